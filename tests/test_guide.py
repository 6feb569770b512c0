"""The README and the user's guide in docs/ cannot drift from the program or from each other:

- every relative link and image in README.md and docs/*.md resolves, anchors included (a heading's slug as
  GitHub makes it, and as the site's Markdown makes it: a link must work in both);
- every `hearth ...` command line shown in their code blocks (and every inline `hearth ...` span) parses with
  the real argument parser (app.cli.build_parser);
- every page of the guide is in mkdocs.yml's nav and reachable from the README, directly or through the guide's
  home page;
- the site builds with `mkdocs build --strict` (skipped, saying so, where mkdocs is not installed).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
GUIDE_HOME = DOCS / "index.md"

FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
SHELL_FENCES = {"", "bash", "sh", "shell", "console", "zsh"}
# [text](target) and ![alt](target); a target may carry a "title". Reference-style links are not used here.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
PLACEHOLDER = re.compile(r"<[^<>\s][^<>]*>")
SUBSHELL = re.compile(r"\$\([^)]*\)")
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
SEPARATORS = {"&&", "||", ";", "|"}
INLINE_PLACEHOLDER = re.compile(r"\.\.\.|\b[A-Z][A-Z_]*\b")  # `hearth bench KIND --help`, `hearth models ...`
# What the parser says when an inline span names a command or a flag without the words that follow it.
NAMED_ONLY = ("the following arguments are required", "expected one argument")


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# --- reading Markdown ------------------------------------------------------------------------------------------

def prose_and_code(path: Path) -> tuple[list[tuple[int, str]], list[tuple[int, str, str]]]:
    """(prose lines, code lines) of a Markdown file, each with its 1-based line number; code lines carry their
    fence's language. Backslash continuations inside code are joined into the line they start."""
    prose, code = [], []
    fence = None  # (marker, language) while inside a fenced block
    pending: tuple[int, str, str] | None = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        opened = FENCE.match(line)
        if fence is None and opened:
            fence = (opened.group(2), opened.group(3).lower())
            continue
        if fence is not None:
            if line.strip().startswith(fence[0]) and not line.strip()[len(fence[0]):].strip():
                fence = None
                continue
            if pending is not None:
                start, text, language = pending
                text += " " + line.strip()
            else:
                start, text, language = number, line, fence[1]
            if text.rstrip().endswith("\\"):
                pending = (start, text.rstrip()[:-1], language)
            else:
                pending = None
                code.append((start, text, language))
            continue
        prose.append((number, line))
    return prose, code


def github_slug(heading: str) -> str:
    """A heading's anchor as GitHub writes it: lower case, punctuation dropped, each space a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def toc_slug(heading: str) -> str:
    """The same anchor as Python-Markdown's toc extension writes it for the site (its default slugify)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> tuple[set[str], set[str]]:
    """(GitHub's anchors, the site's anchors) of a file's headings; repeated headings get -1, -2, ..."""
    prose, _ = prose_and_code(path)
    found: tuple[set[str], set[str]] = (set(), set())
    for slugify, into in ((github_slug, found[0]), (toc_slug, found[1])):
        seen: dict[str, int] = {}
        for _, line in prose:
            match = HEADING.match(line)
            if not match:
                continue
            slug = slugify(match.group(2))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            into.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """Every link and image target in a file's prose (not in code), with its line."""
    prose, _ = prose_and_code(path)
    out = []
    for number, line in prose:
        line = INLINE_CODE.sub("", line)
        out += [(number, match.group(1)) for match in LINK.finditer(line)]
    return out


def is_relative(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) and not target.startswith("//")


# --- the links --------------------------------------------------------------------------------------------------

def test_every_relative_link_and_image_resolves_anchors_included():
    problems = []
    for page in markdown_files():
        for number, target in links(page):
            if not is_relative(target):
                continue
            where = f"{rel(page)}:{number}: {target}"
            file_part, _, anchor = target.partition("#")
            destination = (page.parent / unquote(file_part)).resolve() if file_part else page
            if not destination.exists():
                problems.append(f"{where}: no such file")
                continue
            if not anchor:
                continue
            if destination.suffix != ".md":
                problems.append(f"{where}: an anchor into a file that is not Markdown")
                continue
            on_github, on_site = anchors(destination)
            if anchor not in on_github:
                problems.append(f"{where}: no heading with that anchor on GitHub ({sorted(on_github)})")
            elif anchor not in on_site and destination.is_relative_to(DOCS):
                problems.append(f"{where}: the site's anchor for that heading differs; simplify the heading")
    assert not problems, "\n".join(problems)


def test_every_list_starts_after_a_blank_line():
    """GitHub starts a list right after a paragraph line; the site's Markdown (Python-Markdown) does not, and
    prints the items as one run of text. So a list begins after a blank line (or a heading, or another item)."""
    item = re.compile(r"^(?:[-*]|\d+\.)\s")
    problems = []
    for page in markdown_files():
        prose, _ = prose_and_code(page)
        for (_, before), (number, line) in zip(prose, prose[1:]):
            if item.match(line) and before.strip() and not item.match(before.lstrip()) \
                    and not before.startswith((" ", "#", "|", ">")):
                problems.append(f"{rel(page)}:{number}: {line[:60]}")
    assert not problems, "\n".join(problems)


def test_the_readme_shows_one_screenshot_and_stays_a_front_door():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300, "README.md is the front door: keep it under about 300 lines"
    images = [target for _, target in links(README) if target.endswith((".png", ".jpg", ".svg", ".gif"))]
    assert images == ["docs/screenshots/chat-light.png"], images
    # The two set-up commands: the one that installs and starts Hearth, and the one CI runs (.ci/run).
    assert "pip install . && hearth" in text
    assert "bash tests/run.sh" in text and "bash tests/run.sh" in (ROOT / ".ci" / "run").read_text()


# --- the code the guide names ------------------------------------------------------------------------------------

REPO_PATH = re.compile(r"\b(?:app|tests|scripts|packaging)/[A-Za-z0-9_./-]*[A-Za-z0-9_/]")


def test_every_path_of_the_repository_named_in_the_guide_exists():
    """Files move (`git mv`): a path the README or the guide names must move with them."""
    missing = [f"{rel(page)}:{number}: {path}" for page in markdown_files()
               for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
               for path in REPO_PATH.findall(line) if not (ROOT / path).exists()]
    assert not missing, "\n".join(missing)


def test_the_architecture_page_names_every_room_of_the_code():
    """docs/architecture.md is the map: every package under app/ and every room of the engine is on it."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    app = ROOT / "app"
    rooms = [f"app/{p.name}/" for p in sorted(app.iterdir()) if (p / "__init__.py").exists()]
    rooms += [f"`{p.name}/`" for p in sorted((app / "engine").iterdir()) if (p / "__init__.py").exists()]
    rooms += [f"`{p.name}/`" for p in sorted((app / "ui").iterdir()) if (p / "__init__.py").exists()]
    rooms += ["app/__main__.py", "app/cli.py", "app/selftest.py", "packaging/", "scripts/"]
    missing = [room for room in rooms if room not in text]
    assert not missing, f"docs/architecture.md does not name: {missing}"


# --- the commands -----------------------------------------------------------------------------------------------

def hearth_words(segment: list[str]) -> list[str] | None:
    """The arguments after `hearth` (or `python -m app`) in one shell command, else None."""
    while segment and ENV_ASSIGNMENT.match(segment[0]):
        segment = segment[1:]
    if segment[:1] == ["hearth"]:
        return segment[1:]
    if len(segment) >= 3 and segment[0] in ("python", "python3") and segment[1:3] == ["-m", "app"]:
        return segment[3:]
    return None


def command_lines(page: Path) -> list[tuple[int, list[str], str, bool]]:
    """Each `hearth ...` command shown in a page: (line, its arguments, the text shown, whether it was inline).

    Code blocks show whole command lines. An inline span may only name a command (`hearth models show`) or a
    flag (`hearth chat --endpoint`), so a required argument it leaves out is no error there; a span written
    with placeholders (`hearth bench KIND --help`, `hearth models ...`) is not a command line and is skipped."""
    prose, code = prose_and_code(page)
    shown = [(number, text, False) for number, text, language in code if language in SHELL_FENCES]
    for number, line in prose:
        shown += [(number, m.group(2), True) for m in INLINE_CODE.finditer(line)
                  if m.group(2).startswith("hearth ") and not INLINE_PLACEHOLDER.search(m.group(2))]
    found = []
    for number, text, inline in shown:
        # Placeholders (<version>, $(mktemp -d)) stand for a word; `source <(hearth ...)` runs the command inside.
        text = text.replace("<(", " ; ").replace(">(", " ; ")
        text = SUBSHELL.sub("X", PLACEHOLDER.sub("X", text))
        try:
            words = shlex.split(text, comments=True)
        except ValueError as exc:
            found.append((number, ["<unparsable shell line>"], f"{text} ({exc})", inline))
            continue
        segment: list[str] = []
        for word in [*words, ";"]:
            if word in SEPARATORS:
                args = hearth_words(segment) if segment else None
                if args is not None:
                    found.append((number, args, text.strip(), inline))
                segment = []
            elif word.endswith(")") and "(" not in word:  # the end of `<(hearth ...)`
                if word.rstrip(")"):
                    segment.append(word.rstrip(")"))
            else:
                segment.append(word)
    return found


def parse_error(parser, args: list[str]) -> str | None:
    """None if the real parser takes args (--help included), else what it said."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            parser.parse_args(args)
    except SystemExit as stop:
        if stop.code in (0, None):
            return None
        return (err.getvalue().strip().splitlines() or [f"exit {stop.code}"])[-1]
    return None


def test_every_hearth_command_shown_parses_with_the_real_parser():
    from app.cli import build_parser

    parser = build_parser()
    problems, checked = [], 0
    for page in markdown_files():
        for number, args, text, inline in command_lines(page):
            if args == ["<unparsable shell line>"]:
                problems.append(f"{rel(page)}:{number}: cannot split {text}")
                continue
            checked += 1
            error = parse_error(parser, args)
            if error and not (inline and any(words in error for words in NAMED_ONLY)):
                problems.append(f"{rel(page)}:{number}: `{text}`: {error}")
    assert not problems, "\n".join(problems)
    assert checked > 100, f"only {checked} commands found: is the scan still reading the code blocks?"


def test_a_wrong_command_in_the_guide_would_be_caught(tmp_path):
    """The scan itself: a command the parser refuses is found, with its line; placeholders and --help pass."""
    from app.cli import build_parser

    page = tmp_path / "page.md"
    page.write_text("Run `hearth models show bundled`, see `hearth models show`; not `hearth bench KIND`.\n\n"
                    "```bash\nhearth chat --help\n"
                    "sudo apt install ./hearth_<version>_amd64.deb && hearth --selftest   # comment\n"
                    "HEARTH_HOME=$(mktemp -d) hearth bench matrix \\\n    --quick\n"
                    "hearth chat --no-such-flag\n```\n", encoding="utf-8")
    parser = build_parser()
    found = command_lines(page)
    assert [(number, inline) for number, _, _, inline in found] == [(4, False), (5, False), (6, False), (8, False),
                                                                  (1, True), (1, True)]
    results = {number: parse_error(parser, args) for number, args, _, inline in found if not inline}
    assert [n for n, error in results.items() if error] == [8] and "--no-such-flag" in results[8]
    named = [parse_error(parser, args) for _, args, _, inline in found if inline]
    assert named[0] is None and "required" in named[1]  # a command named inline, without its argument


# --- the site ---------------------------------------------------------------------------------------------------

def nav_pages() -> list[str]:
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["docs_dir"] == "docs" and config["theme"]["name"] == "material"

    def walk(items) -> list[str]:
        pages = []
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            pages += walk(value) if isinstance(value, list) else [value]
        return pages

    return walk(config["nav"])


def test_every_page_is_in_the_nav_and_reachable_from_the_readme():
    pages = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}
    nav = nav_pages()
    assert sorted(nav) == sorted(pages), f"in docs/ but not in the nav: {sorted(pages - set(nav))}; " \
                                         f"in the nav but not in docs/: {sorted(set(nav) - pages)}"
    assert len(nav) == len(set(nav)), "a page is in the nav twice"
    readme_targets = {(README.parent / unquote(t.partition("#")[0])).resolve()
                      for _, t in links(README) if is_relative(t) and t.partition("#")[0]}
    assert GUIDE_HOME.resolve() in readme_targets, "the README must link the guide's home page"
    home_targets = {(DOCS / unquote(t.partition("#")[0])).resolve()
                    for _, t in links(GUIDE_HOME) if is_relative(t) and t.partition("#")[0]}
    unreachable = sorted(p for p in pages if (DOCS / p).resolve() not in readme_targets | home_targets)
    assert not unreachable, f"not linked from the README nor from docs/index.md: {unreachable}"


def test_the_site_builds_in_strict_mode(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs and mkdocs-material are not installed (the test extra has them: "
                    "pip install -e '.[test]')")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                            str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
                           capture_output=True, text=True, timeout=120, cwd=ROOT,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "site" / "index.html").exists()
    for page in nav_pages():
        html = tmp_path / "site" / Path(page).with_suffix("") / "index.html"
        if page == "index.md":
            html = tmp_path / "site" / "index.html"
        assert html.exists(), f"{page} was not built"
