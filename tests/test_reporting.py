"""Results as files: strict JSON, honest mean ± std strings, the std named in every table."""
import json
import math

import numpy as np
import torch

from et_graph.reporting import format_stat, json_text, summarize, write_results


def _strict_load(text):
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_results_are_strict_json_with_null_for_non_finite_values(tmp_path):
    """From an audit: json.dumps wrote NaN (a mean over no values is NaN), which JSON parsers
    other than Python's refuse."""
    results = {"dataset": "d", "models": {"a": {"auroc": summarize([])},
                                          "b": {"auroc": summarize([0.5, float("inf")])}},
               "scalars": [np.float32(1.5), torch.tensor(2.0), np.int64(3), (1, float("nan"))]}
    json_path, md_path = write_results(tmp_path, results, ["auroc"])
    loaded = _strict_load(json_path.read_text())
    assert loaded["models"]["a"]["auroc"] == {"mean": None, "std": None, "values": []}
    assert loaded["models"]["b"]["auroc"]["values"] == [0.5, None]
    assert loaded["scalars"] == [1.5, 2.0, 3, [1, None]]
    assert _strict_load(json_text({"x": float("-inf")}, indent=None)) == {"x": None}
    assert "population standard deviation" in md_path.read_text()  # which std, said once
    _, md_path = write_results(tmp_path / "b", results, ["auroc"],
                               notes=["accuracy: mean ± std (population) over the folds"])
    assert md_path.read_text().count("population") == 1


def test_format_stat_hides_neither_a_failed_run_nor_a_tiny_spread():
    """From an audit: one NaN seed among good ones printed a bare 'n/a', an inf 'inf ± nan',
    and a spread of 2e-5 '± 0.0000', the measured zero spread the function avoids for n = 1."""
    assert format_stat(summarize([0.5, float("nan")])) == "n/a (1 of 2 runs not finite)"
    assert format_stat(summarize([float("inf"), 1.0])) == "n/a (1 of 2 runs not finite)"
    assert format_stat(summarize([0.64449, 0.64451])) == "0.6445 ± <0.0001"
    assert format_stat(summarize([0.5, 0.5])) == "0.5000 ± 0.0000"  # a real zero spread
    assert format_stat(summarize([0.5])) == "0.5000 (n = 1)"
    assert format_stat(summarize([])) == "n/a" and format_stat(None) == "n/a"
    assert math.isnan(summarize([]).get("mean"))


def test_a_failed_run_removes_the_output_folders_it_made_empty_and_keeps_others(tmp_path):
    import pytest

    from et_graph.reporting import output_folder

    with pytest.raises(ValueError, match="bad data"):
        with output_folder(tmp_path / "runs" / "new"):
            raise ValueError("bad data")
    assert not (tmp_path / "runs").exists()  # both folders it made, and nothing else
    (tmp_path / "kept").mkdir()
    with pytest.raises(ValueError):
        with output_folder(tmp_path / "kept" / "run"):
            (tmp_path / "kept" / "run" / "partial.json").write_text("{}")
            raise ValueError("late failure")
    assert (tmp_path / "kept" / "run" / "partial.json").is_file()  # a folder holding files stays
    with output_folder(tmp_path / "ok"):
        pass
    assert (tmp_path / "ok").is_dir()
