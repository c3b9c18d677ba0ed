"""How often a discrete ET step raises the energy (docs/derivation.md, "How small is small enough").

The continuous flow x' = -dE/dg always descends (the LayerNorm Jacobian is positive
semi-definite), and a step descends to first order in alpha; a finite step can overshoot where the
energy is not concave in g (attention, coupling). This script counts, over random float64 layers
and inputs (default initialisation, 5 steps each), the traces of ``ETConv(..., return_energy=True)``
in which some step raises the energy by more than 1e-10 of its largest magnitude. The layers
have one head of width D on small random graphs (6 nodes, 12 edges), where rises show up:

* attention only (``hopfield_dim=0``) at several alphas, inputs ~ N(0, 1);
* attention only at the default alpha 0.1, inputs ~ 0.03 N(0, 1) (the LayerNorm ignores the
  scale of x, so a small x means a large effective step);
* Hopfield only (no edges) at alphas up to 1000: both Hopfield energies are concave in g, so no
  rise is expected;
* the default layer (K = 4D ReLU memories) at alpha 0.1 and 1.

    python benchmarks/descent_check.py --json docs/measured/descent_check.json

It also prints the smallest counterexample it knows, ``ETConv(4, heads=1, head_dim=4,
hopfield_dim=0, alpha=1.0)`` on 4 nodes (seed 0).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Optional

import torch

from et_graph.nn import ETConv

TOLERANCE = 1e-10


def rises(conv: ETConv, x: torch.Tensor, edge_index: torch.Tensor) -> bool:
    with torch.no_grad():
        _, energy = conv(x, edge_index, return_energy=True)
    return bool((energy.diff() > TOLERANCE * energy.abs().max().clamp_min(1e-12)).any())


def count(traces: int, channels: int, alpha: float, hopfield_dim: Optional[int],
          scale: float = 1.0, edges: bool = True, hopfield: str = "relu",
          nodes: int = 6) -> dict[str, Any]:
    """Rising traces among ``traces`` random one-head layers of width ``channels`` on small
    random graphs (``nodes`` nodes, ``2 * nodes`` edges: few neighbours per node, where the
    softmax is least smooth)."""
    risen = 0
    for seed in range(traces):
        torch.manual_seed(seed)
        conv = ETConv(channels, heads=1, head_dim=channels, hopfield_dim=hopfield_dim, steps=5,
                      alpha=alpha, hopfield=hopfield)
        x = torch.randn(nodes, channels) * scale
        edge_index = (torch.randint(0, nodes, (2, 2 * nodes)) if edges
                      else torch.empty(2, 0, dtype=torch.long))
        risen += rises(conv, x, edge_index)
    return {"channels": channels, "alpha": alpha, "hopfield_dim": hopfield_dim,
            "input_scale": scale, "edges": edges, "hopfield": hopfield, "nodes": nodes,
            "traces": traces, "rising": risen}


def counterexample() -> list[float]:
    torch.manual_seed(0)
    conv = ETConv(4, heads=1, head_dim=4, hopfield_dim=0, steps=5, alpha=1.0)
    edge_index = torch.randint(0, 4, (2, 8))
    x = torch.randn(4, 4)
    with torch.no_grad():
        return conv(x, edge_index, return_energy=True)[1].tolist()


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--traces", type=int, default=200, help="random layers per setting")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if args.traces < 1:
        parser.error("--traces must be at least 1")
    torch.set_num_threads(1)
    # float64 throughout (the layers are built in it, so their initialisation is float64's)
    torch.set_default_dtype(torch.float64)
    rows = []
    for channels in (4, 8):
        for alpha in (0.1, 1.0):
            rows.append(count(args.traces, channels, alpha, 0))
        rows.append(count(args.traces, channels, 0.1, 0, scale=0.03))
        for alpha in (1.0, 1000.0):
            rows.append(count(args.traces, channels, alpha, None, edges=False))
            rows.append(count(args.traces, channels, alpha, None, edges=False,
                              hopfield="softmax"))
        for alpha in (0.1, 1.0):
            rows.append(count(args.traces, channels, alpha, None))
    result = {"tolerance": TOLERANCE, "rows": rows, "counterexample": counterexample()}
    print("| D | alpha | memories | input scale | edges | Hopfield | rising traces |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        memories = "4D" if r["hopfield_dim"] is None else r["hopfield_dim"]
        print(f"| {r['channels']} | {r['alpha']:g} | {memories} | {r['input_scale']:g} | "
              f"{'yes' if r['edges'] else 'none'} | {r['hopfield']} | "
              f"{r['rising']} / {r['traces']} |")
    print("counterexample (D = 4, alpha = 1, no memories):",
          [round(v, 3) for v in result["counterexample"]])
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
