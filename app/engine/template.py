"""Render a model's chat template (Jinja, from the GGUF metadata) safely.

A GGUF file is untrusted input: its template runs in Jinja's immutable
sandbox, so it cannot reach Python internals or mutate our objects, and
under a time and size budget (app/engine/template_budget.py), so it cannot
hang the engine or take its memory.

Tools (function calling) go to a template that knows them as `tools`, as
Hugging Face's apply_chat_template passes them; a template that never mentions
tools gets them as text instead (app/engine/tool_format.py).
"""

from __future__ import annotations

import datetime
import json
import threading

from jinja2 import TemplateError

from app.core.errors import HearthError, InvalidRequest
from app.engine.template_budget import BudgetedSandbox, TemplateBudgetError
from app.engine.tool_format import as_plain_messages

# Used when a GGUF carries no template: ChatML is what most small instruct models expect.
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


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
    def __init__(self, source: str | None, bos_token: str = "", eos_token: str = ""):
        self.source = source or CHATML
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
        elif tools or any(m.get("role") == "tool" or m.get("tool_calls") for m in messages):
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
