"""The package ships ``py.typed``: a user's type-checked code must see the public API's types.

Inline ``isinstance(value, numbers.Real)`` checks on ``float`` arguments made mypy deem the rest
of several ``__init__`` methods unreachable, so users got "Cannot determine type" on
``ETEnergy(8).channels`` or ``ETDetector().device``; ``fit`` was typed to return
``BaseDetector`` and ``predict(data)`` a ``Tensor | tuple``.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy")

ROOT = Path(__file__).resolve().parent.parent

USER_CODE = '''
from torch import Tensor
from torch_geometric.data import Data

from et_graph.detectors import ETDetector, MLPDetector, UnsupervisedETDetector
from et_graph.nn import ETConv, ETEnergy, EnergyLayerNorm, RelationalETConv


def use(data: Data) -> None:
    conv = ETConv(8, heads=2, head_dim=4)
    width: int = conv.channels + conv.heads + conv.head_dim + conv.hopfield_dim
    kind: str = conv.hopfield
    temperature: float = conv.hopfield_beta + conv.beta_init
    relational = RelationalETConv(8, num_relations=2, heads=2, head_dim=4)
    width += relational.channels + relational.heads
    energy = ETEnergy(8)
    keys: Tensor = energy.w_k
    width += energy.channels
    norm = EnergyLayerNorm(8)
    width += norm.channels
    eps: float = norm.eps
    mlp: MLPDetector = MLPDetector(epochs=1).fit(data)
    et: ETDetector = ETDetector(epochs=1).fit(data)
    pred: Tensor = mlp.predict(data)
    pred = et.predict(data)
    pred, score = et.predict(data, return_score=True)
    unsupervised: UnsupervisedETDetector = UnsupervisedETDetector(epochs=1).fit(data)
    device: str = str(et.device)
    print(width, kind, temperature, keys, eps, pred, score, unsupervised, device)
'''


def test_users_type_checked_code_sees_the_public_types(tmp_path):
    script = tmp_path / "user.py"
    script.write_text(USER_CODE, encoding="utf-8")
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "mypy", str(script), "--follow-imports=silent",
         "--ignore-missing-imports", "--cache-dir", str(tmp_path / "cache")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
