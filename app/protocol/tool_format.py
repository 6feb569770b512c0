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
    """The system-prompt text that tells a model which functions it may call and how."""
    listed = "\n".join(json.dumps(tool.get("function", tool), ensure_ascii=False) for tool in tools)
    return ("You may call one or more functions to help with the user's request. The functions are described "
            f"in JSON Schema inside <tools></tools>:\n<tools>\n{listed}\n</tools>\n"
            f"To call a function, answer with {CALL_OPEN}{{\"name\": <function-name>, \"arguments\": "
            f"<arguments-object>}}{CALL_CLOSE}. The result comes back in {RESPONSE_OPEN}{RESPONSE_CLOSE}.")


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
