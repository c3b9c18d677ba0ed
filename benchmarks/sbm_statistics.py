"""Statistics of generated PATTERN / CLUSTER graphs (docs/gnnbenchmark.md's "generated" row).

    python benchmarks/sbm_statistics.py PATTERN 1000
    python benchmarks/sbm_statistics.py CLUSTER 1000

Generates COUNT training graphs with seed 0 (the published SBM recipes) and prints their
average/min/max node count, average directed edge count and label fractions as JSON.
"""
from __future__ import annotations

import argparse
import json
from typing import Optional

from et_graph.datasets.synthetic import (
    generate_sbm_cluster,
    generate_sbm_pattern,
    sbm_statistics,
)

GENERATORS = {"PATTERN": generate_sbm_pattern, "CLUSTER": generate_sbm_cluster}


def main(argv: Optional[list[str]] = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("name", nargs="?", default="PATTERN", choices=sorted(GENERATORS))
    parser.add_argument("count", nargs="?", type=int, default=1000,
                        help="training graphs to generate (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error("count must be at least 1")
    stats = sbm_statistics(GENERATORS[args.name](args.count, 0, 0, seed=args.seed)["train"])
    print(json.dumps({"dataset": args.name, "seed": args.seed, **stats}))
    return stats


if __name__ == "__main__":
    main()
