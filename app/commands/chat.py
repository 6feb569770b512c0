"""`hearth chat`: one prompt, or an interactive multi-turn chat in the terminal."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from app.commands.options import add_load_args, add_sampling_args, load_options, sampling_options
from app.core.errors import EngineCrashed
from app.core.modelfile import check_model_file
from app.engine.client import EngineClient
from app.engine.protocol import Done, Token

HELP = "Commands: /reset starts over, /exit quits. Ctrl-C stops an answer; Ctrl-D quits."


def register(sub) -> None:
    p = sub.add_parser("chat", help="chat with a model in the terminal",
                       description="Chat with a model. With --prompt, answer once and exit.")
    add_load_args(p)
    add_sampling_args(p)
    p.add_argument("--prompt", metavar="TEXT", help="answer this one message and exit")
    p.add_argument("--system", metavar="TEXT", help="system prompt")
    p.add_argument("--json", action="store_true", help="with --prompt: print one JSON object with the answer and figures")
    p.set_defaults(func=run)


def _messages(system: str | None, history: list[dict]) -> list[dict]:
    return ([{"role": "system", "content": system}] if system else []) + history


def _answer(client: EngineClient, messages: list[dict], sampling, echo: bool) -> dict:
    """Stream one answer; Ctrl-C cancels it (the engine stops within a token)."""
    done: dict = {}
    previous = signal.getsignal(signal.SIGINT)
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        signal.signal(signal.SIGINT, lambda *_: client.cancel())
    try:
        for event in client.chat(messages, sampling):
            if isinstance(event, Token) and echo:
                sys.stdout.write(event.text)
                sys.stdout.flush()
            elif isinstance(event, Done):
                done = event
    finally:
        if in_main:
            signal.signal(signal.SIGINT, previous)
    return done


def run(args: argparse.Namespace) -> int:
    options = load_options(args)
    check_model_file(options.model_path)
    sampling = sampling_options(args)
    with EngineClient() as client:
        info = client.load(options)
        notice = (info.get("window") or {}).get("notice")
        if notice:
            print(f"hearth: {notice}", file=sys.stderr)
        if args.prompt is not None:
            messages = _messages(args.system, [{"role": "user", "content": args.prompt}])
            done = _answer(client, messages, sampling, echo=not args.json)
            if args.json:
                keys = ("text", "finish_reason", "prompt_tokens", "completion_tokens", "ttft_s", "prompt_tok_s",
                        "gen_tok_s", "peak_rss_mb", "prompt_evaluated", "n_ctx", "spec", "window")
                out = {"model": info.get("model"), "model_path": info.get("path")}
                out.update({k: done[k] for k in keys if k in done})
                print(json.dumps(out, ensure_ascii=False, indent=2))
            else:
                print()
            return 0
        return interactive(client, info, args.system, sampling)


def interactive(client: EngineClient, info: dict, system: str | None, sampling) -> int:
    print(f"Hearth chat with {info.get('name') or info.get('model')}. {HELP}")
    history: list[dict] = []
    while True:
        try:
            line = input("\nyou> ")
        except EOFError:
            print()
            return 0
        except KeyboardInterrupt:
            print()
            return 0
        text = line.strip()
        if not text:
            continue
        if text in ("/exit", "/quit"):
            return 0
        if text == "/reset":
            history.clear()
            client.reset()
            print("(new conversation)")
            continue
        history.append({"role": "user", "content": line})
        sys.stdout.write("\nassistant> ")
        sys.stdout.flush()
        try:
            done = _answer(client, _messages(system, history), sampling, echo=True)
        except EngineCrashed as exc:
            # The supervisor restarts the engine with the model; the conversation stays here.
            history.pop()
            print(f"\nhearth: {exc} Restarting the engine; the conversation is kept, send the message again.",
                  file=sys.stderr)
            client.wait_loaded()
            continue
        history.append({"role": "assistant", "content": done.get("text", "")})
        if done.get("finish_reason") == "cancelled":
            print("\n(stopped)")
        else:
            print(f"\n[{done.get('completion_tokens', 0)} tokens, {done.get('gen_tok_s', 0):.1f} tok/s]")
