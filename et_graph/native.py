r"""Optional compiled CPU kernels (the attention gradient, the Conv2D mask's Gram entries), for
mini-batches of small graphs.

:func:`et_graph.fused.fused_attention_grad` computes ``(dE_ATT/dk, dE_ATT/dq)`` with PyTorch's
sparse CSR kernels: a sampled product, two segment reductions and two sparse-dense products per
descent step, and as many again in backward. On a batch of small graphs (NCI1: 64 graphs, about
2,100 tokens and 8,500 edges) each of those calls costs more in dispatch and bookkeeping than
in arithmetic. ``et_graph/csrc/attention_grad.cpp`` does the same work as one loop over the
destination-sorted edges in forward and one in backward (the equations of
:mod:`et_graph.fused`'s docstring, edge by edge), each head's products vectorised, the keys
and queries read in place from their shared projection. ``et_graph/csrc/gram_entries.cpp``
does the same for :class:`~et_graph.nn.adjacency_mask.Conv2DAdjacencyMask`: the ``k^2`` Gram
entries its convolution reads at each edge, in one loop (:func:`gram_entries`), where the
PyTorch path builds per-graph Gram matrices and tens of index tensors per batch.
``et_graph/csrc/random.cpp`` draws the training noise (:func:`normal_like`, ETConv's
``noise_std``) and dropout (:func:`dropout`, :class:`et_graph.nn.Dropout`) from a Philox
generator, seeded from PyTorch's so that ``torch.manual_seed`` still reproduces a run, where
PyTorch's CPU generator spends about a twentieth of an NCI1 training step drawing them. All
three are one extension (``bindings.cpp``), built together.

It is **off by default** and opt-in, because it is compiled on first use (with
:func:`torch.utils.cpp_extension.load`: a C++ compiler and ninja, about a minute, then cached
by torch under ``~/.cache/torch_extensions`` or ``$TORCH_EXTENSIONS_DIR``), and because it sums
in another order than the sparse kernels, so float32 results differ from the default path in the
last bits (float64 agrees with the reference closed form to about 1e-14; the tests check both).
It runs on PyTorch's intra-op threads (``torch.set_num_threads``; OpenMP, on Linux): with more
than one thread the attention gradient splits its loops in two passes, over destinations and
then over sources (the scatter into ``dE/dk`` would race otherwise), the mask's backward runs
graph by graph and the generator block by block, and every result is the same, bit for bit,
whatever the number of threads (:func:`source_layout`). It was written for mini-batches of many
small graphs; ``benchmarks/bench_native_attention.py`` times both paths on one large graph too
(docs/benchmarks.md has the figures). Turn it on with

* ``set_native_attention(True)`` (or the context manager :func:`native_attention`),
* the environment variable ``ET_GRAPH_NATIVE_ATTENTION=1`` (read at import; the kernel is
  then built on its first call),
* ``--native-attention`` on every ``et-graph`` command (``run.native_attention``).

When it is on, every first-order training step of the CPU float32/float64 path uses them (the
mask's kernel wherever the mask's ``method="sparse"``; noise and dropout then come from another
random stream than PyTorch's: the same distributions, other draws); ``create_graph=True`` (higher
derivatives) takes the reference routes (the sparse path's; :func:`gram_entries_reference`), other
dtypes, devices and ``torch.func`` transforms the same fallbacks as before. Asking for it where
it cannot be built raises :class:`RuntimeError` with the compiler's message; it never falls
back silently.
"""
from __future__ import annotations

import errno
import hashlib
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Optional

import torch
from torch import Tensor

from .exceptions import ConfigWarning
from .precision import backward_without_autocast

CSRC = Path(__file__).with_name("csrc")
#: One extension: the attention gradient, the mask's Gram entries, and their Python bindings.
SOURCES = tuple(CSRC / name for name in ("bindings.cpp", "attention_grad.cpp",
                                         "gram_entries.cpp", "random.cpp"))
#: Included by every source; hashed into the build's name with them (torch's cache would not
#: see a change to it).
HEADERS = (CSRC / "et_native.h",)
ENV_VARIABLE = "ET_GRAPH_NATIVE_ATTENTION"
# No -march flag, so a build cached in a home directory shared by different machines runs on
# all of them. On Linux -fopenmp: at::parallel_for's OpenMP loops run on torch's threads (the
# extension's libgomp.so.1 is the one torch has loaded: one runtime, one thread count); elsewhere
# -fopenmp-simd honours the `omp simd` loops alone and at::parallel_for runs one thread.
# MSVC (Windows) takes its own flags: /O2, and /fp:precise keeps IEEE semantics as above.
_OPENMP_RUNTIME = sys.platform.startswith("linux")
if os.name == "nt":  # pragma: no cover - Windows only
    COMPILE_FLAGS = ["/O2", "/fp:precise"]
    LINK_FLAGS: list[str] = []
else:
    COMPILE_FLAGS = ["-O3", "-fopenmp" if _OPENMP_RUNTIME else "-fopenmp-simd",
                     "-fno-math-errno", "-fno-trapping-math"]
    LINK_FLAGS = ["-fopenmp"] if _OPENMP_RUNTIME else []

_state: dict[str, Any] = {"enabled": False, "module": None, "random": True}


def extension_name() -> str:
    """``et_graph_native_<hash>``: the build's name in torch's extension cache, a hash of the
    sources, their header and the flags. Two checkouts or versions of the package in one
    environment (or sharing a home directory) then keep builds of their own instead of
    rebuilding over each other's; the same files share one."""
    digest = hashlib.sha1(" ".join([*COMPILE_FLAGS, *LINK_FLAGS]).encode())
    for path in (*SOURCES, *HEADERS):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return f"et_graph_native_{digest.hexdigest()[:12]}"


def load_native_attention() -> Any:
    """The compiled extension (built on the first call of the process, then taken from torch's
    build cache). Raises :class:`RuntimeError` naming the cause if it cannot be built."""
    if _state["module"] is not None:
        return _state["module"]
    name = extension_name()
    if not is_built(name):
        # A minute without output would look like a hang.
        print(f"et-graph: building the compiled kernels ({name}, once per version; about a "
              "minute)", file=sys.stderr, flush=True)
    try:
        # torch takes the lock on every load, built or not (ninja then finds nothing to do),
        # and waits on a held one for ever: a build killed (a timeout, kill, the OOM killer;
        # not Ctrl-C) leaves it, and every later run hung without a word, the built ones too
        check_build_locks(name)
        from torch.utils.cpp_extension import load

        module = load(name=name, sources=[str(path) for path in SOURCES],
                      # copies: load() appends torch's libraries to the lists it is given
                      extra_cflags=list(COMPILE_FLAGS), extra_ldflags=list(LINK_FLAGS),
                      verbose=False)
    except NativeBuildError:
        raise
    except OSError as error:
        if error.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise _build_failed(error) from error
        # torch's build folder cannot be made or written (a read-only home in a container):
        # the compiler was blamed, and a read-only folder of prebuilt kernels cannot be used
        # either, as torch writes its lock there (a locked-down runtime audit)
        raise NativeBuildError(
            f"the native kernels' build folder is not writable ({error}): set "
            "TORCH_EXTENSIONS_DIR to a writable folder (torch builds, and takes a lock, "
            "there even when the kernels are built), or leave them off (the default) to use "
            "the sparse kernels instead.") from error
    except Exception as error:  # compiler, ninja or headers missing: say which
        raise _build_failed(error) from error
    _state["module"] = module
    return module


def _build_failed(error: Exception) -> NativeBuildError:
    return NativeBuildError(
        f"the native kernels could not be built from {CSRC} "
        f"({type(error).__name__}: {str(error).strip()[-600:]}); it needs a C++ compiler "
        "and ninja (pip install ninja). Leave it off (the default) to use the sparse "
        "kernels instead.")


class NativeBuildError(RuntimeError):
    """The compiled kernels could not be built here (the message says why). The command line
    reports it in one line, as bad input: it is the machine's, not a bug."""


#: A build lock older than this (seconds) is one a killed build left: a build takes a minute or
#: two here, and torch would wait on it for ever.
STALE_LOCK_S = 600.0


def check_build_locks(name: str) -> None:
    """Refuse a stale lock of build ``name`` (older than :data:`STALE_LOCK_S`) with
    :class:`NativeBuildError` naming it; say that a fresh one is waited for."""
    for lock in build_locks(name):
        try:
            age = time.time() - lock.stat().st_mtime
        except FileNotFoundError:  # the other build has just finished
            continue
        if age > STALE_LOCK_S:
            raise NativeBuildError(
                f"{lock} is {age / 60:.0f} minutes old: a build that was killed left it, and "
                "torch would wait on it for ever. If no process is building the kernels, "
                "delete it and run again")
        print(f"et-graph: {lock} exists: another process is building the kernels; waiting "
              "for it (if none is building, a killed build left it: delete it)",
              file=sys.stderr, flush=True)


def build_locks(name: str) -> list[Path]:
    """The lock files torch's extension builder left for build ``name`` (it waits while one
    exists): its own build folder's, for this Python and device (another interpreter's stale
    lock was refused here, though torch never waits on it); every tag's where torch does not
    say which folder it uses."""
    try:
        from torch.utils.cpp_extension import _get_build_directory
    except ImportError:  # a torch without it
        pass
    else:
        lock = Path(_get_build_directory(name, False)) / "lock"
        return [lock] if lock.exists() else []
    from torch.utils.cpp_extension import get_default_build_root

    chosen = os.environ.get("TORCH_EXTENSIONS_DIR")
    if chosen:
        return sorted(Path(chosen).glob(f"{name}/lock"))
    return sorted(Path(get_default_build_root()).glob(f"*/{name}/lock"))


def is_built(name: str) -> bool:
    """Whether torch's extension cache already holds a build called ``name`` (its layout:
    ``$TORCH_EXTENSIONS_DIR/<name>/<name>.so`` where that is set, else
    ``<default root>/<python and device tag>/<name>/<name>.so``)."""
    from torch.utils.cpp_extension import get_default_build_root

    chosen = os.environ.get("TORCH_EXTENSIONS_DIR")
    pattern = f"{name}/{name}*.{{suffix}}" if chosen else f"*/{name}/{name}*.{{suffix}}"
    root = Path(chosen) if chosen else Path(get_default_build_root())
    # .pyd on Windows: the "building the compiled kernels" line printed on every run there
    return any(any(root.glob(pattern.format(suffix=suffix))) for suffix in ("so", "pyd"))


def native_attention_enabled() -> bool:
    """Whether :func:`et_graph.fused.fused_attention_grad` uses the compiled kernel."""
    return bool(_state["enabled"])


def set_native_attention(enabled: bool) -> None:
    """Turn the compiled kernel on or off for this process. Turning it on builds it first (see
    :func:`load_native_attention`), so a missing compiler is reported here, not mid-training."""
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool, got {enabled!r}")
    if enabled:
        load_native_attention()
    _state["enabled"] = enabled


@contextmanager
def _switched(key: str, setter: Callable[[bool], None], enabled: bool) -> Iterator[None]:
    """``setter(enabled)`` for the block, then ``_state[key]`` as it was (even on error)."""
    before = _state[key]
    setter(enabled)
    try:
        yield
    finally:
        _state[key] = before


def native_attention(enabled: bool = True) -> AbstractContextManager[None]:
    """``with native_attention(): ...`` uses the compiled kernel inside the block only. The
    switch is process-wide: while the block runs, layers in other threads use the kernel
    too, and blocks in several threads must not overlap (each restores the value it found)."""
    return _switched("enabled", set_native_attention, enabled)


def native_random_enabled() -> bool:
    """Whether training noise and dropout draw from the compiled generator where the compiled
    kernels apply (the default), rather than from PyTorch's."""
    return bool(_state["random"])


def set_native_random(enabled: bool) -> None:
    """With ``False`` the compiled kernels (when on) keep PyTorch's generator for the training
    noise and dropout: the same draws, for a seed, as without the kernels, so a run differs
    from one on the default path by the kernels' rounding alone (and the generator's speed is
    given up). ``True`` (the default) draws them from the compiled generator."""
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool, got {enabled!r}")
    _state["random"] = enabled


def native_random(enabled: bool = True) -> AbstractContextManager[None]:
    """``with native_random(False): ...`` sets :func:`set_native_random` inside the block only."""
    return _switched("random", set_native_random, enabled)


def env_requests_native() -> Optional[bool]:
    """``ET_GRAPH_NATIVE_ATTENTION`` as a bool (``None`` when unset); other values are refused."""
    value = os.environ.get(ENV_VARIABLE)
    if value is None or value == "":
        return None
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{ENV_VARIABLE} must be 1/0 (or true/false, yes/no, on/off), got {value!r}")


def sorted_edges(plan: Any) -> tuple[Tensor, Tensor]:
    """``(src, rowptr)``: the int64 sources of ``plan``'s destination-sorted edges and the
    ``[N + 1]`` offsets of each destination's edges among them. Kept on the plan: every step of
    a forward call and its backward share them."""
    cached = getattr(plan, "_native_edges", None)
    if cached is None:
        from torch_geometric.utils import cumsum

        rowptr = cumsum(plan.in_degree.long())
        cached = plan._native_edges = (plan.src.contiguous().long(), rowptr)
    return cached


def rows_contiguous(t: Tensor) -> Tensor:
    """``t [N, H, Y]`` itself when each row's ``[H, Y]`` block is contiguous (the kernel reads
    rows at any stride: the keys and queries, views of one ``[N, 2HY]`` projection, are read
    in place), else a contiguous copy. The test is the kernels' own input check (one definition
    of the layout, in ``attention_grad.cpp``), so a tensor passed on is never refused there."""
    return t if load_native_attention().rows_contiguous(t) else t.contiguous()


#: Destinations per block of the attention kernel's threaded loops (``kGrain`` in
#: attention_grad.cpp): a graph with no more nodes is one block, which one pass serves.
KERNEL_GRAIN = 256


def source_layout(plan: Any) -> tuple[Tensor, Tensor, Tensor]:
    """``(t_ptr, t_perm, dst)``: the offsets ``[N + 1]`` of each source's edges in ``plan``'s
    source-sorted order, that order as indices into the destination-sorted edges (the stable
    sort by source: each source's edges keep their destination-sorted order) and each
    destination-sorted edge's destination, int64. With them the attention kernel runs its two
    threaded passes, whose every row sums the same terms in the same order as the one-pass
    loop; kept on the plan."""
    cached = getattr(plan, "_native_layout", None)
    if cached is None:
        from torch_geometric.utils import cumsum

        src, _ = sorted_edges(plan)
        t_ptr = cumsum(torch.bincount(src, minlength=plan.num_nodes))
        cached = plan._native_layout = (t_ptr, plan.transpose.long(), plan.dst.long())
    return cached


def kernel_inputs(k: Tensor, q: Tensor, beta: Tensor, weight: Optional[Tensor], plan: Any
                  ) -> tuple[Tensor, ...]:
    """``(k, q, beta, weight, src, rowptr, t_ptr, t_perm, dst)`` as the compiled kernel takes
    them: rows contiguous, beta flat, an empty tensor for no weight, the plan's sorted edges,
    and its source-sorted layout when PyTorch runs more than one thread and the graph has more
    than one block of destinations (three empty tensors otherwise: one pass, no scratch, no
    second sort)."""
    if torch.get_num_threads() > 1 and plan.num_nodes > KERNEL_GRAIN:
        layout = source_layout(plan)
    else:
        layout = (k.new_empty(0, dtype=torch.long),) * 3
    return (rows_contiguous(k), rows_contiguous(q), beta.reshape(-1).contiguous(),
            k.new_empty(0) if weight is None else weight.contiguous(), *sorted_edges(plan),
            *layout)


class NativeAttentionGrad(torch.autograd.Function):
    """``(dE/dk, dE/dq)`` from the compiled kernel; the same inputs and outputs as
    :class:`et_graph.fused._FusedAttentionGrad` (``weight`` in the plan's ``[1 or H, E]``
    layout), and the same route for higher derivatives."""

    @staticmethod
    def forward(ctx: Any, k: Tensor, q: Tensor, beta: Tensor, weight: Optional[Tensor],
                plan: Any) -> tuple[Tensor, Tensor]:
        grad_k, grad_q, probs, scores = load_native_attention().forward(
            *kernel_inputs(k, q, beta, weight, plan))
        ctx.plan = plan
        ctx.save_for_backward(k, q, beta, weight, probs, scores)
        return grad_k, grad_q

    @staticmethod
    @backward_without_autocast
    def backward(ctx: Any, up_k: Optional[Tensor], up_q: Optional[Tensor]):
        from .fused import _FusedAttentionGrad, wants_differentiable_backward

        saved = ctx.saved_tensors
        if wants_differentiable_backward(saved, up_k, up_q):
            # The sparse path's reference route, differentiable to any order.
            return _FusedAttentionGrad._differentiable_backward(ctx, saved, up_k, up_q)
        k, q, beta, weight, probs, scores = saved
        empty = k.new_empty(0)
        d_k, d_q, d_beta, d_w = load_native_attention().backward(
            *kernel_inputs(k, q, beta, weight, ctx.plan), probs, scores,
            empty if up_k is None else up_k.contiguous(),
            empty if up_q is None else up_q.contiguous(),
            bool(ctx.needs_input_grad[3]),
        )
        needs = ctx.needs_input_grad
        return (d_k if needs[0] else None, d_q if needs[1] else None,
                d_beta.view(beta.shape) if needs[2] else None,
                d_w if needs[3] and weight is not None else None, None)


def _apply_environment() -> None:
    # Only the switch: importing the package never compiles (nor fails for want of a
    # compiler). The kernel is built on its first call, or by RunConfig.apply_threads. A
    # value it cannot read is said here and left to RunConfig, which refuses it in one line:
    # raised at import, it broke every command (and --version) with a traceback.
    try:
        requested = env_requests_native()
    except ValueError as error:
        warnings.warn(str(error), ConfigWarning, stacklevel=2)
        return
    if requested:
        _state["enabled"] = True


_apply_environment()


# --------------------------------------------------------------------------------------------
# The Conv2D adjacency mask's Gram entries at the edges
# --------------------------------------------------------------------------------------------
def gram_entries_reference(x: Tensor, src: Tensor, dst: Tensor, batch: Tensor, ptr: Tensor,
                           radius: int) -> Tensor:
    """``[E, k^2]``, ``k = 2 radius + 1``: entry ``(a + r) k + (b + r)`` of edge ``B -> C`` is
    ``<x_{C+a}, x_{B+b}>``, or 0 where ``C + a`` leaves ``C``'s graph or ``B + b`` leaves
    ``B``'s (graph ``g`` holds the tokens ``ptr[g] .. ptr[g + 1] - 1``; ``batch`` maps each
    token to its graph). Plain PyTorch and differentiable to any order: what the compiled
    kernel is tested against, and its backward under ``create_graph=True``."""
    last = max(x.size(0) - 1, 0)
    lo, hi = ptr.index_select(0, batch), ptr.index_select(0, batch + 1)
    columns = []
    for row_shift in range(-radius, radius + 1):
        rows = dst + row_shift
        row_inside = (rows >= lo[dst]) & (rows < hi[dst])
        rows = rows.clamp(0, last)
        for col_shift in range(-radius, radius + 1):
            cols = src + col_shift
            inside = row_inside & (cols >= lo[src]) & (cols < hi[src])
            cols = cols.clamp(0, last)
            dots = (x.index_select(0, rows) * x.index_select(0, cols)).sum(-1)
            columns.append(dots * inside.to(x.dtype))
    return torch.stack(columns, dim=1) if columns else x.new_zeros(src.numel(), 0)


class NativeGramEntries(torch.autograd.Function):
    """:func:`gram_entries_reference` from the compiled kernel (one loop over the edges each
    way); its backward under ``create_graph=True`` differentiates the reference instead."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, src: Tensor, dst: Tensor, batch: Tensor, ptr: Tensor,
                radius: int) -> Tensor:
        edges = tuple(t.contiguous().long() for t in (src, dst, batch, ptr))
        ctx.save_for_backward(x, *edges)
        ctx.radius = radius
        return load_native_attention().gram_entries_forward(x.contiguous(), *edges, radius)

    @staticmethod
    @backward_without_autocast
    def backward(ctx: Any, grad: Tensor):
        x, src, dst, batch, ptr = ctx.saved_tensors
        if torch.is_grad_enabled() and (x.requires_grad or grad.requires_grad):
            with torch.enable_grad():
                values = gram_entries_reference(x, src, dst, batch, ptr, ctx.radius)
                (d_x,) = torch.autograd.grad(values, x, grad, create_graph=True)
        else:
            d_x = load_native_attention().gram_entries_backward(
                x.contiguous(), src, dst, batch, ptr, ctx.radius, grad.contiguous())
        return d_x, None, None, None, None, None


def gram_entries(x: Tensor, src: Tensor, dst: Tensor, batch: Tensor, ptr: Tensor,
                 radius: int) -> Tensor:
    """:func:`gram_entries_reference`'s values from the compiled kernel (CPU, float32/64)."""
    return NativeGramEntries.apply(x, src, dst, batch, ptr, radius)


def native_applies(x: Tensor) -> bool:
    """Whether the compiled kernels take ``x``: switched on, a CPU tensor of float32/64, and
    no ``torch.func`` transform in force (those keep the PyTorch route)."""
    from .fused import SPARSE_KERNEL_DTYPES, functorch_active

    return (native_attention_enabled() and x.device.type == "cpu"
            and x.dtype in SPARSE_KERNEL_DTYPES and not functorch_active())


# --------------------------------------------------------------------------------------------
# Random numbers: training noise and dropout
# --------------------------------------------------------------------------------------------
def native_random_applies(x: Tensor) -> bool:
    """Whether noise and dropout for ``x`` come from the compiled generator:
    :func:`native_applies` and :func:`native_random_enabled`."""
    return native_random_enabled() and native_applies(x)


def _draw_seed() -> int:
    """A 63-bit key for the compiled generator, drawn from PyTorch's default CPU generator, so
    that ``torch.manual_seed`` reproduces the compiled draws as it does PyTorch's."""
    return int(torch.empty((), dtype=torch.int64).random_())


def _native_values(x: Tensor) -> bool:
    """Whether to draw float64 (else float32) for ``x``; refuses what the generator cannot give."""
    if x.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"the compiled generator draws float32 or float64, got {x.dtype}")
    if x.device.type != "cpu":
        raise ValueError(f"the compiled generator runs on the CPU, got a tensor on {x.device}")
    return x.dtype == torch.float64


def random_normal_like(x: Tensor) -> Tensor:
    """Standard normals of ``x``'s shape and dtype (CPU) from the compiled Philox4x32-10
    generator (``csrc/random.cpp``): each value the inverse CDF of 24 random bits, computed in
    float32, so ``|z| <= 5.42``."""
    values = load_native_attention().random_normal(x.numel(), _draw_seed(), _native_values(x))
    return values.view(x.shape)


def dropout(x: Tensor, p: float) -> Tensor:
    """``x`` with each value zeroed with probability ``p`` (rounded to a multiple of
    ``2^-24``) and the rest scaled by ``1 / (1 - p)``, the draws from the compiled generator.
    Differentiable to any order (a product with a fixed mask)."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must lie in [0, 1), got {p}")
    scale = load_native_attention().dropout_scale(x.numel(), float(p), _draw_seed(),
                                                  _native_values(x))
    return x * scale.view(x.shape)


def normal_like(x: Tensor) -> Tensor:
    """Training noise: :func:`random_normal_like` where the compiled generator applies
    (:func:`native_random_applies`), else ``torch.randn_like``."""
    return random_normal_like(x) if native_random_applies(x) else torch.randn_like(x)
