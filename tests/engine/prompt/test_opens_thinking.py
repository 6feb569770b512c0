"""Whether a chat template opens <think> in the generation prompt (its answers start inside the thinking),
decided once at load from the template itself (app/engine/prompt/template.py opens_thinking)."""

from __future__ import annotations

import pytest

from app.engine.prompt.template import ChatTemplate, opens_thinking

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# DeepSeek-R1's distills: the assistant turn opens the thinking.
R1 = ("{% for m in messages %}{% if m['role'] == 'user' %}<｜User｜>{{ m['content'] }}{% endif %}{% endfor %}"
      "{% if add_generation_prompt %}<｜Assistant｜><think>\n{% endif %}")
# Qwen3's: the model opens its own thinking; only enable_thinking=false writes an empty, closed one.
QWEN3 = CHATML.replace("<|im_start|>assistant\n{% endif %}",
                       "<|im_start|>assistant\n{% if enable_thinking is defined and enable_thinking is false %}"
                       "<think>\n\n</think>\n\n{% endif %}{% endif %}")
NEEDS_SYSTEM = "{% if messages[0]['role'] != 'system' %}{{ raise_exception('system first') }}{% endif %}<think>"


@pytest.mark.parametrize("source, opens", [(CHATML, False), (R1, True), (QWEN3, False), (NEEDS_SYSTEM, False)])
def test_only_a_generation_prompt_that_ends_inside_think_opens_it(source, opens):
    assert opens_thinking(ChatTemplate(source)) is opens
