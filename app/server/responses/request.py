"""A Responses API request (`POST /v1/responses`) checked field by field and turned into the chat request the
engine path already serves (app/server/openai/chat_request.py: the same sampling bounds, schema grammars and tool
grammars as /v1/chat/completions).

Every field that would change the answer is either honoured or refused with a 400 that names it: hosted tools
Hearth does not have (web search, file search, code interpreter, computer use, ...), image and file inputs,
background mode, stored prompts, log probabilities, a reasoning effort the model cannot follow. Unknown fields
are refused too, as OpenAI's API refuses them.

The input items of this turn get ids here (msg_, fc_, fco_), so that a stored response lists them and a later
turn that continues it (previous_response_id) reads back the same conversation.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Annotated, Any, Callable, Literal

from app.protocol.messages import SamplingOptions
from app.protocol.option_spec import Range
from app.server.edge.errors import ApiError, invalid
from app.server.edge.request_shape import Taken, known, read, said
from app.server.media_parts import responses_part
from app.server.openai.chat_request import MAX_TOKENS_CAP, Generation, Sampled, chat_request

# What the Responses API calls a field, for the chat request's errors that name it.
_CHAT_NAMES = {"messages": "input", "max_tokens": "max_output_tokens", "response_format.json_schema.schema":
               "text.format.schema", "response_format.json_schema": "text.format",
               "response_format": "text.format", "tool_choice": "tool_choice"}

HOSTED_TOOLS = ("web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11",
                "file_search", "code_interpreter", "computer_use_preview", "computer", "computer_use",
                "image_generation", "local_shell", "shell", "apply_patch", "custom", "tool_search")
INPUT_ROLES = ("user", "system", "developer", "assistant")
MAX_METADATA = 16  # OpenAI's bound: 16 pairs, keys of 64 characters, values of 512
TRUNCATIONS = ("disabled", "auto")

@dataclass(kw_only=True)
class ResponsesBody(Sampled):
    """The fields of a Responses request: OpenAI's, and the sampling fields chat completions reads (Sampled), which
    go to the chat request as they are (PASSED)."""

    input: Any = said(must="a text or a list of input items", required=True)
    instructions: str | None = None
    max_output_tokens: Annotated[int, Range(1, MAX_TOKENS_CAP)] | None = None
    store: bool = True
    previous_response_id: str | None = said(must="the id of a stored response")
    tools: Any = None
    tool_choice: Any = None
    parallel_tool_calls: Any = None
    text: Any = None
    reasoning: Any = None  # checked against the model once it is known (reasoning_for)
    truncation: Literal[TRUNCATIONS] | None = None
    max_tool_calls: Any = None  # max_tool_calls(), shared with chat completions' MCP tools
    # What this server cannot do, refused unless neutral (_refuse_unsupported)
    include: Any = None
    top_logprobs: Any = None
    background: Any = None
    conversation: Any = None
    prompt: Any = None


# The fields that go to the chat request as they are: the sampling fields both read (their names the same there).
PASSED = tuple(sorted(known(Sampled) - known(Taken))) + ("parallel_tool_calls",)


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


@dataclass
class ResponsesRequest:
    """One /v1/responses request: what the engine runs, and what the response object echoes back."""

    gen: Generation
    input_items: list[dict]  # this turn's items, with ids (what GET .../input_items lists)
    previous_response_id: str | None
    store: bool
    echo: dict  # instructions, tools, tool_choice, text, reasoning, ... as the response object repeats them
    truncate: bool = False
    # The functions given inside a namespace tool, by name: its calls say their namespace (output items).
    namespaces: dict[str, str] = field(default_factory=dict)


# The fields OpenAI's API defines for each input item and each content part: all that a stored item keeps, so that
# a client's own keys (of any size) are neither stored nor sent back.
ITEM_FIELDS = {
    "message": ("type", "id", "role", "content", "status"),
    "function_call": ("type", "id", "call_id", "namespace", "name", "arguments", "status"),
    "function_call_output": ("type", "id", "call_id", "output", "status"),
    "reasoning": ("type", "id", "summary", "content", "encrypted_content", "status"),
    "mcp_call": ("type", "id", "server_label", "name", "arguments", "output", "error", "status",
                 "approval_request_id"),
    "mcp_list_tools": ("type", "id", "server_label", "tools", "error"),
}
PART_FIELDS = {"input_text": ("type", "text"), "output_text": ("type", "text", "annotations", "logprobs"),
               # kept whole, data URL and all: the store bounds a response's bytes as it bounds text (response_store.py)
               "input_image": ("type", "image_url", "file_id", "detail"), "input_audio": ("type", "input_audio"),
               "text": ("type", "text"), "refusal": ("type", "refusal"), "summary_text": ("type", "text"),
               "reasoning_text": ("type", "text")}
_PARTS = ("content", "summary", "output")  # the fields that may hold a list of parts
ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs",
             "mcp_call": "mcp", "mcp_list_tools": "mcpl"}


def _defined(item: dict) -> dict:
    """An item with only the fields its type defines (an unknown type is left whole: chat_messages refuses it)."""
    fields = ITEM_FIELDS.get(item.get("type"))
    if fields is None:
        return item
    kept = {name: item[name] for name in fields if name in item}
    for name in _PARTS:
        parts = kept.get(name)
        if isinstance(parts, list):
            kept[name] = [{k: part[k] for k in PART_FIELDS.get(part.get("type"), ("type", "text")) if k in part}
                          if isinstance(part, dict) else part for part in parts]
    return kept


def _ids(items: list[dict]) -> list[dict]:
    """The input items as stored: the fields the API defines, each with an id of its kind. A client's own id must be
    a string, unique in the request (as OpenAI's API refuses a duplicate): pages of the stored items start after
    one (GET .../input_items)."""
    out, seen = [], set()
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        given = item.get("id")
        if given is not None and not isinstance(given, str):
            raise invalid(f"input[{i}].id must be a string.", f"input[{i}].id")
        if given and given in seen:
            raise invalid(f"Duplicate item found with id '{given}' (input[{i}].id): remove duplicate items from "
                          "your input and try again.", f"input[{i}].id", code="duplicate_item")
        item = _defined({**item, "type": kind, "id": given or new_id(ID_PREFIX.get(kind, "item"))})
        seen.add(item["id"])
        out.append(item)
    return out


def _input_items(value: Any) -> list[dict]:
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}]
    if not isinstance(value, list) or not value:
        raise invalid("'input' must be a text or a non-empty list of input items.", "input")
    items = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise invalid(f"input[{i}] must be an object (a message, a function_call or a function_call_output).",
                          f"input[{i}]")
        items.append(dict(item))
    return items


def _text_of(content: Any, where: str, role: str | None = None) -> str | list[dict]:
    """A message's text: a string, or its text parts (input_text, output_text). With role (a message's content)
    images and sounds too (input_image, input_audio: app/server/media_parts.py), and then the seam's list of
    parts in the order sent; other parts are refused."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(f"{where} must be a text or a list of content parts.", where)
    parts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            if not isinstance(part.get("text"), str):
                raise invalid(f"{where}[{j}] needs a 'text' string.", f"{where}[{j}].text")
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal") or "")})
        elif role is not None and (medium := responses_part(part, f"{where}[{j}]", role)) is not None:
            parts.append(medium)
        else:
            readable = "text, input_image (as a data URL) and input_audio parts" if role else "text"
            raise invalid(f"{where}[{j}]: this server reads {readable} here; a '{kind}' part cannot be read.",
                          f"{where}[{j}].type", code="unsupported_content")
    if any(part["type"] != "text" for part in parts):
        return parts
    return "".join(part["text"] for part in parts)


def chat_messages(items: list[dict], stored: int = 0) -> list[dict]:
    """Input and output items as the chat messages the engine's template takes. Consecutive function calls are one
    assistant turn; a reasoning item is left out, as chat templates leave earlier thinking out. stored: how many of
    the items come from the conversation previous_response_id continues (named by it: 'input[0]' is this request's
    first item)."""
    messages: list[dict] = []
    for i, item in enumerate(items):
        where = f"input[{i - stored}]" if i >= stored else "previous_response_id"
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in INPUT_ROLES:
                raise invalid(f"{where}.role must be one of {', '.join(INPUT_ROLES)}; got {role!r}.", f"{where}.role")
            messages.append({"role": role, "content": _text_of(item.get("content"), f"{where}.content", role)})
        elif kind in ("function_call", "mcp_call"):
            name, arguments = item.get("name"), item.get("arguments", "{}")
            call_id = item.get("call_id") if kind == "function_call" else item.get("id")
            if not isinstance(name, str) or not isinstance(arguments, str) or not isinstance(call_id, str):
                raise invalid(f"{where} must have 'call_id', 'name' and 'arguments' (JSON text).", where)
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments or "{}"}}
            last = messages[-1] if messages else None
            if last and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
            if kind == "mcp_call":  # its output travels inside it
                error = item.get("error")
                if isinstance(error, dict):  # OpenAI's shape: {"type", "content": [{"type": "text", "text"}]}
                    error = " ".join(str(c.get("text", "")) for c in error.get("content") or [] if isinstance(c, dict))
                output = item.get("output") if error is None else f"Error: {error}"
                messages.append({"role": "tool", "tool_call_id": call_id, "content": str(output or "")})
        elif kind == "function_call_output":
            call_id, output = item.get("call_id"), item.get("output")
            if not isinstance(call_id, str):
                raise invalid(f"{where}.call_id must be the call_id of the function_call it answers.",
                              f"{where}.call_id")
            text = output if isinstance(output, str) else _text_of(output, f"{where}.output")
            messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
        elif kind in ("reasoning", "mcp_list_tools"):
            continue
        else:
            raise invalid(f"{where}: an input item of type '{kind}' is not supported here; send messages, "
                          "function_call and function_call_output items.", f"{where}.type",
                          code="unsupported_input_item")
    return messages


def mcp_entry(tool: dict, where: str, labels: dict[str, list[str] | None]) -> None:
    """A {"type": "mcp", "server_label": NAME} tool, checked, into labels ({label: the tools it narrows to}); the
    same entry in /v1/responses and, where the user offers them there, /v1/chat/completions."""
    label = tool.get("server_label")
    if not isinstance(label, str) or not label:
        raise invalid(f"{where}.server_label must name one of this server's MCP servers.", f"{where}.server_label")
    if tool.get("server_url") or tool.get("connector_id"):
        raise invalid(f"{where}: this server runs only the MCP servers its user configured and offered "
                      "to the API (hearth serve --tools NAME); it does not connect to a server_url.",
                      f"{where}.server_url", code="unsupported_tool")
    if label in labels:
        raise invalid(f"{where}: the MCP server '{label}' is named twice.", f"{where}.server_label")
    only = tool.get("allowed_tools")
    if isinstance(only, dict):
        only = only.get("tool_names")
    if only is not None and (not isinstance(only, list) or not all(isinstance(n, str) for n in only)):
        raise invalid(f"{where}.allowed_tools must be a list of tool names.", f"{where}.allowed_tools")
    if tool.get("require_approval", "never") != "never":
        raise invalid(f"{where}: calls to this server's tools run under the rules its user set (the tools "
                      "they allowed for good), never by a client's approval; send require_approval "
                      "'never'.", f"{where}.require_approval", code="unsupported_parameter")
    labels[label] = only


def _function(tool: dict) -> tuple[dict, dict]:
    """A function tool as the chat request takes it, and as the response object echoes it."""
    function = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
    if "parameters" in function and function["parameters"] is None:
        del function["parameters"]
    return ({"type": "function", "function": function},
            {"type": "function", "name": tool.get("name"), "description": tool.get("description"),
             "parameters": tool.get("parameters"), "strict": tool.get("strict", True)})


def _namespace(tool: dict, where: str, namespaces: dict[str, str]) -> list[dict]:
    """A {"type": "namespace", "name", "tools": [function tools]} tool (the Codex CLI groups its sub-agent tools
    in one): its functions offered by their own names, each call then saying its namespace."""
    name, inner = tool.get("name"), tool.get("tools")
    if not isinstance(name, str) or not name or not isinstance(inner, list):
        raise invalid(f"{where} must have a 'name' and a list of 'tools'.", where)
    chat = []
    for j, member in enumerate(inner):
        if not isinstance(member, dict) or member.get("type") != "function":
            raise invalid(f"{where}.tools[{j}].type must be 'function' here.", f"{where}.tools[{j}].type",
                          code="unsupported_tool")
        if member.get("name") in namespaces:
            raise invalid(f"{where}.tools[{j}]: the function '{member.get('name')}' is in two namespaces; this "
                          "server tells calls apart by their names.", f"{where}.tools[{j}].name")
        namespaces[member.get("name")] = name
        chat.append(_function(member)[0])
    return chat


def _tools(body: dict) -> tuple[list[dict], list[dict], dict[str, list[str] | None], dict[str, str]]:
    """(chat tools for the function tools, the tools as the response echoes them, the MCP servers asked for with
    the tools each is narrowed to)."""
    tools = body.get("tools")
    if tools is None:
        return [], [], {}, {}
    if not isinstance(tools, list):
        raise invalid("'tools' must be a list of tools.", "tools")
    chat, echo, labels, namespaces = [], [], {}, {}
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        where = f"tools[{i}]"
        if kind == "function":
            offered, echoed = _function(tool)
            chat.append(offered)
            echo.append(echoed)
        elif kind == "namespace":
            chat += _namespace(tool, where, namespaces)
            echo.append(dict(tool))
        elif kind == "mcp":
            mcp_entry(tool, where, labels)
            echo.append(dict(tool))
        elif kind in HOSTED_TOOLS:  # it would change what the model may do: refused (docs/api.md's field policy)
            raise invalid(f"{where}: the hosted tool '{kind}' is OpenAI's; this server does not have it. Send "
                          "function tools, or an MCP server this server offers (the Codex CLI: web_search = "
                          "\"disabled\" in its config.toml).", f"{where}.type",
                          code="unsupported_tool")
        else:
            raise invalid(f"{where}.type must be 'function', 'namespace' or 'mcp'; got {kind!r}.", f"{where}.type",
                          code="unsupported_tool")
    return chat, echo, labels, namespaces


def _tool_choice(body: dict) -> Any:
    choice = body.get("tool_choice")
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise invalid("'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", \"name\": ...}.",
                  "tool_choice")


def _object(body: dict, name: str, example: str) -> dict | None:
    """An optional field that must be an object; None when it is left out."""
    value = body.get(name)
    if value is not None and not isinstance(value, dict):
        raise invalid(f"'{name}' must be an object such as {example}.", name)
    return value


def _text_format(body: dict) -> dict | None:
    """text.format as chat's response_format."""
    text = _object(body, "text", '{"format": {"type": "json_schema", ...}}')
    if text is None:
        return None
    verbosity = text.get("verbosity")
    if verbosity not in (None, "medium"):
        raise invalid("'text.verbosity' cannot be followed by this server's models; leave it out.",
                      "text.verbosity")
    fmt = text.get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        spec = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": spec}
    raise invalid("'text.format.type' must be 'text', 'json_object' or 'json_schema'.", "text.format.type")


def reasoning_for(body: dict, thinks: bool | None) -> dict | None:
    """The request's `reasoning`, checked against the model (thinks None: its shape only, before a model is
    chosen); as the response object echoes it."""
    reasoning = _object(body, "reasoning", '{"effort": "medium"}')
    if reasoning is None:
        return None
    effort = reasoning.get("effort")
    if effort is not None and effort not in ("none", "minimal", "low", "medium", "high", "xhigh"):
        raise invalid(f"'reasoning.effort' {effort!r} is not an effort.", "reasoning.effort")
    if thinks and effort not in (None, "medium"):
        raise invalid(f"This model reasons at one effort of its own; 'reasoning.effort' {effort!r} cannot be "
                      "followed. Leave it out or send 'medium'.", "reasoning.effort", code="unsupported_effort")
    if thinks is False and effort not in (None, "none"):  # None: no model chosen yet, so not known either way
        raise invalid(f"This model does not reason before it answers, so 'reasoning.effort' {effort!r} cannot be "
                      "followed. Leave it out, or load a reasoning model.", "reasoning.effort",
                      code="unsupported_effort")
    if reasoning.get("summary") not in (None, "auto", "concise", "detailed"):
        raise invalid("'reasoning.summary' must be 'auto', 'concise' or 'detailed'.", "reasoning.summary")
    return {"effort": effort, "summary": None}


def _refuse_unsupported(body: dict) -> None:
    if body.get("background"):
        raise invalid("Background responses are not supported here: send the request without 'background' (and "
                      "stream it to see it as it comes).", "background", code="unsupported_parameter")
    for name in ("conversation", "prompt"):
        if body.get(name) is not None:
            what = "Conversations objects" if name == "conversation" else "Stored prompt templates"
            raise invalid(f"{what} are not supported here; use previous_response_id, or send the text as input.",
                          name, code="unsupported_parameter")
    if body.get("top_logprobs") not in (None, 0):
        raise invalid("This server does not return log probabilities: send the request without 'top_logprobs'.",
                      "top_logprobs", code="logprobs_not_supported")
    include = body.get("include")
    # Encrypted reasoning asks for nothing this server hides: a reasoning item carries its text in full. The Codex
    # CLI sends it with every request (store false), so refusing it failed its first request.
    if include is not None and (not isinstance(include, list)
                                or any(item != "reasoning.encrypted_content" for item in include)):
        raise invalid("'include' asks for data this server does not return (log probabilities, search results, "
                      "tool outputs); leave it out.", "include", code="unsupported_parameter")
    if body.get("service_tier") not in (None, "auto", "default"):
        raise invalid("'service_tier' must be 'auto' or 'default' here.", "service_tier")
    metadata = body.get("metadata")
    if metadata is not None and (not isinstance(metadata, dict) or len(metadata) > MAX_METADATA or not all(
            isinstance(k, str) and len(k) <= 64 and isinstance(v, str) and len(v) <= 512
            for k, v in metadata.items())):
        raise invalid(f"'metadata' must map at most {MAX_METADATA} keys (64 characters) to strings of at most 512.",
                      "metadata")
    max_tool_calls(body)


def max_tool_calls(body: dict) -> int | None:
    """The request's bound on the MCP calls the server runs for one answer, checked (None: the server's)."""
    limit = body.get("max_tool_calls")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise invalid("'max_tool_calls' must be a positive integer.", "max_tool_calls")
    return limit


def responses_request(body: Any, defaults: SamplingOptions, history: list[dict],
                      mcp_functions: Callable[[dict[str, list[str] | None]], list[dict]]) -> ResponsesRequest:
    """body: the request; history: the stored conversation it continues (previous_response_id), oldest first;
    mcp_functions: the tools of the MCP servers it names ({label: the tools it narrows them to}), as function
    tools beside its own (app/server/api_tools.py); it refuses a server that is not offered.
    The reasoning effort is checked against the model once it is known (reasoning_for)."""
    shape = read(ResponsesBody, body)
    _refuse_unsupported(body)
    items = _ids(_input_items(shape.input))
    instructions, store = shape.instructions, shape.store
    chat_tools, echo_tools, labels, namespaces = _tools(body)
    if labels:
        chat_tools += mcp_functions(labels)
    messages = chat_messages(history + items, stored=len(history))
    if instructions:  # only this request's: instructions are not carried over from the previous response
        messages.insert(0, {"role": "system", "content": instructions})
    chat: dict[str, Any] = {"messages": messages}
    chat.update((name, body[name]) for name in PASSED if name in body)
    if shape.max_output_tokens is not None:
        chat["max_tokens"] = shape.max_output_tokens
    if chat_tools:
        chat["tools"] = chat_tools
    choice = _tool_choice(body)
    if choice is not None and (chat_tools or choice in ("none", "auto")):
        chat["tool_choice"] = choice
    elif choice is not None and not labels:
        raise invalid("'tool_choice' needs 'tools' to choose from.", "tool_choice")
    response_format = _text_format(body)
    if response_format is not None:
        chat["response_format"] = response_format
    reasoning = reasoning_for(body, None)
    try:
        gen = chat_request(chat, defaults)
    except ApiError as exc:
        raise _renamed(exc) from None
    text = body.get("text") if isinstance(body.get("text"), dict) else {}
    echo = {"instructions": instructions, "max_output_tokens": body.get("max_output_tokens"),
            "temperature": gen.sampling.temperature, "top_p": gen.sampling.top_p,
            "tools": echo_tools, "tool_choice": body.get("tool_choice") or "auto",
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "text": {"format": text.get("format") or {"type": "text"}, "verbosity": "medium"},
            "reasoning": reasoning or {"effort": None, "summary": None},
            "truncation": body.get("truncation") or "disabled", "metadata": body.get("metadata") or {},
            "store": store, "max_tool_calls": body.get("max_tool_calls"), "user": body.get("user")}
    return ResponsesRequest(gen=gen, input_items=items, previous_response_id=shape.previous_response_id, store=store,
                            echo=echo, truncate=shape.truncation == "auto", namespaces=namespaces)


def _renamed(exc: ApiError) -> ApiError:
    """A chat request's error in the Responses API's names ('messages[2]' is 'input[2]' here, and so on)."""
    message, param = exc.message, exc.param
    for chat_name, name in _CHAT_NAMES.items():
        message = message.replace(f"'{chat_name}", f"'{name}").replace(f"{chat_name}[", f"{name}[")
        if param and (param == chat_name or param.startswith(chat_name + ".") or param.startswith(chat_name + "[")):
            param = name + param[len(chat_name):]
    return ApiError(exc.status, message, exc.type, param=param, code=exc.code, headers=exc.headers)
