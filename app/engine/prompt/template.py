"""Render a model's chat template (Jinja, from the GGUF metadata) safely.

A GGUF file is untrusted input: its template runs in Jinja's immutable
sandbox, so it cannot reach Python internals or mutate our objects, and
under a time and size budget (app/engine/prompt/template_budget.py), so it cannot
hang the engine or take its memory.

Tools (function calling) go to a template that knows them as `tools`, as
Hugging Face's apply_chat_template passes them; a template that never mentions
tools gets them as text instead (app/protocol/tool_format.py).

Which template a model gets is decided in app/core/gguf/chat_formats.py; a model
without one of its own gets one of llama.cpp's built-in templates, rendered by
llama.cpp (BuiltinTemplate), or the plain completion format. Every template
says the turn separator it writes (turn_stops): where that separator is plain
text in the model's vocabulary, nothing else would end the answer.
"""

from __future__ import annotations

import ctypes
import datetime
import json
import threading

import llama_cpp
from jinja2 import TemplateError

from app.core.gguf.chat_formats import ChatFormat, choose_format, model_names
from app.core.errors import HearthError, InvalidRequest
from app.core.chats.reasoning import prompt_opens_thinking
from app.engine.prompt.template_budget import BudgetedSandbox, TemplateBudgetError
from app.protocol.tool_format import as_plain_messages

class TemplateRenderError(HearthError):
    pass


class ConversationRefused(TemplateRenderError, InvalidRequest):
    """The template cannot render this conversation (roles out of order, a role it does not know): the
    request's fault, so an API client gets a 400, not a server error."""


def _raise(message: str):
    raise ConversationRefused(f"The model's chat template refused the conversation: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


class ChatTemplate:
    """A Jinja template: the model's own, a file the user chose, or the plain format."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = ""):
        self.source = source
        self._env = env = BudgetedSandbox(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = _strftime_now
        try:
            self._template = env.checked_template(self.source)
        except TemplateError as exc:
            raise TemplateRenderError(f"The model's chat template is broken: {exc}") from None
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.knows_tools = "tools" in self.source

    def render(self, messages: list[dict], add_generation_prompt: bool = True, tools: list[dict] | None = None,
               cancelled: threading.Event | None = None) -> str:
        extra = {}
        if self.knows_tools:
            messages = [_arguments_as_objects(m) for m in messages]
            if tools:
                extra["tools"] = tools
        elif _has_tools(messages, tools):
            messages = as_plain_messages(messages, tools)
        try:
            return self._env.render(
                self._template,
                cancelled,
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **extra,
            )
        except (TemplateRenderError, TemplateBudgetError):
            raise
        except Exception as exc:  # any error inside a foreign template, most often data it did not expect
            raise ConversationRefused(f"The model's chat template failed on this conversation: {exc}") from None


def opens_thinking(template) -> bool:
    """Whether the template's generation prompt ends inside an opened `<think>` (DeepSeek-R1's, QwQ's): the
    answer then starts in its thinking, without the tag (app/core/chats/reasoning.py)."""
    try:
        prompt = template.render([{"role": "user", "content": "Hi"}])
    except Exception:  # a template that needs more than one user turn: no thinking known to be opened
        return False
    return prompt_opens_thinking(prompt)


def _has_tools(messages: list[dict], tools: list[dict] | None) -> bool:
    """Tools offered, called or answered: a template that knows none gets them as text."""
    return bool(tools) or any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)


def _arguments_as_objects(message: dict) -> dict:
    """Tool-call arguments as objects: templates write them with `tojson`, OpenAI clients send JSON text."""
    calls = message.get("tool_calls")
    if not calls:
        return message
    parsed = []
    for call in calls:
        function = dict(call.get("function") or {})
        if isinstance(function.get("arguments"), str):
            try:
                function["arguments"] = json.loads(function["arguments"])
            except ValueError:
                pass
        parsed.append({**call, "function": function})
    return {**message, "tool_calls": parsed}


class BuiltinTemplate:
    """One of llama.cpp's built-in templates, by name (llama_chat_apply_template renders it in C++). They
    know no tools: a conversation with tools is written as text first, as for a Jinja template without."""

    knows_tools = False

    def __init__(self, name: str):
        self.name = name
        self.source = f"llama.cpp built-in '{name}'"
        if self._apply([("user", "x")], True) is None:
            raise TemplateRenderError(f"llama.cpp has no built-in chat template named '{name}'.")

    def render(self, messages: list[dict], add_generation_prompt: bool = True, tools: list[dict] | None = None,
               cancelled: threading.Event | None = None) -> str:
        if _has_tools(messages, tools):
            messages = as_plain_messages(messages, tools)
        pairs = [(str(m.get("role") or "user"), _text(m.get("content"))) for m in messages]
        out = self._apply(pairs, add_generation_prompt)
        if out is None:
            raise ConversationRefused(f"llama.cpp's '{self.name}' chat template refused the conversation.")
        return out

    def _apply(self, pairs: list[tuple[str, str]], add_assistant: bool) -> str | None:
        chat = (llama_cpp.llama_chat_message * max(len(pairs), 1))()
        keep = []  # the bytes the C structs point at, alive until the call returns
        for i, (role, content) in enumerate(pairs):
            keep += [role.encode("utf-8"), content.encode("utf-8", "replace")]
            chat[i].role, chat[i].content = keep[-2], keep[-1]
        name = self.name.encode()
        need = llama_cpp.llama_chat_apply_template(name, chat, len(pairs), add_assistant, None, 0)
        if need < 0:
            return None
        buf = ctypes.create_string_buffer(need + 1)
        n = llama_cpp.llama_chat_apply_template(name, chat, len(pairs), add_assistant, buf, len(buf))
        return buf.raw[:n].decode("utf-8", "replace") if 0 <= n <= need else None


def _text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, list):  # content parts: their text, in order
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def make_template(fmt: ChatFormat, bos_token: str = "", eos_token: str = ""):
    if fmt.kind == "builtin":
        return BuiltinTemplate(fmt.name)
    return ChatTemplate(fmt.source or "", bos_token, eos_token)


def chat_format(runtime, override: str | None = None) -> ChatFormat:
    """A loaded model's chat format (app/core/gguf/chat_formats.py), from its vocabulary and metadata."""
    return choose_format(runtime.chat_template(), runtime.special_texts(), runtime.meta("general.architecture"),
                         model_names(runtime.meta, runtime.path), override)


def template_for(runtime, override: str | None = None):
    """(the loaded model's chat format, its template)."""
    fmt = chat_format(runtime, override)
    return fmt, make_template(fmt, *runtime.bos_eos_text())


_SENTINELS = ("\u2460hearth-a\u2460", "\u2461hearth-b\u2461", "\u2462hearth-c\u2462")


def turn_stops(template, special_texts) -> list[str]:
    """The stop strings an answer needs because the template's turn separator is plain text here.

    Found by rendering a probe conversation: what the template writes between an assistant's text and
    the next user text is the separator (`<|im_end|>\\n<|im_start|>user\\n`, `\\nUser: `). Its first
    marker, up to the first whitespace after some text, is what a model writes when its turn ends; where
    that is a control token of the vocabulary, llama.cpp ends the answer itself (an end-of-generation
    token) or never shows it, and no stop string is needed."""
    a, b, c = _SENTINELS
    try:
        text = template.render([{"role": "user", "content": a}, {"role": "assistant", "content": b},
                                {"role": "user", "content": c}], add_generation_prompt=False)
    except Exception:  # a template that refuses the probe: no stops beyond the model's own tokens
        return []
    start, end = text.find(b), text.find(c)
    if start < 0 or end < 0:
        return []
    separator = text[start + len(b): end]
    for special in special_texts:
        if separator.lstrip().startswith(special):
            return []
    lead = len(separator) - len(separator.lstrip())
    rest = separator[lead:]
    marker = rest.split(None, 1)[0] if rest.strip() else ""
    if not marker:
        return []
    for special in special_texts:  # "</s><s>[INST]": the marker ends where a control token begins
        cut = marker.find(special)
        if cut > 0:
            marker = marker[:cut]
    if marker.endswith(":") and "\n" in separator[:lead]:
        return ["\n" + marker]  # "\nUser:": a model writes "User:" mid-sentence too, at a line's start only here
    return [marker]
