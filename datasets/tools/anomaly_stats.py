#!/usr/bin/env python
"""Print the statistics quoted in datasets/SOURCES.md for the anomaly graphs et-graph ships.

    python datasets/tools/anomaly_stats.py [NAME ...]

Each graph goes through ``load_anomaly_dataset`` (symmetrised, self-loops and duplicates
removed), so the numbers describe exactly what the models see.
"""
from __future__ import annotations

import sys

from et_graph.datasets import describe_anomaly_data, load_anomaly_dataset

EMBEDDED = ("tolokers", "reddit", "inj_amazon")


def main(names: list[str]) -> int:
    header = ("name", "nodes", "undirected edges", "features", "anomalies", "ratio", "splits")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name in names or EMBEDDED:
        s = describe_anomaly_data(load_anomaly_dataset(name))
        print(
            f"| {s['name']} | {s['nodes']:,} | {s['undirected_edges']:,} | {s['features']} | "
            f"{s['anomalies']:,} / {s['labelled_nodes']:,} | {100 * s['anomaly_ratio']:.2f}% | "
            f"{s['shipped_splits']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
