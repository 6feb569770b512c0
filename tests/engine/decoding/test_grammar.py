"""Grammar-constrained sampling on the real bundled model: what comes out follows the grammar, whatever the
sampling settings; a grammar llama.cpp cannot parse is one sentence with its reason, never a crash."""

from __future__ import annotations

import json
import threading

import pytest
from llama_cpp.llama_grammar import JSON_GBNF

from app.core.errors import InvalidRequest
from app.protocol.messages import LoadOptions, SamplingOptions
from app.protocol.schema_grammar import schema_grammar

CAT = {"type": "object", "additionalProperties": False, "required": ["name", "age", "color"],
       "properties": {"name": {"type": "string", "maxLength": 16}, "age": {"type": "integer"},
                      "color": {"enum": ["black", "white", "orange"]}}}
ASK = [{"role": "user", "content": "Describe a cat."}]


@pytest.fixture(scope="module")
def session(bundled_model):
    from app.engine.process.session import Session

    s = Session.load(LoadOptions(model_path=str(bundled_model), n_ctx=512, n_threads=1))
    yield s
    s.close()


def answer(session, sampling: SamplingOptions, messages=ASK) -> dict:
    return session.chat(messages, sampling, lambda event: None, threading.Event(), truncate=False)


def warm(session) -> None:
    """Leave the prompt in the KV cache, so that the answers compared next are all computed with the same
    batch sizes (llama.cpp rounds batches of other sizes differently on some CPUs)."""
    answer(session, SamplingOptions(max_tokens=1, temperature=0))


def fits_cat(text: str) -> bool:
    data = json.loads(text)
    return (set(data) == {"name", "age", "color"} and isinstance(data["name"], str) and len(data["name"]) <= 16
            and isinstance(data["age"], int) and data["color"] in ("black", "white", "orange"))


@pytest.mark.parametrize("settings", [
    dict(temperature=0),  # greedy: the grammar must turn the chain-less argmax path off
    dict(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=3),  # wild sampling still fits
    dict(temperature=0.8, repeat_penalty=1.3, seed=5),  # the penalties saw the prompt; the grammar must not
    dict(temperature=0, logit_bias={0: 50.0}),  # a bias towards a token the grammar forbids changes nothing
])
def test_answers_fit_the_schema_whatever_the_sampling(session, settings):
    done = answer(session, SamplingOptions(max_tokens=80, grammar=schema_grammar(CAT, "schema"), **settings))
    assert done["finish_reason"] == "stop", done["text"]
    assert fits_cat(done["text"]), done["text"]


def test_json_object_grammar_gives_an_object(session):
    ask = [{"role": "user", "content": "Reply with a JSON object with the key 'ok' set to true."}]
    done = answer(session, SamplingOptions(max_tokens=60, temperature=0, grammar=JSON_GBNF), ask)
    assert done["finish_reason"] == "stop", done["text"]
    assert isinstance(json.loads(done["text"]), dict)


@pytest.mark.parametrize("grammar, reason", [
    ("root ::= foo", "Undefined rule identifier 'foo'"),
    ('root ::= "unclosed', "unexpected end of input"),
    ("answer ::= \"yes\"", "'root'"),
    ("root ::= root \"x\"", "left recursion"),
    # Nested deep enough to overflow llama.cpp's recursive parser: refused before it reaches llama.cpp.
    ("root ::= " + "(" * 30000 + '"a"' + ")" * 30000, "too big"),
    # One group deeper than the engine takes (a schema's maxLength no longer gets there: above 1000 it is left out).
    ("root ::= " + "(" * 2001 + '"a"' + ")" * 2001, "too big"),
])
def test_a_grammar_llama_cpp_refuses_is_a_sentence_with_its_reason(session, grammar, reason):
    with pytest.raises(InvalidRequest) as err:
        answer(session, SamplingOptions(max_tokens=5, temperature=0, grammar=grammar))
    message = str(err.value)
    assert message.startswith(("llama.cpp cannot use this grammar: ", "This grammar is too big"))
    assert reason in message and "\n" not in message
    # The engine goes on as before.
    assert answer(session, SamplingOptions(max_tokens=3, temperature=0))["completion_tokens"] == 3


def test_a_grammar_that_allows_everything_changes_nothing(session):
    # The chain picks first and the grammar only checks its pick: a grammar that refuses nothing must leave
    # a seeded answer exactly as it is without one.
    sampling = dict(max_tokens=40, temperature=0.9, seed=11)
    warm(session)
    plain = answer(session, SamplingOptions(**sampling))
    anything = answer(session, SamplingOptions(grammar=r"root ::= [\U00000000-\U0010FFFF]*", **sampling))
    assert anything["text"] == plain["text"]


def test_the_same_seed_gives_the_same_structured_answer(session):
    sampling = dict(max_tokens=80, temperature=1.2, seed=21, grammar=schema_grammar(CAT, "schema"))
    warm(session)
    first, second = answer(session, SamplingOptions(**sampling)), answer(session, SamplingOptions(**sampling))
    assert first["text"] == second["text"] and fits_cat(first["text"])


def test_a_forced_call_to_a_tool_with_pydantic_style_refs_fits_its_schema(session):
    from app.protocol.tool_calls import CallReader, tool_grammar, tool_use

    # What the openai package's pydantic_function_tool writes: nested models under $defs, reached by $ref.
    parameters = {"$defs": {"Point": {"type": "object", "additionalProperties": False, "required": ["x", "y"],
                                      "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}}},
                  "type": "object", "additionalProperties": False, "required": ["start", "end"],
                  "properties": {"start": {"$ref": "#/$defs/Point"}, "end": {"$ref": "#/$defs/Point"}}}
    tools = [{"type": "function", "function": {"name": "draw_line", "parameters": parameters}}]
    use = tool_use({"tools": tools, "tool_choice": "required", "parallel_tool_calls": False})
    done = session.chat([{"role": "user", "content": "Draw a line."}],
                        SamplingOptions(max_tokens=120, temperature=0, grammar=tool_grammar(use)),
                        lambda event: None, threading.Event(), truncate=False, tools=use.tools)
    reader = CallReader()
    reader.feed(done["text"])
    assert done["finish_reason"] == "stop", done["text"]
    [call] = reader.calls
    assert call.name == "draw_line" and set(call.input) == {"start", "end"}
    assert all(set(point) == {"x", "y"} and all(isinstance(v, int) for v in point.values())
               for point in call.input.values())
    assert tools[0]["function"]["parameters"]["properties"]["start"] == {"$ref": "#/$defs/Point"}  # untouched


def follows(session, grammar: str, text: str) -> bool:
    """Whether llama.cpp's own grammar sampler takes text, as this model tokenizes it, and lets it end there."""
    import llama_cpp

    from app.engine.decoding.grammar import GrammarSampling

    rt = session.rt
    sampling = GrammarSampling(rt.vocab, grammar, rt.n_vocab)
    try:
        for token in rt.tokenize(text, add_special=False, parse_special=False):
            if not sampling._allows(token):
                return False
            sampling.accept(token)
        return sampling._allows(llama_cpp.llama_vocab_eos(rt.vocab))
    finally:
        sampling.close()


ADD = {"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "additionalProperties": False, "required": ["a", "b"],
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}
CALL = '{"name": "add", "arguments": {"a": 1, "b": 2}}'


@pytest.mark.parametrize("text, taken", [
    (f"<tool_call>\n{CALL}\n</tool_call>", True), ("Sure, 1 + 2 = 3.", True),
    # A model's habitual call, bare or fenced, is a call held to the tools from its first character ...
    (f"```json\n{CALL}\n```", True), (f"```\n{CALL}\n```", True), (CALL, True),
    (f"```json\n{CALL.replace('add', 'subtract')}\n```", False), (CALL.replace("1", '"one"'), False),
    ('{"title": "x"}', False), ('```json\n{"title": "x"}\n```', False),
    # ... and an answer of text starts with anything else.
    ("```python\nprint(1 + 2)\n```", True), ("```\nplain text\n```", True), ("[1, 2]", True),
    ("```json\n[1, 2]\n```", True), ("```javascript\n1 + 2\n```", True), ("<b>bold</b>", False),
])
def test_under_auto_a_call_in_any_dress_fits_its_tool(session, text, taken):
    from app.protocol.tool_calls import tool_grammar, tool_use

    grammar = tool_grammar(tool_use({"tools": [ADD], "tool_choice": "auto"}))
    assert follows(session, grammar, text) is taken
