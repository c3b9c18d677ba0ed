"""``et-graph compare``: stored runs joined and compared, over seeds, nodes or folds."""
import json

import numpy as np
import pytest

from et_graph import compare_cli
from et_graph.cli import main as cli_main
from et_graph.compare_cli import compare
from et_graph.experiments import tudataset
from et_graph.protocols.significance import (
    cv_test_train_ratio,
    fold_difference,
    node_difference,
    seed_difference,
)
from et_graph.reporting import summarize

PROTOCOL = ("paper/BWGNN: stratified split, train ratio 0.4, rest 1:2 val:test, split seed "
            "2 (fixed); 40/20/40 train/val/test nodes; 5 seeds")
ET, GBT = [0.85, 0.84, 0.86, 0.85, 0.85], [0.80, 0.80, 0.80, 0.80, 0.80]


@pytest.fixture
def write(tmp_path):
    def write(name, models, **fields):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"dataset": "tolokers", "protocol": PROTOCOL, **fields,
                                    "models": {m: {"auroc": summarize(v), "auprc": summarize(v)}
                                               for m, v in models.items()}}), encoding="utf-8")
        return str(path)

    return write


def test_compare_joins_seeded_runs_of_one_split_and_refuses_others(write, tmp_path, capsys):
    ours, theirs = write("ours", {"et": ET}), write("theirs", {"gbt": GBT, "et": GBT})
    out = tmp_path / "out.json"
    assert cli_main(["compare", ours, theirs + "@gbt", "--metrics", "auroc",
                     "--json", str(out)]) == 0
    assert "| et − gbt | auroc |" in capsys.readouterr().out
    [row] = json.loads(out.read_text(encoding="utf-8"))["differences"]
    expected = seed_difference(ET, GBT)
    assert (row["first"], row["second"], row["verdict"]) == ("et", "gbt", "et ahead")
    assert (row["mean"], row["low"], row["high"]) == pytest.approx(
        (expected.mean, expected.low, expected.high))
    renamed = compare([ours, theirs + "@et=et_old"], metrics=["auroc"])
    assert [r["second"] for r in renamed["differences"]] == ["et_old"]
    assert [r["metric"] for r in compare([ours, theirs + "@gbt"])["differences"]] == [
        "auroc", "auprc"]  # an anomaly run's headline metrics by default
    refusals = [
        ([ours, theirs], "appear twice"),
        ([ours, theirs + "@gat"], "no model 'gat'"),
        ([ours, write("probe", {"gbt": GBT}, scored="validation")], "scored part"),
        ([ours, write("other", {"gbt": GBT}, dataset="reddit")], "same dataset"),
        ([write("vary", {"et": ET}, protocol=PROTOCOL.replace("(fixed)", "+ seed"))],
         "draw their own splits"),
        ([ours, str(tmp_path / "plain.json")], "not a results.json of et-graph"),
    ]
    (tmp_path / "plain.json").write_text("[1, 2]", encoding="utf-8")
    for argv, message in refusals:
        assert compare_cli.main(argv) == 2  # one line on stderr, no traceback
        assert message in capsys.readouterr().err
        with pytest.raises(ValueError, match=message):
            compare(argv)


def test_compare_prints_its_tables_as_a_run_reports_them(write, capsys):
    # (review) compare printed its two tables with a loop of its own: no heading said which
    # was which, and a 2-seed interval came without the run report's caution
    two = write("two", {"et": ET[:2], "gbt": GBT[:2]}, protocol=PROTOCOL.replace("5 seeds",
                                                                                 "2 seeds"))
    assert cli_main(["compare", two, "--metrics", "auroc"]) == 0
    assert "With 2 runs an interval rests on very few degrees of freedom" in (
        capsys.readouterr().out)
    ours, theirs = write("ours", {"et": ET}), write("theirs", {"gbt": GBT})
    rng = np.random.default_rng(0)
    labels = rng.random(60) < 0.3
    for path, name in ((ours, "et"), (theirs, "gbt")):
        arrays = {f"{name}__seed{i}": labels + rng.normal(size=60) for i in range(5)}
        arrays |= {f"nodes__seed{i}": np.arange(60) for i in range(5)}
        arrays |= {f"labels__seed{i}": labels for i in range(5)}
        np.savez(path.replace(".json", ".scores.npz"), **arrays)
    assert cli_main(["compare", ours, theirs, "--metrics", "auroc"]) == 0
    out = capsys.readouterr().out
    assert out.index("**Differences over the runs**") < out.index(
        "**Differences over the scored nodes and the runs**")
    assert "very few degrees of freedom" not in out  # 5 seeds


def test_compare_reads_per_node_scores_for_delong_and_the_bootstrap(write):
    ours, theirs = write("ours", {"et": ET}), write("theirs", {"gbt": GBT, "et": GBT})
    assert "node_differences" not in compare([ours, theirs + "@gbt"])  # no scores stored
    rng = np.random.default_rng(0)
    labels = rng.random(60) < 0.3
    nodes = np.arange(60)
    draws = {m: [labels + rng.normal(size=60) for _ in range(5)] for m in ("et", "gbt")}

    def keep(path, names, node_ids=nodes):
        arrays = {f"{k}__seed{i}": v for k in names for i, v in enumerate(draws[k])}
        arrays |= {f"nodes__seed{i}": node_ids for i in range(5)}
        arrays |= {f"labels__seed{i}": labels for i in range(5)}
        np.savez(path.replace(".json", ".scores.npz"), **arrays)

    keep(ours, ["et"])
    keep(theirs, ["et", "gbt"])
    [row] = compare([ours, theirs + "@gbt"], metrics=["auroc"])["node_differences"]
    expected = node_difference(labels, draws["et"], draws["gbt"])
    assert (row["second"], row["design"]) == ("gbt", "nodes")
    assert (row["low"], row["high"]) == pytest.approx((expected.low, expected.high))
    with_auprc = compare([ours, theirs + "@gbt"], bootstrap=100)
    assert [(r["metric"], r["design"]) for r in with_auprc["node_differences"]] == [
        ("auroc", "nodes"), ("auprc", "nodes")]
    assert "paired class-stratified bootstrap (100 draws" in with_auprc["node_design"]
    renamed = compare([ours, theirs + "@et=et_old"], metrics=["auroc"])
    assert renamed["node_differences"][0]["mean"] == pytest.approx(
        node_difference(labels, draws["et"], draws["et"]).mean)
    keep(theirs, ["et"])  # the renamed model's scores are not there
    with pytest.raises(ValueError, match="holds no scores"):
        compare([ours, theirs + "@gbt"], metrics=["auroc"])
    keep(theirs, ["et", "gbt"], node_ids=nodes[::-1])
    with pytest.raises(ValueError, match="other nodes or labels"):
        compare([ours, theirs + "@gbt"], metrics=["auroc"])
    with pytest.raises(ValueError, match=r"bootstrap \(--bootstrap\)"):
        compare([ours, theirs + "@gbt"], bootstrap=10)


def test_compare_pairs_cross_validations_run_apart_over_their_folds(tmp_path):
    """ET and GIN cross-validated in two runs on the same folds: the joined comparison is the
    corrected paired test over the folds, as one run with both models reports it; runs on
    other folds are refused."""
    def cv(models, out, seed="0"):
        tudataset.main(["--dataset", "MUTAG", "--cache", str(tmp_path / "cache"), "--quick",
                        "--models", models, "--max-folds", "3", "--seed", seed,
                        "--out", str(tmp_path / out), "--no-progress"])
        return str(tmp_path / out / "MUTAG" / "results.json")

    et, gin = cv("et", "et"), cv("gin", "gin")
    [row] = compare([et, gin])["differences"]
    values = {name: json.loads(open(path,
                                    encoding="utf-8").read())["models"][name]["accuracy"]["values"]
              for name, path in (("et", et), ("gin", gin))}
    expected = fold_difference(values["et"], values["gin"],
                               test_train_ratio=cv_test_train_ratio(10))
    assert (row["design"], row["metric"], row["n"]) == ("folds", "accuracy", 3)
    assert (row["mean"], row["low"], row["high"]) == pytest.approx(
        (expected.mean, expected.low, expected.high))
    with pytest.raises(ValueError, match="same dataset, folds or split"):
        compare([et, cv("gin", "gin_other_folds", seed="1")])
    stripped = json.loads(open(gin, encoding="utf-8").read())
    del stripped["meta"]
    (tmp_path / "bare.json").write_text(json.dumps(stripped), encoding="utf-8")
    with pytest.raises(ValueError, match="fold count, which sets the correction, is unknown"):
        compare([et, str(tmp_path / "bare.json")])


def test_compare_leaves_out_derived_rows_and_refuses_empty_or_unknown_requests(
        write, tmp_path, capsys):
    """A file read whole is compared as its run's own table is: without ET's energy and score
    rows and the seed ensembles (one value each), unless they are named; the reference defaults
    to an unsupervised run's ``et_combined``; a request that leaves nothing to compare, an
    unknown metric and an unreadable path are refused with one line."""
    run = write("run", {"et": ET, "et_energy_trained": GBT, "gbt": GBT})
    stored = json.loads(open(run, encoding="utf-8").read())
    stored["models"]["gbt_ensemble"] = {"auroc": summarize([0.8]), "auprc": summarize([0.8])}
    (tmp_path / "run.json").write_text(json.dumps(stored), encoding="utf-8")
    assert {r["second"] for r in compare([run])["differences"]} == {"gbt"}
    assert {r["second"] for r in compare([run + "@et,et_energy_trained"])["differences"]} == {
        "et_energy_trained"}
    unsupervised = write("unsup", {"et_combined": ET, "et_reconstruction": GBT, "lof": GBT})
    rows = compare([unsupervised])["differences"]
    assert {(r["first"], r["second"]) for r in rows} == {("et_combined", "lof")}
    rows = compare([unsupervised], reference="et_reconstruction")["differences"]
    assert {(r["first"], r["second"]) for r in rows} == {("et_reconstruction", "lof")}
    (tmp_path / "text.json").write_text("not json", encoding="utf-8")
    refusals = [
        ([run, "--metrics", "AUROC"], "unknown metric(s) ['AUROC']"),
        ([write("alone", {"et": ET})], "nothing to compare 'et' with"),
        ([write("one_seed", {"et": ET[:1], "gbt": GBT[:1]})], "nothing to compare: seeds"),
        ([run, "--reference", "gat"], "no model 'gat'"),
        ([str(tmp_path / "text.json")], "text.json is not a JSON file"),
        ([str(tmp_path)], "Is a directory"),
        ([run, "--json", str(tmp_path / "missing" / "out.json")], "folder does not exist"),
        # named as compare names it (it said bootstrap_rounds: a CLI audit), under both names
        ([run, "--bootstrap", "5"], "bootstrap (--bootstrap) must be 0 (off)"),
        ([run, "--bootstrap-rounds", "5"], "bootstrap (--bootstrap) must be 0 (off)"),
    ]
    for argv, message in refusals:
        assert compare_cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err


def test_a_validation_only_cv_without_its_validation_fraction_is_named():
    # a hand-made or truncated file: the correction's ratio failed with a TypeError on None
    results = {"dataset": "MUTAG", "folds": [],
               "meta": {"config": {"protocol": {"folds": 10, "validation_only": True}}}}
    with pytest.raises(ValueError, match="without meta.config.protocol.val_fraction"):
        compare_cli.design_of(results)
    results["meta"]["config"]["protocol"]["val_fraction"] = 0.1
    assert compare_cli.design_of(results) == ("folds", pytest.approx(0.1 / 0.9))


def test_an_image_runs_errors_are_compared_the_right_way_round(tmp_path):
    # (from a CLI audit) image results did not say their MSE is an error: ET's higher MSE was
    # called "et ahead", and without --metrics the refusal blamed the seed count
    results = {"dataset": "sklearn digits", "protocol": "seeded random split per seed",
               "metric": "mse", "lower_is_better": True,
               "models": {"et": {"mse": summarize([0.090, 0.091, 0.092])},
                          "mean_patch": {"mse": summarize([0.070, 0.074, 0.072])}}}
    path = tmp_path / "image.json"
    path.write_text(json.dumps(results), encoding="utf-8")
    (row,) = compare([str(path)])["differences"]
    assert row["metric"] == "mse" and row["verdict"] == "mean_patch ahead"
    del results["metric"]
    path.write_text(json.dumps(results), encoding="utf-8")
    with pytest.raises(ValueError, match=r"report \['mse'\], none of the default metrics"):
        compare([str(path)])
    del results["lower_is_better"]  # an older file: its direction is not said
    path.write_text(json.dumps(results), encoding="utf-8")
    with pytest.raises(ValueError, match="do not say that lower is better"):
        compare([str(path)], metrics=["mse"])


def test_a_path_with_an_at_sign_and_an_empty_selection(write, tmp_path, monkeypatch, capsys):
    """`PATH@MODELS` was cut at the first '@' (a folder named v@1 was "no such file 'v'"), and
    an '@' with nothing after it kept the derived rows the plain path leaves out; the --json
    file was written after the tables, so a reader that left early lost it (a CLI audit)."""
    run = write("run", {"et": ET, "et_energy_trained": GBT, "gbt": GBT})
    folder = tmp_path / "v@1"
    folder.mkdir()
    moved = folder / "results.json"
    moved.write_text(open(run, encoding="utf-8").read(), encoding="utf-8")
    assert {r["second"] for r in compare([str(moved)])["differences"]} == {"gbt"}
    assert {r["second"] for r in compare([f"{moved}@et,gbt"])["differences"]} == {"gbt"}
    with pytest.raises(ValueError, match="name the models after '@'"):
        compare([f"{run}@"])

    def reader_left(*args, **kwargs):
        raise BrokenPipeError

    monkeypatch.setattr("builtins.print", reader_left)
    with pytest.raises(BrokenPipeError):
        compare_cli.main([run, "--json", str(tmp_path / "kept.json")])
    assert json.loads((tmp_path / "kept.json").read_text(encoding="utf-8"))["differences"]
