"""Ollama's requests: each endpoint's fields declared once (as the other dialects declare theirs,
app/server/edge/request_shape.py), and each request read into the OpenAI request it means, which the same readers
check (app/server/openai/chat_request.py).

The declarations are what the field policy knows (docs/api.md, "Fields a request may send"): a field Ollama's API
has and Hearth takes; one it has that would change the answer and cannot be done here is a 400 that names it
(generate's `suffix`, `template`, `context`); any other is left out and named in Hearth-Ignored-Fields, or refused
with --strict-fields. Values are checked where they are read (the messages, the options, the images).
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from typing import Any

from app.server.edge.errors import invalid
from app.server.edge.request_shape import read
from app.server.media_parts import ollama_images

THINK_LEVELS = ("low", "medium", "high")  # `think` as a level (Ollama 0.12): the thinking is asked for
# Ollama's `options` that are the OpenAI request's sampling fields, by their OpenAI names.
OPTIONS = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p", "seed": "seed",
           "stop": "stop", "repeat_penalty": "repeat_penalty", "repeat_last_n": "repeat_last_n",
           "frequency_penalty": "frequency_penalty", "presence_penalty": "presence_penalty",
           "num_predict": "max_tokens"}


@dataclass
class Asked:
    """What every request that names a model may say: the model, and how long it stays loaded."""

    model: Any = None
    keep_alive: Any = None  # 0 unloads it (a request without messages or prompt); else the pool's own rule


@dataclass
class Answering(Asked):
    format: Any = None  # "json" or a JSON schema
    options: Any = None
    stream: Any = None  # anything but false streams
    think: Any = None  # true or a level: the thinking in its own field; false or none: left out


@dataclass
class ChatBody(Answering):
    messages: Any = None
    tools: Any = None


@dataclass
class GenerateBody(Answering):
    prompt: Any = None
    system: Any = None
    images: Any = None
    raw: Any = None
    suffix: Any = None  # each of these three changes the answer and cannot be done: refused when not empty
    template: Any = None
    context: Any = None


@dataclass
class EmbedBody(Asked):
    input: Any = None
    options: Any = None
    truncate: Any = None  # the input is cut to the context, or refused: the engine's own bound either way
    dimensions: Any = None  # refused as OpenAI's endpoint refuses it


@dataclass
class EmbeddingsBody(Asked):
    prompt: Any = None
    options: Any = None


@dataclass
class Named:
    """/api/show, /api/pull and /api/delete: a model by its name (`name` in older clients)."""

    model: Any = None
    name: Any = None


@dataclass
class ShowBody(Named):
    verbose: Any = None


@dataclass
class PullBody(Named):
    stream: Any = None
    insecure: Any = None  # for registries over plain HTTP: Hugging Face's is HTTPS, so it changes nothing here


@dataclass
class DeleteBody(Named):
    pass


def read_generate(body: Any) -> GenerateBody:
    shape = read(GenerateBody, body)
    refused = {"suffix": "this server completes a prompt at its end only (no fill-in-the-middle)",
               "template": "the model's own chat template writes the prompt (hearth serve --chat-template chooses "
                           "another for every request)",
               "context": "Hearth's answers carry no token context to go on from; send the conversation as "
                          "/api/chat messages"}
    for name, why in refused.items():
        if getattr(shape, name) not in (None, "", []):
            raise invalid(f"'{name}' is not supported: {why}; send the request without it.", name)
    return shape


def _options(shape: Answering) -> dict:
    """Ollama's `options` (and `format`) as the OpenAI request's fields; set-up options of a load are left out
    (the loaded model's own stand); an option Hearth has never heard of is left out too."""
    options = shape.options or {}
    if not isinstance(options, dict):
        raise invalid("'options' must be an object.", "options")
    fields = {}
    for name, value in options.items():
        if name in OPTIONS:
            if name == "num_predict" and isinstance(value, int) and value < 0:
                continue  # -1 (until the end) and -2 (fill the context): the server's own bound
            fields[OPTIONS[name]] = value
    fmt = shape.format
    if fmt == "json":
        fields["response_format"] = {"type": "json_object"}
    elif isinstance(fmt, dict):
        fields["response_format"] = {"type": "json_schema", "json_schema": {"name": "format", "schema": fmt}}
    elif fmt not in (None, ""):
        raise invalid("'format' must be \"json\" or a JSON schema.", "format")
    return fields


def openai_chat(shape: Answering, messages: Any, tools: Any = None) -> dict:
    """An Ollama chat as the OpenAI chat request it means (checked by the same reader). think false, as think left
    out: the thinking is split off and left out of the answer."""
    if not isinstance(messages, list):
        raise invalid("'messages' must be a list of messages.", "messages")
    out = []
    unanswered = _Unanswered([])  # the last assistant message's calls that no tool message has answered yet
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise invalid(f"messages[{i}] must be an object.", f"messages.{i}")
        images = ollama_images(message.get("images"), f"messages[{i}].images", message.get("role"))
        converted = {"role": message.get("role"), "content": with_images(images, message.get("content") or "")}
        if message.get("tool_calls"):
            converted["tool_calls"] = [
                {"id": f"call_{i}_{n}", "type": "function",
                 "function": {"name": (call.get("function") or {}).get("name"),
                              "arguments": json.dumps((call.get("function") or {}).get("arguments") or {})}}
                for n, call in enumerate(message["tool_calls"]) if isinstance(call, dict)]
            unanswered = _Unanswered(converted["tool_calls"])
        if message.get("role") == "tool":
            converted["tool_call_id"] = message.get("tool_call_id") or unanswered.answer(message.get("tool_name"))
        out.append(converted)
    chat = {"model": shape.model, "messages": out, "stream": shape.stream is not False, **_options(shape)}
    if tools:
        chat["tools"] = tools
    return chat


class _Unanswered:
    """The calls of an assistant message that no tool message has answered yet. Ollama's tool messages name their
    tool (`tool_name`), not the call: a result answers the first unanswered call of its tool, else the first
    unanswered one, so that the chat template pairs them and the result carries its tool's name. Each answer costs
    about the same however many calls a (hostile) request holds: no list is searched or shifted."""

    def __init__(self, calls: list[dict]):
        self.order = deque(call["id"] for call in calls)
        self.by_name: dict[Any, deque] = {}
        for call in calls:
            if isinstance(call["function"]["name"], str):  # another kind is refused by the chat reader after
                self.by_name.setdefault(call["function"]["name"], deque()).append(call["id"])
        self.answered: set[str] = set()

    def answer(self, name: Any) -> str:
        ids = self.by_name.get(name) if isinstance(name, str) else None
        for queue in (ids, self.order):
            while queue and queue[0] in self.answered:
                queue.popleft()
            if queue:
                self.answered.add(queue[0])
                return queue.popleft()
        return name if isinstance(name, str) and name else "call"


def with_images(images: list[dict], text):
    """A message's content with Ollama's images: the seam's parts, the images first (as `hearth chat --image` puts
    them, and as most models were trained), then the text."""
    return [*images, {"type": "text", "text": text}] if images else text


def openai_completion(shape: GenerateBody) -> dict:
    return {"model": shape.model, "prompt": shape.prompt or "", "stream": shape.stream is not False,
            **_options(shape)}
