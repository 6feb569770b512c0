"""LaTeX in answers as Qt rich-text HTML (app/ui/chat/math_text.py): where math is, and what a formula becomes."""

from __future__ import annotations

from app.ui.chat.math_text import find_math, latex_html


def test_math_is_found_where_pandoc_finds_it_and_prices_and_code_stay_text():
    text = (r"Inline $x^2$, displayed $$\int_0^1 x\,dx$$, \(a+b\) and \[c\]; prices $5 and $10, "
            r"an escaped \$3 and code `$y$` and ``$z$``; no $ space$ either.")
    assert [(latex, display) for _, _, latex, display in find_math(text)] == [
        ("x^2", False), (r"\int_0^1 x\,dx", True), ("a+b", False), ("c", True)]
    start, end, _, _ = find_math(text)[0]
    assert text[start:end] == "$x^2$"
    assert find_math("$$\nE = mc^2\n$$")[0][2] == "E = mc^2"  # over lines, trimmed
    assert find_math("It costs $3.") == [] and find_math("$x$5") == []


def test_formulas_become_unicode_and_html_and_unknown_commands_keep_their_source():
    raw = latex_html(r"\alpha^2 + \beta_i \le \sqrt{x} \in \mathbb{R}, \frac{1}{2}, \frac{a+b}{c}, \foo")
    assert " ≤ " not in raw and "&nbsp;≤&nbsp;" in raw  # inline: no line break inside the formula
    inline = raw.replace("&nbsp;", " ").replace("&#8201;", "")
    assert "<i>α</i><sup>2</sup>" in inline and "<i>β</i><sub><i>i</i></sub>" in inline and " ≤ " in inline
    assert "√<span style='text-decoration: overline'><i>x</i></span>" in inline and "ℝ" in inline
    assert "<sup>1</sup>⁄<sub>2</sub>" in inline and "(<i>a</i> + <i>b</i>)/<i>c</i>" in inline
    assert "\\foo" in inline and "<table" not in inline  # inline, nothing stacks
    shown = latex_html(r"x = \frac{-b}{2a}", display=True, point_size=12)
    assert shown.startswith("<table align='center'") and "border-bottom" in shown and "font-size: 12.0pt" in shown
    assert "−<i>b</i>" in shown and "2<i>a</i>" in shown  # a leading minus is a sign: no space after it
    matrix = latex_html(r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}", display=True)
    assert matrix.count("<tr>") >= 2 and ">(<" in matrix and ">)<" in matrix
    inline_matrix = latex_html(r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}")
    assert "(1&nbsp;&nbsp;2;&nbsp;3&nbsp;&nbsp;4)" in inline_matrix  # inline: on one line, rows apart
    assert latex_html(r"\text{if } x_{\max}") == latex_html(r"\text{if } x_{\max}")  # no state between calls
