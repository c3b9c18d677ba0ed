"""``et-graph compare``: ET minus each baseline, with confidence intervals, from stored runs.

A comparison often joins runs made apart on the same folds or split and seeds (ET's preset in
one run, the baselines' in others). This reads their ``results.json`` files (``et-graph
tudataset``, ``anomaly``, ``unsupervised`` or ``gnnbenchmark``), joins the models and reports
``reference - other`` per metric (:mod:`et_graph.protocols.significance`):

* a cross-validation (``tudataset``): paired over the shared folds, by Nadeau and Bengio's
  corrected resampled t-test;
* seeds on one fixed split (the others): Welch's t-test over the seeds, which covers the
  training randomness only. An error metric (``lower_is_better``, ZINC's MAE) is read the right
  way round.

::

    et-graph compare runs/tolokers-et/results.json runs/tolokers-gbt/results.json
    et-graph compare --reference et_combined runs/unsup/results.json@et_combined,iforest,lof
    et-graph compare runs/nci1-et/NCI1/results.json runs/nci1-gin/NCI1/results.json

``PATH@a,b`` keeps only those models of a file; ``PATH@a=b`` renames one (two files with an
``et`` row, say). A file read whole leaves out, as its run's own table does, the rows derived
from ET's or another model's seeds (ET's energy and score rows ``et_*``, the seed ensembles
``*_ensemble``): name one after ``@`` to compare it. Files of different datasets, folds,
splits or scored parts (a validation-only probe beside a test run), and runs whose seeds draw
their own splits, are refused.

Where every file has its run's per-node scores beside it (``scores.npz`` next to a
``results.json``, or ``NAME.scores.npz`` next to ``NAME.json``), the reference's AUROC minus
each other row's is also reported paired over the scored nodes (DeLong) and the seeds, which
covers the sampling of the test nodes too; the files must then hold the same nodes and labels.
``--bootstrap ROUNDS`` adds AUPRC over the nodes and seeds by a paired, class-stratified
bootstrap (AUPRC has no closed form like DeLong's).
"""
from __future__ import annotations

import argparse
import json
import zipfile
from pathlib import Path
from typing import Any, Optional, Union, cast

import numpy as np

from .cli import exit_on_bad_input
from .paths import write_text_whole
from .protocols.significance import (
    check_bootstrap_rounds,
    compare_nodes,
    compare_to,
    cv_scored_part,
    describe_design,
    difference_records,
    difference_sections,
    scored_parts_ratio,
)
from .reporting import SCORES_FILE, json_text, load_scores, scores_run_id

#: The default reference, the first of these a run holds (an unsupervised run has no ``et``).
REFERENCES = ("et", "et_combined", "et_reconstruction")


def is_derived_row(name: str) -> bool:
    """A row a run derives from a model's own seeds rather than a rival: ET's energy and score
    rows (``et_energy_trained``, an unsupervised run's ``et_*``) and the seed ensembles."""
    return name.startswith("et_") or name.endswith("_ensemble")


def read_json(path: Union[str, Path]) -> Any:
    """A JSON file's contents; an unreadable one is refused with its name."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not a JSON file ({error})") from None


def split_spec(spec: str) -> tuple[str, Optional[str]]:
    """``(path, models)`` of ``PATH[@MODELS]``; ``models`` is ``None`` without ``@``. A spec
    that names an existing file is that file, whatever ``@`` it holds, and otherwise it is cut
    at its last ``@`` (``v@1/results.json`` was cut at its first: a CLI audit). An ``@`` with
    nothing after it is refused (it kept the derived rows the plain path leaves out)."""
    if "@" not in spec or Path(spec).is_file():
        return spec, None
    path, _, models = spec.rpartition("@")
    if not models.strip(" ,"):
        raise ValueError(f"{spec}: name the models after '@' (PATH@MODEL,MODEL=NAME), or "
                         "leave the '@' out for all of them")
    return path, models


def read_models(spec: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """``(results, models, names)`` of ``PATH[@MODEL[=NAME],...]``: the file's results, the
    kept models under their new names, and ``names``, ``{new name: stored name}``."""
    path, keep = split_spec(spec)
    results = read_json(path)
    models = results.get("models") if isinstance(results, dict) else None
    if not isinstance(models, dict):
        raise ValueError(f"{path} is not a results.json of et-graph (no 'models' table)")
    names = {name: name for name in models}
    if keep is not None:
        names = {}
        for item in (part.strip() for part in keep.split(",") if part.strip()):
            name, _, alias = item.partition("=")
            if name not in models:
                raise ValueError(f"{path} holds no model {name!r} (it has {list(models)})")
            names[alias or name] = name
    return results, {new: models[old] for new, old in names.items()}, names


def scores_file(path: Path) -> Path:
    """Where a results file's per-node scores are kept."""
    return (path.parent / SCORES_FILE if path.name == "results.json"
            else path.with_name(path.stem + ".scores.npz"))


#: A joined results file: its path, ``{new name: stored name}`` of its kept models, and its
#: ``meta.run_id`` (``None`` in files written before it was kept).
Pick = tuple[Path, dict[str, str], Optional[str]]


def read_scores(picks: list[Pick]) -> Optional[tuple[np.ndarray, dict[str, list[np.ndarray]]]]:
    """``(labels, {model: per-seed scores})`` over every file's kept models (``picks``, as
    :func:`join` returns them), or ``None`` when a file has no scores beside it. Refuses files
    whose seeds scored other nodes or labels, and scores of another run than their file."""
    labels: Optional[np.ndarray] = None
    nodes: Optional[np.ndarray] = None
    scores: dict[str, list[np.ndarray]] = {}
    for path, names, expected in picks:
        if not scores_file(path).exists():
            return None
        try:
            written = scores_run_id(scores_file(path))
            seeds, seed_nodes, seed_labels, rows = load_scores(scores_file(path))
        except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as error:
            raise ValueError(f"{scores_file(path)} cannot be read ({type(error).__name__}: "
                             f"{error}); it may be cut short: rerun, or remove it to compare "
                             "the seeds alone") from None
        if written is not None and expected is not None and written != expected:
            # (a rerun killed between its results.json and its scores.npz paired them unsaid)
            raise ValueError(f"{scores_file(path)} belongs to another run than {path} (run ids "
                             f"{written} and {expected}): rerun, or compare the seeds alone "
                             "by removing it")
        for seed, mine in zip(seeds, zip(seed_nodes, seed_labels)):
            if nodes is None or labels is None:  # (set together, by the first seed)
                nodes, labels = mine
            elif not (np.array_equal(nodes, mine[0]) and np.array_equal(labels, mine[1])):
                raise ValueError(f"{path}: seed {seed} scored other nodes or labels than the "
                                 "files before it")
        missing = [stored for stored in names.values() if stored not in rows]
        if missing:
            raise ValueError(f"{scores_file(path)} holds no scores of {missing}")
        scores.update({new: rows[stored] for new, stored in names.items()})
    # (set: a scores file holds one seed at least, as a run writes one per seed)
    return cast(np.ndarray, labels), scores


def is_cross_validation(results: dict[str, Any]) -> bool:
    """An ``et-graph tudataset`` result: per-fold records under ``folds``."""
    return isinstance(results.get("folds"), list)


def _cv_protocol(results: dict[str, Any]) -> dict[str, Any]:
    """A cross-validation's protocol settings (its folds decide the correction)."""
    protocol = results.get("meta", {}).get("config", {}).get("protocol")
    if not protocol or "folds" not in protocol:
        raise ValueError(f"a cross-validation of {results.get('dataset')!r} without "
                         "meta.config.protocol (an older or hand-made file): its fold count, "
                         "which sets the correction, is unknown")
    if protocol.get("validation_only") and not isinstance(protocol.get("val_fraction"),
                                                          (int, float)):
        # (failed with a TypeError on None in the correction)
        raise ValueError(f"a validation-only cross-validation of {results.get('dataset')!r} "
                         "without meta.config.protocol.val_fraction: the size of its scored "
                         "parts, which sets the correction, is unknown")
    return protocol


def design_of(results: dict[str, Any]) -> tuple[str, Optional[float]]:
    """``("folds", n_test / n_train)`` for a cross-validation (its inner validation parts for a
    validation-only run), ``("seeds", None)`` for seeds on one fixed split."""
    if is_cross_validation(results):
        protocol = _cv_protocol(results)
        # (val_fraction is read for a validation-only run alone, which _cv_protocol checked)
        return "folds", scored_parts_ratio(int(protocol["folds"]),
                                           cast(float, protocol.get("val_fraction")),
                                           bool(protocol.get("validation_only")))
    if results.get("split_per_seed") or "+ seed" in results.get("protocol", ""):
        raise ValueError("these seeds draw their own splits (an anomaly run's vary_split, or "
                         "the image protocol): compare them paired within one run (its "
                         "results.json holds the differences) instead")
    return "seeds", None


def signature(results: dict[str, Any]) -> tuple[Any, ...]:
    """What must agree for two runs to be compared: the dataset, the scored part, the metric's
    direction and the folds (the CV's seed, count and test sizes) or the split (the protocol up
    to its node counts: split rule, split seed and sizes)."""
    design, ratio = design_of(results)
    if design == "folds":
        protocol = _cv_protocol(results)
        where: Any = (protocol["seed"], protocol["folds"], protocol.get("val_fraction"),
                      tuple(fold.get("test") for fold in results["folds"]))
    else:
        where = results.get("protocol", "").split(" nodes")[0]
    return (results.get("dataset", ""), results.get("scored", "test"), design, ratio, where,
            bool(results.get("lower_is_better", False)))


def scored_part(results: dict[str, Any]) -> str:
    """The part a run scored: its test nodes or folds, or in a validation-only run the
    validation nodes (anomaly) or the folds' inner validation parts (tudataset)."""
    if is_cross_validation(results):
        return cv_scored_part(bool(_cv_protocol(results).get("validation_only")))
    return str(results.get("scored", "test"))


#: Metric names that are errors (lower is better) and that a file must mark as such.
ERROR_METRICS = frozenset({"mse", "mae", "loss", "error"})


def default_metrics(results: dict[str, Any], models: dict[str, Any]) -> list[str]:
    """The run's headline metrics: GNNBenchmark's own, a CV's accuracy (and its ensemble's),
    else AUROC and AUPRC."""
    if "metric" in results:
        return [results["metric"]]
    if is_cross_validation(results):
        first: dict[str, Any] = next(iter(models.values()), {})
        base = "accuracy" if "accuracy" in first else "val_accuracy"  # a validation-only run
        return [m for m in (base, f"ensemble_{base}") if m in first]
    return ["auroc", "auprc"]


def join(specs: list[str], reference: Optional[str] = None
         ) -> tuple[dict[str, Any], dict[str, Any], list[Pick]]:
    """The models of every spec in one table, the first file's results (for its design) and
    each file's :data:`Pick` (its kept names and run id); refuses mismatched runs and duplicate
    names. A file read whole (no ``@``) leaves out its derived rows (:func:`is_derived_row`),
    except ``reference`` (by default the first of :data:`REFERENCES` it holds)."""
    models: dict[str, Any] = {}
    picks = []
    first: Optional[tuple[dict[str, Any], tuple[Any, ...]]] = None
    for spec in specs:
        results, chosen, names = read_models(spec)
        path, selection = split_spec(spec)
        if selection is None:
            kept = reference or next((name for name in REFERENCES if name in chosen), None)
            names = {new: old for new, old in names.items()
                     if new == kept or not is_derived_row(old)}
            chosen = {new: chosen[new] for new in names}
        picks.append((Path(path), names,
                      results.get("meta", {}).get("run_id")))
        mine = signature(results)
        if first is not None and mine != first[1]:
            raise ValueError(f"{spec} is not the same dataset, folds or split, and scored part "
                             f"as the files before it:\n  {mine}\n  {first[1]}")
        first = first or (results, mine)
        twice = set(models) & set(chosen)
        if twice:
            raise ValueError(f"model(s) {sorted(twice)} appear twice: keep one with PATH@MODEL "
                             "or rename one with PATH@MODEL=NAME")
        models.update(chosen)
    assert first is not None
    return models, first[0], picks


def known_metrics(models: dict[str, Any]) -> list[str]:
    """The metrics every joined model reports with per-seed or per-fold values."""
    per_model = [{name for name, value in rows.items()
                  if isinstance(value, dict) and "values" in value}
                 for rows in models.values()]
    return sorted(set.intersection(*per_model)) if per_model else []


def compare(files: list[str], reference: Optional[str] = None,
            metrics: Optional[list[str]] = None, confidence: float = 0.95,
            bootstrap: int = 0) -> dict[str, Any]:
    """The differences of ``reference`` (default: the first of :data:`REFERENCES` present)
    against every other model of the joined ``files`` (``{"differences", "design"}``, plus
    ``node_differences`` where per-node scores are kept), as ``et-graph compare`` prints them.
    Refuses a reference or metric the files do not hold, and a join that leaves nothing to
    compare."""
    # (named as compare and its flag name it: "bootstrap_rounds" named no flag of it: a CLI
    # audit)
    check_bootstrap_rounds(bootstrap, "bootstrap (--bootstrap)")
    models, results, picks = join(files, reference)
    if reference is None:
        reference = next((name for name in REFERENCES if name in models), REFERENCES[0])
    if reference not in models:
        raise ValueError(f"no model {reference!r} among {list(models)}: name the row to compare "
                         "with --reference")
    design, ratio = design_of(results)
    # a metric asked for must exist; the defaults are the run's headline ones, which a
    # joined file may lack (a CV of one training per fold has no ensemble column)
    unknown = sorted(set(metrics or ()) - set(known_metrics(models)))
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}: these files' models all report "
                         f"{known_metrics(models)}")
    if not metrics and not set(default_metrics(results, models)) & set(known_metrics(models)):
        # (said "seeds with fewer than 2 values each" of a file that had two)
        raise ValueError(f"these files' models report {known_metrics(models)}, none of the "
                         "default metrics: pass --metrics")
    metrics = metrics or default_metrics(results, models)
    errors = sorted(set(metrics) & ERROR_METRICS)
    if errors and "lower_is_better" not in results:
        # an older file that does not say its direction: higher would be read as better
        raise ValueError(f"{errors} are errors, but the files do not say that lower is better "
                         "(an older run?): rerun it with this version")
    others = [name for name in models if name != reference]
    if not others:
        raise ValueError(f"nothing to compare {reference!r} with: the files hold no other "
                         "model (ET's own derived rows are left out unless named after @)")
    rows = compare_to(models, reference, metrics, design, test_train_ratio=ratio,
                      confidence=confidence, others=others,
                      higher_is_better=not results.get("lower_is_better", False))
    if not rows:
        raise ValueError(f"nothing to compare: {design} with fewer than 2 values each "
                         f"(a difference needs at least 2 {design} per model)")
    counts = sorted({d.n for d in rows})
    payload: dict[str, Any] = {
        "files": files, "differences": difference_records(rows),
        "design": describe_design(design, min(counts) if counts else 0, ratio, confidence,
                                  scored=scored_part(results))
        + (f" (pairs per row: {counts})" if len(counts) > 1 else "")}
    stored = read_scores(picks) if "auroc" in metrics and design == "seeds" else None
    if stored is not None:
        labels, scores = stored
        rounds = bootstrap if "auprc" in metrics else 0
        nodes = compare_nodes(labels, scores, reference, others, confidence,
                              bootstrap_rounds=rounds)
        payload.update(node_differences=difference_records(nodes),
                       node_design=describe_design("nodes", len(scores[reference]),
                                                   confidence=confidence,
                                                   bootstrap_rounds=rounds))
    return payload


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``et-graph compare``."""
    parser = argparse.ArgumentParser(
        prog="et-graph compare", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__.split("\n\n")[0],
        epilog="Files: PATH@a,b keeps models a and b; PATH@a=b renames a to b.", allow_abbrev=False)
    parser.add_argument("files", nargs="+", metavar="RESULTS_JSON[@MODELS]",
                        help="results.json files of runs on the same split, folds or nodes "
                             "(the per-node scores beside them are read too)")
    parser.add_argument("--reference", default=None,
                        help="the row every other is compared with (default: the first of "
                             f"{', '.join(REFERENCES)} that the files hold)")
    parser.add_argument("--metrics", default=None,
                        help="comma list (default: the run's headline metrics)")
    parser.add_argument("--confidence", type=float, default=0.95,
                        help="two-sided level of the intervals (default 0.95)")
    # (--bootstrap-rounds too: the tasks' name of it)
    parser.add_argument("--bootstrap", "--bootstrap-rounds", dest="bootstrap", type=int,
                        default=0, metavar="ROUNDS",
                        help="with per-node scores: AUPRC over the nodes by a paired bootstrap "
                             "of ROUNDS draws (0: off, else at least 100; 2000 is a good value)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write the differences here")
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    """``et-graph compare A/results.json B/results.json ...``; returns the exit status."""
    args = build_parser().parse_args(argv)
    metrics = ([m.strip() for m in args.metrics.split(",") if m.strip()]
               if args.metrics else None)

    def report() -> None:
        if args.json and not args.json.parent.is_dir():  # before the work, not after it
            raise FileNotFoundError(f"--json {args.json}: its folder does not exist")
        payload = compare(args.files, args.reference, metrics, args.confidence, args.bootstrap)
        if args.json:  # first, whole: a reader of the tables that left (| head) lost it
            write_text_whole(args.json, json_text(payload))
        # The tables as a run's results.md shows them (one function: the headings that say
        # which table is which, and the caution on intervals from fewer than 3 runs)
        print("\n\n".join(difference_sections({
            "differences": payload["differences"], "differences_design": payload["design"],
            "node_differences": payload.get("node_differences"),
            "node_differences_design": payload.get("node_design")})))

    return exit_on_bad_input(report, "et-graph compare")
