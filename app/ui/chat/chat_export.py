"""A conversation as a file (no Qt; the window's File menu uses it, the CLI could).

- JSON ("hearth-chat", version 1): everything the store keeps of a chat (title, system prompt, every message
  with its meta: the model that wrote it, its speed, why it stopped, its thinking time) and every version of a
  message with the branch that followed it, so an import brings back what the export had. Import also takes
  the OpenAI shape, {"messages": [{"role", "content"}, …]} or that list alone, where a first system message
  becomes the chat's system prompt.
  Its images and sounds (#53) travel once each, by digest, in "media" ({digest: {kind, name, data (base64)}}),
  as the store keeps them; an import keeps each whose bytes match its digest.
- Markdown: the chat as it reads, the versions shown only, for reading and sharing (not imported back); an
  attached image or sound is named under its question.

A file that cannot be imported says why in one sentence (ChatImportError) and imports nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import time
from pathlib import Path

from app.core.store.bounded_read import Budget, TooBig, load_json, read_file
from app.core.chats.store import DEFAULT_TITLE, MEDIA, ChatStore, answer_model
from app.protocol.media import KINDS
from app.core.errors import HearthError
from app.core.chats.reasoning import split

FORMAT = "hearth-chat"
VERSION = 1
MAX_IMPORT_BYTES = 256 * 1024 * 1024  # far beyond any chat, its images included; a bigger file is something else
# An export nests 9 levels (message, versions, their branch, a tool call's arguments...); its tool calls' JSON
# arguments a few more. Deeper is not a chat, and the store, the export and the window all walk it recursively.
MAX_IMPORT_DEPTH = 64
ROLES = ("user", "assistant", "system")
ROLE_TITLES = {"user": "You", "assistant": "Assistant", "system": "System"}


class ChatImportError(HearthError):
    """A file that is not a chat Hearth can import."""


def export_json(store: ChatStore, conversation_id: int) -> dict:
    conv = store.get(conversation_id)
    if conv is None:
        raise HearthError("That chat is no longer in the chat history.")
    messages = [{"role": msg.role, "content": msg.content, "meta": msg.meta,
                 **({"versions": store.versions(msg.id)} if msg.versions > 1 else {})}
                for msg in store.messages(conversation_id)]
    return {"format": FORMAT, "version": VERSION, "title": conv.title, "system_prompt": conv.system_prompt,
            "exported": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "messages": messages,
            # The MCP servers the chat may use, by name (the answers' calls are in their meta, "tool_calls").
            **({"tool_servers": store.chat_tools(conversation_id)} if store.chat_tools(conversation_id) else {}),
            **({"media": media} if (media := _media_of(store, messages)) else {})}


def _media_of(store: ChatStore, messages: list[dict]) -> dict:
    """The images and sounds the exported messages (and their versions and branches) show, once each."""
    found: dict = {}

    def walk(item) -> None:
        if isinstance(item, dict):
            meta = item.get("meta")
            for ref in (meta.get(MEDIA) if isinstance(meta, dict) else None) or []:
                digest = ref.get("digest") if isinstance(ref, dict) else None
                if digest and digest not in found and (data := store.media_data(digest)) is not None:
                    found[digest] = {"kind": ref.get("kind"), "name": ref.get("name", ""),
                                     "data": base64.b64encode(data).decode("ascii")}
            for key in ("versions", "tail"):
                for inner in item.get(key) or []:
                    walk(inner)

    for message in messages:
        walk(message)
    return found


DECISIONS = {"once": "allowed once", "always": "always allowed", "allowed": "allowed", "deny": "denied",
             "stopped": "stopped"}


SOURCE_QUOTE_CHARS = 400  # of each source passage quoted under an exported answer

def call_markdown(call: dict) -> list[str]:
    """One tool call of an answer, folded as the window shows it: its arguments and its result."""
    state = DECISIONS.get(call.get("decision"), call.get("decision") or "")
    if call.get("stopped"):
        state = "stopped"
    elif call.get("is_error") and call.get("decision") != "deny":
        state += ", error"
    arguments = json.dumps(call.get("arguments") or {}, ensure_ascii=False, indent=2)
    return ["<details>", f"<summary>Tool call: {call.get('server')} · {call.get('tool')} ({state})</summary>", "",
            "```json", arguments, "```", "", "```", str(call.get("result") or "").strip(), "```", "", "</details>",
            ""]


def sources_markdown(sources) -> list[str]:
    """An answer's numbered sources, as its [n] marks name them (#55 E3: the JSON export kept them, the Markdown
    lost them): where each passage is, and the passage itself quoted."""
    lines: list[str] = []
    for source in sources or []:
        if not isinstance(source, dict) or "n" not in source:
            continue
        lines.append(f"- [{source['n']}] {source.get('where') or source.get('path') or ''}".rstrip())
        passage = " ".join(str(source.get("text") or "").split())
        if passage:
            lines.append(f"  > {passage[:SOURCE_QUOTE_CHARS]}{'…' if len(passage) > SOURCE_QUOTE_CHARS else ''}")
    return ["**Sources**", "", *lines, ""] if lines else []


def export_markdown(store: ChatStore, conversation_id: int) -> str:
    conv = store.get(conversation_id)
    if conv is None:
        raise HearthError("That chat is no longer in the chat history.")
    out = [f"# {conv.title}", "", f"*Exported from Hearth on {time.strftime('%Y-%m-%d %H:%M')}*", ""]
    if conv.system_prompt.strip():
        out += ["**System prompt:**", "", *(f"> {line}" for line in conv.system_prompt.strip().split("\n")), ""]
    for msg in store.messages(conversation_id):
        title = ROLE_TITLES.get(msg.role, msg.role)
        signed = answer_model(msg.meta)
        if msg.role == "assistant" and signed:
            title += f" · {signed['model']}" + (f" on {signed['endpoint']}" if signed.get("endpoint") else "")
        out += [f"## {title}", ""]
        text = msg.content
        if msg.role == "assistant":
            parts = split(text)
            if parts.reasoning.strip():
                took = msg.meta.get("thought_s")
                summary = f"Thought for {took:.1f} s" if isinstance(took, (int, float)) else "Thinking"
                # <details> folds the thinking away where Markdown is shown (GitHub, most editors), as the window does.
                out += ["<details>", f"<summary>{summary}</summary>", "", parts.reasoning.strip(), "", "</details>", ""]
            text = parts.content
            for call in msg.meta.get("tool_calls") or []:
                if isinstance(call, dict):
                    if call.get("said", "").strip():
                        out += [call["said"].strip(), ""]
                    out += call_markdown(call)
        if msg.meta.get("error"):
            text = (text + "\n\n" if text.strip() else "") + f"*Error: {msg.meta['error']}*"
        for ref in msg.meta.get(MEDIA) or []:
            if isinstance(ref, dict):
                text += f"\n\n*Attached {'a sound' if ref.get('kind') == 'audio' else 'an image'}: {ref.get('name')}*"
        out += [text.strip(), ""]
        out += sources_markdown(msg.meta.get("sources"))
    return "\n".join(out).rstrip() + "\n"


def _fail(name: str, why: str) -> ChatImportError:
    return ChatImportError(f"{name} cannot be imported: {why}.")


def _message(name: str, item, where: str, tail: bool = False) -> dict:
    """One message of the file, checked: a clear sentence for the first thing wrong."""
    if not isinstance(item, dict):
        raise _fail(name, f"{where} is not a message (an object with a role and a content)")
    role, content = item.get("role"), item.get("content")
    if role not in ROLES:
        raise _fail(name, f"{where} has the role {role!r}; a chat has user, assistant and system messages")
    if isinstance(content, list):  # OpenAI's content parts: their text
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    if not isinstance(content, str):
        raise _fail(name, f"{where} has no text content")
    meta = item.get("meta") if isinstance(item.get("meta"), dict) else {}
    out = {"role": role, "content": content, "meta": meta}
    versions = item.get("versions")
    if versions is not None:
        if not isinstance(versions, list) or not versions:
            raise _fail(name, f"{where} has versions that are not a list of versions")
        out["versions"] = []
        for number, version in enumerate(versions, 1):
            if not isinstance(version, dict) or not isinstance(version.get("content"), str):
                raise _fail(name, f"version {number} of {where} has no text content")
            kept = version.get("tail") or []
            if not isinstance(kept, list):
                raise _fail(name, f"version {number} of {where} has a branch that is not a list of messages")
            out["versions"].append({
                "content": version["content"],
                "meta": version.get("meta") if isinstance(version.get("meta"), dict) else {},
                "tail": [_message(name, t, f"message {i} after version {number} of {where}", True)
                         for i, t in enumerate(kept, 1)]})
        shown = meta.get("version")
        if not isinstance(shown, int) or not 1 <= shown <= len(versions):
            out["meta"] = {**meta, "version": len(versions)}
    elif not tail and "version" in meta:
        out["meta"] = {k: v for k, v in meta.items() if k != "version"}
    return out


def parse_import(data, name: str = "The file") -> dict:
    """{title, system_prompt, messages} from an export's data (a Hearth export or OpenAI's messages)."""
    if isinstance(data, list):
        data = {"messages": data}
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise _fail(name, "it is JSON, but not a chat (no list of messages)")
    if data.get("format") not in (None, FORMAT):
        raise _fail(name, f"it is a {data.get('format')!r} file, not a Hearth chat")
    if data.get("format") == FORMAT and isinstance(data.get("version"), int) and data["version"] > VERSION:
        raise _fail(name, f"it was exported by a newer Hearth (format version {data['version']}); update Hearth")
    messages = [_message(name, item, f"message {i}") for i, item in enumerate(data["messages"], 1)]
    system = data.get("system_prompt") if isinstance(data.get("system_prompt"), str) else ""
    if messages and messages[0]["role"] == "system" and not system:
        system = messages.pop(0)["content"]  # OpenAI's shape: the system prompt is the first message
    if not messages:
        raise _fail(name, "it has no messages")
    title = data.get("title") if isinstance(data.get("title"), str) and data["title"].strip() else None
    if title is None:
        first = next((m["content"] for m in messages if m["role"] == "user"), "")
        from app.core.chats.store import title_from

        title = title_from(first) if first else DEFAULT_TITLE
    servers = data.get("tool_servers")
    servers = [s for s in servers if isinstance(s, str)] if isinstance(servers, list) else []
    return {"title": title, "system_prompt": system, "messages": messages, "tool_servers": servers,
            "media": _imported_media(data.get("media"))}


def _imported_media(media) -> list[tuple[str, str, bytes]]:
    """(kind, name, bytes) of each exported medium whose bytes match its digest; another is left out (its
    question then shows that an image was there)."""
    out = []
    for digest, item in (media.items() if isinstance(media, dict) else ()):
        if not isinstance(item, dict) or item.get("kind") not in KINDS or not isinstance(item.get("data"), str):
            continue
        try:
            data = base64.b64decode(item["data"], validate=True)
        except (binascii.Error, ValueError):
            continue
        if hashlib.sha256(data).hexdigest() == digest:
            out.append((item["kind"], str(item.get("name") or ""), data))
    return out


def read_import(path: Path | str) -> dict:
    """A file's chat, parsed and checked (parse_import); ChatImportError with the reason otherwise.

    Read through app/core/bounded_read: its size is counted as it is read (not taken from the file system), and
    JSON nested deeper than any chat is refused in one sentence instead of a RecursionError."""
    path = Path(path)
    name = path.name
    try:
        text = read_file(path, Budget(name, MAX_IMPORT_BYTES)).decode("utf-8")
    except FileNotFoundError:
        raise _fail(name, f"there is no such file in {path.parent}") from None
    except UnicodeDecodeError:
        raise _fail(name, "it is not a text file (a chat export is JSON)") from None
    except IsADirectoryError:
        raise _fail(name, "it is a folder") from None
    except OSError as exc:
        raise _fail(name, f"it cannot be read ({exc.strerror or exc})") from None
    except TooBig:
        raise _fail(name, f"it is more than {MAX_IMPORT_BYTES // 2**20} MB, far more than a chat") from None
    try:
        data = load_json(text, name, MAX_IMPORT_DEPTH)
    except TooBig:
        raise _fail(name, f"it is nested more than {MAX_IMPORT_DEPTH} levels deep, which no chat is") from None
    except ValueError as exc:
        where = f" (line {exc.lineno}, column {exc.colno}: {exc.msg})" if hasattr(exc, "lineno") else ""
        raise _fail(name, f"it is not valid JSON{where}; export a chat as JSON to import it") from None
    return parse_import(data, name)


def import_chat(store: ChatStore, path: Path | str) -> int:
    """Add the chat in a file to the store as a new conversation; its id."""
    chat = read_import(path)
    title = chat["title"]
    if any(conv.title == title for conv in store.list()):  # two chats of one name could not be told apart
        title = f"{title} (imported)"
    for kind, name, data in chat["media"]:
        store.keep_media(kind, name, data)
    cid = store.restore(title, chat["system_prompt"], chat["messages"])
    if chat["tool_servers"]:
        store.set_chat_tools(cid, chat["tool_servers"])
    return cid


def write_export(store: ChatStore, conversation_id: int, path: Path | str, kind: str) -> Path:
    """kind: "markdown" or "json". OSError carries on to the caller, which says it."""
    path = Path(path)
    if kind == "json":
        text = json.dumps(export_json(store, conversation_id), indent=2, ensure_ascii=False) + "\n"
    else:
        text = export_markdown(store, conversation_id)
    path.write_text(text, encoding="utf-8")
    return path


def file_name(title: str, kind: str) -> str:
    """A file name from a chat's title: letters, digits, spaces and dashes, shortened."""
    safe = "".join(ch if ch.isalnum() or ch in " -_" else " " for ch in title)
    safe = "-".join(safe.split())[:60] or "chat"
    return f"{safe}.{'json' if kind == 'json' else 'md'}"
