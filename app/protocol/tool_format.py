"""How a tool call looks in a prompt and in an answer, for models whose chat template knows no tools.

One format for both directions, so that the calls a model made earlier in a conversation read exactly like
the ones it is asked to make: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, the results going
back as `<tool_response>...</tool_response>` in a user turn. It is the Hermes format that Qwen's and
several other templates use natively, so models trained on it follow it without being forced.
app/protocol/tool_calls.py (for the API server, the CLI and the window alike) constrains answers to it with a
grammar and reads the calls back out.
"""

from __future__ import annotations

import json

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
RESPONSE_OPEN = "<tool_response>"
RESPONSE_CLOSE = "</tool_response>"


def call_text(name: str, arguments) -> str:
    """One call as the model writes it (arguments: an object, or the JSON text of one)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass  # a client's own text: shown as it was sent
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{CALL_OPEN}\n{body}\n{CALL_CLOSE}"


def tools_instruction(tools: list[dict]) -> str:
    """The system-prompt text that tells a model which functions it may call and how: each function as a compact
    signature with its description (#54.5: the whole JSON Schema of each tool tripled opencode's prompt, 7,617
    tokens where the same request without its 10 tools took 2,230). The grammar (app/protocol/tool_calls.py) still
    holds a call to the full schema; the model reads only what it needs to choose and fill one."""
    listed = "\n".join(signature(tool.get("function", tool)) for tool in tools)
    return ("You may call one or more functions to help with the user's request. The functions, as "
            f"name(parameter: type, optional?: type):\n<tools>\n{listed}\n</tools>\n"
            f"To call a function, answer with {CALL_OPEN}{{\"name\": <function-name>, \"arguments\": "
            f"<arguments-object>}}{CALL_CLOSE}. The result comes back in {RESPONSE_OPEN}{RESPONSE_CLOSE}.")


def signature(function: dict) -> str:
    """One function as a line a model reads: `name(a: string, b?: integer) - what it does`, each parameter's own
    description after it as `# a: ...`. A parameter whose schema has no short form is given as compact JSON."""
    schema = function.get("parameters") if isinstance(function.get("parameters"), dict) else {}
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = set(schema.get("required") or []) if isinstance(schema.get("required"), list) else set()
    params = ", ".join(f"{name}{'' if name in required else '?'}: {type_text(spec)}"
                       for name, spec in properties.items())
    description = " ".join(str(function.get("description") or "").split())
    lines = [f"{function.get('name', '')}({params})" + (f" - {description}" if description else "")]
    for name, spec in properties.items():
        said = " ".join(str(spec.get("description") or "").split()) if isinstance(spec, dict) else ""
        if said:
            lines.append(f"  # {name}: {said}")
    return "\n".join(lines)


def type_text(spec) -> str:
    """A JSON Schema as a short type: string, integer, "a"|"b", string[], {x: number}; else compact JSON."""
    if not isinstance(spec, dict):
        return "any"
    if isinstance(spec.get("enum"), list) and spec["enum"]:
        return "|".join(json.dumps(v, ensure_ascii=False) for v in spec["enum"])
    kind = spec.get("type")
    if isinstance(kind, list):
        return "|".join(str(k) for k in kind)
    if kind == "array":
        inner = type_text(spec.get("items"))
        return f"{inner}[]" if "|" not in inner else f"({inner})[]"
    if kind == "object" and isinstance(spec.get("properties"), dict):
        required = set(spec.get("required") or [])
        fields = ", ".join(f"{k}{'' if k in required else '?'}: {type_text(v)}" for k, v in spec["properties"].items())
        return f"{{{fields}}}"
    if isinstance(kind, str):
        return kind
    short = {k: v for k, v in spec.items() if k not in ("description", "title")}
    return json.dumps(short, ensure_ascii=False, separators=(",", ":")) if short else "any"


def as_plain_messages(messages: list[dict], tools: list[dict] | None) -> list[dict]:
    """A conversation with tools as plain system/user/assistant text messages, for a template without tools."""
    out: list[dict] = []
    if tools:
        if messages and messages[0].get("role") == "system":
            out.append({"role": "system", "content": f"{messages[0].get('content') or ''}\n\n"
                                                     f"{tools_instruction(tools)}".lstrip()})
            messages = messages[1:]
        else:
            out.append({"role": "system", "content": tools_instruction(tools)})
    for message in messages:
        role, content = message.get("role"), message.get("content") or ""
        if role == "tool":
            response = f"{RESPONSE_OPEN}\n{content}\n{RESPONSE_CLOSE}"
            if out and out[-1].get("tool_results"):  # results of one turn's calls go back together
                out[-1]["content"] += "\n" + response
            else:
                out.append({"role": "user", "content": response, "tool_results": True})
        elif role == "assistant" and message.get("tool_calls"):
            calls = [call_text(c["function"]["name"], c["function"].get("arguments")) for c in message["tool_calls"]]
            out.append({"role": "assistant", "content": "\n".join(filter(None, [content, *calls]))})
        else:
            out.append({"role": role, "content": content})
    for message in out:
        message.pop("tool_results", None)
    return out
