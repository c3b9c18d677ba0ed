"""Griffe extension for the API reference: the reST bits of et-graph's docstrings as Markdown.

The docstrings are Google style (``Args:``, ``Returns:``, ``Raises:``) with a few reStructuredText
constructs inside the prose, which mkdocstrings would otherwise print verbatim:

* ``:math:`...``` becomes inline math ``\\(...\\)`` and a ``.. math::`` directive (with its
  indented body) becomes a display block ``$$ ... $$``; ``pymdownx.arithmatex`` then marks them
  and ``docs/hooks/mathml.py`` renders them as MathML like the rest of the site;
* ``:class:`~pkg.Name```, ``:func:``, ``:meth:``, ``:mod:``, ``:data:``, ``:attr:``, ``:exc:``,
  ``:obj:`` become code spans (``~`` keeps the last dotted component, as in Sphinx);
* a paragraph ending in ``::`` (a reST literal block follows) ends in ``:`` instead; the indented
  block after it is already a Markdown code block.

Only the docstring text handed to mkdocstrings changes; the source files are not touched.
Registered in ``mkdocs.yml`` under ``plugins: mkdocstrings: handlers: python: options:
extensions``.
"""
from __future__ import annotations

import re
from typing import Any

import griffe

_MATH_ROLE = re.compile(r":math:`(?P<tex>[^`]+)`")
_XREF_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj):`(?P<target>[^`]+)`")
_LITERAL_MARKER = re.compile(r"(?<=\S)::[ \t]*$", re.MULTILINE)


def _xref(match: re.Match[str]) -> str:
    target = match.group("target").strip()
    if target.startswith("~"):
        target = target[1:].rsplit(".", 1)[-1]
    return f"`{target}`"


def _math_directive(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith(".. math::"):
            indent = len(line) - len(line.lstrip())
            body: list[str] = []
            first = stripped[len(".. math::") :].strip()
            if first:
                body.append(first)
            i += 1
            while i < len(lines):
                nxt = lines[i]
                if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                    break
                body.append(nxt.strip())
                i += 1
            while body and not body[-1]:
                body.pop()
            pad = " " * indent
            if out and out[-1].strip():
                out.append("")
            out.extend([pad + "$$", *(pad + b for b in body if b), pad + "$$", ""])
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def rst_to_markdown(text: str) -> str:
    """Rewrite the reST constructs listed in the module docstring as Markdown."""
    text = _math_directive(text)
    text = _MATH_ROLE.sub(lambda m: "\\(" + " ".join(m.group("tex").split()) + "\\)", text)
    text = _XREF_ROLE.sub(_xref, text)
    return _LITERAL_MARKER.sub(":", text)


class RstToMarkdown(griffe.Extension):
    """Apply :func:`rst_to_markdown` to every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:  # noqa: ARG002
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)
