"""The docs hook (docs/hooks/mathml.py) turns the site's LaTeX into MathML at build time."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("latex2mathml", reason="docs extra not installed (pip install -e .[docs])")
markdown = pytest.importorskip("markdown")
pytest.importorskip("pymdownx.arithmatex")

HOOK = Path(__file__).resolve().parents[1] / "docs" / "hooks" / "mathml.py"


def _load_hook():
    spec = importlib.util.spec_from_file_location("docs_hooks_mathml", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mathml = _load_hook()


def _render(text: str) -> str:
    """Markdown -> HTML as mkdocs.yml configures it, then the hook's conversion."""
    html = markdown.markdown(
        text,
        extensions=["pymdownx.arithmatex", "tables"],
        extension_configs={"pymdownx.arithmatex": {"generic": True}},
    )
    return mathml.convert_math(html)


def test_inline_and_display_math_become_mathml() -> None:
    out = _render("Inline $x^2 + \\beta_h$ here.\n\n$$\n\\frac{\\partial E}{\\partial g} < 0\n$$\n")
    assert out.count("<math") == 2
    assert 'display="inline"' in out and 'display="block"' in out
    assert "<msup><mi>x</mi><mn>2</mn></msup>" in out
    assert "<mfrac>" in out
    # Nothing of the TeX is left outside the <math> elements.
    assert "\\(" not in out and "\\[" not in out and "$" not in out
    assert "arithmatex" not in out


def test_backslash_delimiters() -> None:
    out = _render("Inline \\(a_{eh}\\) and\n\n\\[\nE = -\\sum_h \\log x\n\\]\n")
    assert out.count("<math") == 2 and 'display="block"' in out


def test_code_is_untouched() -> None:
    source = "Run `et-graph anomaly $OPTS` with `\\(x\\)` and $y$.\n\n    $$ not math $$\n"
    out = _render(source)
    assert "<code>et-graph anomaly $OPTS</code>" in out
    assert "<code>\\(x\\)</code>" in out
    assert "<pre><code>$$ not math $$" in out
    assert out.count("<math") == 1  # only $y$


def test_html_entities_and_known_quirks() -> None:
    # arithmatex HTML-escapes '<'; \texttt{a\_b} and \mathrel{+=} need the hook's repairs.
    out = _render("$a < b$, $e^{\\texttt{log\\_gamma}}$, $w \\mathrel{+=} p$")
    assert "<mo>&lt;</mo>" in out
    assert "log_gamma" in out and "log\\_gamma" not in out
    assert "<mo>+=</mo>" in out


def test_unsupported_latex_fails_loudly() -> None:
    with pytest.raises(mathml.MathConversionError):
        mathml.tex_to_mathml("\\notacommand x")
    with pytest.raises(mathml.MathConversionError):  # latex2mathml emits a raw '&' here
        mathml.tex_to_mathml("\\begin{aligned} a &= b \\end{aligned}", display=True)
    with pytest.raises(mathml.MathConversionError):  # raw TeX outside code is an error
        mathml.convert_math("<p>left over \\(x\\)</p>")


def test_toc_title() -> None:
    title = mathml.convert_toc_title("The gradient with respect to \\(g\\)")
    assert title.startswith("The gradient with respect to <math")
    assert "<mi>g</mi>" in title
