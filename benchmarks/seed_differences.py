"""ET minus each baseline, with a confidence interval, from stored runs scored over seeds.

A README row often joins runs made apart on the same split and seeds (ET's preset in one run,
the baselines' in others). This reads their ``results.json`` files (``et-graph anomaly``,
``et-graph unsupervised`` or ``et-graph gnnbenchmark``), joins the models, and reports
``reference - other`` per metric by Welch's t-test over the seeds
(``et_graph.protocols.significance``): every seed of a fixed split (or of an unsupervised run)
scores the same nodes or graphs, so nothing pairs up, and the interval covers the training
randomness only. An error metric (a run with ``lower_is_better``, ZINC's MAE) is read the right
way round.

    python benchmarks/seed_differences.py \\
        docs/measured/anomaly/tolokers40_v4_et_two_hop.json \\
        docs/measured/anomaly/tolokers40_tuned_v3.json@gbt \\
        docs/measured/anomaly/tolokers40_mlp_extra_trial.json
    python benchmarks/seed_differences.py --reference et_combined --metrics auroc \\
        docs/measured/unsupervised/reddit_planted_baselines.json
    python benchmarks/seed_differences.py --metrics mae \\
        docs/measured/graph/zinc_lr/test-et/results.json \\
        docs/measured/graph/zinc_lr/test-gatedgcn-l9-h128-jk-lr0.00025/results.json

``PATH@a,b`` keeps only those models of a file; ``PATH@a=b`` renames one (two files with an
``et`` row, say). Files of different datasets, splits or scored parts (a validation-only
probe beside a test run), and runs whose seeds draw their own splits, are refused.

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
from pathlib import Path
from typing import Any, Optional

import numpy as np

from et_graph.protocols.significance import (
    compare_nodes,
    compare_to,
    describe_design,
    difference_table,
)
from et_graph.reporting import json_text


def read_models(spec: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(results, models)`` of ``PATH[@MODEL[=NAME],...]``."""
    path, _, keep = spec.partition("@")
    results = json.loads(Path(path).read_text())
    models = results["models"]
    if not keep:
        return results, dict(models)
    chosen = {}
    for item in (part.strip() for part in keep.split(",") if part.strip()):
        name, _, alias = item.partition("=")
        if name not in models:
            raise ValueError(f"{path} holds no model {name!r} (it has {list(models)})")
        chosen[alias or name] = models[name]
    return results, chosen


def scores_file(path: Path) -> Path:
    """Where a results file's per-node scores are kept."""
    return (path.parent / "scores.npz" if path.name == "results.json"
            else path.with_name(path.stem + ".scores.npz"))


def read_scores(specs: list[str]) -> Optional[tuple[np.ndarray, dict[str, list[np.ndarray]]]]:
    """``(labels, {model: per-seed scores})`` over every spec's kept models, or ``None`` when a
    file has no scores beside it. Refuses files whose seeds scored other nodes or labels."""
    labels, nodes, scores = None, None, {}
    for spec in specs:
        path = Path(spec.partition("@")[0])
        if not scores_file(path).exists():
            return None
        stored = np.load(scores_file(path))
        _, chosen = read_models(spec)
        seeds = sorted(int(k.split("__seed")[1]) for k in stored.files
                       if k.startswith("nodes__seed"))
        for seed in seeds:
            mine = stored[f"nodes__seed{seed}"], stored[f"labels__seed{seed}"]
            if nodes is None:
                nodes, labels = mine
            elif not (np.array_equal(nodes, mine[0]) and np.array_equal(labels, mine[1])):
                raise ValueError(f"{path}: seed {seed} scored other nodes or labels than the "
                                 "files before it")
        originals = _originals(spec)
        for name in chosen:
            scores[name] = [stored[f"{originals.get(name, name)}__seed{seed}"] for seed in seeds]
    return labels, scores


def _originals(spec: str) -> dict[str, str]:
    """``{new name: stored name}`` of a spec's renames (``PATH@a=b``)."""
    keep = spec.partition("@")[2]
    return {alias: name for name, _, alias in (item.strip().partition("=")
                                               for item in keep.split(",")) if alias}


def split_signature(results: dict[str, Any]) -> tuple[str, str, str, bool]:
    """What must agree for two runs' seeds to be comparable: the dataset, the scored part, the
    protocol up to its node counts (split rule, split seed and sizes) and the metric's
    direction."""
    protocol = results.get("protocol", "")
    if "+ seed" in protocol:
        raise ValueError("these seeds draw their own splits (vary_split): compare them paired "
                         "within one run (its results.json holds the differences) instead")
    return (results.get("dataset", ""), results.get("scored", "test"),
            protocol.split(" nodes")[0], bool(results.get("lower_is_better", False)))


def join(specs: list[str]) -> tuple[dict[str, Any], list[int], bool]:
    """The models of every spec in one table; refuses mismatched runs and duplicate names.
    Also returns the seed counts and whether lower is better."""
    models: dict[str, Any] = {}
    signature = None
    for spec in specs:
        results, chosen = read_models(spec)
        mine = split_signature(results)
        if signature is not None and mine != signature:
            raise ValueError(f"{spec} is not the same dataset, split and scored part as the "
                             f"files before it:\n  {mine}\n  {signature}")
        signature = mine
        twice = set(models) & set(chosen)
        if twice:
            raise ValueError(f"model(s) {sorted(twice)} appear twice: keep one with PATH@MODEL "
                             "or rename one with PATH@MODEL=NAME")
        models.update(chosen)
    seeds = sorted({len(stat.get("values") or ()) for row in models.values()
                    for stat in row.values() if isinstance(stat, dict) and "values" in stat})
    return models, seeds, bool(signature and signature[3])


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", metavar="RESULTS_JSON[@MODELS]")
    parser.add_argument("--reference", default="et",
                        help="the row every other is compared with (default et; for an "
                             "unsupervised run et_combined or et_reconstruction)")
    parser.add_argument("--metrics", default="auroc,auprc")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--bootstrap", type=int, default=0, metavar="ROUNDS",
                        help="with per-node scores: AUPRC over the nodes by a paired bootstrap "
                             "of ROUNDS draws (0: off; 2000 is a good value)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE")
    args = parser.parse_args(argv)
    try:
        models, seeds, lower_is_better = join(args.files)
        metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
        others = [name for name in models if name != args.reference]
        rows = compare_to(models, args.reference, metrics, "seeds", others=others,
                          confidence=args.confidence, higher_is_better=not lower_is_better)
    except ValueError as error:
        parser.error(str(error))
    design = describe_design("seeds", min(seeds) if seeds else 0, confidence=args.confidence)
    print(difference_table(rows) + f"\n\n{design}" + (
        f" (seed counts per row: {seeds})" if len(seeds) > 1 else ""))
    payload = {"files": args.files, "differences": [d.as_dict() for d in rows],
               "design": design}
    try:
        stored = read_scores(args.files) if "auroc" in metrics else None
        if stored is not None:
            labels, scores = stored
            rounds = args.bootstrap if "auprc" in metrics else 0
            nodes = compare_nodes(labels, scores, args.reference, others, args.confidence,
                                  bootstrap_rounds=rounds)
            nodes_design = describe_design("nodes", len(scores[args.reference]),
                                           confidence=args.confidence, bootstrap_rounds=rounds)
            print("\n" + difference_table(nodes) + f"\n\n{nodes_design}")
            payload.update(node_differences=[d.as_dict() for d in nodes],
                           node_design=nodes_design)
    except (ValueError, KeyError) as error:
        parser.error(f"per-node scores: {error}")
    if args.json:
        args.json.write_text(json_text(payload))
    return payload


if __name__ == "__main__":
    main()
