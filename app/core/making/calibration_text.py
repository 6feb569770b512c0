"""The text an importance matrix is computed from: the user's files, or their own chat history.

A document is {"name": ..., "text": ...} or, for a chat, {"name": ..., "messages": [{role, content}, ...]}: the
engine renders a chat with the model's own template, so the matrix sees the turn markers the model will see.
"""

from __future__ import annotations

from pathlib import Path

from app.core.errors import HearthError


class CalibrationTextError(HearthError):
    pass


def file_documents(files: list[str]) -> list[dict]:
    if not files:
        raise CalibrationTextError("Name the text to calibrate on with --text FILE (your own writing, code or "
                                   "chats: the kind of text you will use the model for), or use --chats.")
    docs = []
    for name in files:
        file = Path(name).expanduser()
        docs.append({"name": str(file.resolve()), "text": read_user_text(file, CalibrationTextError, "calibrate on")})
    return docs


def read_user_text(file: Path, error: type[HearthError], use: str) -> str:
    """A text file of the user's (to calibrate on, to score quants on), or `error` with one sentence that says
    what is wrong with it; `use` ends the sentence for an empty file ("there is nothing to <use>")."""
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{file} does not exist.") from None
    except IsADirectoryError:
        raise error(f"{file} is a folder; name the text files in it.") from None
    except UnicodeDecodeError:
        raise error(f"{file} is not UTF-8 text.") from None
    except OSError as exc:
        raise error(f"{file} cannot be read ({exc.strerror or exc}).") from None
    if not text.strip():
        raise error(f"{file} is empty: there is nothing to {use}.")
    return text


def chat_documents(store=None) -> list[dict]:
    """Every conversation with some text in it, oldest first, as messages (system prompt first where set)."""
    from app.core.chats.store import ChatStore

    own = store is None
    store = store or ChatStore(recover=False)
    try:
        docs = []
        for conv in reversed(store.list()):
            messages = [{"role": "system", "content": conv.system_prompt}] if conv.system_prompt.strip() else []
            messages += [{"role": m.role, "content": m.content} for m in store.messages(conv.id)
                         if m.role in ("system", "user", "assistant") and m.content.strip()]
            if any(m["role"] != "system" for m in messages):
                docs.append({"name": conv.title, "messages": messages})
        path = store.path
    finally:
        if own:
            store.close()
    if not docs:
        raise CalibrationTextError(f"The chat history ({path}) has no messages yet: chat first, or calibrate on "
                                   "files with --text FILE.")
    return docs


def dataset_name(docs: list[dict], chats: bool) -> list[str]:
    """What the matrix file records as its datasets (llama-imatrix records its text file's path)."""
    if chats:
        return [f"Hearth chat history ({len(docs)} conversations)"]
    return [d["name"] for d in docs]
