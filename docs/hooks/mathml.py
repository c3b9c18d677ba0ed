"""MkDocs hook: render the site's LaTeX as MathML at build time (no MathJax, no network).

``pymdownx.arithmatex`` (generic mode) finds the math in the Markdown and leaves it, untouched
by Markdown and never inside code, as

* ``<span class="arithmatex">\\(...\\)</span>`` for inline math (``$...$`` or ``\\(...\\)``),
* ``<div class="arithmatex">\\[...\\]</div>`` for display math (``$$...$$``, ``\\[...\\]`` or a
  bare ``\\begin{env}...\\end{env}``).

``on_page_content`` replaces each of these with the ``<math>`` element that ``latex2mathml``
produces (``display="block"`` for display math), and does the same for math in the page's table
of contents. A formula that ``latex2mathml`` cannot turn into clean MathML (an unknown command, a
malformed result, raw LaTeX left over) stops the build with the page and the formula named: the
site never ships raw TeX.

:func:`convert_math` (HTML in, HTML out) and :func:`tex_to_mathml` are the conversion functions;
``tests/test_docs_math.py`` tests them.
"""
from __future__ import annotations

import html
import logging
import re
import xml.etree.ElementTree as ET

from latex2mathml.converter import convert as _latex2mathml

log = logging.getLogger("mkdocs.hooks.mathml")

MATHML_NS = "http://www.w3.org/1998/Math/MathML"

_ARITHMATEX = re.compile(
    r'<(?P<tag>span|div) class="arithmatex">(?P<tex>.*?)</(?P=tag)>', re.DOTALL
)
_INLINE_DELIMS = re.compile(r"\A\s*\\\((?P<tex>.*)\\\)\s*\Z", re.DOTALL)
_DISPLAY_DELIMS = re.compile(r"\A\s*\\\[(?P<tex>.*)\\\]\s*\Z", re.DOTALL)
# Inline math as it appears in a table-of-contents title (plain text, HTML-escaped).
_TOC_INLINE = re.compile(r"\\\((?P<tex>.+?)\\\)", re.DOTALL)
# Text latex2mathml copies verbatim into <mtext> (``\texttt{log\_gamma}``): LaTeX's escaped
# specials there mean the plain character.
_TEXT_ESCAPES = re.compile(r"\\([_%#&$])")
# Signs of math that was not converted, searched for outside code.
_RAW_TEX = re.compile(r"\\\(|\\\)|\\\[|\\\]|\$\$|\\begin\{|class=\"arithmatex\"")
_CODE_LIKE = re.compile(
    r"<(?P<tag>pre|code|script|style|math)\b[^>]*>.*?</(?P=tag)>", re.DOTALL | re.IGNORECASE
)

ET.register_namespace("", MATHML_NS)


class MathConversionError(ValueError):
    """A formula that cannot be rendered as MathML."""


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


# Operator names (``\log``, ``\exp``, ...) come out as <mi>; TeX puts a thin space between them
# and a following ordinary atom, native MathML does not.
_FUNCTION_NAMES = frozenset(
    "arccos arcsin arctan arg cos cosh cot coth csc deg det dim exp gcd hom inf ker lg lim "
    "liminf limsup ln log max min Pr sec sin sinh sup tan tanh".split()
)
_THIN_SPACE = "0.1667em"


def _is_mo(el: ET.Element, chars: frozenset[str] | None = None) -> bool:
    return _local(el.tag) == "mo" and (chars is None or (el.text or "").strip() in chars)


def _space_function_names(root: ET.Element) -> None:
    for parent in list(root.iter()):
        children = list(parent)
        for i in range(len(children) - 2, -1, -1):
            el, nxt = children[i], children[i + 1]
            if _local(el.tag) != "mi" or (el.text or "").strip() not in _FUNCTION_NAMES:
                continue
            if _is_mo(nxt) and not (nxt.text or "").strip().isalpha():
                continue  # an opening fence, a relation, a binary operator, punctuation
            space = ET.Element(f"{{{MATHML_NS}}}mspace", {"width": _THIN_SPACE})
            parent.insert(i + 1, space)


def _repair(root: ET.Element) -> None:
    """Fix the known latex2mathml quirks in place."""
    _space_function_names(root)
    for el in root.iter():
        # ``a/b`` in TeX is an ordinary symbol: no space around the slash.
        if _is_mo(el, frozenset("/")):
            el.set("lspace", "0")
            el.set("rspace", "0")
        # ``\mathrel{+=}`` and friends come out as <mo><mrow><mo>+</mo>...</mrow></mo>, which is
        # not valid MathML: an <mo> holds text only. Flatten it to one operator.
        if _local(el.tag) == "mo" and len(el):
            text = "".join(el.itertext())
            for child in list(el):
                el.remove(child)
            el.text = text
        if _local(el.tag) == "mtext" and el.text:
            el.text = _TEXT_ESCAPES.sub(r"\1", el.text)


def _check(root: ET.Element, tex: str) -> None:
    for el in root.iter():
        for text in (el.text, el.tail):
            if text and "\\" in text:
                raise MathConversionError(
                    f"latex2mathml left LaTeX {text.strip()!r} unconverted in {tex!r}"
                )
        if _local(el.tag) == "merror":
            raise MathConversionError(f"latex2mathml reported an error for {tex!r}")


def tex_to_mathml(tex: str, display: bool = False) -> str:
    """Convert one LaTeX formula (without delimiters) to a ``<math>`` element.

    Raises:
        MathConversionError: if the formula does not convert to clean MathML.
    """
    tex = tex.strip()
    if not tex:
        raise MathConversionError("empty formula")
    try:
        mathml = _latex2mathml(tex, display="block" if display else "inline")
    except Exception as exc:  # latex2mathml raises a zoo of exception types
        raise MathConversionError(f"latex2mathml failed on {tex!r}: {exc!r}") from exc
    try:
        root = ET.fromstring(mathml)
    except ET.ParseError as exc:  # e.g. a raw '&' from an unsupported environment
        raise MathConversionError(
            f"latex2mathml produced malformed MathML for {tex!r}: {exc}"
        ) from exc
    if _local(root.tag) != "math":
        raise MathConversionError(f"latex2mathml did not produce a <math> element for {tex!r}")
    _repair(root)
    _check(root, tex)
    root.set("display", "block" if display else "inline")
    return ET.tostring(root, encoding="unicode", short_empty_elements=True)


def _strip_delimiters(body: str, display: bool) -> str:
    match = (_DISPLAY_DELIMS if display else _INLINE_DELIMS).match(body)
    if match:
        return match.group("tex")
    if display and body.strip().startswith("\\begin{"):
        return body  # a bare \begin{env}...\end{env} block
    raise MathConversionError(f"unexpected arithmatex content {body!r}")


def convert_math(content: str) -> str:
    """Replace every arithmatex span/div in an HTML fragment with MathML.

    Code (``<code>``, ``<pre>``) is never touched: arithmatex does not mark math inside it, and
    only marked math is converted.

    Raises:
        MathConversionError: if a formula does not convert, or raw LaTeX delimiters remain
            outside code afterwards.
    """

    def replace(match: re.Match[str]) -> str:
        display = match.group("tag") == "div"
        tex = _strip_delimiters(html.unescape(match.group("tex")), display)
        return tex_to_mathml(tex, display=display)

    out = _ARITHMATEX.sub(replace, content)
    leftover = _RAW_TEX.search(_CODE_LIKE.sub("", out))
    if leftover:
        start = max(leftover.start() - 60, 0)
        context = _CODE_LIKE.sub("", out)[start : leftover.end() + 60]
        raise MathConversionError(f"raw LaTeX left in the page near {context!r}")
    return out


def convert_toc_title(title: str) -> str:
    """Convert the inline math in a table-of-contents title (plain text) to MathML."""
    return _TOC_INLINE.sub(
        lambda m: tex_to_mathml(html.unescape(m.group("tex")), display=False), title
    )


def _convert_toc(items) -> None:
    for item in items:
        item.title = convert_toc_title(item.title)
        _convert_toc(item.children)


def on_page_content(html_content: str, page, config, files) -> str:  # noqa: ARG001
    try:
        out = convert_math(html_content)
        _convert_toc(page.toc)
    except MathConversionError as exc:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"{page.file.src_uri}: {exc}") from exc
    return out
