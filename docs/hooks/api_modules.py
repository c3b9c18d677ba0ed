"""MkDocs hook: leave modules that are not in the source tree out of the API reference.

The API pages (``docs/api/*.md``) list modules with mkdocstrings' ``::: et_graph.module``
directives. A module that does not exist (yet) would abort the build; instead, its directive (with
its indented ``options:`` block) is replaced by an HTML comment marking it as a TODO and a one-line
note on the page, and the build goes on. A module counts as present when ``pkg/mod.py`` or
``pkg/mod/__init__.py`` exists under the repository root, for every dotted prefix (a folder
without ``__init__.py`` does not count: mkdocstrings cannot load it).
"""
from __future__ import annotations

import logging
import re
from pathlib import Path

log = logging.getLogger("mkdocs.hooks.api_modules")

_DIRECTIVE = re.compile(
    r"^:::[ \t]+(?P<name>et_graph(?:\.[A-Za-z_]\w*)*)[ \t]*\n(?P<options>(?:[ \t]+.*\n|[ \t]*\n)*)",
    re.MULTILINE,
)


def _mentions(source: Path, name: str) -> bool:
    return source.is_file() and re.search(rf"\b{re.escape(name)}\b", source.read_text(
        encoding="utf-8")) is not None


def module_exists(name: str, root: Path) -> bool:
    """True when ``name`` is a module or package under ``root`` (every dotted prefix too).

    A trailing component that is not a module (a class or function, e.g. ``et_graph.nn.ETConv``)
    counts as present when its parent module's source mentions it.
    """
    parts = name.split(".")
    path = root
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if (path / part / "__init__.py").is_file():
            path = path / part
            continue
        module = path / f"{part}.py"
        if module.is_file():
            return last or (i == len(parts) - 2 and _mentions(module, parts[-1]))
        return last and i > 0 and _mentions(path / "__init__.py", part)
    return True


def drop_missing_modules(markdown: str, root: Path) -> tuple[str, list[str]]:
    """Replace the directives of missing modules; return the new text and the names dropped."""
    missing: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if module_exists(name, root):
            return match.group(0)
        missing.append(name)
        return (
            f"<!-- TODO: document {name} here once it exists; it was not in the source tree "
            "at this docs build. -->\n"
            f"*`{name}` was not in the source tree when this site was built.*\n\n"
        )

    return _DIRECTIVE.sub(replace, markdown), missing


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001
    if not page.file.src_uri.startswith("api/"):
        return markdown
    root = Path(config.config_file_path).resolve().parent
    out, missing = drop_missing_modules(markdown, root)
    for name in missing:
        log.info("API reference: %s is not in the source tree; left out of %s", name,
                 page.file.src_uri)
    return out
