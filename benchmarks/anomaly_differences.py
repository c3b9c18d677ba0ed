"""ET minus each baseline, with a confidence interval, from stored anomaly results.

A README row often joins runs made apart on the same split and seeds (ET's preset in one run,
the baselines' in others). This reads their ``results.json`` files (``et-graph anomaly`` or
``et-graph unsupervised``), joins the models, and reports ``reference - other`` per metric by
Welch's t-test over the seeds (``et_graph.protocols.significance``): every seed of a fixed
split (or of an unsupervised run) scores the same nodes, so nothing pairs up, and the interval
covers the training randomness only.

    python benchmarks/anomaly_differences.py \\
        docs/measured/anomaly/tolokers40_v4_et_two_hop.json \\
        docs/measured/anomaly/tolokers40_tuned_v3.json@gbt \\
        docs/measured/anomaly/tolokers40_mlp_extra_trial.json
    python benchmarks/anomaly_differences.py --reference et_combined --metrics auroc \\
        docs/measured/unsupervised/reddit_planted_baselines.json

``PATH@a,b`` keeps only those models of a file; ``PATH@a=b`` renames one (two files with an
``et`` row, say). Files of different datasets, splits or scored parts (a validation-only
probe beside a test run), and runs whose seeds draw their own splits, are refused.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Optional

from et_graph.protocols.significance import (
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


def split_signature(results: dict[str, Any]) -> tuple[str, str, str]:
    """What must agree for two runs' seeds to be comparable: the dataset, the scored part and
    the protocol up to its node counts (split rule, split seed and sizes)."""
    protocol = results.get("protocol", "")
    if "+ seed" in protocol:
        raise ValueError("these seeds draw their own splits (vary_split): compare them paired "
                         "within one run (its results.json holds the differences) instead")
    return (results.get("dataset", ""), results.get("scored", "test"),
            protocol.split(" nodes")[0])


def join(specs: list[str]) -> tuple[dict[str, Any], list[int]]:
    """The models of every spec in one table; refuses mismatched runs and duplicate names.
    Also returns each model's seed count."""
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
    return models, sorted({len(stat.get("values") or ()) for row in models.values()
                           for stat in row.values() if isinstance(stat, dict)})


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", metavar="RESULTS_JSON[@MODELS]")
    parser.add_argument("--reference", default="et",
                        help="the row every other is compared with (default et; for an "
                             "unsupervised run et_combined or et_reconstruction)")
    parser.add_argument("--metrics", default="auroc,auprc")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--json", type=Path, default=None, metavar="FILE")
    args = parser.parse_args(argv)
    try:
        models, seeds = join(args.files)
        metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
        others = [name for name in models if name != args.reference]
        rows = compare_to(models, args.reference, metrics, "seeds", others=others,
                          confidence=args.confidence)
    except ValueError as error:
        parser.error(str(error))
    design = describe_design("seeds", min(seeds) if seeds else 0, confidence=args.confidence)
    print(difference_table(rows) + f"\n\n{design}" + (
        f" (seed counts per row: {seeds})" if len(seeds) > 1 else ""))
    payload = {"files": args.files, "differences": [d.as_dict() for d in rows],
               "design": design}
    if args.json:
        args.json.write_text(json_text(payload))
    return payload


if __name__ == "__main__":
    main()
