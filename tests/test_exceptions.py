"""The warning categories (et_graph.exceptions): every warning of the package names one, the
classes keep their stdlib parents, and the filters a user writes reach them."""
from __future__ import annotations

import ast
import inspect
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import et_graph
from et_graph import exceptions
from et_graph.exceptions import (
    ConfigWarning,
    DataWarning,
    ETGraphDeprecationWarning,
    ETGraphWarning,
    FitWarning,
    OutputWarning,
    ReproducibilityWarning,
    SkippedBaselineWarning,
    SmallSampleWarning,
    UnsafeLoadWarning,
)

PACKAGE = Path(et_graph.__file__).parent


WARNS = {"warn", "warn_explicit"}


def _warn_calls_in(source: str) -> list[tuple[int, str | None]]:
    """Each call of ``warnings.warn`` or ``warn_explicit`` in ``source``, however imported
    (``import warnings as w``, ``from warnings import warn``; a contributor audit found those
    unchecked): its line and its category's source (None when the call names none, which
    makes it a plain UserWarning)."""
    tree = ast.parse(source)
    modules, functions = {"warnings"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "warnings"}
        elif isinstance(node, ast.ImportFrom) and node.module == "warnings":
            functions |= {a.asname or a.name for a in node.names if a.name in WARNS}
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                  and func.value.id in modules and func.attr in WARNS) or (
                      isinstance(func, ast.Name) and func.id in functions)
        if not called:
            continue
        # (both take the message, then the category)
        category = node.args[1] if len(node.args) > 1 else next(
            (k.value for k in node.keywords if k.arg == "category"), None)
        calls.append((node.lineno, None if category is None else ast.unparse(category)))
    return calls


def _warn_calls() -> list[tuple[str, int, str | None]]:
    """Each warning call of the package (:func:`_warn_calls_in`), with its file."""
    return [(str(path.relative_to(PACKAGE)), line, category)
            for path in sorted(PACKAGE.rglob("*.py"))
            for line, category in _warn_calls_in(path.read_text(encoding="utf-8"))]


def _is_et_graph_category(category: str | None) -> bool:
    """``DataWarning`` or ``exceptions.DataWarning``: a class of et_graph.exceptions."""
    return category is not None and category.rsplit(".", 1)[-1] in exceptions.__all__


def test_the_walk_finds_warnings_however_imported():
    source = ("import warnings as w\nfrom warnings import warn, warn_explicit as we\n"
              "w.warn('a')\nwarn('b', DataWarning)\nwe('c', UserWarning, 'f', 1)\n"
              "w.warn('d', category=X.ConfigWarning)\n")
    calls = _warn_calls_in(source)
    assert calls == [(3, None), (4, "DataWarning"), (5, "UserWarning"), (6, "X.ConfigWarning")]
    assert [_is_et_graph_category(c) for _, c in calls] == [False, True, False, True]


def test_every_warning_of_the_package_names_an_et_graph_category():
    calls = _warn_calls()
    assert len(calls) > 50  # the walk found the package's warnings
    wrong = [f"{path}:{line}: {category}" for path, line, category in calls
             if not _is_et_graph_category(category)]
    assert not wrong, "warnings without an et_graph.exceptions category:\n" + "\n".join(wrong)


def test_the_categories_keep_their_stdlib_parents():
    classes = [getattr(exceptions, name) for name in exceptions.__all__]
    assert all(issubclass(c, ETGraphWarning) and issubclass(c, UserWarning) for c in classes)
    for runtime in (FitWarning, OutputWarning, SmallSampleWarning, SkippedBaselineWarning,
                    UnsafeLoadWarning):
        assert issubclass(runtime, RuntimeWarning)
    for plain in (DataWarning, ConfigWarning, ReproducibilityWarning):
        assert not issubclass(plain, RuntimeWarning)
    assert issubclass(ETGraphDeprecationWarning, FutureWarning)
    # each class is documented (the API page renders the docstrings)
    assert all(inspect.getdoc(c) for c in classes)


def test_a_filter_on_one_kind_turns_a_library_warning_into_an_error():
    from et_graph.config import warn_unread_flags

    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        with pytest.raises(ConfigWarning, match="no model of this run reads them"):
            warn_unread_flags({"et.label_trick"}, ["gbt"], {"et": ["et"]})
        warnings.simplefilter("ignore", ETGraphWarning)  # the base silences every kind
        assert warn_unread_flags({"et.label_trick"}, ["gbt"], {"et": ["et"]}) == [
            "et.label_trick"]


def test_the_shell_can_name_a_category_before_torch_loads():
    """``-W error::et_graph.exceptions.DataWarning`` imports the module at start-up, before
    site-packages are on the path (so only with the package on ``PYTHONPATH``, as here): it
    must import without torch (a filter Python cannot resolve is dropped with a warning)."""
    import os

    code = ("import sys, warnings, et_graph.exceptions as e\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "try:\n"
            "    warnings.warn('x', e.DataWarning)\n"
            "except e.DataWarning:\n"
            "    print('raised')\n")
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    done = subprocess.run([sys.executable, "-W", "error::et_graph.exceptions.DataWarning",
                           "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "raised"
    assert "Invalid -W option" not in done.stderr
