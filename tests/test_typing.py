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
from typing import Union

from typing_extensions import assert_type  # (typing's needs Python 3.11; 3.9 is supported)

from torch import Tensor, nn
from torch_geometric.data import Data

from et_graph.detectors import ETDetector, ETDetectorConfig, MLPDetector, UnsupervisedETDetector
from et_graph.nn import ETConv, ETEnergy, EdgeSet, EnergyLayerNorm, RelationalETConv
from et_graph.nn.models import ETAnomalyNet, ETImageCompletion
from et_graph.training import FitResult, TrainConfig, Trainer, Validation


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


# From a typing audit: pyright saw every ETDetector(...) as Any (its __new__ said Any); the
# flag-dependent returns below were all Tensor | tuple; a task typed with its own model class
# did not fit Trainer.fit.
class Net(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x


class Task:
    def batches(self, epoch: int) -> list[Tensor]:
        return []

    def loss(self, model: Net, batch: Tensor) -> Tensor:
        return model(batch).sum()

    def validate(self, model: Net) -> Validation:
        return Validation(score=0.0)


def flags(data: Data, flag: bool, edges: EdgeSet, x: Tensor, images: Tensor,
          mask: Tensor) -> None:
    assert_type(ETDetector(epochs=1), ETDetector)
    # (supervised=False gives an UnsupervisedETDetector, which pyright reads from __new__'s
    # overloads; mypy takes the class whatever __new__ returns)
    et = ETDetector(epochs=1).fit(data)
    assert_type(et.config, ETDetectorConfig)  # (Any: the base class stores it untyped)
    assert_type(et.predict(data, return_score=True), tuple[Tensor, Tensor])
    assert_type(et.predict(data, return_prob=True), tuple[Tensor, Tensor])
    assert_type(et.predict(data, True, True), tuple[Tensor, Tensor, Tensor])
    net = ETAnomalyNet(4, hidden_channels=8)
    assert_type(net.forward(x, data.edge_index), Tensor)
    assert_type(net.forward(x, data.edge_index, return_energy=True), tuple[Tensor, Tensor])
    assert_type(net.descend(x, data.edge_index), Tensor)
    assert_type(net.descend(x, data.edge_index, None, True), tuple[Tensor, Tensor])
    completion = ETImageCompletion()
    assert_type(completion.forward(images, mask), Tensor)
    assert_type(completion.forward(images, mask, True), tuple[Tensor, Tensor])
    conv = ETConv(8)
    assert_type(conv.descend_edges(x, edges), Tensor)
    assert_type(conv.descend_edges(x, edges, return_energy=True), tuple[Tensor, Tensor])
    relational = RelationalETConv(8, num_relations=2)
    out = relational.forward(x, data.edge_index, data.edge_index[0], return_energy=flag)
    assert_type(out, Union[Tensor, tuple[Tensor, Tensor]])
    result: FitResult = Trainer(TrainConfig()).fit(Net(), Task())
    print(result)
'''

#: Code a type checker must refuse: a misspelt top-level name passed as Any (the package's
#: lazy __getattr__), and ETDetector's typed keywords were hidden behind **keywords.
WRONG_CODE = '''
import et_graph
from et_graph.detectors import ETDetector

layer = et_graph.ETCnv(8)
detector = ETDetector(seed="zero")
'''


def run_mypy(tmp_path: Path, code: str) -> subprocess.CompletedProcess:
    script = tmp_path / "user.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "mypy", str(script), "--follow-imports=silent",
         "--ignore-missing-imports", "--cache-dir", str(tmp_path / "cache")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)


def test_users_type_checked_code_sees_the_public_types(tmp_path):
    result = run_mypy(tmp_path, USER_CODE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_type_checker_refuses_a_misspelt_name_and_a_wrongly_typed_keyword(tmp_path):
    result = run_mypy(tmp_path, WRONG_CODE)
    assert 'has no attribute "ETCnv"' in result.stdout, result.stdout
    assert 'Argument "seed" to "ETDetector" has incompatible type "str"' in result.stdout, \
        result.stdout


@pytest.mark.slow
def test_the_package_itself_type_checks_clean(tmp_path):
    """mypy over the whole package (``--ignore-missing-imports``: some dependencies ship no
    stubs). It once reported 186 errors: optional values read where their check was out of
    mypy's sight, a ModuleList's items read as ``Tensor | Module``, and one real bug, a
    ``config_class`` given as an instance, which raised AttributeError from its own message."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", str(ROOT / "et_graph"), "--ignore-missing-imports",
         "--cache-dir", str(tmp_path / "cache")],
        capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert result.returncode == 0, "mypy found errors in et_graph:\n" + result.stdout \
        + result.stderr
