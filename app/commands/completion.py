"""`hearth completion bash|zsh`: a shell completion script, written from the parser itself (app/commands/grammar.py)."""

from __future__ import annotations

SHELLS = ("bash", "zsh")


def register(sub) -> None:
    p = sub.add_parser("completion", help="print a shell completion script (bash or zsh)",
                       description="Prints a completion script for every hearth command, option and choice. "
                       "Bash: add `source <(hearth completion bash)` to ~/.bashrc. Zsh: add `source <(hearth "
                       "completion zsh)` to ~/.zshrc, after compinit.")
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(func=lambda args: run(args, p))


def run(args, parser) -> int:
    from app.commands.grammar import completion_script

    root = parser
    while root.parent is not None:  # set by the parse that chose this command (grammar.Parser)
        root = root.parent
    print(completion_script(root, args.shell), end="")
    return 0
