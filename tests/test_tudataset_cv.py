import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from et_graph.cli import main as cli_main
from et_graph.experiments.tudataset import prepare_root
from et_graph.protocols.graph_cv import (
    TrainConfig,
    check_graph_labels,
    cross_validate,
    inner_split,
    stratified_folds,
)

DATA = Path(__file__).resolve().parents[1] / "datasets" / "TUDataset"


def test_folds_are_stratified_and_test_folds_are_never_trained_on():
    labels = np.array([0] * 30 + [1] * 20 + [2] * 10)
    folds = stratified_folds(labels, folds=5, seed=0)
    tests = np.concatenate([test for _, test in folds])
    assert sorted(tests.tolist()) == list(range(60))  # the test folds partition the data
    for train, test in folds:
        assert not set(train) & set(test)
        assert np.bincount(labels[test]).tolist() == [6, 4, 2]
        inner, val = inner_split(train, labels, val_fraction=0.25, seed=1)
        assert not set(inner) & set(val) and not (set(inner) | set(val)) & set(test)
        assert sorted(np.concatenate([inner, val]).tolist()) == sorted(train.tolist())
        assert np.bincount(labels[val]).tolist() == [6, 4, 2]


def test_label_and_graph_checks():
    with pytest.raises(ValueError, match="single class"):
        check_graph_labels([1, 1, 1, 1])
    with pytest.raises(ValueError, match="integer"):
        check_graph_labels([0.5, 1.0])
    with pytest.raises(ValueError, match="fewer than folds"):
        stratified_folds([0] * 20 + [1] * 3, folds=5)
    graphs = [Data(x=torch.ones(2, 1), edge_index=torch.tensor([[0], [1]]), y=torch.tensor([0]))
              for _ in range(4)]
    with pytest.raises(ValueError, match="single class"):
        cross_validate(graphs, {}, {}, folds=2)
    graphs.append(Data(x=torch.ones(0, 1), edge_index=torch.empty(2, 0, dtype=torch.long),
                       y=torch.tensor([1])))
    with pytest.raises(ValueError, match="without nodes"):
        cross_validate(graphs, {}, {"m": TrainConfig()}, folds=2)


def test_missing_raw_files_are_reported(tmp_path):
    with pytest.raises(ValueError, match="no TU raw files"):
        prepare_root(tmp_path, "MUTAG", tmp_path / "cache")


def test_quick_cv_run_writes_results(tmp_path):
    root = tmp_path / "root"
    shutil.copytree(DATA / "MUTAG" / "raw", root / "MUTAG" / "raw")
    out = tmp_path / "out"
    code = cli_main(["tudataset", "--dataset", "MUTAG", "--root", str(root), "--cache",
                     str(tmp_path / "cache"), "--quick", "--out", str(out), "--pe-dim", "4"])
    assert code == 0
    results = json.loads((out / "MUTAG" / "results.json").read_text())
    assert results["dataset"] == "MUTAG" and "stratified 10-fold" in results["protocol"]
    assert set(results["models"]) == {"et", "gin", "structure_agnostic"}
    for stats in results["models"].values():
        assert 0.0 <= stats["accuracy"]["mean"] <= 1.0 and stats["accuracy"]["std"] >= 0.0
        assert len(stats["accuracy"]["values"]) == 2
    # the folds are real: disjoint test folds of about a tenth of MUTAG's 188 graphs
    assert all(18 <= fold["test"] <= 19 for fold in results["folds"])
    markdown = (out / "MUTAG" / "results.md").read_text()
    assert "| et |" in markdown and "| gin |" in markdown and "structure_agnostic" in markdown
    assert (out / "MUTAG" / "accuracy.png").stat().st_size > 0
    assert not (root / "MUTAG" / "processed").exists()  # the given root is left untouched
