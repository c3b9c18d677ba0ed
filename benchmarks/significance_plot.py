"""The README's differences as one forest plot, from docs/measured/significance.

    python benchmarks/significance_plot.py --out docs/img/significance_forest.png

Graph classification: ET minus GIN under per-fold selection (the mean of three trainings per
fold; DD: minus the MLP, its nearest rival, with the tuned presets), in accuracy points.
Anomaly detection: ET's AUROC minus its nearest rival's over the test nodes and seeds (DeLong).
ZINC: GatedGCN's MAE minus ET's (mirrored: right is ET better). inj_amazon's unsupervised lead
(+0.22 AUROC and more) is left out of the figure, where it would flatten the others.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from et_graph.plots.significance import plot_differences
from et_graph.protocols.significance import (
    Difference,
    format_p_near,
    holm,
    interval_text,
    signed,
)
from et_graph.reporting import json_text

STORED = Path(__file__).resolve().parents[1] / "docs" / "measured" / "significance"

#: (label, stored file, dataset, candidates per fold (None: fixed presets), second model)
TU_ROWS = [
    ("NCI1 (vs GIN)", "tu_fold_select.json", "NCI1", 3, "gin"),
    ("PROTEINS (vs GIN)", "tu_fold_select.json", "PROTEINS", 6, "gin"),
    ("ENZYMES (vs GIN)", "tu_fold_select.json", "ENZYMES", 3, "gin"),
    ("IMDB-BINARY (vs GIN)", "tu_fold_select.json", "IMDB-BINARY", 6, "gin"),
    ("MUTAG (vs GIN)", "tu_fold_select.json", "MUTAG", 9, "gin"),
    ("NCI109 (vs GIN)", "tu_fold_select.json", "NCI109", 2, "gin"),
    ("Mutagenicity (vs GIN)", "tu_fold_select.json", "Mutagenicity", 3, "gin"),
    ("DD (vs MLP, presets)", "tu_presets.json", "DD", None, "structure_agnostic"),
]
ANOMALY_ROWS = [
    ("Tolokers (vs GBT)", "tolokers_v5.json", "gbt"),
    ("reddit (vs GAT)", "reddit.json", "gat"),
    ("inj_amazon (vs GBT)", "inj_amazon.json", "gbt"),
    ("inj_amazon (vs MLP)", "inj_amazon.json", "mlp"),
    ("reddit unsupervised (vs LOF at its defaults)", "unsupervised_reddit.json", "lof_defaults"),
    ("reddit unsupervised (vs IsolationForest)", "unsupervised_reddit.json", "iforest"),
]


def _load(name: str, stored: Path) -> dict[str, Any]:
    return json.loads((stored / name).read_text(encoding="utf-8"))


def tu_row(stored: Path, file: str, dataset: str, candidates: Optional[int],
           second: str) -> Difference:
    rows = [r for r in _load(file, stored)["differences"]
            if r["dataset"] == dataset and r["candidates"] == candidates
            and r["second"] == second and r["metric"] == "test_accuracy"]
    if len(rows) != 1:
        raise ValueError(f"{file}: expected one row for {dataset} ({candidates}) − {second}, "
                         f"found {len(rows)}")
    fields = {k: v for k, v in rows[0].items() if k not in ("dataset", "candidates",
                                                             "runs_per_fold")}
    d = Difference.from_dict(fields)
    return replace(d, mean=100 * d.mean, low=100 * d.low, high=100 * d.high)


def node_row(stored: Path, file: str, second: str) -> Difference:
    payload = _load(file, stored)
    rows = [r for r in payload.get("node_differences", [])
            if r["second"] == second and r["metric"] == "auroc"]
    if len(rows) != 1:
        raise ValueError(f"{file}: expected one AUROC row over the nodes for {second}")
    return Difference.from_dict(rows[0])


def panels(stored: Path = STORED) -> dict[str, list[tuple[str, Difference]]]:
    zinc = [r for r in _load("zinc_proxy.json", stored)["differences"]
            if r["second"] == "gatedgcn"]
    return {
        "graph classification: ET − rival, test accuracy points (10 folds, corrected t)":
            [(label, tu_row(stored, *spec)) for label, *spec in TU_ROWS],
        "anomaly detection: ET − rival, test AUROC (DeLong over the nodes, and the seeds)":
            [(label, node_row(stored, file, second)) for label, file, second in ANOMALY_ROWS],
        "ZINC proxy: GatedGCN's test MAE − ET's (3 seeds, Welch)":
            [("ZINC proxy (vs GatedGCN; MAE, lower is better)", Difference.from_dict(zinc[0]))],
    }


def family_table(rows: dict[str, list[tuple[str, Difference]]]) -> list[dict[str, Any]]:
    """Every plotted row with its p-value adjusted by Holm within its panel (one family: the
    datasets of one task), since a panel of eight intervals flags a true-zero one by chance
    far more often than one interval does."""
    records = []
    for panel, items in rows.items():
        adjusted = holm([d.p_value for _, d in items])
        records += [{"panel": panel, "row": label, "mean": d.mean, "low": d.low, "high": d.high,
                     "p": d.p_value, "p_holm": p_family}
                    for (label, d), p_family in zip(items, adjusted)]
    return records


def main(argv: Optional[list[str]] = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--out", type=Path, default=Path("docs/img/significance_forest.png"))
    parser.add_argument("--stored", type=Path, default=STORED,
                        help="the folder of the stored difference tables")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write the rows with their Holm-adjusted p-values")
    args = parser.parse_args(argv)
    rows = panels(args.stored)
    path = plot_differences(rows, args.out,
                            title="ET against its nearest rival: difference and 95% interval\n"
                                  "(right: ET better; filled: significant after Holm over "
                                  "the panel; half: the interval alone excludes 0)")
    records = family_table(rows)
    print("| panel | row | difference [95% interval] | p | p, Holm over the panel |\n"
          "|---|---|---|---|---|")
    for r in records:  # (95% intervals, as the title says: alpha 0.05)
        print(f"| {r['panel'].split(':')[0]} | {r['row']} | {signed(r['mean'], 4)} "
              f"{interval_text(r['low'], r['high'], 4)} | {format_p_near(r['p'], 0.05)} | "
              f"{format_p_near(r['p_holm'], 0.05)} |")
    if args.json:
        args.json.write_text(json_text(records), encoding="utf-8")
    print(f"\nwrote {path}")
    return path


if __name__ == "__main__":
    main()
