"""Helpers shared by the test modules (importable because pytest puts ``tests/`` on the path)."""
from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Optional

import numpy as np
import torch

from et_graph.native_cli import relative_error  # noqa: F401  (the tests' one too)

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def benchmark_module(name: str) -> ModuleType:
    """``benchmarks/NAME.py`` loaded as a module (the folder is not a package)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record_calls(patch: Any, owner: Any, name: str) -> list[Any]:
    """Replace ``owner.name`` through ``patch`` (pytest's ``monkeypatch``, or a
    ``MonkeyPatch.context()``) by a wrapper that calls the original and records what each call
    returned; the returned list grows by one entry a call (a call count, or the models a
    factory built)."""
    calls: list[Any] = []
    original = getattr(owner, name)

    def recorded(*args: Any, **kwargs: Any) -> Any:
        calls.append(original(*args, **kwargs))
        return calls[-1]

    patch.setattr(owner, name, recorded)
    return calls


def record_arguments(patch: Any, owner: Any, name: str) -> list[tuple[tuple, dict]]:
    """Like :func:`record_calls`, but record each call's ``(args, kwargs)``: for a method
    patched on its class, ``args[0]`` is the instance (the figure saved, the axes drawn on)."""
    calls: list[tuple[tuple, dict]] = []
    original = getattr(owner, name)

    def recorded(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        return original(*args, **kwargs)

    patch.setattr(owner, name, recorded)
    return calls


@contextmanager
def torch_threads(count: Optional[int] = None) -> Iterator[None]:
    """Run the block on ``count`` torch threads (``None``: as many as it finds) and restore the
    number after it, which the benchmarks' ``main`` functions set for themselves."""
    before = torch.get_num_threads()
    if count is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def awkward_graph(num_nodes=12, num_edges=40, seed=1):
    """Random graph with self-loops, duplicate edges and isolated nodes (the last two ids);
    float64 features of width 8."""
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes - 2, (2, num_edges), generator=gen)
    edge_index = torch.cat(
        [edge_index, torch.tensor([[0, 3, 3], [0, 5, 5]])], dim=1
    )  # a self-loop and a duplicate edge
    x = torch.randn(num_nodes, 8, generator=gen, dtype=torch.float64)
    return x, edge_index


def results_keeping_random_streams(call: Callable[[], Any], seeds=(1, 2)) -> list[Any]:
    """``call()`` after seeding torch and NumPy with each of ``seeds``; asserts that the draws
    after it are the ones the seed gives without the call (the caller's random streams are left
    alone). Returns the results, one per seed."""
    import random

    results = []
    for seed in seeds:
        for reseed in (torch.manual_seed, np.random.seed, random.seed):
            reseed(seed)
        expected = (torch.rand(3), np.random.rand(3), random.random())
        for reseed in (torch.manual_seed, np.random.seed, random.seed):
            reseed(seed)
        results.append(call())
        assert torch.equal(torch.rand(3), expected[0])
        assert np.array_equal(np.random.rand(3), expected[1])
        assert random.random() == expected[2]
    return results


def planted_graph_with_masks(num_nodes: int, seed: int):
    """``planted_anomaly_graph(num_nodes, seed)`` with the paper's 40% training split (split
    seed 0) stored as ``train_mask``, ``val_mask`` and ``test_mask``."""
    from et_graph.datasets.synthetic import planted_anomaly_graph
    from et_graph.protocols.anomaly import make_splits

    data = planted_anomaly_graph(num_nodes, seed=seed)
    split = make_splits(data, "paper", 1, 0.4, split_seed=0)[0]
    data.train_mask, data.val_mask, data.test_mask = split.masks(num_nodes)
    return data


class CodeRunningPickle:
    """Unpickling it writes ``marker``: what a crafted data file could do instead (the
    security tests check that no loader rebuilds it)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


class ExplainedModel(torch.nn.Module):
    """An ETConv (8 channels, one step) and a linear head to 2 classes: what the explainer
    tests explain."""

    def __init__(self) -> None:
        super().__init__()
        from et_graph.nn import ETConv

        self.conv = ETConv(8, heads=2, head_dim=4, steps=1)
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x, edge_index))


def node_explainer(model: torch.nn.Module):
    """PyG's GNNExplainer (3 epochs) over ``model``'s node classification, edge masks per edge."""
    from torch_geometric.explain import Explainer, GNNExplainer

    return Explainer(
        model=model, algorithm=GNNExplainer(epochs=3), explanation_type="model",
        node_mask_type="attributes", edge_mask_type="object",
        model_config=dict(mode="multiclass_classification", return_type="raw", task_level="node"))


def assert_unread_flags_named(runner: ModuleType, monkeypatch: Any,
                              warned: list[tuple[list[str], str]], silent: list[str]) -> None:
    """``runner.main`` (its ``run`` stubbed out) warns with each pattern for its command line,
    and says nothing about ``silent``'s: the unread-flag check of every task's command."""
    import warnings

    import pytest

    from et_graph.exceptions import ConfigWarning, ETGraphWarning

    monkeypatch.setattr(runner, "run", lambda config: config)
    for argv, pattern in warned:
        with pytest.warns(ConfigWarning, match=pattern):
            runner.main(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("error", ETGraphWarning)
        runner.main(silent)


def write_plugin(folder: Path, name: str, template: str) -> Path:
    """``folder/NAME_plugin.py``: ``template`` (dedented) with ``{name}`` replaced by ``name``,
    a plugin file that registers a model under that name."""
    import textwrap

    path = folder / f"{name}_plugin.py"
    path.write_text(textwrap.dedent(template.format(name=name)), encoding="utf-8")
    return path
