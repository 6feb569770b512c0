"""Text at the edge: a request body becomes JSON here, once, and every string in it is checked before any
endpoint reads it.

A lone surrogate ("\\ud800") is valid JSON, and json.loads makes a Python str of it, but it is no text: it
cannot be encoded as UTF-8, so it failed wherever the text was next encoded (the engine's pipe, a crash
log), as a 500 that left the request's engine slot taken (issue 48). Every endpoint parses its body through
parse_body, which refuses it with a 400 naming the field; so are bodies that are not UTF-8, not JSON,
nested too deeply, or that use JavaScript's NaN and Infinity, which JSON does not have. The body's size is
bounded before this (app/server/edge/guard.py): a 413 is never parsed.
"""

from __future__ import annotations

import json
import re
from typing import Any

from app.server.edge.errors import invalid

# A surrogate reaches a str only through a \\u escape (UTF-8 bytes cannot spell one, and the bytes are decoded
# strictly): a body without such an escape needs no walk, which keeps a 10 MB body's check to one scan.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def parse_body(raw: bytes) -> Any:
    """The body's JSON value; an ApiError (400) for one that is not UTF-8, not JSON, or holds a string that is
    not text."""
    try:
        body = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        raise invalid(f"The request body is not valid UTF-8 (at byte {exc.start}).") from None
    except RecursionError:
        raise invalid("The request body is nested too deeply.") from None
    except ValueError as exc:
        raise invalid(f"The request body is not valid JSON: {exc}.") from None
    if _SURROGATE_ESCAPE.search(raw):
        where = lone_surrogate(body)
        if where is not None:
            what = f"'{where}'" if where else "The request body"
            raise invalid(f"{what} holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape without its pair), which "
                          "is not text; send valid Unicode.", where or None, code="invalid_text")
    return body


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON value")


def lone_surrogate(value: Any) -> str | None:
    """The path of the first string (a value or a key) that cannot be encoded as UTF-8, or None when all can.
    Iterative: the parser bounds the depth, but the walk should not depend on it."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if not _encodes(item):
                return path
        elif isinstance(item, dict):
            for key, child in item.items():
                where = f"{path}.{key}" if path else str(key)
                if not _encodes(key):
                    return where.encode("utf-8", "backslashreplace").decode("ascii")
                stack.append((where, child))
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", child) for i, child in reversed(list(enumerate(item))))
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False
