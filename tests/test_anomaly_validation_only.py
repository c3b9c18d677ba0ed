"""``et-graph anomaly --validation-only``: a probe run that scores the validation nodes and never
a test node, so that a choice made from it cannot have seen a test figure."""
import json

import pytest
import torch
from helpers import planted_graph_with_masks

from et_graph.config import parse
from et_graph.experiments import anomaly
from et_graph.protocols.anomaly_config import AnomalyConfig, AnomalyProtocolConfig

pytestmark = pytest.mark.usefixtures("one_thread")


def masked_graph():
    """A planted graph with one split stored as masks, read by ``--protocol gadbench``: once
    stored, the split no longer depends on the labels, so test labels can be changed without
    moving it."""
    return planted_graph_with_masks(240, seed=5)


def scrambled_test_labels(data):
    """The same graph with every test label redrawn (each class kept at least once)."""
    other = data.clone()
    test = other.test_mask.nonzero().view(-1)
    labels = torch.randint(0, 2, (test.numel(),), generator=torch.Generator().manual_seed(9))
    labels[:2] = torch.tensor([0, 1])
    other.y = other.y.clone()
    other.y[test] = labels
    assert not torch.equal(other.y, data.y)
    return other


def run(data, *flags, out=None):
    config = parse(AnomalyConfig, ["--no-progress", "--protocol", "gadbench", "--seeds", "2",
                                   "--models", "et,gbt", "--epochs", "3", "--hidden", "16",
                                   "--select-metric", "auroc", *flags,
                                   *(["--out", str(out)] if out else [])])
    return anomaly.run(config, data=data)


def figures(results):
    """Every per-seed figure of both models but the clock's."""
    return {name: [{key: value for key, value in seed[name].items() if "seconds" not in key}
                   for seed in results["per_seed"]] for name in ("et", "gbt")}


def test_no_test_label_is_read(capsys):
    data = masked_graph()
    probe = run(data, "--validation-only")
    assert probe["scored"] == "validation"
    assert figures(run(scrambled_test_labels(data), "--validation-only")) == figures(probe)
    # The same change moves an ordinary run's figures: the comparison can fail.
    assert figures(run(scrambled_test_labels(data))) != figures(run(data))
    assert "Validation only" in capsys.readouterr().out


def test_the_figures_are_the_validation_nodes():
    probe = run(masked_graph(), "--validation-only")
    for seed in probe["per_seed"]:
        # ET kept the checkpoint with the best validation AUROC: the table's AUROC is that one.
        assert seed["et"]["auroc"] == pytest.approx(seed["et"]["best_score"], abs=1e-6)
        assert seed["gbt"]["auroc"] == pytest.approx(seed["gbt"]["val_auroc"], abs=1e-9)
        assert seed["split_sizes"] == [96, 48, 96]  # the stored masks, 40 % / 1:2


def test_the_outputs_say_so_and_the_energy_row_is_skipped(tmp_path):
    probe = run(masked_graph(), "--validation-only", out=tmp_path / "probe")
    assert "et_energy_trained" not in probe["models"]  # it is scored on test nodes
    assert "VALIDATION ONLY" in probe["protocol"] and "test nodes scored once" not in \
        probe["protocol"]
    # The protocol line counts the anomalies of the training and validation parts only.
    assert "train/val/test nodes (" in probe["protocol"]
    assert probe["protocol"].split(" anomalous)")[0].split("(")[-1].count("/") == 1
    text = (tmp_path / "probe" / "results.md").read_text(encoding="utf-8")
    assert "Validation only" in text and "validation anomalies" in text
    assert json.loads((tmp_path / "probe" / "results.json").read_text(
        encoding="utf-8"))["scored"] == \
        "validation"
    assert (tmp_path / "probe" / "roc_pr.png").exists()
    # the difference table's design line names the part scored (it said "the same test set")
    assert "the same validation set" in probe["differences_design"]
    assert "test set" not in probe["differences_design"]


def test_a_seed_ensemble_of_one_seed_is_refused():
    """Its rows repeated the seed's own, drawn on top of them."""
    with pytest.raises(ValueError, match="seeds = 1 gives one"):
        AnomalyProtocolConfig(seeds=1, seed_ensemble=True)


def test_seed_ensembles_are_refused():
    with pytest.raises(ValueError, match="validation_only"):
        AnomalyProtocolConfig(validation_only=True, seed_ensemble=True)


def test_a_split_names_the_nodes_each_run_scores():
    from et_graph.protocols.anomaly import make_splits

    split = make_splits(masked_graph(), "gadbench", 1, 0.4)[0]
    assert split.scored() is split.test and split.scored("validation") is split.val
    with pytest.raises(ValueError, match="scored part"):
        split.scored("train")
