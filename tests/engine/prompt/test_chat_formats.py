"""A model without a chat template of its own (#29): which format it gets and why, no template marker in an
answer, an answer that stops, one BOS, and the user's own choice. The models are the bundled SmolLM2 with its
metadata edited (tests/helpers/gguf_edit.py): no template; no template and no ChatML tokens in the vocabulary; a
template that writes bos_token into a vocabulary that adds one."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from app.core.gguf.chat_formats import BUILTIN_NAMES, ChatFormatError, choose_format
from tests.helpers.gguf_edit import DROP, TEMPLATE_KEY, TOKENS_KEY, copy_with_fields, copy_without
from app.protocol.messages import LoadOptions, SamplingOptions
from app.engine.process.session import Session
from app.engine.prompt.template import BuiltinTemplate, ChatTemplate, turn_stops
from tests.helpers.templates import CHATML

POEM = [{"role": "user", "content": "Write a short poem about the sea."}]
GREEDY = SamplingOptions(temperature=0.0, max_tokens=60)
MARKER_PIECES = ("<|im", "im_end", "im_start", "<|turn", "\nUser:")


# --- the choice, from metadata alone -------------------------------------------------------------------
@pytest.mark.parametrize("markers, arch, expected", [
    (["<|im_start|>", "<|im_end|>"], "llama", "chatml"),
    (["<start_of_turn>", "<end_of_turn>"], "gemma3", "gemma"),
    (["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], "llama", "llama3"),
    (["<|user|>", "<|assistant|>", "<|end|>"], "phi3", "phi3"),
    (["<|user|>", "<|assistant|>"], "stablelm", "zephyr"),
    (["[INST]", "[/INST]"], "llama", "mistral-v3"),
    (["[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"], "llama", "mistral-v7"),
    # a vocabulary with two families' markers: the architecture decides
    (["<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>"], "gemma2", "gemma"),
    (["<|im_start|>"], "llama", "plain"),  # half a family is none
    ([], "llama", "plain"),
])
def test_a_model_without_a_template_gets_the_family_its_vocabulary_names(markers, arch, expected):
    fmt = choose_format(None, markers, arch, ("Some-Model-Instruct",))
    assert fmt.name == expected
    assert fmt.kind == ("plain" if expected == "plain" else "builtin")
    assert "no chat template" in fmt.why and fmt.base_model is False


def test_its_own_template_wins_and_the_user_overrides_both(tmp_path):
    chatml = ["<|im_start|>", "<|im_end|>"]
    assert choose_format("{{ x }}", chatml, "llama").kind == "model"
    assert choose_format("{{ x }}", chatml, "llama", override="gemma").name == "gemma"
    assert choose_format(None, chatml, "llama", override="plain").kind == "plain"
    jinja = tmp_path / "mine.jinja"
    jinja.write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    mine = choose_format("{{ x }}", chatml, "llama", override=str(jinja))
    assert (mine.kind, mine.source) == ("file", jinja.read_text())
    with pytest.raises(ChatFormatError, match="neither a chat template file nor a built-in.*chatml.*gemma"):
        choose_format(None, chatml, "llama", override="chatmll")


def test_a_model_that_says_nothing_of_chat_is_labelled_a_base_model():
    assert choose_format(None, [], "llama", ("Llama-3.2-1B", "llama-3.2-1b.Q4_0")).base_model
    assert "base model" in choose_format(None, [], "llama", ("Llama-3.2-1B",)).why
    assert not choose_format(None, [], "llama", ("Llama-3.2-1B-Instruct",)).base_model
    assert not choose_format(None, [], "gemma3", ("gemma-3-1b-it",)).base_model
    assert not choose_format("{{ x }}", [], "llama", ("Llama-3.2-1B",)).base_model  # it has a template


def test_every_builtin_hearth_offers_is_one_llama_cpp_renders():
    for name in BUILTIN_NAMES:
        assert BuiltinTemplate(name).render([{"role": "user", "content": "hi"}])
    with pytest.raises(Exception, match="no built-in chat template named"):
        BuiltinTemplate("chatmll")


def test_builtin_templates_render_as_llama_cpp_writes_them():
    chat = [{"role": "user", "content": "AAA"}, {"role": "assistant", "content": "BBB"},
            {"role": "user", "content": "CCC"}]
    assert BuiltinTemplate("gemma").render(chat) == (
        "<start_of_turn>user\nAAA<end_of_turn>\n<start_of_turn>model\nBBB<end_of_turn>\n"
        "<start_of_turn>user\nCCC<end_of_turn>\n<start_of_turn>model\n")
    assert BuiltinTemplate("chatml").render(chat[:1]) == ChatTemplate(CHATML).render(chat[:1])
    # tools reach a built-in as text (it knows none), never dropped
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    assert "get_weather" in BuiltinTemplate("gemma").render(chat[:1], tools=[tool])


@pytest.mark.parametrize("template, specials, stops", [
    (ChatTemplate(CHATML), (), ["<|im_end|>"]),  # ChatML markers that are plain text here
    (ChatTemplate(CHATML), ("<|im_start|>", "<|im_end|>"), []),  # control tokens: llama.cpp ends the turn
    (BuiltinTemplate("gemma"), (), ["<end_of_turn>"]),
    (BuiltinTemplate("llama2"), ("</s>",), []),
    (ChatTemplate(choose_format(None, [], "llama").source), (), ["\nUser:"]),
])
def test_a_turn_marker_that_is_plain_text_becomes_a_stop(template, specials, stops):
    assert turn_stops(template, specials) == stops


# --- the loaded models -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def edited(tmp_path_factory, bundled_model):
    folder = tmp_path_factory.mktemp("formats")

    def rename_chatml(tokens):  # ids 1 and 2 stay control tokens, with texts no template knows
        tokens = list(tokens)
        tokens[1], tokens[2] = "<|turn_a|>", "<|turn_b|>"
        return tokens

    bos_template = "{{ bos_token }}" + CHATML
    return {
        "no_template": copy_without(bundled_model, folder / "no-template.gguf", TEMPLATE_KEY),
        "no_chatml": copy_with_fields(bundled_model, folder / "no-chatml.gguf",
                                      {TEMPLATE_KEY: lambda _old: DROP, TOKENS_KEY: rename_chatml}),
        # a vocabulary that adds BOS (<|endoftext|>, id 0), with a template that writes it too
        "bos": copy_with_fields(bundled_model, folder / "bos.gguf", {TEMPLATE_KEY: lambda _old: bos_template},
                                add={"tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.bos_token_id": 0}),
    }


def answer(path, chat_template: str = "auto", messages=POEM, sampling=GREEDY):
    session = Session.load(LoadOptions(model_path=str(path), n_ctx=1024, chat_template=chat_template))
    try:
        done = session.chat(messages, sampling, lambda _event: None, threading.Event())
        return session.describe(), done, list(session.decoder.tokens)
    finally:
        session.close()


def test_a_template_less_model_gets_builtin_chatml_from_its_vocabulary(edited):
    info, done, tokens = answer(edited["no_template"])
    fmt = info["chat_format"]
    assert (fmt["kind"], fmt["name"], fmt["turn_stops"]) == ("builtin", "chatml", [])
    assert "<|im_start|> <|im_end|>" in fmt["why"]
    assert not any(piece in done["text"] for piece in MARKER_PIECES)
    # the prompt is ChatML's, as control tokens: <|im_start|> (1) first, user, newline
    assert tokens[:1] == [1]


def test_without_chatml_tokens_chats_are_plain_text_and_no_marker_reaches_the_answer(edited):
    info, done, _tokens = answer(edited["no_chatml"])
    fmt = info["chat_format"]
    assert (fmt["kind"], fmt["turn_stops"]) == ("plain", ["\nUser:"])
    assert not any(piece in done["text"] for piece in MARKER_PIECES)


def test_chatml_forced_on_a_vocabulary_without_it_stops_at_its_plain_text_marker(edited):
    """The issue's case: `<|im_end|>` is plain text in this vocabulary. Before, it reached every answer and
    nothing stopped the answer; now the marker ends the turn and is never shown."""
    info, done, _tokens = answer(edited["no_chatml"], "chatml",
                                 sampling=SamplingOptions(temperature=0.0, max_tokens=200))
    assert info["chat_format"]["turn_stops"] == ["<|im_end|>"]
    assert not any(piece in done["text"] for piece in MARKER_PIECES)
    assert done["finish_reason"] == "stop" and done["completion_tokens"] < 200
    assert done["stop_sequence"] is None  # the end of a turn, not a stop sequence the client asked for


def test_a_template_that_writes_bos_gets_one_bos(edited):
    _info, _done, tokens = answer(edited["bos"], sampling=SamplingOptions(temperature=0.0, max_tokens=1))
    assert tokens[:2] == [0, 1]  # BOS (<|endoftext|>) once, then the template's <|im_start|>


def test_inspect_and_chat_say_which_format_and_why(edited):
    shown = subprocess.run([sys.executable, "-m", "app", "models", "inspect", str(edited["no_template"])],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    line = next(line for line in shown.stdout.splitlines() if line.startswith("Chat format:"))
    assert "chatml" in line and "<|im_start|>" in line
    chat = subprocess.run([sys.executable, "-m", "app", "chat", "--model", str(edited["no_chatml"]), "--prompt",
                           "Hi", "--max-tokens", "4", "--temp", "0", "--json"], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert chat.returncode == 0, chat.stderr
    assert "plain 'User:' / 'Assistant:' text" in chat.stderr
    assert json.loads(chat.stdout)["chat_format"]["name"] == "plain"
    wrong = subprocess.run([sys.executable, "-m", "app", "chat", "--chat-template", "chatmll", "--prompt", "Hi"],
                           capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert wrong.returncode != 0 and "neither a chat template file nor a built-in" in wrong.stderr
    assert "Traceback" not in wrong.stderr


def test_another_family_gets_its_own_builtin_template(gemma3_model):
    """A model of Gemma 3's shape without a template (random weights, a 262k SentencePiece vocabulary): Gemma's
    turn markers are control tokens in it, so llama.cpp's 'gemma' template is chosen, by the header alone
    (inspect) as by the loaded vocabulary, and its prompt carries them as tokens."""
    from app.core.gguf.chat_formats import format_for_file
    from app.core.gguf.info import read_gguf_info

    assert format_for_file(read_gguf_info(gemma3_model)).name == "gemma"
    info, done, tokens = answer(gemma3_model, sampling=SamplingOptions(temperature=0.0, max_tokens=8))
    assert (info["chat_format"]["kind"], info["chat_format"]["name"], info["chat_format"]["turn_stops"]) == \
        ("builtin", "gemma", [])
    assert tokens[:2] == [2, 4]  # BOS, then <start_of_turn> as its control token
    assert "<start_of_turn>" not in done["text"] and "<end_of_turn>" not in done["text"]
