"""A chat as a file (app/ui/chat/chat_export.py), on a real SQLite store: JSON brings back everything (versions and
their branches, meta, the system prompt), Markdown reads as the chat, and a bad file says why and imports nothing."""

from __future__ import annotations

import json

import pytest

from app.ui.chat.chat_export import (ChatImportError, export_json, export_markdown, file_name, import_chat,
                                  write_export)
from app.core.chats.store import ChatStore


def a_chat(store: ChatStore) -> int:
    cid = store.create("Roots & *maths*", "Be exact.")
    q = store.add_message(cid, "user", "What is 2+2?\nShow your work.")
    a = store.add_message(cid, "assistant", "<think>add them</think>\n\nIt is **4**.",
                          {"model": "SmolLM2 · Q4_1", "model_path": "/m/smol.gguf", "thought_s": 1.5,
                           "finish_reason": "stop", "completion_tokens": 9})
    store.add_message(cid, "user", "And 3+3?")
    store.add_message(cid, "assistant", "6.", {"model": "llama3", "endpoint": "http://box:8080/v1"})
    store.add_version(a, "Four.", {"model": "SmolLM2 · Q4_1"})  # a regenerated answer: a new branch
    store.add_message(cid, "user", "Thanks")
    assert store.message(q).versions == 1
    return cid


def shape(store: ChatStore, cid: int) -> list:
    return [(m.role, m.content, m.meta, m.versions, store.versions(m.id)) for m in store.messages(cid)]


def test_json_export_imports_back_whole_with_its_versions_and_branches(tmp_path):
    store = ChatStore(tmp_path / "chats.sqlite3")
    cid = a_chat(store)
    path = write_export(store, cid, tmp_path / "out.json", "json")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["format"] == "hearth-chat" and data["version"] == 1 and data["title"] == "Roots & *maths*"
    copy = import_chat(store, path)
    assert copy != cid and store.get(copy).system_prompt == "Be exact."
    assert store.get(copy).title == "Roots & *maths* (imported)"  # told apart from the original, still here
    assert shape(store, copy) == shape(store, cid)
    assert store.get(import_chat(ChatStore(tmp_path / "other.sqlite3"), path)).title is not None
    assert ChatStore(tmp_path / "other.sqlite3").list()[0].title == "Roots & *maths*"  # alone, its own name
    # The earlier branch comes back in the copy as it does in the original.
    answer = store.messages(copy)[1]
    store.show_version(answer.id, 1)
    assert [m.content for m in store.messages(copy)] == ["What is 2+2?\nShow your work.",
                                                         "<think>add them</think>\n\nIt is **4**.", "And 3+3?", "6."]
    assert store.messages(copy)[3].meta["endpoint"] == "http://box:8080/v1"
    # OpenAI's shape imports too: its system message is the chat's system prompt.
    (tmp_path / "openai.json").write_text(json.dumps({"messages": [
        {"role": "system", "content": "Terse."}, {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]}]}), encoding="utf-8")
    other = import_chat(store, tmp_path / "openai.json")
    assert store.get(other).system_prompt == "Terse." and store.get(other).title == "Hi there"
    assert [(m.role, m.content) for m in store.messages(other)] == [("user", "Hi there"), ("assistant", "Hello.")]


def test_markdown_reads_as_the_chat(tmp_path):
    store = ChatStore(tmp_path / "chats.sqlite3")
    cid = a_chat(store)
    store.show_version(store.messages(cid)[1].id, 1)
    text = export_markdown(store, cid)
    assert text.startswith("# Roots & *maths*\n") and "> Be exact." in text
    assert "## You\n\nWhat is 2+2?\nShow your work.\n" in text
    assert "## Assistant · SmolLM2 · Q4_1\n" in text and "## Assistant · llama3 on http://box:8080/v1\n" in text
    assert "<summary>Thought for 1.5 s</summary>\n\nadd them\n" in text and "<think>" not in text
    assert "It is **4**." in text and "Four." not in text  # the versions shown only
    assert file_name("Roots & *maths*", "markdown") == "Roots-maths.md" and file_name("???", "json") == "chat.json"


@pytest.mark.parametrize("content, sentence", [
    (b"{\"messages\": [", "bad.json cannot be imported: it is not valid JSON (line 1, column 15"),
    (b"\xff\xfe\x00garbage", "bad.json cannot be imported: it is not a text file"),
    (b"{\"title\": \"x\"}", "bad.json cannot be imported: it is JSON, but not a chat (no list of messages)."),
    (b"[{\"role\": \"robot\", \"content\": \"beep\"}]", "message 1 has the role 'robot'"),
    (b"[{\"role\": \"user\", \"content\": 5}]", "message 1 has no text content"),
    (b"{\"format\": \"hearth-chat\", \"version\": 9, \"messages\": []}", "exported by a newer Hearth"),
    (b"{\"format\": \"hearth-chat\", \"version\": 1, \"messages\": []}", "it has no messages"),
    (b"[{\"role\": \"user\", \"content\": \"a\", \"versions\": [{\"content\": \"a\", \"tail\": [3]}]}]",
     "message 1 after version 1 of message 1 is not a message"),
    # 400 KB of nesting (issue 48, E18): Python's JSON parser raised RecursionError, which no caller expected.
    (b"{\"messages\":" + b"[" * 200_000 + b"]" * 200_000 + b"}",
     "bad.json cannot be imported: it is nested more than 64 levels deep, which no chat is."),
    # Nested deep enough to walk, too deep to store or show: the same sentence.
    (b"[{\"role\": \"user\", \"content\": \"a\", \"meta\": " + b"[" * 500 + b"]" * 500 + b"}]",
     "bad.json cannot be imported: it is nested more than 64 levels deep, which no chat is."),
])
def test_a_bad_file_says_why_in_one_sentence_and_imports_nothing(tmp_path, content, sentence):
    store = ChatStore(tmp_path / "chats.sqlite3")
    (tmp_path / "bad.json").write_bytes(content)
    with pytest.raises(ChatImportError) as caught:
        import_chat(store, tmp_path / "bad.json")
    assert sentence in str(caught.value) and str(caught.value).endswith(".") and "\n" not in str(caught.value)
    assert store.list() == []
    with pytest.raises(ChatImportError, match="there is no such file"):
        import_chat(store, tmp_path / "missing.json")


def test_an_answers_tool_calls_are_exported_and_rebuild_the_conversation_the_model_saw(tmp_path):
    from app.ui.chat.chat_export import export_json, export_markdown, import_chat, write_export
    from app.core.chats.store import ChatStore, tool_turn_messages

    store = ChatStore(tmp_path / "chats.db")
    cid = store.create("Paris time")
    store.set_chat_tools(cid, ["time"])
    store.add_message(cid, "user", "What time is it in Paris?")
    call = {"server": "time", "tool": "get_current_time", "arguments": {"timezone": "Europe/Paris"},
            "decision": "once", "result": '{"datetime": "2025-01-01T12:00:00+01:00"}', "is_error": False,
            "seconds": 0.1, "id": "call_1", "round": 0, "said": "Let me look."}
    store.add_message(cid, "assistant", "It is noon in Paris.", {"tool_calls": [call]})
    answer = store.messages(cid)[-1]
    assert tool_turn_messages(answer.content, answer.meta) == [
        {"role": "assistant", "content": "Let me look.", "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_current_time", "arguments": '{"timezone": "Europe/Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_current_time",
         "content": '{"datetime": "2025-01-01T12:00:00+01:00"}'},
        {"role": "assistant", "content": "It is noon in Paris."}]
    assert tool_turn_messages("Hi.", {}) == [{"role": "assistant", "content": "Hi."}]
    markdown = export_markdown(store, cid)
    assert "<summary>Tool call: time · get_current_time (allowed once)</summary>" in markdown
    assert "2025-01-01T12:00:00+01:00" in markdown and markdown.index("Let me look.") < markdown.index("noon")
    assert export_json(store, cid)["tool_servers"] == ["time"]
    path = write_export(store, cid, tmp_path / "chat.json", "json")
    again = import_chat(store, path)
    assert store.chat_tools(again) == ["time"] and store.messages(again)[-1].meta["tool_calls"] == [call]
    store.close()


def test_markdown_keeps_an_answers_sources(tmp_path):
    """#55 E3: the answer said [1] and the Markdown file had no source list (the JSON export kept them)."""
    store = ChatStore(tmp_path / "chats.sqlite3")
    cid = store.create("Manual")
    store.add_message(cid, "user", "How do I reset it?")
    store.add_message(cid, "assistant", "Hold the button for ten seconds [1].",
                      {"sources": [{"n": 1, "where": "manual.pdf p. 2", "text": "Hold the reset button for ten "
                                                                              "seconds until the light blinks."}]})
    text = export_markdown(store, cid)
    assert "[1] manual.pdf p. 2" in text and "> Hold the reset button for ten seconds" in text
    assert text.index("Hold the button for ten seconds [1].") < text.index("**Sources**")
