"""An embedding model is refused for chat with one sentence and serves embeddings (#29: a BERT GGUF "answered"
`[unused12] [unused4]`). The model is a random-weight BERT written with the gguf package (tests/helpers)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest
from openai import BadRequestError, OpenAI

from app.protocol.messages import LoadOptions, SamplingOptions
from app.engine.process.session import NotAChatModel, Session
from tests.helpers.tiny_gguf import write_tiny_bert
from tests.server.conftest import KEY, start_server, stop_server

SENTENCE = "is an embedding model (bert, attention that is not causal)"


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return write_tiny_bert(tmp_path_factory.mktemp("bert") / "tiny-bert.gguf")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def test_the_engine_refuses_to_chat_with_it_and_embeds_with_it(bert):
    session = Session.load(LoadOptions(model_path=str(bert), n_ctx=128))
    try:
        assert SENTENCE in session.describe()["cannot_generate"]
        for ask in (lambda: session.chat([{"role": "user", "content": "hello"}], SamplingOptions(max_tokens=4),
                                         lambda _e: None, threading.Event()),
                    lambda: session.complete("hello", SamplingOptions(max_tokens=4), lambda _e: None,
                                             threading.Event())):
            with pytest.raises(NotAChatModel, match="cannot write an answer"):
                ask()
        vectors = session.embed(["hello world", "the sea"])["embeddings"]
        assert len(vectors) == 2 and len(vectors[0]) == 32
    finally:
        session.close()


def test_inspect_and_chat_say_what_it_is(bert):
    shown = run("models", "inspect", str(bert), "--json")
    assert shown.returncode == 0 and SENTENCE in json.loads(shown.stdout)["cannot_generate"]
    chat = run("chat", "--model", str(bert), "--prompt", "hello")
    assert chat.returncode == 1 and SENTENCE in chat.stderr and "Traceback" not in chat.stderr
    assert chat.stdout == ""  # no "answer" at all


def test_the_api_gives_a_400_for_chat_and_serves_embeddings(bert):
    proc, base = start_server("--model", str(bert), "--api-key", KEY, ctx=128)
    try:
        client = OpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=60)
        model = client.models.list().data[0].id
        with pytest.raises(BadRequestError, match="cannot write an answer"):
            client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        with pytest.raises(BadRequestError, match="cannot write an answer"):
            client.completions.create(model=model, prompt="hi", max_tokens=4)
        r = client.embeddings.create(model=model, input=["hello world"], encoding_format="float")
        assert len(r.data[0].embedding) == 32
    finally:
        stop_server(proc)
