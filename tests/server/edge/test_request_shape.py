"""Each endpoint's request fields are declared once (app/server/edge/request_shape.py and the dialects' readers): the
declaration is what the field policy knows, what is type-checked, and what a wrong value's sentence says."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from app.protocol.option_fields import accepted
from app.server.anthropic.messages import MessagesBody, messages_request
from app.server.edge import field_policy
from app.server.edge.errors import ApiError
from app.server.edge.request_shape import known, read
from app.server.openai.chat_request import ChatBody, CompletionBody, EmbeddingBody, chat_request
from app.server.options import request_defaults
from app.server.responses.request import PASSED, ResponsesBody

CHAT = {"messages": [{"role": "user", "content": "hi"}]}
DEFAULTS = request_defaults()


def refused(call, *args) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call(*args)
    assert caught.value.status == 400
    return caught.value


@pytest.mark.parametrize("field, value", [
    ("temperature", True), ("temperature", "0.5"), ("temperature", math.nan), ("temperature", math.inf),
    ("temperature", accepted("temperature")[1] + 0.01), ("top_k", 1.5), ("top_k", -1), ("seed", 1 << 63),
    ("stream", None), ("stream", "yes"), ("ignore_eos", 1), ("max_tokens", 0), ("max_completion_tokens", 2 ** 21),
    ("n", 0), ("model", 7), ("stop", [1]), ("stop", ["x"] * 17), ("reasoning_format", "verbose"),
    ("stream_options", "yes"),
])
def test_a_wrong_value_is_one_sentence_naming_its_field(field, value):
    error = refused(chat_request, {**CHAT, field: value}, DEFAULTS)
    assert error.param == field
    assert f"'{field}'" in error.message
    assert len(error.message) < 200  # the value is said short, never echoed whole


def test_the_engines_ranges_are_the_requests():
    low, high = accepted("temperature")
    assert chat_request({**CHAT, "temperature": high}, DEFAULTS).sampling.temperature == high
    assert "between 0 and 2" in refused(chat_request, {**CHAT, "temperature": 2.5}, DEFAULTS).message
    assert chat_request({**CHAT, "seed": -1}, DEFAULTS).sampling.seed == (-1) % (1 << 31)


def test_a_missing_required_field_and_a_body_that_is_no_object():
    assert refused(chat_request, {"model": "x"}, DEFAULTS).param == "messages"
    assert refused(read, CompletionBody, {}).param == "prompt"
    assert refused(read, EmbeddingBody, {"model": None}).param == "input"
    assert refused(read, ResponsesBody, {}).param == "input"
    assert refused(messages_request, {"messages": []}).param == "max_tokens"
    assert refused(read, ChatBody, [CHAT]).param is None


def test_anthropics_own_ranges():
    body = {"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    assert messages_request({**body, "temperature": 1.0}).sampling.temperature == 1.0
    assert refused(messages_request, {**body, "temperature": 1.5}).param == "temperature"
    assert refused(messages_request, {**body, "stop_sequences": ["x"] * 17}).param == "stop_sequences"
    # count_tokens takes a body without max_tokens
    assert messages_request({"messages": body["messages"]}, counting=True).sampling.max_tokens == 1


def test_an_unknown_field_is_noted_or_refused_as_the_policy_says():
    with field_policy.request_fields(strict=False, path="/v1/chat/completions") as notes:
        chat_request({**CHAT, "brand_new_field": 1}, DEFAULTS)
    assert notes.ignored == ["brand_new_field"]
    with field_policy.request_fields(strict=True, path="/v1/chat/completions"):
        assert refused(chat_request, {**CHAT, "brand_new_field": 1}, DEFAULTS).param == "brand_new_field"


def test_metadata_fields_are_known_everywhere_openai_takes_them():
    for shape in (ChatBody, CompletionBody, EmbeddingBody, ResponsesBody):
        assert {"metadata", "user", "client_metadata", "safety_identifier"} <= known(shape)
    assert "metadata" in known(MessagesBody) and "client_metadata" not in known(MessagesBody)


def test_responses_pass_the_sampling_fields_chat_reads():
    # what /v1/responses hands to the chat request is what both declare, under the same names
    assert set(PASSED) <= known(ResponsesBody) & known(ChatBody)
    assert {"temperature", "top_p", "seed", "stop", "stream"} <= set(PASSED)


def test_what_a_request_leaves_out_is_the_servers_default():
    """hearth serve --temp 0.2 --max-tokens 7 --stop END: a request that says none of them is answered so, and the
    flags count as given (the model's recommendation does not replace them); what a request says wins."""
    served = replace(DEFAULTS, temperature=0.2, max_tokens=7, stop=["END"], given=["temperature", "max_tokens"])
    left_out = chat_request(CHAT, served).sampling
    assert (left_out.temperature, left_out.max_tokens, left_out.stop) == (0.2, 7, ["END"])
    assert "temperature" in left_out.given and "top_p" not in left_out.given
    said = chat_request({**CHAT, "temperature": 1.0, "max_tokens": 3, "stop": "x"}, served).sampling
    assert (said.temperature, said.max_tokens, said.stop) == (1.0, 3, ["x"])
    anthropic = messages_request({"max_tokens": 8, "messages": CHAT["messages"]}, d=served).sampling
    assert (anthropic.temperature, anthropic.max_tokens, anthropic.stop) == (0.2, 8, ["END"])
    assert "temperature" in anthropic.given
    # Without flags, as before: Hearth's defaults, nothing given.
    plain = chat_request(CHAT, DEFAULTS).sampling
    assert plain.temperature == DEFAULTS.temperature and plain.max_tokens == DEFAULTS.max_tokens and not plain.given
