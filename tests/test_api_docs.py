"""The API reference's argument lists match the signatures they document.

The API pages render each public class's and function's docstring (mkdocstrings); its
``Args:`` section names the parameters. A renamed or removed parameter left behind in the text
misdocuments it, and a new one missing from a list that names the others is undocumented
there. Each public name of the modules the API pages render is checked: a name in ``Args:``
must be a parameter (unless the function takes ``**kwargs``), and where a docstring has an
``Args:`` section, every named parameter is in it (``a, b, c:`` documents three at once).
"""
from __future__ import annotations

import importlib
import inspect
import re

#: The modules docs/api renders.
MODULES = ("et_graph.nn", "et_graph.nn.models", "et_graph.energy", "et_graph.datasets",
           "et_graph.protocols", "et_graph.baselines", "et_graph.training", "et_graph.loaders",
           "et_graph.config", "et_graph.detectors", "et_graph.tuning", "et_graph.transforms",
           "et_graph.exceptions")
#: One documented entry: ``name:``, ``name (type):`` or ``a, b, c:`` at the section's indent.
ENTRY = re.compile(r"^(\s*)(\*{0,2}\w+(?:,\s*\*{0,2}\w+)*)(?: \([^)]*\))?:(\s|$)")


def documented_arguments(doc: str) -> list[str] | None:
    """The names an ``Args:`` section of ``doc`` documents (None without one)."""
    names: list[str] | None = None
    indent = None
    inside = False
    for line in inspect.cleandoc(doc).splitlines():
        if line.strip() in ("Args:", "Arguments:", "Parameters:"):
            inside, indent = True, None
            names = names or []
            continue
        if not inside or not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        match = ENTRY.match(line)
        if indent is None:
            if not match:
                inside = False
                continue
            indent = depth
        if depth < indent:
            inside = False
        elif depth == indent and match and names is not None:
            names += [name.strip().lstrip("*") for name in match.group(2).split(",")]
    return names


def public_callables() -> list[tuple[str, object]]:
    """``(qualified name, function)`` of each public function, class constructor and public
    method that the API modules export."""
    found, seen = [], set()
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if inspect.isclass(value):
                found.append((f"{module_name}.{name}", value))
                found += [(f"{module_name}.{name}.{method}", function)
                          for method, function in vars(value).items()
                          if inspect.isfunction(function) and not method.startswith("_")]
            elif inspect.isfunction(value):
                found.append((f"{module_name}.{name}", value))
    unique = []
    for qualified, value in found:
        if id(value) not in seen:
            seen.add(id(value))
            unique.append((qualified, value))
    return unique


def argument_list_problems(qualified: str, value: object) -> list[str]:
    doc = inspect.getdoc(value) if not inspect.isclass(value) else value.__doc__
    names = documented_arguments(doc or "")
    if names is None:
        return []
    target = value.__init__ if inspect.isclass(value) else value
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return []
    parameters = signature.parameters
    variadic = {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}
    takes_keywords = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    problems = [f"{qualified}: documents {name!r}, which it does not take" for name in names
                if name not in parameters and not takes_keywords]
    problems += [f"{qualified}: does not document {name!r}" for name, parameter
                 in parameters.items() if name not in ("self", "cls") and name not in names
                 and parameter.kind not in variadic]
    return problems


def test_the_parser_reads_grouped_and_typed_entries():
    doc = """Summary.

    Args:
        a: first.
            continued: not an entry.
        b (int): second.
        c, d: two at once.

    Returns:
        e: not an argument.
    """
    assert documented_arguments(doc) == ["a", "b", "c", "d"]
    assert documented_arguments("No section.") is None


def test_a_stale_or_missing_argument_is_found():
    def function(a, b, c=1):
        """Do.

        Args:
            a: the first.
            old: renamed since.
        """

    problems = argument_list_problems("function", function)
    assert problems == ["function: documents 'old', which it does not take",
                        "function: does not document 'b'", "function: does not document 'c'"]


def test_every_public_argument_list_matches_its_signature():
    callables = public_callables()
    assert len(callables) > 150  # the walk found the API
    problems = [problem for qualified, value in callables
                for problem in argument_list_problems(qualified, value)]
    assert not problems, "\n".join(problems)
