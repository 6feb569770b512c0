"""One grammar for every `hearth` command: the parser class, the examples, the walk over the tree, completion.

Every parser of the command line is a `Parser` (argparse gives each subparser its parent's class), so
- a mistyped or misplaced option is an error in every command, said by the command it was given to, with
  what was meant: the closest option (difflib, as Python 3.14's suggest_on_error does for choices), the
  command it belongs to, or, for a command that takes a program line, that the program goes after `--`;
- every `--help` ends with one example, from EXAMPLES below; tests/commands/test_cli_grammar.py parses each
  one and fails for a command without one;
- shell completion (`hearth completion bash|zsh`) is written from the same tree, so it cannot drift.
"""

from __future__ import annotations

import argparse
import difflib
import shlex
from collections.abc import Iterator

# One example per command, by its path; the first word of each is `hearth`.
EXAMPLES = {
    "": "hearth chat --prompt 'Why is the sky blue?'",
    "chat": "hearth chat --model bundled --temp 0.2 --prompt 'Write a haiku about tea.'",
    "serve": "hearth serve --port 8080 --parallel 2",
    "doctor": "hearth doctor --json",
    "gui": "hearth gui --startup-time",
    "completion": "source <(hearth completion bash)",
    "bench": "hearth bench --repeats 3",
    "bench spec": "hearth bench spec --quants Q4_0 --max-tokens 100",
    "bench window": "hearth bench window --tokens 4000 --ctx 512",
    "bench matrix": "hearth bench matrix --quick",
    "bench quality": "hearth bench quality --text notes.txt --quants Q8_0,Q4_K_M",
    "bench compare": "hearth bench compare before.json after.json",
    "bench serve": "hearth bench serve --parallel 4 --requests 2",
    "bench contention": "hearth bench contention --tokens 100",
    "bench gui": "hearth bench gui --tokens 128",
    "bench docs": "hearth bench docs --topics 20 --no-vectors",
    "bench media": "hearth bench media --model gemma-3-4b-it-Q4_K_M.gguf --tokens 64",
    "models": "hearth models list",
    "models list": "hearth models list --json",
    "models show": "hearth models show bundled --json",
    "models search": "hearth models search qwen --limit 5",
    "models pull": "hearth models pull bartowski/Qwen2.5-0.5B-Instruct-GGUF --quant Q4_K_M",
    "models import": "hearth models import ~/Downloads/model.Q4_K_M.gguf --copy",
    "models rm": "hearth models rm model.Q4_K_M --yes",
    "models fit": "hearth models fit bundled --ctx 8192",
    "models quantize": "hearth models quantize model-f16.gguf --type Q4_K_M",
    "models imatrix": "hearth models imatrix model-f16.gguf --text notes.txt",
    "models convert": "hearth models convert HuggingFaceTB/SmolLM2-135M-Instruct --quantize Q8_0",
    "runtimes": "hearth runtimes list",
    "runtimes list": "hearth runtimes list --json",
    "runtimes build": "hearth runtimes build vulkan",
    "runtimes rm": "hearth runtimes rm vulkan",
    "docs": "hearth docs list",
    "docs add": "hearth docs add ~/notes --collection notes",
    "docs list": "hearth docs list --json",
    "docs rm": "hearth docs rm notes",
    "docs search": "hearth docs search 'release date' --collection notes --limit 3",
    "tools": "hearth tools list",
    "tools add": "hearth tools add time -- uvx mcp-server-time",
    "tools import": "hearth tools import ~/.lmstudio/mcp.json",
    "tools list": "hearth tools list --json",
    "tools rm": "hearth tools rm time",
    "tools test": "hearth tools test time",
}


class _Subcommands(argparse._SubParsersAction):
    """Subcommands whose unknown options are an error of the subcommand itself: argparse hands them up to the
    top parser, which names neither the command nor what was meant."""

    def __call__(self, parser, namespace, values, option_string=None):
        chosen = self._name_parser_map.get(values[0])
        if chosen is not None:
            chosen.parent, parser.chosen = parser, chosen
        super().__call__(parser, namespace, values, option_string)
        extras = vars(namespace).pop(argparse._UNRECOGNIZED_ARGS_ATTR, None)
        if extras:
            chosen.unrecognized(extras, namespace)


class _Formatter(argparse.HelpFormatter):
    """Leaves an example as it is: wrapped, a command line could no longer be copied."""

    def _fill_text(self, text, width, indent):
        return text if text.startswith("Example:") else super()._fill_text(text, width, indent)


class Parser(argparse.ArgumentParser):
    parent: Parser | None = None  # the parser this one is a subcommand of, once chosen
    chosen: Parser | None = None  # the subcommand chosen in the last parse
    program: tuple[str, str] | None = None  # (dest, what): a positional that takes a program line after --

    def __init__(self, *args, **kwargs):
        if kwargs.get("formatter_class", argparse.HelpFormatter) is argparse.HelpFormatter:
            kwargs["formatter_class"] = _Formatter
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Subcommands)

    def format_help(self) -> str:
        # The example is printed as given, whatever the command's formatter does with its description.
        epilog, self.epilog = self.epilog, None
        try:
            text = super().format_help()
        finally:
            self.epilog = epilog
        return f"{text}\n{epilog}\n" if epilog else text

    def parse_known_args(self, args=None, namespace=None):
        self.chosen = None  # a parser may parse twice (tests do): no hint from the last command line
        if self.program is not None and args is not None:
            self._positionals_before_program(list(args))
        return super().parse_known_args(args, namespace)

    def _positionals_before_program(self, words: list[str]) -> None:
        """A program line's command (tools add NAME -- PROGRAM) with nothing before `--` to be NAME: argparse
        would take the program as the name, and the missing piece would be said to be the program."""
        if "--" not in words:
            return
        before, after = words[:words.index("--")], words[words.index("--") + 1:]
        wanted = [a for a in self._actions if not a.option_strings and a.dest != self.program[0]
                  and not isinstance(a, argparse._SubParsersAction) and a.nargs is None]
        given, i = 0, 0
        while i < len(before):
            word = before[i]
            action = self._option_string_actions.get(word.split("=", 1)[0]) if word.startswith("-") else None
            if action is None:
                given += not word.startswith("-")
            elif "=" not in word and action.nargs != 0:
                i += 1  # the option's value
            i += 1
        if given < len(wanted):
            names = " ".join(a.metavar or a.dest.upper() for a in wanted)
            line = " ".join(shlex.quote(w) for w in after) or "PROGRAM"
            self.error(f"give the {' and '.join(a.dest for a in wanted[given:])} before --, as in "
                       f"`{self.prog} {names} -- {line}`")

    def parse_args(self, args=None, namespace=None):
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            self.unrecognized(extras, namespace)
        return namespace

    def _check_value(self, action, value):
        if action.choices is not None and value not in action.choices:
            choices = [str(c) for c in action.choices]
            close = difflib.get_close_matches(str(value), choices, n=1)
            meant = f"did you mean {close[0]!r}? " if close else ""
            raise argparse.ArgumentError(action, f"invalid choice: {value!r} ({meant}choose from "
                                         f"{', '.join(map(repr, choices))})")

    def unrecognized(self, extras: list[str], namespace: argparse.Namespace) -> None:
        """Error out on words no argument took, saying what was meant."""
        if self.program is not None:
            dest, what = self.program
            if extras[0] == "--" and not getattr(namespace, dest):
                # argparse gives an optional `*` positional its empty match at the first option (NAME --env X
                # -- PROG), so the program after -- arrives here; it is the program all the same.
                setattr(namespace, dest, extras[1:])
                return
            given = [*getattr(namespace, dest), *extras]
            if not getattr(namespace, dest) and given[0].startswith("-"):
                given = given[1:]  # `--command PROG`: the flag the user thought there was
            line = [self.prog, *(w for w in self._positionals_given(namespace) if w), "--",
                    *(shlex.quote(w) for w in given or ["PROGRAM"])]
            self.error(f"{extras[0]} is not an option of '{self.prog}': {what} goes after --, as in "
                       f"`{' '.join(line)}`")
        self.error(f"unrecognized arguments: {' '.join(extras)}{self._meant(extras)}")

    def _positionals_given(self, namespace) -> list[str]:
        dest = self.program[0] if self.program else None
        return [str(getattr(namespace, a.dest, "") or "") for a in self._actions
                if not a.option_strings and a.dest != dest and not isinstance(a, argparse._SubParsersAction)]

    def _meant(self, extras: list[str]) -> str:
        flag = next((w.split("=", 1)[0] for w in extras if w.startswith("-") and w != "--"), None)
        if flag is None:
            return ""
        root = self
        while root.parent is not None:
            root = root.parent
            if flag in root._option_string_actions:
                return f" ({flag} belongs to '{root.prog}': give it before '{self.prog[len(root.prog) + 1:]}')"
        below = self.chosen
        while below is not None:
            if flag in below._option_string_actions:
                return f" ({flag} belongs to '{below.prog}': give it after '{below.prog.rsplit(' ', 1)[-1]}')"
            below = below.chosen
        # Compared without their dashes, which every flag shares and which would make unlike names look alike.
        flags = {f.lstrip("-"): f for f in self._option_string_actions}
        close = difflib.get_close_matches(flag.lstrip("-"), list(flags), n=1)
        return f" (did you mean {flags[close[0]]}?)" if close else ""


def subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[argparse.ArgumentParser, list[str], str]]:
    """A parser's subcommands: primary name -> (parser, aliases, help)."""
    out: dict = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                primary = next((n for n, v in out.items() if v[0] is sub), None)
                if primary is None:
                    out[name] = (sub, [], helps.get(name, ""))
                else:
                    out[primary][1].append(name)
    return out


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command of the tree with its path (the root's is ())."""
    yield path, parser
    for name, (sub, _aliases, _help) in subcommands(parser).items():
        yield from walk(sub, (*path, name))


def add_examples(root: argparse.ArgumentParser) -> None:
    for path, parser in walk(root):
        example = EXAMPLES.get(" ".join(path))
        if example:
            parser.epilog = f"Example:\n  {example}"


# --- shell completion ------------------------------------------------------------------------------------------

def _options(parser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.help is not argparse.SUPPRESS]


def _case(pattern: str) -> str:
    return shlex.quote(pattern)


def completion_script(root: argparse.ArgumentParser, shell: str) -> str:
    """A bash or zsh completion function for `hearth`, from the parser tree: subcommands (aliases too, when
    walking), options, the choices of options and positionals; files wherever a free value goes."""
    steps, values, choices, nodes = [], [], [], []
    for path, parser in walk(root):
        node = " ".join(path)
        subs = subcommands(parser)
        for name, (_sub, aliases, _help) in subs.items():
            target = _case(f"{node} {name}".strip())
            steps.append(f"            {'|'.join(_case(f'{node}:{n}') for n in (name, *aliases))}) node={target}; continue ;;")
        for action in _options(parser):
            if action.nargs == 0:
                continue
            pats = "|".join(_case(f"{node}:{o}") for o in action.option_strings)
            values.append(f"            {pats}) skip=1 ;;")
            if action.choices:
                words = " ".join(str(c) for c in action.choices)
                choices.append(f"        {pats}) {_add(shell, words)}; return 0 ;;")
        opts = " ".join(o for a in _options(parser) for o in a.option_strings)
        if subs:
            if shell == "zsh":
                described = " ".join(shlex.quote(f"{n}:{text}") for n, (_s, _a, text) in subs.items())
                listing = f"local -a subs=({described}); _describe command subs"
            else:
                listing = _add(shell, " ".join(subs))
        else:
            positional = next((a for a in parser._actions if not a.option_strings and a.choices), None)
            listing = _add(shell, " ".join(map(str, positional.choices))) if positional else _files(shell)
        nodes.append(f"        {_case(node)}) if [[ $cur == -* ]]; then {_add(shell, opts)}; else {listing}; fi ;;")
    if shell == "bash":
        head = ["_hearth() {", '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
                '    local node="" word i skip=0', "    COMPREPLY=()",
                "    for ((i = 1; i < COMP_CWORD; i++)); do", '        word="${COMP_WORDS[i]}"']
        tail = ["complete -o default -F _hearth hearth"]
    else:
        head = ["#compdef hearth", "_hearth() {", '    local cur="${words[CURRENT]}" prev="${words[CURRENT-1]}"',
                '    local node="" word i skip=0',
                "    for ((i = 2; i < CURRENT; i++)); do", '        word="${words[i]}"']
        tail = ["compdef _hearth hearth"]
    lines = [f"# hearth {shell} completion, written from hearth's own parser: source <(hearth completion {shell})",
             *head,
             "        if ((skip)); then skip=0; continue; fi",
             f"        [[ $word == -- ]] && {{ {_files(shell)}; return 0; }}  # after --: a program's own words",
             '        case "$node:$word" in', *steps, "        esac",
             '        case "$node:$word" in', *values, "        esac",
             "    done",
             '    case "$node:$prev" in', *choices, "    esac",
             f"    ((skip)) && {{ {_files(shell)}; return 0; }}",
             '    case "$node" in', *nodes, "    esac", "}", *tail]
    return "\n".join(lines) + "\n"


def _add(shell: str, words: str) -> str:
    if shell == "bash":
        return f'COMPREPLY=($(compgen -W {shlex.quote(words)} -- "$cur"))'
    return f"compadd -- {words}" if words else "true"


def _files(shell: str) -> str:
    return "true" if shell == "bash" else "_files"  # bash: `complete -o default` completes files
