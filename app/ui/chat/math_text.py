"""LaTeX in answers ($…$, $$…$$, \\(…\\), \\[…\\]) as HTML that Qt's rich text draws, with no TeX, no MathJax and
no image renderer (no Qt here: the window renders it, a test or an export can call it).

Qt's rich text has no MathML and no web engine; matplotlib's mathtext would draw images but is a large install
that Hearth does not otherwise need. What Qt's HTML subset does have is enough for the maths chat answers hold:
Unicode symbols (Greek, operators, arrows, blackboard letters), italic variables, <sup>/<sub> for powers and
indices, an overline for roots and bars, a fraction as a numerator over a fraction slash over a denominator,
and a table for a matrix or cases in a displayed formula. Unknown commands stay as their source, so nothing
is lost: the answer's text (copied, exported) is always the LaTeX itself.

Where math is: display math ($$…$$, \\[…\\]) anywhere; inline $…$ only where pandoc takes it (the opening $
followed, and the closing $ preceded, by a non-space, the closing one not followed by a digit), so prices
("$5 and $10") stay text; nothing inside `code`.
"""

from __future__ import annotations

import html
import re

MATH_FONT = "'DejaVu Math TeX Gyre', 'STIX Two Math', 'Cambria Math', 'Latin Modern Math', serif"
CODE = re.compile(r"(`+).+?\1", re.S)
SPAN = re.compile(r"\\\$|\$\$(.+?)\$\$|\\\[(.+?)\\\]|\\\((.+?)\\\)|\$(?=\S)([^$\n]*?\S)\$(?!\d)", re.S)

GREEK = {name: chr(code) for name, code in [
    ("alpha", 0x3B1), ("beta", 0x3B2), ("gamma", 0x3B3), ("delta", 0x3B4), ("epsilon", 0x3F5),
    ("varepsilon", 0x3B5), ("zeta", 0x3B6), ("eta", 0x3B7), ("theta", 0x3B8), ("vartheta", 0x3D1),
    ("iota", 0x3B9), ("kappa", 0x3BA), ("lambda", 0x3BB), ("mu", 0x3BC), ("nu", 0x3BD), ("xi", 0x3BE),
    ("pi", 0x3C0), ("varpi", 0x3D6), ("rho", 0x3C1), ("varrho", 0x3F1), ("sigma", 0x3C3), ("varsigma", 0x3C2),
    ("tau", 0x3C4), ("upsilon", 0x3C5), ("phi", 0x3D5), ("varphi", 0x3C6), ("chi", 0x3C7), ("psi", 0x3C8),
    ("omega", 0x3C9), ("Gamma", 0x393), ("Delta", 0x394), ("Theta", 0x398), ("Lambda", 0x39B), ("Xi", 0x39E),
    ("Pi", 0x3A0), ("Sigma", 0x3A3), ("Upsilon", 0x3A5), ("Phi", 0x3A6), ("Psi", 0x3A8), ("Omega", 0x3A9)]}
# Relations and arrows get a space each side, as TeX spaces them.
RELATIONS = {
    "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "ne": "≠", "neq": "≠", "approx": "≈", "equiv": "≡", "sim": "∼",
    "simeq": "≃", "cong": "≅", "propto": "∝", "ll": "≪", "gg": "≫", "to": "→", "rightarrow": "→",
    "leftarrow": "←", "Rightarrow": "⇒", "Leftarrow": "⇐", "iff": "⟺", "implies": "⟹", "impliedby": "⟸",
    "mapsto": "↦", "leftrightarrow": "↔", "Leftrightarrow": "⇔", "longrightarrow": "⟶", "longleftarrow": "⟵",
    "Longrightarrow": "⟹", "uparrow": "↑", "downarrow": "↓", "in": "∈", "notin": "∉", "ni": "∋",
    "subset": "⊂", "subseteq": "⊆", "supset": "⊃", "supseteq": "⊇", "perp": "⊥", "parallel": "∥", "mid": "∣",
    "models": "⊨", "vdash": "⊢", "prec": "≺", "succ": "≻", "coloneqq": "≔", "doteq": "≐",
}
BINARY = {"pm": "±", "mp": "∓", "times": "×", "cdot": "⋅", "div": "÷", "cup": "∪", "cap": "∩", "setminus": "∖",
          "oplus": "⊕", "otimes": "⊗", "circ": "∘", "ast": "∗", "star": "⋆", "land": "∧", "lor": "∨",
          "wedge": "∧", "vee": "∨", "bullet": "∙", "bmod": "mod"}
SYMBOLS = {
    "infty": "∞", "partial": "∂", "nabla": "∇", "forall": "∀", "exists": "∃", "nexists": "∄", "neg": "¬",
    "lnot": "¬", "emptyset": "∅", "varnothing": "∅", "ldots": "…", "dots": "…", "cdots": "⋯", "vdots": "⋮",
    "ddots": "⋱", "angle": "∠", "degree": "°", "prime": "′", "hbar": "ℏ", "ell": "ℓ", "Re": "ℜ", "Im": "ℑ",
    "aleph": "ℵ", "langle": "⟨", "rangle": "⟩", "lfloor": "⌊", "rfloor": "⌋", "lceil": "⌈", "rceil": "⌉",
    "|": "‖", "Vert": "‖", "vert": "|", "{": "{", "}": "}", "$": "$", "%": "%", "&": "&amp;", "#": "#", "_": "_",
    "triangle": "△", "square": "□", "checkmark": "✓", "dagger": "†", "top": "⊤", "bot": "⊥", "therefore": "∴",
    "because": "∵", "backslash": "∖", "sum": "∑", "prod": "∏", "coprod": "∐", "int": "∫", "iint": "∬",
    "iiint": "∭", "oint": "∮", "bigcup": "⋃", "bigcap": "⋂", "bigoplus": "⨁", "sqrt": "√",
    ",": "&#8201;", ":": "&#8197;", ";": "&#8196;", "!": "", " ": " ", "quad": "&#8195;", "qquad": "&#8195;&#8195;",
    "lbrace": "{", "rbrace": "}", "lvert": "|", "rvert": "|", "lVert": "‖", "rVert": "‖",
}
FUNCTIONS = {"sin", "cos", "tan", "cot", "sec", "csc", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh",
             "log", "ln", "lg", "exp", "lim", "limsup", "liminf", "max", "min", "sup", "inf", "det", "gcd", "lcm",
             "arg", "deg", "dim", "ker", "hom", "Pr", "mod", "argmax", "argmin", "sgn", "tr", "rank"}
ACCENTS = {"hat": "\u0302", "widehat": "\u0302", "tilde": "\u0303", "widetilde": "\u0303", "vec": "\u20d7",
           "dot": "\u0307", "ddot": "\u0308", "acute": "\u0301", "grave": "\u0300", "check": "\u030c",
           "breve": "\u0306"}
DOUBLE_STRUCK = {"C": "ℂ", "H": "ℍ", "N": "ℕ", "P": "ℙ", "Q": "ℚ", "R": "ℝ", "Z": "ℤ"}
SCRIPT = {"B": "ℬ", "E": "ℰ", "F": "ℱ", "H": "ℋ", "I": "ℐ", "L": "ℒ", "M": "ℳ", "R": "ℛ", "e": "ℯ", "g": "ℊ",
          "o": "ℴ"}
FRAKTUR = {"C": "ℭ", "H": "ℌ", "I": "ℑ", "R": "ℜ", "Z": "ℨ"}
SIZING = {"left", "right", "big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl", "Bigr", "biggl", "biggr",
          "middle", "displaystyle", "textstyle", "scriptstyle", "limits", "nolimits"}
ENV_BRACKETS = {"matrix": ("", ""), "pmatrix": ("(", ")"), "bmatrix": ("[", "]"), "Bmatrix": ("{", "}"),
                "vmatrix": ("|", "|"), "Vmatrix": ("‖", "‖"), "cases": ("{", ""), "aligned": ("", ""),
                "align": ("", ""), "align*": ("", ""), "gathered": ("", ""), "array": ("", ""),
                "split": ("", ""), "smallmatrix": ("", "")}
TOKEN = re.compile(r"\\([A-Za-z]+\*?|.)|([{}^_&])|(\s+)|(.)", re.S)
# In a displayed formula a fraction, a matrix and a sum's limits are tables (Qt's one way to stack text); a table is
# a block, so a run of text and tables becomes a one-row table of cells. Parts that are tables are marked.
BLOCK, END = "\x01", "\x02"
LIMITS = ("∑", "∏", "∐", "⋃", "⋂", "⨁")  # displayed, their limits go above and below


def find_math(text: str) -> list[tuple[int, int, str, bool]]:
    """[(start, end, latex, display)] of the math in a Markdown text (without its fenced code blocks)."""
    # Code first, as Markdown reads it: a $ inside `…` neither opens nor closes a formula.
    masked = CODE.sub(lambda m: "\0" * len(m.group(0)), text)
    found = []
    for m in SPAN.finditer(masked):
        if m.group(0) == "\\$":
            continue  # an escaped dollar: text
        display = m.group(1) is not None or m.group(2) is not None
        group = next(i for i, g in enumerate(m.groups(), 1) if g is not None)
        latex = text[m.start(group):m.end(group)]
        if latex.strip():
            found.append((m.start(), m.end(), latex.strip(), display))
    return found


def _block(table: str) -> str:
    return f"{BLOCK}{table}{END}"


def _visible(part: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", part))


def _outside_brackets(part: str) -> str:
    """A part's text without what its brackets hold: n(n + 1) has no operator of its own, n + 1 has."""
    text, previous = _visible(part).strip(), None
    while text != previous:
        previous, text = text, re.sub(r"\([^()]*\)|\[[^\[\]]*\]", "()", text)
    return text


def _is_block(part: str) -> bool:
    return part.startswith(BLOCK) and part.endswith(END)


def _style(name: str, text: str) -> str:
    """\\mathbb{R} and friends: Unicode's letters where it has them; else the letters in a matching face."""
    table = {"mathbb": DOUBLE_STRUCK, "mathcal": SCRIPT, "mathscr": SCRIPT, "mathfrak": FRAKTUR}.get(name)
    if table is not None and all(ch in table for ch in text):
        return "".join(table[ch] for ch in text)
    if name in ("mathbb", "mathcal", "mathscr", "mathfrak", "mathbf", "boldsymbol", "bm"):
        return f"<b>{html.escape(text)}</b>"
    return html.escape(text)


class _Parser:
    def __init__(self, latex: str, display: bool, font: str, point_size: float):
        self.tokens = [(m.group(1), m.group(2), m.group(3), m.group(4)) for m in TOKEN.finditer(latex)]
        self.pos = 0
        self.display = display
        self.font = font  # the CSS of the formula's text, given again in each table cell (a span cannot hold one)
        self.point_size = point_size

    def text(self, part: str) -> str:
        """A part as a table cell's content: a table as it is, text in the formula's font."""
        if _is_block(part):
            return part[1:-1]
        part = re.sub(r" {2,}", " ", part)
        part = re.sub(r"^ | $", "&nbsp;", part)  # a cell's edge would drop an operator's space
        return f"<span style=\"{self.font}\">{part}</span>"

    def row(self, parts: list[str]) -> str:
        if not any(_is_block(p) for p in parts):
            return "".join(parts)
        cells, run = [], []
        for part in parts:
            if _is_block(part):
                if run:
                    cells.append(self.text("".join(run)))
                    run = []
                cells.append(part[1:-1])
            else:
                run.append(part)
        if run:
            cells.append(self.text("".join(run)))
        tds = "".join(f"<td valign='middle'>{cell}</td>" for cell in cells)
        return _block(f"<table cellspacing='0' cellpadding='0'><tr>{tds}</tr></table>")

    def inline(self, parse):
        """Parse a power or an index: small text on the line, never a table."""
        display, self.display = self.display, False
        try:
            return parse()
        finally:
            self.display = display

    def peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self):
        token = self.peek()
        self.pos += 1
        return token

    def skip_space(self) -> None:
        while self.peek() is not None and self.peek()[2] is not None:
            self.pos += 1

    def group(self) -> str:
        """One argument: a {group}, a command, or a single character."""
        self.skip_space()
        token = self.peek()
        if token is None:
            return ""
        if token[1] == "{":
            self.take()
            body = self.sequence(until="}")
            self.take()
            return body
        return self.atom()

    def raw_group(self) -> str:
        """An argument as its source text (\\text{…}, \\mathbb{…}, \\begin{…})."""
        self.skip_space()
        token = self.take()
        if token is None:
            return ""
        if token[1] != "{":
            return token[3] or token[0] or ""
        depth, out = 1, []
        while self.peek() is not None:
            cmd, special, space, char = self.take()
            if special == "{":
                depth += 1
            elif special == "}":
                depth -= 1
                if depth == 0:
                    break
            out.append(f"\\{cmd}" if cmd is not None else special or space or char)
        return "".join(out)

    def optional(self) -> str | None:
        """[…] after a command (\\sqrt[3]{x})."""
        self.skip_space()
        if self.peek() is not None and self.peek()[3] == "[":
            self.take()
            out = []
            while self.peek() is not None and self.peek()[3] != "]":
                out.append(self.atom())
            self.take()
            return "".join(out)
        return None

    def sequence(self, until: str | None = None, stop_cmds: tuple = ()) -> str:
        out: list[str] = []
        while self.peek() is not None:
            cmd, special, space, char = self.peek()
            if special is not None and special == until:
                break
            if cmd in stop_cmds or (special == "&" and "&" in stop_cmds):
                break
            if space is not None:
                self.take()
                continue
            if special in ("^", "_"):
                self.take()
                tag = "sup" if special == "^" else "sub"
                out.append(f"<{tag}>{self.inline(self.group)}</{tag}>")
                continue
            out.append(self.atom(out))
            if self.display and out[-1] in LIMITS:
                out[-1] = self.limits(out[-1])
        return self.row(out)

    def limits(self, operator: str) -> str:
        """∑ with its limits above and below it (displayed)."""
        found = {}
        while True:
            self.skip_space()
            token = self.peek()
            if token is None or token[1] not in ("^", "_") or token[1] in found:
                break
            self.take()
            found[token[1]] = self.inline(self.group)
        if not found:
            return operator
        cell = lambda text: f"<tr><td align='center'>{text}</td></tr>"  # noqa: E731
        rows = (cell(self.text(f"<small>{found['^']}</small>")) if "^" in found else "") + \
            cell(self.text(f"<big>{operator}</big>")) + \
            (cell(self.text(f"<small>{found['_']}</small>")) if "_" in found else "")
        return _block(f"<table cellspacing='0' cellpadding='0'>{rows}</table>")

    def atom(self, before: list[str] | None = None) -> str:
        cmd, special, space, char = self.take()
        if special is not None:
            if special == "{":
                body = self.sequence(until="}")
                self.take()
                return body
            return "" if special in ("}", "&") else html.escape(special)
        if space is not None:
            return ""
        if char is not None:
            return self.char(char, before)
        return self.command(cmd, before)

    def char(self, char: str, before: list[str] | None) -> str:
        if char.isalpha():
            return f"<i>{html.escape(char)}</i>"
        if char in "=<>":
            return f" {html.escape(char)} "
        if char in "+-":
            sign = "−" if char == "-" else "+"
            # Binary after something (a spaced operator), unary at the start or after an operator or bracket.
            binary = bool(before) and not before[-1].endswith((" ", "(", "[", "{", "<sup>", "<sub>"))
            return f" {sign} " if binary else sign
        if char == "*":
            return "∗"
        if char == "'":
            return "′"
        if char == "~":
            return "&nbsp;"
        if char in ",;":
            return f"{char}&#8201;"  # TeX's thin space after punctuation: {1, 2}
        return html.escape(char)

    def command(self, cmd: str, before: list[str] | None) -> str:
        if cmd in GREEK:
            return f"<i>{GREEK[cmd]}</i>" if cmd[0].islower() else GREEK[cmd]
        if cmd in RELATIONS:
            return f" {RELATIONS[cmd]} "
        if cmd in BINARY:
            return f" {BINARY[cmd]} "
        if cmd == "sqrt":
            index = self.optional()
            root = f"<sup>{index}</sup>" if index else ""
            return f"{root}√<span style='text-decoration: overline'>{self.group()}</span>"
        if cmd in SYMBOLS:
            return SYMBOLS[cmd]
        if cmd in FUNCTIONS:
            return f"{cmd}&#8201;" if cmd not in ("mod",) else " mod "
        if cmd == "operatorname":
            return f"{html.escape(self.raw_group())}&#8201;"
        if cmd in ("frac", "dfrac", "tfrac", "cfrac"):
            top, bottom = self.group(), self.group()
            if self.display and cmd != "tfrac":  # stacked, over a rule
                # A grey rule: one colour that reads on light and dark backgrounds alike.
                return _block("<table cellspacing='0' cellpadding='1'><tr><td align='center' style='border-bottom: "
                              f"1px solid #888888'>{self.text(top)}</td></tr><tr><td align='center'>{self.text(bottom)}"
                              "</td></tr></table>")
            top, bottom = self.plain(top), self.plain(bottom)
            if len(_visible(top)) <= 3 and len(_visible(bottom)) <= 3:  # ½-sized: small and stacked
                return f"<sup>{top}</sup>⁄<sub>{bottom}</sub>"
            # On the line, larger, readable: (a + b)/2, as one would type it.
            wrap = lambda part: f"({part})" if " " in _outside_brackets(part) else part  # noqa: E731
            return f"{wrap(top)}/{wrap(bottom)}"
        if cmd == "binom":
            top, bottom = self.group(), self.group()
            return f"(<sup>{top}</sup><sub>{bottom}</sub>)"
        if cmd == "pmod":
            return f" (mod {self.group()})"
        if cmd in ("text", "textrm", "textnormal", "mathrm", "textup", "mbox", "textsf", "mathsf", "texttt",
                   "mathtt"):
            return html.escape(self.raw_group())
        if cmd in ("textbf",):
            return f"<b>{html.escape(self.raw_group())}</b>"
        if cmd in ("textit", "mathit", "emph"):
            return f"<i>{html.escape(self.raw_group())}</i>"
        if cmd in ("mathbb", "mathcal", "mathscr", "mathfrak", "mathbf", "boldsymbol", "bm"):
            if cmd in ("mathbf", "boldsymbol", "bm"):
                return f"<b>{self.group()}</b>"
            return _style(cmd, self.raw_group())
        if cmd in ACCENTS:
            body = self.group()
            plain = re.sub(r"<[^>]+>", "", body)
            if len(html.unescape(plain)) == 1:  # a combining mark sits on one letter only
                return f"<i>{plain}{ACCENTS[cmd]}</i>" if body == f"<i>{plain}</i>" else body + ACCENTS[cmd]
            return f"<span style='text-decoration: overline'>{body}</span>"
        if cmd in ("bar", "overline"):
            return f"<span style='text-decoration: overline'>{self.group()}</span>"
        if cmd == "underline":
            return f"<u>{self.group()}</u>"
        if cmd in ("overbrace", "underbrace", "boxed", "phantom", "mathring", "cancel"):
            return "" if cmd == "phantom" else self.group()
        if cmd in SIZING:
            if cmd in ("left", "right", "middle", "bigl", "bigr", "Bigl", "Bigr", "big", "Big", "bigg", "Bigg",
                       "biggl", "biggr"):
                self.skip_space()
                token = self.peek()
                if token is not None and token[3] == ".":  # \left. : no bracket
                    self.take()
                    return ""
            return ""
        if cmd == "begin":
            return self.environment(self.raw_group())
        if cmd == "\\":
            return "<br>"
        if cmd in ("label", "tag", "nonumber", "notag"):
            if cmd in ("label", "tag"):
                tag = self.raw_group()
                return f"&#8195;({html.escape(tag)})" if cmd == "tag" else ""
            return ""
        return html.escape(f"\\{cmd} ")  # unknown: its source, not nothing

    @staticmethod
    def plain(part: str) -> str:
        return part[1:-1] if _is_block(part) else part

    def environment(self, name: str) -> str:
        if name == "array":
            self.raw_group()  # the column spec
        rows: list[list[str]] = [[]]
        while self.peek() is not None:
            cmd, special, _space, _char = self.peek()
            if cmd == "end":
                self.take()
                self.raw_group()
                break
            if cmd == "\\":
                self.take()
                rows.append([])
                continue
            if special == "&":
                self.take()
                rows[-1].append("")
                continue
            cell = self.text(self.sequence(stop_cmds=("end", "\\", "&"))) if self.display else \
                self.sequence(stop_cmds=("end", "\\", "&"))
            if rows[-1] and rows[-1][-1] == "":
                rows[-1][-1] = cell
            else:
                rows[-1].append(cell)
        rows = [row for row in rows if any(cell.strip() for cell in row)]
        left, right = ENV_BRACKETS.get(name, ("", ""))
        if not self.display:  # inline: on one line, rows apart
            body = "; ".join("&nbsp;&nbsp;".join(row) for row in rows)
            return f"{left}{body}{right}"
        aligned = name.startswith(("align", "split", "aligned"))
        cells = "".join(
            "<tr>" + "".join(f"<td align='{('right' if i % 2 == 0 else 'left') if aligned else 'center'}'"
                             f" style='padding: 2px 6px'>{cell}</td>" for i, cell in enumerate(row)) + "</tr>"
            for row in rows)
        if name == "cases":
            cells = "".join("<tr>" + "".join(f"<td align='left' style='padding: 2px 6px'>{cell}</td>"
                                             for cell in row) + "</tr>" for row in rows)
        # The brackets grow with the rows (Qt cannot stretch a glyph; a bigger one is the nearest).
        size = self.point_size * (1 + 0.8 * max(0, len(rows) - 1))
        bracket = lambda b: (f"<td valign='middle'><span style=\"font-family: {MATH_FONT}; "  # noqa: E731
                             f"font-size: {size:.1f}pt\">{b}</span></td>") if b else ""
        return _block(f"<table cellspacing='0' cellpadding='0'><tr>{bracket(left)}<td><table cellspacing='0'>"
                      f"{cells}</table></td>{bracket(right)}</tr></table>")


def latex_html(latex: str, display: bool = False, point_size: float | None = None) -> str:
    """One formula as Qt rich-text HTML: a span inline; displayed, a span or, where it stacks (a fraction, a
    matrix, a sum's limits), a centred table. point_size: the displayed formula's text size."""
    font = f"font-family: {MATH_FONT}" + (f"; font-size: {point_size:.1f}pt" if point_size else "")
    parser = _Parser(latex, display, font, point_size or 10.0)
    body = parser.sequence()
    if _is_block(body):
        return body[1:-1].replace("<table", "<table align='center'", 1)
    body = re.sub(r" {2,}", " ", body).strip()
    if not display:  # an inline formula is not broken across lines ("Δ <" at a line's end, "0" on the next)
        body = re.sub(r" (?![^<]*>)", "&nbsp;", body)
    return f"<span style=\"{font}\">{body}</span>"
