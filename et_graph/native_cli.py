"""``et-graph native``: build the opt-in compiled kernels ahead of time and check them.

The kernels of :mod:`et_graph.native` are compiled on first use (about a minute). This command
does it now (in a container image's build step, say, or before timing anything) and reports
what was built: its name and file, the flags, the CPU threads its loops run on, and a check of
the compiled attention gradient, its backward, the mask's Gram entries and the generator
against their references on a small random graph in float64. It exits 1 when the build or a
check fails (with the compiler's message), 0 otherwise.

    et-graph native                       # build (or load) and check
    et-graph native --json native.json    # the same report as JSON
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional

import torch

from . import native
from .paths import write_text_whole

#: The checks' tolerance on the relative error in float64 (the closed forms agree to ~1e-14).
TOLERANCE = 1e-10


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``et-graph native``."""
    parser = argparse.ArgumentParser(
        prog="et-graph native",
        description="Build the opt-in compiled CPU kernels (et_graph.native) now and check "
                    "them against their references; exit status 1 if either fails.",
                    allow_abbrev=False)
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    return parser


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """``|got - want| / |want|`` (Frobenius norms), detached (the tests use it too)."""
    got, want = got.detach(), want.detach()
    return float((got - want).norm() / want.norm().clamp_min(1e-300))


def checks(module: Any) -> dict[str, float]:
    """Relative errors (float64) of the compiled kernels against their references on a random
    graph of 3 small graphs, 4 heads of width 8."""
    from .energy import attention_grad
    from .fused import fused_attention_grad

    generator = torch.Generator().manual_seed(0)
    sizes = torch.tensor([7, 12, 9])
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)])
    batch = torch.repeat_interleave(torch.arange(3), sizes)
    nodes = int(ptr[-1])
    graphs = [(int(first), int(size)) for first, size in zip(ptr, sizes)]
    # four edges per node inside each graph: the sources' draws, then the destinations'
    src, dst = (torch.cat([first + torch.randint(0, size, (4 * size,), generator=generator)
                           for first, size in graphs]) for _ in range(2))
    keep = src != dst
    src, dst = src[keep], dst[keep]
    k, q = (torch.randn(nodes, 4, 8, dtype=torch.float64, generator=generator,
                        requires_grad=True) for _ in range(2))
    beta = torch.rand(4, dtype=torch.float64, generator=generator).add(0.5).requires_grad_()
    with native.native_attention():
        grad_k, grad_q = fused_attention_grad(k, q, src, dst, beta, None)
    ref_k, ref_q = attention_grad(k, q, src, dst, beta, None, nodes)
    up_k, up_q = torch.randn_like(grad_k), torch.randn_like(grad_q)
    got = torch.autograd.grad((grad_k, grad_q), (k, q, beta), (up_k, up_q))
    want = torch.autograd.grad((ref_k, ref_q), (k, q, beta), (up_k, up_q))
    x = torch.randn(nodes, 16, dtype=torch.float64, generator=generator, requires_grad=True)
    entries = native.gram_entries(x, src, dst, batch, ptr, 1)
    reference = native.gram_entries_reference(x, src, dst, batch, ptr, 1)
    up = torch.randn_like(entries)
    (d_x,) = torch.autograd.grad(entries, x, up)
    (want_x,) = torch.autograd.grad(reference, x, up)
    normals = module.random_normal(400_000, 1234, True)
    return {
        "attention_gradient": max(relative_error(grad_k, ref_k), relative_error(grad_q, ref_q)),
        "attention_backward": max(relative_error(g, w) for g, w in zip(got, want)),
        "gram_entries": relative_error(entries, reference),
        "gram_entries_backward": relative_error(d_x, want_x),
        # 400,000 normals: mean and standard deviation within 5 standard errors of 0 and 1
        "normals_mean_in_standard_errors": abs(float(normals.mean())) / (1 / 400_000 ** 0.5),
        "normals_std_in_standard_errors": abs(float(normals.std()) - 1) / (
            1 / (2 * 400_000) ** 0.5),
    }


def main(argv: Optional[list[str]] = None) -> int:
    """``et-graph native``: build the compiled kernels now and check them; returns the exit
    status."""
    args = build_parser().parse_args(argv)
    report: dict[str, Any] = {"name": native.extension_name(),
                              "compile_flags": native.COMPILE_FLAGS,
                              "link_flags": native.LINK_FLAGS,
                              "torch_threads": torch.get_num_threads()}
    try:
        module = native.load_native_attention()
    except RuntimeError as error:
        report.update(ok=False, error=str(error))
        print(f"et-graph native: {error}", file=sys.stderr)
        return _finish(report, args.json, 1)
    report.update(file=str(module.__file__), threads_used=int(module.threads_used()),
                  errors=checks(module))
    errors = report["errors"]
    report["ok"] = all(value < TOLERANCE for key, value in errors.items()
                       if not key.startswith("normals")) and all(
        errors[key] < 5 for key in errors if key.startswith("normals"))
    # the file first, whole: printed first, a reader that left (| head) lost it (a CLI audit)
    status = _finish(report, args.json, 0 if report["ok"] else 1)
    print(f"compiled kernels: {report['name']}\n  file: {report['file']}\n"
          f"  flags: {' '.join(native.COMPILE_FLAGS)}"
          f"{' | link ' + ' '.join(native.LINK_FLAGS) if native.LINK_FLAGS else ''}\n"
          f"  threads: {report['threads_used']} of torch's {report['torch_threads']}")
    for key, value in errors.items():
        unit = "" if key.startswith("normals") else " (relative error, float64)"
        print(f"  {key}: {value:.2e}{unit}")
    print("  ok" if report["ok"] else "  FAILED: a kernel disagrees with its reference")
    return status


def _finish(report: dict[str, Any], path: Optional[Path], status: int) -> int:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_whole(path, json.dumps(report, indent=2) + "\n")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
