"""The engine pipe's commands are typed (app/protocol/commands.py): what the supervisor sends is what the host
reads back, and a line that is not a command is answered with a sentence naming what is wrong, by a real engine
process that then goes on answering."""

from __future__ import annotations

import json
import subprocess

import pytest

from app.core import proc
from app.protocol import commands as C
from app.protocol import messages as P

EVERY_COMMAND = [
    C.Load(id=1, options=P.LoadOptions(model_path="/models/m.gguf", n_ctx=2048, kv_type="q8_0")),
    C.Chat(id=2, messages=[{"role": "user", "content": "hi"}], stream_interval_ms=80.0, truncate=False,
           sampling=P.SamplingOptions(temperature=0.0, logit_bias={15: -1.5}, stop=["\n"]),
           tools=[{"type": "function", "function": {"name": "f"}}]),
    C.Chat(id=3, messages=[]),
    C.Complete(id=4, prompt="Once upon a time", sampling=P.SamplingOptions(max_tokens=7)),
    C.Embed(id=5, inputs=["a", [1, 2, 3]]),
    C.Cancel(target=2), C.Cancel(),
    C.Reset(id=6), C.Unload(id=7), C.Shutdown(),
]


@pytest.mark.parametrize("command", EVERY_COMMAND, ids=lambda c: c.CMD)
def test_what_is_sent_is_what_the_host_reads(command):
    line = P.encode(command.wire())
    assert C.read(P.decode(line)) == command


@pytest.mark.parametrize(("data", "said"), [
    ([1, 2], "not a JSON object"),
    ({"id": 1}, "does not know the command 'None'"),
    ({"cmd": "fly", "id": 1}, "does not know the command 'fly'"),
    ({"cmd": "chat", "id": 1, "messages": "hi"}, "the 'messages' of the 'chat' command"),
    ({"cmd": "chat", "id": 1, "messages": ["hi"]}, "the 'messages' of the 'chat' command"),
    ({"cmd": "chat", "id": 1}, "'chat' command came without its 'messages'"),
    ({"cmd": "chat", "id": "1", "messages": []}, "the 'id' of the 'chat' command"),
    ({"cmd": "chat", "id": 1, "messages": [], "sampling": [0.5]}, "the 'sampling' of the 'chat' command"),
    ({"cmd": "chat", "id": 1, "messages": [], "truncate": 1}, "the 'truncate' of the 'chat' command"),
    ({"cmd": "chat", "id": 1, "messages": [], "stream_interval_ms": float("nan")}, "'stream_interval_ms'"),
    ({"cmd": "complete", "id": 1, "prompt": 5}, "the 'prompt' of the 'complete' command"),
    ({"cmd": "embed", "id": 1, "inputs": "text"}, "the 'inputs' of the 'embed' command"),
    ({"cmd": "cancel", "target": True}, "the 'target' of the 'cancel' command"),
    ({"cmd": "load", "id": 1}, "'load' command came without its 'options'"),
])
def test_a_line_that_is_not_a_command_is_one_sentence(data, said):
    with pytest.raises(C.ProtocolError, match=said):
        C.read(data)


def test_a_wrongly_typed_option_keeps_its_default_as_the_settings_file_does():
    read = C.read({"cmd": "complete", "id": 1, "prompt": "x", "sampling": {"temperature": "hot", "top_k": 3}})
    assert read.sampling.temperature == P.SamplingOptions().temperature and read.sampling.top_k == 3


def test_the_engine_answers_a_malformed_command_and_goes_on():
    engine = subprocess.Popen(proc.child_command("app.engine.process.host"), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=proc.child_env())
    try:
        assert b'"ready"' in engine.stdout.readline()
        engine.stdin.write(b'{"cmd": "chat", "id": 1, "messages": "hello"}\n{"cmd": "fly", "id": 2}\n'
                           b'not json\n' + P.encode(C.Reset(id=3).wire()))
        engine.stdin.flush()
        events = [json.loads(engine.stdout.readline()) for _ in range(4)]
    finally:
        engine.kill()
        engine.wait(timeout=10)
    assert [(e["ev"], e.get("kind")) for e in events[:3]] == [("error", "protocol")] * 3
    assert "the 'messages' of the 'chat' command" in events[0]["message"]
    assert "does not know the command 'fly'" in events[1]["message"]
    assert events[2]["message"] == "The engine received a malformed command."
    assert events[3] == {"ev": "ok", "id": 3, "cmd": "reset"}
