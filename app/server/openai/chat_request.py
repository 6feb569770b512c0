"""OpenAI request bodies, declared field by field (ChatBody, CompletionBody, EmbeddingBody), read into the engine's
options.

Each endpoint's fields are declared once, below, with their types and ranges (the engine's own, where a field is one
of its sampling options), and read against that declaration (app/server/edge/request_shape.py), so that a wrong value
is a 400 that names the field (never a 500, never a silently ignored value). A field that asks for something this
server cannot do (best_of, suffix, audio output, web search, the old functions API) is a 400 that says so, unless it
has its neutral value (best_of 1, an empty suffix, text-only modalities). Fields that change nothing in the answer
(store, metadata, user, service_tier, ...) are accepted and ignored, as other local servers do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from app.protocol.messages import SamplingOptions
from app.protocol.option_fields import accepted
from app.protocol.option_spec import Range
from app.server.edge.errors import invalid
from app.server.edge.request_shape import Taken, read, said
from app.server.media_parts import openai_part
from app.server.options import given_with
from app.server.structured import format_grammar
from app.server.tools import ToolUse, tool_grammar, tool_use

MAX_TOKENS_CAP = 1 << 20
MAX_LOGIT_BIAS = 1024
MAX_STOPS = 16
ROLES = ("system", "developer", "user", "assistant", "tool")
REASONING_FORMATS = ("auto", "deepseek", "none")  # llama-server's names; "deepseek" is its name for the split
STOPS = f"a string or a list of at most {MAX_STOPS} strings"
INT64 = Range(-(1 << 63), (1 << 63) - 1)  # a seed: the API's int64, taken modulo 2^31


# The ranges of the engine's sampling options, as SamplingOptions declares them (OpenAI's own bounds are the same:
# temperature 0-2, penalties -2-2); max_tokens and seed keep the API's own (below the engine's).
@dataclass(kw_only=True)
class Sampled(Taken):
    """What /v1/chat/completions, /v1/completions and /v1/responses read alike: OpenAI's sampling fields, and
    llama-server's, which its clients send to every local server."""

    model: str | None = None
    stream: bool = False
    temperature: Annotated[float, Range(*accepted("temperature"))] | None = None
    top_p: Annotated[float, Range(*accepted("top_p"))] | None = None
    top_k: Annotated[int, Range(*accepted("top_k"))] | None = None
    min_p: Annotated[float, Range(*accepted("min_p"))] | None = None
    seed: Annotated[int, INT64] | None = None
    frequency_penalty: Annotated[float, Range(*accepted("frequency_penalty"))] | None = None
    presence_penalty: Annotated[float, Range(*accepted("presence_penalty"))] | None = None
    repeat_penalty: Annotated[float, Range(*accepted("repeat_penalty"))] | None = None  # llama.cpp's own
    stop: str | list[str] | None = said(must=STOPS)
    # llama-server's and vLLM's extension: answers of a fixed length, for benchmarks (hearth bench serve).
    ignore_eos: bool = False
    grammar: Any = None  # GBNF text: app/server/structured.py
    # llama-server's: "none" keeps a reasoning model's <think>…</think> in `content`; "auto" (or "deepseek")
    # returns it as `reasoning_content`.
    reasoning_format: Literal[REASONING_FORMATS] | None = None


@dataclass(kw_only=True)
class OpenAIGeneration(Sampled):
    """What chat completions and completions read alike."""

    max_tokens: Annotated[int, Range(1, MAX_TOKENS_CAP)] | None = None
    n: Annotated[int, Range(1, 128)] | None = None
    logit_bias: Any = None
    logprobs: Any = None
    response_format: Any = None
    stream_options: dict | None = None
    # llama-server's fields that change nothing here, taken as its clients send them
    repeat_last_n: Any = None
    cache_prompt: Any = None
    n_predict: Any = None
    typical_p: Any = None
    id_slot: Any = None
    chat_template_kwargs: Any = None
    json_schema: Any = None


@dataclass(kw_only=True)
class ChatBody(OpenAIGeneration):
    messages: Any = said(must="a non-empty list of messages", required=True)
    max_completion_tokens: Annotated[int, Range(1, MAX_TOKENS_CAP)] | None = None
    top_logprobs: Any = None
    tools: Any = None  # these three: app/server/tools.py
    tool_choice: Any = None
    parallel_tool_calls: Any = None
    prediction: Any = None
    # What this server cannot do (_cannot_do), refused unless neutral
    functions: Any = None
    function_call: Any = None
    modalities: Any = None
    audio: Any = None
    web_search_options: Any = None
    # Hints for OpenAI's reasoning models, which a local model has no setting for
    reasoning_effort: Any = None
    verbosity: Any = None


@dataclass(kw_only=True)
class CompletionBody(OpenAIGeneration):
    prompt: Any = said(must="a string, or a list of one string", required=True)
    echo: bool = False
    best_of: Any = None
    suffix: Any = None


@dataclass(kw_only=True)
class EmbeddingBody(Taken):
    model: str | None = None
    input: Any = said(required=True, must="a text, a list of token ids, or a list of those")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Any = None


@dataclass
class Generation:
    """One chat or completion request, as the engine takes it."""

    model: str | None
    sampling: SamplingOptions
    stream: bool = False
    include_usage: bool = False
    messages: list[dict] = field(default_factory=list)  # chat
    tools: ToolUse | None = None  # chat: the tools the model may call
    prompt: str | None = None  # completions
    echo: bool = False
    reasoning_format: str | None = None  # chat: "none" keeps <think>… inline, "auto" splits it; None: the server's


def _text_content(content: Any, where: str) -> str:
    """A message's content: a string, or OpenAI's list of parts of which the text parts count."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in ("text", "input_text"):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise invalid(f"{where}: this model takes text only; a '{kind}' part cannot be read.", where)
            if not isinstance(part.get("text"), str):
                raise invalid(f"{where}: a text part needs a 'text' string.", where)
            texts.append(part["text"])
        return "".join(texts)
    raise invalid(f"{where} must be a string or a list of text parts.", where)


def _content(content: Any, where: str, role: Any) -> str | list[dict]:
    """A message's content: a string, or OpenAI's list of parts. Text parts alone are joined into one string, as
    before; with an image_url or input_audio part (app/server/media_parts.py) it is the seam's list of parts, in
    the order sent (app/protocol/media.py)."""
    if not isinstance(content, list):
        return _text_content(content, where)
    parts, media = [], False
    for j, part in enumerate(content):
        medium = openai_part(part, f"{where}[{j}]", role) if isinstance(part, dict) else None
        if medium is None:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            if kind not in ("text", "input_text"):
                raise invalid(f"{where}[{j}]: a '{str(kind)[:40]}' part cannot be read here; this server reads text, "
                              "image_url (as a data URL) and input_audio parts.", f"{where}[{j}]")
            medium = {"type": "text", "text": _text_content([part], where)}
        else:
            media = True
        parts.append(medium)
    return parts if media else "".join(p["text"] for p in parts)


def _messages(messages: Any) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise invalid("'messages' must be a non-empty list of messages.", "messages")
    out = []
    called: dict[str, str] = {}  # tool-call id -> function name, for the tool results that answer them
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise invalid(f"{where} must be an object with 'role' and 'content'.", where)
        role = m.get("role")
        if role not in ROLES:
            raise invalid(f"{where}.role must be one of {', '.join(ROLES)}; got {role!r}.", f"{where}.role")
        # 'developer' is OpenAI's newer name for the system role.
        message = {"role": "system" if role == "developer" else role,
                   "content": _content(m.get("content"), f"{where}.content", role)}
        if role == "assistant" and m.get("tool_calls") is not None:
            message["tool_calls"] = _tool_calls(m["tool_calls"], f"{where}.tool_calls")
            called.update((c["id"], c["function"]["name"]) for c in message["tool_calls"])
        if role == "tool":
            call_id = m.get("tool_call_id")
            if not isinstance(call_id, str):
                raise invalid(f"{where}.tool_call_id must be the id of the call this message answers.",
                              f"{where}.tool_call_id")
            message["tool_call_id"] = call_id
            if call_id in called:
                message["name"] = called[call_id]
        out.append(message)
    return out


def _tool_calls(calls: Any, where: str) -> list[dict]:
    """An assistant message's earlier tool calls, as OpenAI sends them back."""
    if not isinstance(calls, list):
        raise invalid(f"{where} must be a list of tool calls.", where)
    out = []
    for j, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) \
                or not isinstance(function.get("arguments", ""), str):
            raise invalid(f"{where}[{j}] must be {{\"id\", \"type\": \"function\", \"function\": "
                          "{\"name\", \"arguments\": JSON text}}.", f"{where}[{j}]")
        call_id = call.get("id") if isinstance(call.get("id"), str) else f"call_{j}"
        out.append({"id": call_id, "type": "function",
                    "function": {"name": function["name"], "arguments": function.get("arguments") or "{}"}})
    return out


def stop_list(stop: str | list[str] | None, name: str = "stop") -> list[str]:
    """A request's stop strings, of a type its shape checked: at most MAX_STOPS, the empty ones left out."""
    stops = [stop] if isinstance(stop, str) else stop or []
    if len(stops) > MAX_STOPS:
        raise invalid(f"'{name}' must be {STOPS}.", name)
    return [s for s in stops if s]


def _no_logprobs(body: OpenAIGeneration) -> None:
    """Log probabilities are refused, never silently left out: the engine does not report them."""
    given = body.logprobs
    if isinstance(body, ChatBody):
        top = body.top_logprobs
        if given not in (None, False) or top not in (None, 0):
            name = "logprobs" if given not in (None, False) else "top_logprobs"
            raise invalid("This server does not return log probabilities: send the request without 'logprobs' and "
                          "'top_logprobs'.", name, code="logprobs_not_supported")
    elif given is not None:
        raise invalid("This server does not return log probabilities: send the request without 'logprobs'.",
                      "logprobs", code="logprobs_not_supported")


def _cannot_do(body: OpenAIGeneration) -> None:
    """What would change the answer but cannot be done here: a 400 naming the field, never ignored."""
    if isinstance(body, ChatBody):
        for name, neutral in (("functions", (None, [])), ("function_call", (None, "none", "auto"))):
            if getattr(body, name) not in neutral:
                raise invalid(f"'{name}' (OpenAI's deprecated functions API) is not supported: send the functions "
                              "as 'tools' (and 'function_call' as 'tool_choice').", name)
        modalities = body.modalities
        if modalities is not None and (not isinstance(modalities, list) or set(modalities) - {"text"}):
            raise invalid("'modalities' may only be [\"text\"]: this server answers in text.", "modalities")
        for name, what in (("audio", "audio output"), ("web_search_options", "web search")):
            if getattr(body, name) is not None:
                raise invalid(f"'{name}' is not supported: this server has no {what}; send the request without "
                              "it.", name)
        return
    best_of = body.best_of
    if best_of is not None and (isinstance(best_of, bool) or best_of != 1):
        raise invalid("'best_of' other than 1 is not supported: ask again for another answer.", "best_of")
    suffix = body.suffix
    if suffix not in (None, ""):
        raise invalid("'suffix' is not supported: this server completes a prompt at its end only (no "
                      "fill-in-the-middle); send the request without it.", "suffix")


def _sampling(body: OpenAIGeneration, raw: dict, d: SamplingOptions) -> SamplingOptions:
    """raw: the request as sent, for the readers of its structured fields (response_format, grammar); d: what the
    request leaves out (the server's defaults, app/server/options.py)."""
    if body.n not in (None, 1):
        raise invalid("Only n=1 is supported: ask again for another answer.", "n")
    max_tokens = getattr(body, "max_completion_tokens", None) or body.max_tokens
    given = [name for name in ("temperature", "top_p", "top_k", "min_p", "repeat_penalty")
             if getattr(body, name) is not None]
    return SamplingOptions(
        max_tokens=max_tokens or d.max_tokens,
        # What a request leaves out takes the server's defaults: Hearth's, the same on every surface (CLI, window,
        # both APIs, remote), unless hearth serve's flags set others, as llama-server does with its own.
        temperature=d.temperature if body.temperature is None else float(body.temperature),
        top_p=d.top_p if body.top_p is None else float(body.top_p),
        top_k=d.top_k if body.top_k is None else body.top_k,
        min_p=d.min_p if body.min_p is None else float(body.min_p),
        repeat_penalty=d.repeat_penalty if body.repeat_penalty is None else float(body.repeat_penalty),
        frequency_penalty=float(body.frequency_penalty or 0.0),
        presence_penalty=float(body.presence_penalty or 0.0),
        seed=d.seed if body.seed is None else body.seed % (1 << 31),
        stop=stop_list(body.stop) or list(d.stop),
        repeat_last_n=d.repeat_last_n,
        logit_bias=_logit_bias(body.logit_bias),
        ignore_eos=body.ignore_eos,
        grammar=format_grammar(raw),
        prediction=_prediction(body.prediction) if isinstance(body, ChatBody) else "",
        # The settings neither this request nor the server's flags give take the model's recommendation where its
        # file has one.
        given=given_with(given, d),
    )


def _prediction(prediction: Any) -> str:
    """OpenAI's predicted outputs: {"type": "content", "content": text or text parts}; "" for none."""
    if prediction is None:
        return ""
    if not isinstance(prediction, dict) or prediction.get("type") != "content":
        raise invalid("'prediction' must be {\"type\": \"content\", \"content\": the text you expect}.",
                      "prediction")
    return _text_content(prediction.get("content"), "prediction.content")


def _logit_bias(bias: Any) -> dict[int, float]:
    if bias is None:
        return {}
    if not isinstance(bias, dict):
        raise invalid("'logit_bias' must map token ids to numbers between -100 and 100.", "logit_bias")
    if len(bias) > MAX_LOGIT_BIAS:
        raise invalid(f"'logit_bias' may bias at most {MAX_LOGIT_BIAS} tokens (as OpenAI's API); it has {len(bias)}.",
                      "logit_bias")
    out = {}
    for key, value in bias.items():
        try:
            token = int(key)
        except (TypeError, ValueError):
            raise invalid(f"'logit_bias' key {key!r} is not a token id.", "logit_bias") from None
        if not _is_token(token):  # no vocabulary is that big (the engine checks the model's own)
            raise invalid(f"'logit_bias' key {key} is not a token id (0 to {TOKEN_IDS - 1:,}).", "logit_bias")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not -100 <= value <= 100:
            raise invalid(f"'logit_bias' value for token {token} must be between -100 and 100.", "logit_bias")
        out[token] = float(value)
    return out


def _common(shape: type[OpenAIGeneration], raw: Any, defaults: SamplingOptions) -> tuple[Generation, Any]:
    body = read(shape, raw)
    _no_logprobs(body)
    _cannot_do(body)
    return Generation(model=body.model, sampling=_sampling(body, raw, defaults), stream=body.stream,
                      include_usage=bool((body.stream_options or {}).get("include_usage"))), body


def chat_request(raw: Any, defaults: SamplingOptions) -> Generation:
    request, body = _common(ChatBody, raw, defaults)
    request.messages = _messages(body.messages)
    request.reasoning_format = "auto" if body.reasoning_format == "deepseek" else body.reasoning_format
    use = tool_use(raw)
    if use is not None and use.active:
        if request.sampling.grammar:
            raise invalid("'tools' cannot be combined with 'response_format' or 'grammar' here; "
                          "describe the answer's format in a tool instead.", "response_format")
        request.tools = use
        request.sampling.grammar = tool_grammar(use)
    return request


def completion_request(raw: Any, defaults: SamplingOptions) -> Generation:
    request, body = _common(CompletionBody, raw, defaults)
    prompt = body.prompt
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, str) for p in prompt):
        raise invalid(f"'prompt' may hold one prompt per request here; it has {len(prompt)}: send one request "
                      "per prompt (they are answered in parallel up to the server's --parallel).", "prompt",
                      code="too_many_prompts")
    if not isinstance(prompt, str):
        raise invalid("'prompt' must be a string, or a list of one string (one prompt per request; token arrays "
                      "are not taken).", "prompt")
    request.prompt, request.echo = prompt, body.echo
    return request


MAX_EMBED_INPUTS = 2048  # OpenAI's own limit per request


@dataclass
class EmbeddingRequest:
    model: str | None
    inputs: list  # texts and token lists
    encoding_format: str = "float"


def embedding_request(raw: Any) -> EmbeddingRequest:
    body = read(EmbeddingBody, raw)
    if body.dimensions is not None:
        raise invalid("'dimensions' is not supported: this model's embeddings have a fixed size.", "dimensions")
    given = body.input
    # One text, one token list, or a list of either.
    if isinstance(given, str) or (isinstance(given, list) and given and _is_token(given[0])):
        given = [given]
    if not isinstance(given, list) or not given or len(given) > MAX_EMBED_INPUTS:
        raise invalid(f"'input' must be a text, a list of token ids, or a list of 1-{MAX_EMBED_INPUTS} of those.",
                      "input")
    for i, item in enumerate(given):
        if isinstance(item, str):
            if not item:
                raise invalid(f"input[{i}] is empty; an embedding needs some text.", "input")
        elif not (isinstance(item, list) and item and all(_is_token(t) for t in item)):
            raise invalid(f"input[{i}] must be a non-empty text or a non-empty list of token ids.", "input")
    return EmbeddingRequest(model=body.model, inputs=given, encoding_format=body.encoding_format)


TOKEN_IDS = 1 << 31  # llama.cpp's token ids are int32


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < TOKEN_IDS
