"""Reading tool calls out of an answer as it streams: text before a call is content, text that might
begin a call is held back until it is clearly not one, each call comes out once it is complete."""

from __future__ import annotations

import json

import pytest

from app.server.edge.errors import ApiError
from app.server.tools import CallReader, tool_grammar, tool_use

CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
ADD = {"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}


def feed_chars(reader: CallReader, text: str) -> tuple[str, list]:
    shown, calls = "", []
    for ch in text:
        content, new = reader.feed(ch)
        shown += content
        calls += new
    return shown + reader.finish(), calls


def test_text_that_only_looks_like_a_call_is_shown_in_full():
    text = "Use <b>bold</b> and <tool_ maybe"
    assert feed_chars(CallReader(), text) == (text, [])


def test_calls_after_text_come_out_whole_and_once():
    reader = CallReader()
    shown, calls = feed_chars(reader, "Let me add.\n" + CALL + "\n" + CALL.replace('"a": 1', '"a": 5'))
    assert shown == "Let me add.\n" and reader.content == "Let me add.\n"
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("add", {"a": 1, "b": 2}), ("add", {"a": 5, "b": 2})]
    assert calls[0].input == {"a": 1, "b": 2}


def test_a_call_cut_off_by_max_tokens_is_not_a_call_but_its_text_without_markup():
    # (#30: it was dropped, leaving an empty answer, or came back with its <tool_call> tag as the content)
    reader = CallReader()
    cut = CALL[:-20]
    assert feed_chars(reader, cut) == ('{"name": "add", "arguments": {"a": 1, "', []) and reader.content == cut[12:]
    reader = CallReader()  # cut inside the closing tag
    assert feed_chars(reader, "Adding.\n" + CALL[:-4]) == ("Adding.\n" + CALL[12:-13], [])
    assert reader.content == "Adding.\n" + CALL[12:-13]
    reader = CallReader()  # after a complete call, one cut short is left out: the answer has its call
    shown, calls = feed_chars(reader, CALL + "\n" + CALL[:30])
    assert len(calls) == 1 and shown == "" == reader.content
    assert feed_chars(CallReader(), "<tool_call>\n") == ("", [])  # nothing but the tag: nothing to show


def test_a_call_that_does_not_parse_is_text():
    reader = CallReader()
    shown, calls = feed_chars(reader, 'Sure. <tool_call>\n{"name": "add", "arguments": [1, 2]}\n</tool_call>')
    assert calls == [] and shown == 'Sure. {"name": "add", "arguments": [1, 2]}' == reader.content


@pytest.mark.parametrize("body, param", [
    ({"tools": "add"}, "tools"),
    ({"tools": [{"type": "function"}]}, "tools[0]"),
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools[0].function.name"),
    ({"tools": [ADD, ADD]}, "tools[1].function.name"),
    ({"tools": [ADD], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [ADD], "tool_choice": {"type": "function", "function": {"name": "mul"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [ADD], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
])
def test_wrong_tools_name_the_field(body, param):
    with pytest.raises(ApiError) as err:
        tool_use(body)
    assert err.value.status == 400 and err.value.param == param


def test_a_parameter_schema_the_converter_cannot_enforce_is_a_400():
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": 5}}}
    with pytest.raises(ApiError) as err:
        tool_grammar(tool_use({"tools": [bad]}))
    assert err.value.status == 400 and err.value.param == "tools"


# A call in a model's habitual dress (Qwen 2.5's small models: a JSON object, bare or in a ```json fence), read as
# a call when it opens the answer and names one of the request's tools, in any size of streamed pieces.
FENCED = '```json\n{\n  "name": "add",\n  "arguments": {"a": 1, "b": 2}\n}\n```'


def feed_pieces(reader: CallReader, text: str, size: int) -> tuple[str, list]:
    shown, calls = "", []
    for i in range(0, len(text), size):
        content, new = reader.feed(text[i:i + size])
        shown += content
        calls += new
    return shown + reader.finish(), calls


@pytest.mark.parametrize("size", [1, 2, 7, 1000])
@pytest.mark.parametrize("text, after", [(FENCED, ""), (FENCED + "\nDone.", "Done."),
                                          ('{"name": "add", "arguments": {"a": 1, "b": 2}}', ""),
                                          ("\n" + FENCED.replace("```json", "```"), ""),
                                          (FENCED[:-2], "")])  # a fence cut short: its end is markup too
def test_a_call_written_as_json_opening_the_answer_is_a_call(text, after, size):
    reader = CallReader(["add"])
    shown, calls = feed_pieces(reader, text, size)
    assert [(c.name, c.input) for c in calls] == [("add", {"a": 1, "b": 2})] and reader.calls == calls
    assert shown.strip() == after and reader.content.strip() == after


@pytest.mark.parametrize("text", [
    '{"name": "subtract", "arguments": {"a": 1}}',  # not one of the request's tools
    '{"title": "a JSON answer"}', '[1, 2]', '```python\nprint(1)\n```', '{ not json at all }',
    'The call would be ```json\n{"name": "add", "arguments": {}}\n```',  # after text: only the tags count there
    '```json\n{"name": "add", "arguments": {"a": 1',  # cut before it closed
])
def test_json_that_is_not_such_a_call_is_text_as_written(text):
    for size in (1, 5, 1000):
        reader = CallReader(["add"])
        assert feed_pieces(reader, text, size) == (text, []) and reader.content == text


def test_other_json_is_held_back_no_longer_than_its_first_words():
    reader = CallReader(["add"])
    assert reader.feed('{"na') == ("", [])  # may still be {"name": "add"...
    assert reader.feed('me": "sub') == ('{"name": "sub', [])  # no tool's name starts so: shown at once
    reader = CallReader(["add"])
    assert reader.feed('{"title": ') == ('{"title": ', [])


def test_without_the_tools_names_json_is_text():
    text = '{"name": "add", "arguments": {"a": 1, "b": 2}}'
    assert feed_chars(CallReader(), text) == (text, [])
