"""`hearth chat`: one prompt, or an interactive multi-turn chat in the terminal."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path

from app.core import env
from app.commands import chat_media
from app.commands.chat_docs import add_docs_args, open_docs
from app.commands.chat_tools import add_tools_args, check_tool_flags, open_tools
from app.commands.options import add_load_args, add_sampling_args, load_options, sampling_options
from app.core.errors import EngineCrashed, HearthError
from app.core.gguf.modelfile import above_trained_context, check_model_file
from app.backends.client import EngineClient
from app.protocol.option_fields import LOAD_FIELDS
from app.protocol.messages import Done, LoadOptions, Token

HELP = ("Commands: /image PATH and /audio PATH attach to your next message, /reset starts over, /exit quits. "
        "Ctrl-C stops an answer; Ctrl-D quits.")


def register(sub) -> None:
    p = sub.add_parser("chat", help="chat with a model in the terminal",
                       description="Chat with a model. With --prompt, answer once and exit.")
    add_load_args(p)
    add_sampling_args(p)
    p.add_argument("--prompt", metavar="TEXT", help="answer this one message and exit")
    p.add_argument("--system", metavar="TEXT", help="system prompt")
    p.add_argument("--json", action="store_true", help="with --prompt: print one JSON object with the answer and figures")
    p.add_argument("--predict", metavar="FILE",
                   help="a text the answer will mostly repeat (a file to edit, the previous answer): drafts for "
                   "speculative decoding, so it can come several times faster; the answer stays the same")
    p.add_argument("--endpoint", metavar="URL",
                   help="chat with an OpenAI-compatible server instead (its base URL, e.g. http://127.0.0.1:8080/v1: "
                   "llama-server, vLLM, Ollama, LM Studio, hearth serve); --model then names the server's model")
    p.add_argument("--api-key", metavar="KEY", default=env.API_KEY.get(),
                   help=f"with --endpoint: the server's API key (default: ${env.API_KEY.name})")
    chat_media.add_media_args(p)
    add_docs_args(p)
    add_tools_args(p)
    p.set_defaults(func=run)


def _messages(system: str | None, history: list[dict]) -> list[dict]:
    """The conversation as the model gets it: the window's prompt builder (app/core/chats/prompt.py)."""
    from app.core.chats.prompt import chat_messages

    return chat_messages(system, history)


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
    if done.get("prompt_dropped"):  # never silently: the model did not see all of what was sent
        print(f"\nhearth: the conversation ({done['prompt_dropped'] + done['prompt_tokens']} tokens) is longer than "
              f"the context of {done.get('n_ctx')} tokens; the model saw {done['prompt_tokens']} of them (its start and "
              f"its most recent part), the {done['prompt_dropped']} in between were left out.", file=sys.stderr)
    return done


def _remote(args: argparse.Namespace):
    """The endpoint's backend; the flags that set up a local model do not reach a server, so say so."""
    from app.backends.remote import RemoteEndpoint

    defaults = LoadOptions()
    local_only = [f.flag for f in LOAD_FIELDS
                  if f.flag and getattr(args, f.arg, getattr(defaults, f.name)) != getattr(defaults, f.name)]
    if local_only:
        print(f"hearth: {', '.join(local_only)} set up a local model; the server at {args.endpoint} decides "
              "its own.", file=sys.stderr)
    return RemoteEndpoint(args.endpoint, api_key=args.api_key, model=args.model)


def run(args: argparse.Namespace) -> int:
    check_tool_flags(args)
    sampling = sampling_options(args)
    if args.predict:
        sampling.prediction = _read_prediction(args.predict)
    chat_media.refuse_unless_supported(args)
    parts = chat_media.parts_from_args(args)  # a bad file is a sentence before the model loads
    if args.endpoint:
        backend, options = _remote(args), LoadOptions()
    else:
        backend, options = None, load_options(args)
        check_model_file(options.model_path)
    with EngineClient(backend) as client:
        info = client.load(options)
        if (info.get("media") or {}).get("mmproj_error"):  # the model loaded; its projector did not
            print(f"hearth: {info['media']['mmproj_error']}", file=sys.stderr)
        chat_media.check_model_takes(info, parts)
        if info.get("cannot_generate"):  # an embedding model: said before the first question, not after
            print(f"hearth: {info['cannot_generate']}", file=sys.stderr)
            return 1
        notice = (info.get("window") or {}).get("notice")
        for notice in (notice, above_trained_context(info.get("n_ctx"), info.get("n_ctx_train"))):
            if notice:
                print(f"hearth: {notice}", file=sys.stderr)
        fmt = info.get("chat_format") or {}
        if fmt.get("kind") in ("builtin", "plain"):  # no template of its own: say what it gets instead, and why
            print(f"hearth: {fmt.get('why')}", file=sys.stderr)
        docs = open_docs(args, info, None if args.endpoint else options.model_path, args.prompt or "")
        try:
            tools = open_tools(args, info, None if args.endpoint else options.model_path)
            try:
                return _chat(client, info, args, sampling, docs, tools, parts)
            finally:
                if tools is not None:
                    tools.close()
        finally:
            if docs is not None:
                docs.close()


def _chat(client: EngineClient, info: dict, args: argparse.Namespace, sampling, docs, tools=None,
          parts: list[dict] | None = None) -> int:
    if args.prompt is not None:
        system = _valid_text(args.system, "--system")
        history = [{"role": "user", "content": chat_media.content(_valid_text(args.prompt, "--prompt"), parts or [])}]
        messages, sources = docs.messages(system, history) if docs else (_messages(system, history), [])
        calls = None
        if tools is not None:
            turn = tools.answer(client, messages, sampling, echo=not args.json)
            done, calls = dict(turn.done), [c.to_json() for c in turn.calls]
            done["text"] = turn.added[-1]["content"]  # the answer in words, after the calls
        else:
            done = _answer(client, messages, sampling, echo=not args.json)
        if args.json:
            keys = ("text", "finish_reason", "prompt_tokens", "completion_tokens", "ttft_s", "prompt_tok_s",
                    "gen_tok_s", "peak_rss_mb", "prompt_evaluated", "prompt_dropped", "n_ctx", "spec", "prediction",
                    "window", "n_threads", "threads_reason",  # the threads the answer ended on, and why
                    "media", "media_tokens", "media_encoded", "media_s")  # its images and sounds
            out = {"model": info.get("model"), "model_path": info.get("path"),
                   # where it ran: the engine runtime and its devices, and the layers llama.cpp put on them
                   "runtime": info.get("runtime"), "gpu_layers": info.get("gpu_layers"),
                   # the GPUs' memory in use once loaded, as the monitor's VRAM graph shows it
                   "gpu_mb": info.get("gpu_mb"), "gpu_total_mb": info.get("gpu_total_mb"),
                   "chat_format": info.get("chat_format")}
            out.update({k: done[k] for k in keys if k in done})
            if calls is not None:  # each call: its arguments, whether it was allowed, and what came back
                out["tool_calls"] = calls
            if docs:  # which files went in, and which chunks the answer was given (and cites)
                out.update(docs.json_fields(done.get("text", ""), sources))
            print(json.dumps(out, ensure_ascii=False, indent=2))
        else:
            print()
            if docs:
                docs.print_sources(done.get("text", ""), sources)
        return 0
    return interactive(client, info, args.system, sampling, docs, tools, parts)


def interactive(client: EngineClient, info: dict, system: str | None, sampling, docs=None, tools=None,
                attached: list[dict] | None = None) -> int:
    where = f" at {info['path']}" if info.get("remote") else ""
    print(f"Hearth chat with {info.get('name') or info.get('model')}{where}. {HELP}")
    system = _valid_text(system, "--system")
    history: list[dict] = []
    pending = list(attached or [])  # images and sounds for the next message (--image, --audio, /image, /audio)
    if hasattr(sys.stdin, "reconfigure"):
        sys.stdin.reconfigure(errors="surrogateescape")  # bytes that are not UTF-8 reach _valid_text, not a traceback
    while True:
        try:
            line = _valid_text(input("\nyou> "), "your message")
        except (EOFError, KeyboardInterrupt):
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
        attach = chat_media.attach_command(text)
        if attach is not None:
            kind, path = attach
            if docs is not None or tools is not None:
                print("hearth: images and sounds cannot yet go with documents or tools in one chat.", file=sys.stderr)
                continue
            try:
                part = chat_media.read_part(kind, path, "/") if path else None
                if part is None:
                    raise HearthError(f"Name the file: /{kind} PATH.")
                chat_media.check_model_takes(info, [part])
            except HearthError as exc:
                print(f"hearth: {exc}", file=sys.stderr)
                continue
            pending.append(part)
            print(f"({chat_media.described(part)} goes with your next message)")
            continue
        history.append({"role": "user", "content": chat_media.content(line, pending)})
        sys.stdout.write("\nassistant> ")
        sys.stdout.flush()
        messages, sources = docs.messages(system, history) if docs else (_messages(system, history), [])
        try:
            if tools is not None:  # the calls and their results stay in the conversation, for later turns
                turn = tools.answer(client, messages, sampling, echo=True)
                done = dict(turn.done, text=turn.added[-1]["content"])
                history.extend(turn.added[:-1])
            else:
                done = _answer(client, messages, sampling, echo=True)
        except EngineCrashed as exc:
            # The supervisor restarts the engine with the model; the conversation stays here.
            history.pop()
            print(f"\nhearth: {exc} Restarting the engine; the conversation is kept, send the message again.",
                  file=sys.stderr)
            client.wait_loaded()
            continue
        except HearthError as exc:
            # The engine refused this message (a template, a context, an option), or a server failed (busy,
            # gone, cut the answer off): the conversation stays, and the next try may be answered.
            history.pop()
            print(f"\nhearth: {exc} The conversation is kept; send the message again.", file=sys.stderr)
            continue
        pending = []  # they went with that message, and stay in the conversation with it
        history.append({"role": "assistant", "content": done.get("text", "")})
        if done.get("finish_reason") == "cancelled":
            print("\n(stopped)")
        else:
            print(f"\n[{_count(done)}, {done.get('gen_tok_s') or 0:.1f} tok/s]")
            if docs:
                docs.print_sources(done.get("text", ""), sources)


def _valid_text(text: str | None, what: str) -> str | None:
    """Text as UTF-8 can carry it: bytes that were not UTF-8 (kept by Python as lone surrogates) become U+FFFD,
    and the user hears about it once, in one sentence."""
    if text is None:
        return None
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        try:
            fixed = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:  # surrogates that did not come from bytes
            fixed = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        print(f"hearth: {what} had bytes that are not UTF-8 text; they were replaced with \ufffd.", file=sys.stderr)
        return fixed


def _read_prediction(path: str) -> str:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise HearthError(f"--predict: cannot read {path}: {exc.strerror or exc}.") from None
    return _valid_text(raw.decode("utf-8", "surrogateescape"), f"--predict {path}")


def _count(done: dict) -> str:
    """The answer's length: tokens, or for a server that does not count them, the chunks it streamed."""
    if done.get("completion_tokens") is not None:
        return f"{done['completion_tokens']} tokens"
    return f"{done.get('stream_chunks', 0)} chunks"
