"""`hearth completion bash|zsh`: a shell completion script, written from the parser itself (app/commands/grammar.py)."""

from __future__ import annotations

SHELLS = ("bash", "zsh")


def register(sub) -> None:
    p = sub.add_parser("completion", help="print a shell completion script (bash or zsh)",
                       description="Prints a completion script for every hearth command, option and choice. "
                       "Bash: add `source <(hearth completion bash)` to ~/.bashrc. Zsh: add `source <(hearth "
                       "completion zsh)` to ~/.zshrc, after compinit.")
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(func=run)


def run(args) -> int:
    from app.cli import build_parser
    from app.commands.grammar import completion_script

    print(completion_script(build_parser(), args.shell), end="")
    return 0
