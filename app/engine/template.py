"""Render a model's chat template (Jinja, from the GGUF metadata) safely.

A GGUF file is untrusted input: its template runs in Jinja's immutable
sandbox, so it cannot reach Python internals or mutate our objects, and
under a time and size budget (app/engine/template_budget.py), so it cannot
hang the engine or take its memory.
"""

from __future__ import annotations

import datetime

import threading

from jinja2 import TemplateError

from app.core.errors import HearthError
from app.engine.template_budget import BudgetedSandbox, TemplateBudgetError

# Used when a GGUF carries no template: ChatML is what most small instruct models expect.
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class TemplateRenderError(HearthError):
    pass


def _raise(message: str):
    raise TemplateRenderError(f"The model's chat template refused the conversation: {message}")


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

    def render(self, messages: list[dict], add_generation_prompt: bool = True,
               cancelled: threading.Event | None = None) -> str:
        try:
            return self._env.render(
                self._template,
                cancelled,
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except (TemplateRenderError, TemplateBudgetError):
            raise
        except Exception as exc:  # any error inside a foreign template
            raise TemplateRenderError(f"The model's chat template failed: {exc}") from None
