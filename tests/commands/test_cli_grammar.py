"""The whole command line as one grammar: every command of the real parser tree has help and an example that
parses, the nouns share their verbs, every list and show has --json, a wrong option is an error that says what
was meant, and the completion script (run through a real bash) completes from the same tree."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

import pytest

from app.cli import build_parser, main
from app.commands.grammar import completion_script, subcommands, walk

# A standard verb and the other words a noun might have used for the same action.
SYNONYMS = {
    "list": {"ls", "all", "enumerate"},
    "add": {"new", "create", "register"},
    "rm": {"remove", "delete", "del", "uninstall", "forget", "drop"},
    "show": {"inspect", "info", "describe", "details", "get", "view"},
    "test": {"check", "ping", "probe", "try", "verify"},
}
NOUNS = ("models", "docs", "tools", "runtimes", "bench")


@pytest.fixture(scope="module")
def parser():
    return build_parser()


@pytest.fixture(scope="module")
def tree(parser):
    return list(walk(parser))


def _error(parser, words: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(words)
    assert stop.value.code == 2
    return capsys.readouterr().err


def _example_words(cmd) -> list[str]:
    example = cmd.epilog.split("\n", 1)[1].strip()
    words = shlex.split(example.replace("source <(", "").rstrip(")"))
    assert words[0] == "hearth", example
    return words[1:]


def test_every_command_has_help_and_an_example_that_parses(parser, tree):
    assert {" ".join(p) for p, _ in tree} >= {"models show", "tools add", "runtimes build", "bench matrix",
                                             "docs search", "completion"}
    for path, cmd in tree:
        if path:
            helps = subcommands(dict(tree)[path[:-1]])[path[-1]][2]
            assert helps, f"`hearth {' '.join(path)}` has no help line"
        assert cmd.epilog and cmd.epilog.startswith("Example:\n  "), f"`hearth {' '.join(path)}` has no example"
        words = _example_words(cmd)
        assert words[:len(path)] == list(path), (path, words)
        parser.parse_args(words)  # the example is a command line that parses
        assert cmd.format_help().rstrip().endswith(cmd.epilog.split("\n", 1)[1].strip())


def test_no_two_nouns_name_one_action_differently(tree):
    for path, cmd in tree:
        for name, (_sub, aliases, _help) in subcommands(cmd).items():
            for verb, others in SYNONYMS.items():
                assert name not in others, f"`hearth {' '.join(path)} {name}`: the verb for this is `{verb}`"
                if name == verb:
                    assert set(aliases) <= others, (path, name, aliases)
    verbs = {path[0]: set(subcommands(cmd)) for path, cmd in tree if len(path) == 1 and path[0] in NOUNS}
    assert {"list", "rm"} <= verbs["models"] & verbs["docs"] & verbs["tools"] & verbs["runtimes"]
    assert "show" in verbs["models"] and "test" in verbs["tools"] and "add" in verbs["docs"] & verbs["tools"]


def test_old_words_stay_aliases(parser):
    assert parser.parse_args(["models", "inspect", "bundled"]).func is parser.parse_args(
        ["models", "show", "bundled"]).func
    assert parser.parse_args(["bench", "spec", "--draft", "d.gguf"]).draft == "d.gguf"
    assert parser.parse_args(["bench", "spec", "--draft-model", "d.gguf"]).draft == "d.gguf"
    assert parser.parse_args(["docs", "search", "q", "-k", "3"]).k == 3 == parser.parse_args(
        ["docs", "search", "q", "--limit", "3"]).k


def test_every_list_and_show_has_json(tree):
    listed = [path for path, _ in tree if path and path[-1] in ("list", "show")]
    assert len(listed) >= 5
    for path, cmd in tree:
        if path and path[-1] in ("list", "show"):
            assert "--json" in cmd._option_string_actions, f"`hearth {' '.join(path)}` has no --json"


def test_the_same_things_have_the_same_flags(tree):
    for path, cmd in tree:
        flags = cmd._option_string_actions
        assert not {"--draft"} & set(flags) or flags["--draft"] is flags.get("--draft-model"), path
        assert "--json" not in flags or flags["--json"].nargs == 0, path
        if "--yes" in flags:
            assert flags["-y"] is flags["--yes"], path


def test_an_unknown_option_is_an_error_in_every_command(parser, tree, capsys):
    for path, cmd in tree:
        words = _example_words(cmd)
        at = words.index("--") if "--" in words else len(words)
        err = _error(parser, [*words[:at], "--no-such-option", *words[at:]], capsys)
        paths = dict(tree)
        named = paths[max((tuple(words[:n]) for n in range(len(words) + 1) if tuple(words[:n]) in paths), key=len)]
        said = (f"{named.prog}: error: unrecognized arguments: --no-such-option\n",
                f"{named.prog}: error: --no-such-option is not an option of '{named.prog}'")
        assert any(s in err for s in said), (path, err)


def test_a_mistyped_or_misplaced_option_says_what_was_meant(parser, capsys):
    assert "unrecognized arguments: --jsn (did you mean --json?)" in _error(parser, ["models", "list", "--jsn"], capsys)
    assert "--json belongs to 'hearth models list': give it after 'list'" in _error(
        parser, ["--json", "models", "list"], capsys)
    assert "--endpoint belongs to 'hearth bench': give it before 'spec'" in _error(
        parser, ["bench", "spec", "--endpoint", "http://h/v1"], capsys)
    assert "invalid choice: 'mdoels' (did you mean 'models'?" in _error(parser, ["mdoels", "list"], capsys)
    assert "invalid choice: 'vulkn' (did you mean 'vulkan'?" in _error(parser, ["runtimes", "build", "vulkn"], capsys)


def test_tools_add_with_command_says_the_command_goes_after_dashes(hearth_home, capsys):
    from app.core import paths

    with pytest.raises(SystemExit) as stop:
        main(["tools", "add", "time", "--command", "/path/to/server"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert ("--command is not an option of 'hearth tools add': the server's command goes after --, as in "
            "`hearth tools add time -- /path/to/server`") in err
    assert not paths.mcp_config_file().exists()  # before: stored with --command as its program line
    err = _error(build_parser(), ["tools", "add", "time", "uvx", "mcp-server-time", "--local-timezone=UTC"], capsys)
    assert "`hearth tools add time -- uvx mcp-server-time --local-timezone=UTC`" in err


def test_tools_add_takes_the_program_after_dashes_wherever_the_options_are(parser):
    program = ["uvx", "mcp-server-time", "--local-timezone", "UTC"]
    for words, command, env in ((["time", "--env", "TZ=UTC", "--", *program], program, ["TZ=UTC"]),
                                (["--env", "TZ=UTC", "time", "--", *program], program, ["TZ=UTC"]),
                                (["time", "--", *program, "--env", "TZ=UTC"], [*program, "--env", "TZ=UTC"], [])):
        args = parser.parse_args(["tools", "add", *words])
        assert (args.name, args.command, args.env) == ("time", command, env), words
    remote = parser.parse_args(["tools", "add", "docs", "--url", "https://host/mcp", "--header", "A: b"])
    assert (remote.name, remote.command, remote.url) == ("docs", [], "https://host/mcp")


def _complete(shell_line: str, script_shell: str = "bash") -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    words = shlex.split(shell_line) + ([""] if shell_line.endswith(" ") else [])
    line = (f'source <({shlex.quote(sys.executable)} -m app completion bash) && '
            f'COMP_WORDS=({" ".join(shlex.quote(w) for w in words)}) && COMP_CWORD={len(words) - 1} && '
            '_hearth && printf "%s\\n" "${COMPREPLY[@]}"')
    proc = subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [w for w in proc.stdout.splitlines() if w]


def test_bash_completes_from_the_parser():
    assert _complete("hearth mo") == ["models"]
    assert set(_complete("hearth models s")) == {"show", "search"}
    assert _complete("hearth models inspect --j") == ["--json"]  # an alias walks like its command
    assert _complete("hearth runtimes build ") == ["vulkan", "cuda"]
    assert set(_complete("hearth chat --kv-type ")) == {"f16", "q8_0", "q4_0"}
    assert _complete("hearth chat --model mo") == []  # a value: files, not commands
    assert _complete("hearth tools add time -- mo") == []  # the program's own words


def test_zsh_completes_from_the_same_tree(parser, tmp_path):
    if shutil.which("zsh") is None:
        pytest.skip("no zsh here")
    script = tmp_path / "hearth.zsh"
    script.write_text(completion_script(parser, "zsh"))
    assert subprocess.run(["zsh", "-n", str(script)], capture_output=True, timeout=60).returncode == 0
    # zsh's completion widgets stand in as printers: what the function offers at each place, unfiltered.
    stubs = ('compdef() { :; }; compadd() { [[ $1 == -- ]] && shift; print -l -- "$@"; }; '
             '_describe() { local -a arr; arr=("${(@P)2}"); print -l -- "${arr[@]%%:*}"; }; _files() { print FILES; }')

    def offered(*words: str) -> list[str]:
        line = f'{stubs}; source {shlex.quote(str(script))}; words=({" ".join(map(shlex.quote, words))}); ' \
               f'CURRENT={len(words)}; _hearth'
        proc = subprocess.run(["zsh", "-f", "-c", line], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split()

    assert "models" in offered("hearth", "mo") and "--version" not in offered("hearth", "")
    assert {"--json", "--tensors"} <= set(offered("hearth", "models", "inspect", "--j"))  # an alias walks too
    assert offered("hearth", "runtimes", "build", "") == ["vulkan", "cuda"]
    assert offered("hearth", "chat", "--model", "") == ["FILES"]


def test_tools_add_without_a_name_says_the_name_is_missing(hearth_home, capsys):
    """#56 E18: `hearth tools add -- /bin/cat` took the program as the name and answered "Give either a command
    after -- ...", when the command was there and the name was what was missing."""
    from app.core import paths

    for words in (["--", "/bin/cat"], ["--env", "A=B", "--", "/bin/cat", "-u"], ["--replace", "--", "cat"]):
        with pytest.raises(SystemExit) as stop:
            main(["tools", "add", *words])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert "give the name before --, as in `hearth tools add NAME -- " in err, (words, err)
        assert "Give either a command" not in err and "Traceback" not in err
    # A remote server without a name: only the name is missing (its command was said to be missing too).
    with pytest.raises(SystemExit):
        main(["tools", "add", "--url", "https://example.com/mcp"])
    err = capsys.readouterr().err
    assert "required: name\n" in err and "COMMAND" not in err.splitlines()[-1], err
    assert not paths.mcp_config_file().exists()
    # With the name given, as before: the program after --, options before or after the name.
    assert main(["tools", "add", "cat", "--", "/bin/cat"]) == 0
    assert main(["tools", "add", "--env", "A=B", "cat2", "--", "/bin/cat"]) == 0
