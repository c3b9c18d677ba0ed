"""Portability rules that a Linux CI run cannot see by running the code.

Windows opens text files in the locale's code page (cp1252 and others) unless told
otherwise, and the tables hold ±, ×, −, ‖: every text open names its encoding."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(
    [path for folder in ("et_graph", "benchmarks", "examples", "tests", "docs")
     for path in (ROOT / folder).rglob("*.py")] + [ROOT / "setup.py"])
TEXT_METHODS = {"read_text", "write_text"}
OPENERS = {"open", "fdopen"}
# receivers whose open() is not a file's (labels: SealedLabels.open reveals the labels)
NOT_FILES = {"tarfile", "zipfile", "gzip", "Image", "np", "numpy", "webbrowser", "os", "labels"}


def _constant(node):
    return node.value if isinstance(node, ast.Constant) else None


def _text_opens_without_encoding(tree: ast.AST):
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or any(k.arg == "encoding" for k in node.keywords):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in TEXT_METHODS:
            yield node.lineno, name
        elif name in OPENERS:
            owner = func.value.id if (isinstance(func, ast.Attribute)
                                      and isinstance(func.value, ast.Name)) else None
            if owner in NOT_FILES and name == "open":
                continue
            # open(file, mode), os.fdopen(fd, mode), Path(...).open(mode)
            position = 0 if isinstance(func, ast.Attribute) and owner != "os" else 1
            mode = next((_constant(k.value) for k in node.keywords if k.arg == "mode"), None)
            if mode is None and len(node.args) > position:
                mode = _constant(node.args[position])
            if not (isinstance(mode, str) and "b" in mode):
                yield node.lineno, name


def test_the_scan_finds_what_it_looks_for():
    tree = ast.parse("open(p)\nopen(p, 'rb')\np.read_text()\np.open('w')\n"
                     "os.fdopen(fd, 'w')\nopen(p, encoding='utf-8')\nzipfile.open(n)\n")
    assert [line for line, _ in _text_opens_without_encoding(tree)] == [1, 3, 4, 5]


def test_every_text_open_names_its_encoding():
    missing = [f"{path.relative_to(ROOT)}:{line} {name}()" for path in SOURCES
               for line, name in _text_opens_without_encoding(
                   ast.parse(path.read_text(encoding="utf-8")))]
    assert len(SOURCES) > 100 and not missing, f"add encoding='utf-8': {missing}"


def test_a_device_without_autocast_runs_the_layer_without_entering_it(monkeypatch):
    """torch before 2.5 refused torch.autocast('mps'), and every layer call entered it."""
    import torch

    from et_graph.nn import ETConv

    entered = []
    monkeypatch.setattr(torch.amp, "is_autocast_available", lambda device: False)
    monkeypatch.setattr(torch, "autocast", lambda *a, **k: entered.append(a) or 1 / 0)
    conv = ETConv(8, heads=2, head_dim=4)
    x = torch.randn(6, 8, requires_grad=True)
    conv(x, torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])).sum().backward()
    assert not entered and x.grad is not None


def test_float64_work_moves_off_a_device_without_float64():
    """Apple's mps has no float64: score and feature conversions failed there."""
    import torch

    from et_graph.precision import float64_on_host_if_needed

    class OnMps:  # a tensor stand-in: no mps device on the CI machines
        device = torch.device("mps")

        def cpu(self):
            return torch.ones(2)

        def double(self):
            raise TypeError("Cannot convert a MPS Tensor to float64 dtype")

    assert float64_on_host_if_needed(OnMps()).dtype == torch.float64
    on_cpu = torch.ones(2)
    assert float64_on_host_if_needed(on_cpu).device.type == "cpu"
