"""OpenAI request bodies, checked field by field, into the engine's options.

Every field a client may send is checked for its type and range here, once, so that a wrong value is a
400 that names the field (never a 500, never a silently ignored value). Fields that only OpenAI's hosted
models have (audio, modalities, store, ...) are accepted and ignored, as other local servers do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from app.engine.protocol import SamplingOptions
from app.server.errors import invalid

MAX_TOKENS_CAP = 1 << 20
ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass
class Generation:
    """One chat or completion request, as the engine takes it."""

    model: str | None
    sampling: SamplingOptions
    stream: bool = False
    include_usage: bool = False
    messages: list[dict] = field(default_factory=list)  # chat
    prompt: str | None = None  # completions
    echo: bool = False


def _number(body: dict, name: str, low: float, high: float, integer: bool = False) -> float | int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise invalid(f"'{name}' must be {'an integer' if integer else 'a number'}.", name)
    if (isinstance(value, float) and not math.isfinite(value)) or not low <= value <= high:
        raise invalid(f"'{name}' must be between {low:g} and {high:g}; got {value}.", name)
    return value


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


def _messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("'messages' must be a non-empty list of messages.", "messages")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise invalid(f"{where} must be an object with 'role' and 'content'.", where)
        role = m.get("role")
        if role not in ROLES:
            raise invalid(f"{where}.role must be one of {', '.join(ROLES)}; got {role!r}.", f"{where}.role")
        # 'developer' is OpenAI's newer name for the system role.
        out.append({"role": "system" if role == "developer" else role,
                    "content": _text_content(m.get("content"), f"{where}.content")})
    return out


def _stop(body: dict) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop) or len(stop) > 16:
        raise invalid("'stop' must be a string or a list of at most 16 strings.", "stop")
    return [s for s in stop if s]


def _sampling(body: dict, default_max_tokens: int) -> SamplingOptions:
    d = SamplingOptions()
    n = _number(body, "n", 1, 128, integer=True)
    if n not in (None, 1):
        raise invalid("Only n=1 is supported: ask again for another answer.", "n")
    max_tokens = _number(body, "max_completion_tokens", 1, MAX_TOKENS_CAP, integer=True)
    if max_tokens is None:
        max_tokens = _number(body, "max_tokens", 1, MAX_TOKENS_CAP, integer=True)
    temperature = _number(body, "temperature", 0.0, 2.0)
    top_p = _number(body, "top_p", 0.0, 1.0)
    top_k = _number(body, "top_k", 0, 1 << 20, integer=True)
    min_p = _number(body, "min_p", 0.0, 1.0)
    seed = _number(body, "seed", -(1 << 63), (1 << 63) - 1, integer=True)
    frequency = _number(body, "frequency_penalty", -2.0, 2.0)
    presence = _number(body, "presence_penalty", -2.0, 2.0)
    repeat = _number(body, "repeat_penalty", 0.0, 10.0)  # llama.cpp's own, as llama-server takes it
    # llama-server's and vLLM's extension: answers of a fixed length, for benchmarks (hearth bench serve).
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise invalid("'ignore_eos' must be true or false.", "ignore_eos")
    return SamplingOptions(
        max_tokens=max_tokens or default_max_tokens,
        # OpenAI's defaults where it has them: temperature 1, top_p 1, no penalties.
        temperature=1.0 if temperature is None else float(temperature),
        top_p=1.0 if top_p is None else float(top_p),
        top_k=0 if top_k is None else top_k,
        min_p=0.0 if min_p is None else float(min_p),
        repeat_penalty=1.0 if repeat is None else float(repeat),
        frequency_penalty=float(frequency or 0.0),
        presence_penalty=float(presence or 0.0),
        seed=-1 if seed is None else seed % (1 << 31),
        stop=_stop(body),
        repeat_last_n=d.repeat_last_n,
        logit_bias=_logit_bias(body),
        ignore_eos=ignore_eos,
    )


def _logit_bias(body: dict) -> dict[int, float]:
    bias = body.get("logit_bias")
    if bias is None:
        return {}
    if not isinstance(bias, dict) or len(bias) > 1024:
        raise invalid("'logit_bias' must map token ids to numbers between -100 and 100.", "logit_bias")
    out = {}
    for key, value in bias.items():
        try:
            token = int(key)
        except (TypeError, ValueError):
            raise invalid(f"'logit_bias' key {key!r} is not a token id.", "logit_bias") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not -100 <= value <= 100:
            raise invalid(f"'logit_bias' value for token {token} must be between -100 and 100.", "logit_bias")
        out[token] = float(value)
    return out


def _common(body: Any, default_max_tokens: int) -> Generation:
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise invalid("'model' must be a string.", "model")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise invalid("'stream' must be true or false.", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise invalid("'stream_options' must be an object.", "stream_options")
    return Generation(model=model, sampling=_sampling(body, default_max_tokens), stream=stream,
                      include_usage=bool(options.get("include_usage")))


def chat_request(body: Any, default_max_tokens: int) -> Generation:
    request = _common(body, default_max_tokens)
    request.messages = _messages(body)
    return request


def completion_request(body: Any, default_max_tokens: int) -> Generation:
    request = _common(body, default_max_tokens)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise invalid("'prompt' must be a string (one prompt per request).", "prompt")
    echo = body.get("echo", False)
    if not isinstance(echo, bool):
        raise invalid("'echo' must be true or false.", "echo")
    request.prompt, request.echo = prompt, echo
    return request
