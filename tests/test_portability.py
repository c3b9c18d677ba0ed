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
NOT_FILES = {"tarfile", "zipfile", "gzip", "Image", "np", "numpy", "webbrowser", "os"}


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
