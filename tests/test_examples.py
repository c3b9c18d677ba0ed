"""The teaching example and the detector quick start run as documented (2 epochs here)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str, status: int = 0) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-W", "error::UserWarning",
                           str(ROOT / "examples" / script), *args],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == status, done.stderr[-2000:]
    return done.stdout if status == 0 else done.stderr


@pytest.mark.parametrize("script, args", [
    ("detector_quickstart.py", ["--epochs", "x"]),
    ("detector_quickstart.py", ["--epochs", "0"]),
    ("etconv_node_classification.py", ["--epochs", "0"]),
    ("etconv_node_classification.py", ["--steps", "-1"]),
    ("etconv_node_classification.py", ["--lr", "nan"]),  # a traceback before (an audit)
    ("etconv_link_prediction.py", ["--seeds", "0"]),
    ("etconv_edge_features.py", ["--models", "et,gat"]),
    ("etconv_edge_features.py", ["--folds", "1"]),
    ("etconv_edge_features.py", ["--folds", "200"]),
    ("etconv_edge_features.py", ["--hidden", "33"]),
    ("etconv_edge_features.py", ["--models", "et,et"]),
])
def test_bad_flags_are_one_line_errors(script, args):
    err = _run(script, *args, status=2)
    assert "error:" in err and "Traceback" not in err


@pytest.mark.slow
def test_detector_quickstart_prints_a_test_auroc():
    out = _run("detector_quickstart.py", "--epochs", "2")
    auroc = float(re.search(r"test AUROC (\d\.\d+)", out).group(1))
    assert 0.5 < auroc <= 1.0


@pytest.mark.slow
def test_etconv_node_classification_example():
    out = _run("etconv_node_classification.py", "--epochs", "10")
    best = re.search(r"Best validation ROC-AUC: (\d\.\d+), test ROC-AUC at that epoch: (\d\.\d+)",
                     out)
    assert best and 0.5 < float(best.group(1)) <= 1.0


def test_etconv_link_prediction_example_prints_both_encoders_on_one_split():
    out = _run("etconv_link_prediction.py", "--epochs", "3", "--seeds", "1")
    rows = re.findall(r"^(ETConv|GCN) +(\d\.\d+) \(1 seed\) +(\d\.\d+) \(1 seed\)$", out, re.M)
    assert [row[0] for row in rows] == ["ETConv", "GCN"], out
    assert all(0.0 <= float(value) <= 1.0 for row in rows for value in row[1:])


def test_etconv_edge_features_example_prints_every_model_and_its_folds(tmp_path):
    out = _run("etconv_edge_features.py", "--folds", "2", "--epochs", "2",
               "--json", str(tmp_path / "folds.json"))
    rows = re.findall(r"^\| (\w+) \| (\d+\.\d) ± (\d+\.\d) \| (\d+\.\d) \|$", out, re.M)
    assert [row[0] for row in rows] == ["et_edges", "et", "transformer", "gine"], out
    import json

    folds = json.loads((tmp_path / "folds.json").read_text(encoding="utf-8"))["folds"]
    assert all(len(folds[model]) == 2 for model in ("et_edges", "et", "transformer", "gine"))


def _docstrings_that_join_command_lines(source: str) -> list[int]:
    """Lines of docstrings in which a shell continuation ``\\`` would vanish.

    In a plain (non-raw) docstring a backslash at the end of a line escapes the newline, so
    ``--help`` and the API docs print the command on one garbled line.
    """
    import ast

    joined = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef)) or not node.body:
            continue
        first = node.body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                and isinstance(first.value.value, str):
            text = ast.get_source_segment(source, first.value) or ""
            if not text[:1].lower() == "r" and re.search(r"(?<!\\)(\\\\)*\\\n", text):
                joined.append(first.lineno)
    return joined


def test_docstring_check_finds_a_swallowed_line_continuation():
    assert _docstrings_that_join_command_lines('"""Run:\n\n    cmd --a \\\n        --b\n"""\n')
    assert not _docstrings_that_join_command_lines('r"""Run:\n    cmd --a \\\n    --b\n"""\n')
    assert not _docstrings_that_join_command_lines('"""Run:\n    cmd --a \\\\\n    --b\n"""\n')


def test_no_docstring_swallows_a_shell_line_continuation():
    files = [p for folder in ("et_graph", "benchmarks", "examples")
             for p in (ROOT / folder).rglob("*.py")]
    bad = [f"{p.relative_to(ROOT)}:{line}" for p in files
           for line in _docstrings_that_join_command_lines(p.read_text(encoding="utf-8"))]
    assert not bad, f"write \\\\ or make the docstring raw: {bad}"


def test_yelpchi_example_without_the_file_says_where_to_put_it(tmp_path):
    """YelpChi cannot be downloaded here: the example exits with status 2 and one line that
    names the file and the fix, not a traceback."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ET_GRAPH_CACHE": str(tmp_path)}
    env.pop("ET_GRAPH_TRACEBACK", None)
    env.pop("ET_GRAPH_DOWNLOAD", None)
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "yelpchi_anomaly.py"),
                           "--data-root", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.startswith("yelpchi_anomaly.py: error: yelpchi: YelpChi.mat not found")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("script, default", [
    ("yelpchi_anomaly.py", "(default: yelpchi)"),
    ("tudataset_classification.py", None),
    ("gnnbenchmark.py", None),
    ("image_completion.py", None),
    ("unsupervised_anomaly.py", None),
])
def test_example_help_names_the_script_and_its_own_defaults(script, default):
    """An example's --help is its own: usage names the script, not `et-graph TASK`, and the
    yelpchi example shows the dataset it runs by default."""
    out = _run(script, "--help")
    assert out.startswith(f"usage: {script} ")
    assert "et-graph " not in out.splitlines()[0]
    if default:
        dataset_help = out[out.index("\n  --dataset TEXT"):]
        assert default in dataset_help[:dataset_help.index("--data-root")]


def test_the_graph_plugin_example_runs_as_documented(tmp_path):
    """examples/graph_plugin.py's command: its model is a row beside ET and GIN."""
    import json

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ET_GRAPH_PLUGINS", None)
    done = subprocess.run([sys.executable, "-W", "error::UserWarning", "-m", "et_graph",
                           "tudataset", "--plugin", "examples/graph_plugin.py", "--dataset",
                           "MUTAG", "--models", "et,gin,sage_graph", "--quick",
                           "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "out"),
                           "--no-progress"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "out" / "MUTAG" / "results.json").read_text(
        encoding="utf-8"))
    assert list(results["models"]) == ["et", "gin", "sage_graph"]
    assert "sage_graph = SAGEGraphClassifier" in results["protocol"]


def test_the_benchmark_plugin_example_runs_as_documented(tmp_path):
    """examples/benchmark_plugin.py's command: its model is a row beside ET and GIN."""
    import json

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ET_GRAPH_PLUGINS", None)
    done = subprocess.run([sys.executable, "-W", "error::UserWarning", "-m", "et_graph",
                           "gnnbenchmark", "--plugin", "examples/benchmark_plugin.py",
                           "--models", "et,gin,sage_bench", "--quick", "--out",
                           str(tmp_path / "out"), "--no-progress"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert list(results["models"]) == ["et", "gin", "sage_bench"]
    assert "sage_bench = SAGEBenchmarkModel" in results["protocol"]
