"""Hostile chat templates: rendering has a time and size budget, an empty prompt is an error, and an engine
never outlives the program that started it (#18, items 1 and 2)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from app.core import proc
from app.core.errors import GenerationError, HearthError
from tests.helpers.gguf_edit import copy_with_template
from app.protocol import commands as C
from app.protocol import messages as P
from app.engine.prompt import template_budget
from app.backends.client import EngineClient
from app.engine.prompt.template import ChatTemplate
from app.engine.prompt.template_budget import TemplateBudgetError, _peak_mb
from tests.helpers.templates import CHATML

HELLO = [{"role": "user", "content": "Hello"}]
NESTED_LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x"


@pytest.fixture
def quick_budget(monkeypatch):
    monkeypatch.setattr(template_budget, "RENDER_SECONDS", 0.5)


@pytest.mark.parametrize("source", [
    NESTED_LOOPS,
    "{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}",
    "{% for m in messages %}{% for i in range(100000) %}{% for j in range(100000) %}{{ raise_exception }}"
    "{% endfor %}{% endfor %}{% endfor %}",
])
def test_endless_loops_stop_at_the_time_budget(quick_budget, source):
    started = time.monotonic()
    with pytest.raises(TemplateBudgetError, match="longer than 0.5 s|larger than"):
        ChatTemplate(source).render(HELLO)
    assert time.monotonic() - started < 3


@pytest.mark.parametrize("source", [
    "{{ 'x' * 200000000 }}",
    "{{ 200000000 * 'x' }}",
    "{{ ['x'] * 200000000 }}",
    "{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
    "{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
    "{{ 10 ** 10000000 }}",
    "{{ range(10000000000) | list }}",
])
def test_huge_values_are_refused_before_they_are_made(source):
    before = _peak_mb()
    with pytest.raises(TemplateBudgetError, match="broken or hostile"):
        ChatTemplate(source).render(HELLO)
    assert _peak_mb() - before < 200  # refused before it was built, not after


def test_cancel_reaches_a_template_that_renders(quick_budget, monkeypatch):
    monkeypatch.setattr(template_budget, "RENDER_SECONDS", 60)
    cancelled = threading.Event()
    threading.Timer(0.3, cancelled.set).start()
    started = time.monotonic()
    with pytest.raises(TemplateBudgetError, match="cancelled"):
        ChatTemplate(NESTED_LOOPS).render(HELLO, cancelled=cancelled)
    assert time.monotonic() - started < 3


def test_ordinary_templates_render_as_before():
    chatml = ChatTemplate(CHATML)
    assert chatml.render(HELLO) == "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    looped = ChatTemplate("{% for i in range(3) %}{{ i }}{% endfor %}{{ 'ab' * 2 }}{{ 'c' ~ 'd' }}{{ 2 ** 10 }}")
    assert looped.render(HELLO) == "012ababcd1024"


@pytest.fixture(scope="module")
def hostile_models(tmp_path_factory, bundled_model):
    folder = tmp_path_factory.mktemp("hostile")
    return {"loops": copy_with_template(bundled_model, folder / "loops.gguf", NESTED_LOOPS),
            "empty": copy_with_template(bundled_model, folder / "empty.gguf", "{{ '' }}")}


def chat_refusal(client: EngineClient) -> str:
    """The sentence the engine refuses the chat with (the blocking client raises it)."""
    with pytest.raises(HearthError) as refused:
        for _ in client.chat(HELLO, P.SamplingOptions(max_tokens=4, temperature=0)):
            pass
    return str(refused.value)


@pytest.mark.parametrize("kind, message", [
    # It waits out the template's time budget: slow by design, in the heavy tier (CI runs it after the suite).
    pytest.param("loops", "chat template took longer than", marks=pytest.mark.heavy),
    ("empty", "the prompt is empty"),
])
def test_the_engine_refuses_a_hostile_template_and_keeps_serving(hostile_models, kind, message):
    client = EngineClient()
    try:
        client.load(P.LoadOptions(model_path=str(hostile_models[kind]), n_ctx=512, n_threads=1))
        pid = client.backend.pid
        started = time.monotonic()
        assert message in chat_refusal(client)
        assert time.monotonic() - started < template_budget.RENDER_SECONDS + 5
        # Not a crash: the same engine process answers the next request (a completion needs no template).
        done = None
        for event in client.complete("The sea is", P.SamplingOptions(max_tokens=3, temperature=0)):
            done = event
        assert isinstance(done, P.Done) and done["completion_tokens"] == 3
        assert client.backend.pid == pid
    finally:
        client.close()


def test_an_empty_prompt_is_an_error_not_an_abort(bundled_model):
    from app.engine.decoding.runtime import Runtime
    from app.engine.process.session import Session

    session = Session(Runtime(P.LoadOptions(model_path=str(bundled_model), n_ctx=256, n_threads=1),
                              extra_bufts=False), None)
    try:
        session.template = ChatTemplate("{{ '' }}")
        with pytest.raises(GenerationError, match="the prompt is empty"):
            session.chat(HELLO, P.SamplingOptions(max_tokens=4), lambda e: None, threading.Event())
    finally:
        session.close()


def test_an_engine_whose_parent_goes_away_exits(bundled_model):
    """stdin closing is how an engine learns that its parent died (killed, crashed): it must not live on."""
    engine = subprocess.Popen(proc.child_command("app.engine.process.host"), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=proc.child_env())
    try:
        assert b'"ready"' in engine.stdout.readline()
        load = P.encode(C.Load(id=1, options=P.LoadOptions(model_path=str(bundled_model), n_ctx=512,
                                                           n_threads=1)).wire())
        chat = P.encode(C.Complete(id=2, prompt="Once upon a time",
                                   sampling=P.SamplingOptions(max_tokens=100000, ignore_eos=True)).wire())
        engine.stdin.write(load + chat)
        engine.stdin.flush()
        for line in engine.stdout:
            if b'"token"' in line:
                break  # generating
        engine.stdin.close()
        engine.wait(timeout=10)
    finally:
        if engine.poll() is None:
            engine.kill()
            pytest.fail("the engine outlived its parent's pipe")
    assert sys.platform == "win32" or engine.returncode == 0
