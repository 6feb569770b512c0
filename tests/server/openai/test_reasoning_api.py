"""A reasoning model's <think>…</think> through the official OpenAI client against a real `hearth serve`:
`reasoning_content` apart from `content`, streamed and not, as llama-server returns it; `reasoning_format:
none` keeps it inline; a model whose template opens <think> in the prompt (made with tests/helpers/gguf_edit.py)
answers from inside its thinking; `--reasoning-format none` keeps it inline unless a request asks. A grammar makes the bundled SmolLM2 write the tags every time."""

from __future__ import annotations

import pytest

from tests.helpers.gguf_edit import copy_with_template
from tests.server.conftest import KEY, start_server, stop_server

pytestmark = pytest.mark.slow

THINKS = 'root ::= "<think>" [a-z] [a-z ]{2,20} "</think>" [a-z] [a-z ]{2,20}'
ASK = [{"role": "user", "content": "What is the colour of the sky?"}]
# ChatML, as SmolLM2's, with DeepSeek-R1's habit: the generation prompt opens the thinking.
OPENING = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
           "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")


def ask(oai, model, grammar, **extra):
    return oai.chat.completions.create(model=model, messages=ASK, temperature=0, max_tokens=60,
                                       extra_body={"grammar": grammar, **extra})


def streamed(oai, model, grammar, **extra):
    reasoning, content = [], []
    with oai.chat.completions.create(model=model, messages=ASK, temperature=0, max_tokens=60, stream=True,
                                     extra_body={"grammar": grammar, **extra}) as stream:
        for chunk in stream:
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            reasoning.append(getattr(delta, "reasoning_content", None) or "")
            content.append(delta.content or "")
    return "".join(reasoning), "".join(content)


def test_reasoning_content_comes_apart_from_content(oai, model_name):
    message = ask(oai, model_name, THINKS).choices[0].message
    inline = ask(oai, model_name, THINKS, reasoning_format="none").choices[0].message
    assert inline.content.startswith("<think>") and "</think>" in inline.content  # the model did think
    thought, answer = inline.content[len("<think>"):].split("</think>")
    assert getattr(inline, "reasoning_content", None) is None
    assert message.reasoning_content == thought.strip()
    assert message.content == answer.lstrip()
    assert "<think>" not in message.content and "</think>" not in message.content


def test_streamed_deltas_carry_reasoning_content_and_never_a_tag(oai, model_name):
    whole = ask(oai, model_name, THINKS).choices[0].message
    reasoning, content = streamed(oai, model_name, THINKS)
    assert reasoning.strip() == whole.reasoning_content and reasoning.strip()
    assert content == whole.content
    assert "<" not in reasoning + content
    r_inline, c_inline = streamed(oai, model_name, THINKS, reasoning_format="none")
    assert r_inline == "" and c_inline.startswith("<think>")


def test_an_unknown_reasoning_format_is_a_400(oai, model_name):
    from openai import BadRequestError

    with pytest.raises(BadRequestError) as err:
        ask(oai, model_name, THINKS, reasoning_format="loud")
    assert "reasoning_format" in str(err.value)


@pytest.fixture(scope="module")
def opening_server(tmp_path_factory, bundled_model):
    folder = tmp_path_factory.mktemp("opens_thinking")
    model = copy_with_template(bundled_model, folder / "opens-thinking.gguf", OPENING)
    # The server keeps thinking inline unless a request asks for it apart: the flag, and a request's own field.
    proc, base = start_server("--model", str(model), "--api-key", KEY, "--reasoning-format", "none",
                              env={"HEARTH_HOME": str(folder / "home")})
    yield base
    assert stop_server(proc)


def test_a_template_that_opens_the_thinking_answers_from_inside_it(opening_server):
    from openai import OpenAI

    oai = OpenAI(base_url=opening_server, api_key=KEY, max_retries=0, timeout=120)
    model = oai.models.list().data[0].id
    grammar = 'root ::= [a-z] [a-z ]{2,20} "</think>" [a-z] [a-z ]{2,20}'  # no <think>: the prompt has it
    inline = ask(oai, model, grammar).choices[0].message
    assert "</think>" in inline.content and getattr(inline, "reasoning_content", None) is None
    message = ask(oai, model, grammar, reasoning_format="auto").choices[0].message
    assert message.reasoning_content and "</think>" not in message.content and message.content
    thought, answer = inline.content.split("</think>")
    assert (thought.strip(), answer.lstrip()) == (message.reasoning_content, message.content)
    reasoning, content = streamed(oai, model, grammar, reasoning_format="auto")
    assert reasoning.strip() == message.reasoning_content
    assert content == message.content


def test_a_reasoning_models_own_effort_is_taken_on_the_responses_api(opening_server):
    """reasoning.effort "medium" (what Codex sends a reasoning model) was refused before the model was known, as
    if no model reasoned: "This model does not reason". A reasoning model takes its own effort, and refuses another."""
    from openai import BadRequestError, OpenAI

    oai = OpenAI(base_url=opening_server, api_key=KEY, max_retries=0, timeout=120)
    model = oai.models.list().data[0].id
    answer = oai.responses.create(model=model, input="Hi", max_output_tokens=8, reasoning={"effort": "medium"})
    assert answer.status in ("completed", "incomplete") and answer.reasoning.effort == "medium"
    with pytest.raises(BadRequestError) as err:
        oai.responses.create(model=model, input="Hi", max_output_tokens=8, reasoning={"effort": "high"})
    assert err.value.body["code"] == "unsupported_effort" and "one effort of its own" in err.value.body["message"]
