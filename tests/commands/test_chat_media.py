"""`hearth chat` with images and sounds, as a user runs it: --image/--audio with --prompt, /image and /audio in the
turn-by-turn chat, the projector paired from the model's folder or named with --mmproj."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from app.bench.sample_media import png_bytes
from app.engine.decoding.runtime import Runtime
from app.engine.process.session import Session
from app.protocol.messages import LoadOptions, SamplingOptions
from tests.commands.test_cli import hearth
from tests.engine.media.test_media_greedy import question


@pytest.fixture
def pictures(tmp_path):
    made = {}
    for seed in (1, 3):
        made[seed] = tmp_path / f"picture-{seed}.png"
        made[seed].write_bytes(png_bytes(128, 128, seed))
    return made


def in_process_answer(made, seed: int) -> str:
    session = Session(Runtime(LoadOptions(model_path=str(made.model), n_ctx=1024), extra_bufts=False), None)
    try:
        done = session.chat([question("gemma3", seed)], SamplingOptions(temperature=0.0, max_tokens=12),
                            lambda event: None, threading.Event())
        return done["text"]
    finally:
        session.close()


def test_chat_image_prompt_answers_as_the_engine_does_and_two_images_differ(tiny_media, pictures):
    made = tiny_media["gemma3"]
    texts = {}
    for seed, picture in pictures.items():
        proc = hearth("chat", "--model", str(made.model), "--image", str(picture), "--prompt",
                      "What is in this picture?", "--temp", "0", "--max-tokens", "12", "--ctx", "1024", "--json")
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert out["media"] == 1 and out["media_encoded"] == 1 and out["media_tokens"] == 16
        texts[seed] = out["text"]
        assert texts[seed] == in_process_answer(made, seed)  # the projector paired from the folder reached the load
    assert texts[1] != texts[3]


def test_bad_files_and_models_that_cannot_see_are_one_sentence(tiny_media, pictures, tmp_path, bundled_model):
    fake = tmp_path / "notes.png"
    fake.write_text("a shopping list\n" * 20)
    proc = hearth("chat", "--image", str(fake), "--prompt", "x")
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("hearth: 'notes.png' is not an image (PNG, JPEG, GIF, BMP, WebP): its first bytes "
                                   "are not one of those formats.")
    proc = hearth("chat", "--model", str(bundled_model), "--image", str(pictures[1]), "--prompt", "x")
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith(f"hearth: {bundled_model.name} cannot see images: it has no projector: "
                                          "load it with --mmproj PATH")
    made = tiny_media["gemma3"]
    proc = hearth("chat", "--model", str(made.model), "--mmproj", str(tiny_media["qwen2vl"].model), "--prompt", "Hi",
                  "--max-tokens", "2", "--ctx", "512")
    assert proc.returncode == 0  # the text model answers; its projector is a sentence
    assert "hearth: qwen2vl.gguf is not a projector (its architecture is 'qwen2vl'" in proc.stderr


def test_interactive_image_and_audio_commands_attach_to_the_next_message(tiny_media, pictures):
    made = tiny_media["gemma3"]
    typed = f"/image {pictures[1]}\nWhat is in this picture?\n/image nowhere.png\n/audio {pictures[3]}\nAnd now?\n/exit\n"
    proc = subprocess.run([sys.executable, "-m", "app", "chat", "--model", str(made.model), "--temp", "0",
                           "--max-tokens", "12", "--ctx", "1024"], input=typed, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "(picture-1.png goes with your next message)" in proc.stdout
    expected = in_process_answer(made, 1)
    printable = expected[: next((i for i, c in enumerate(expected) if not c.isprintable()), len(expected))]
    assert f"assistant> {printable}" in proc.stdout  # the first answer is the one about that image
    assert "hearth: /image nowhere.png: no such file." in proc.stderr
    assert "hearth: 'picture-3.png' is an image (PNG), sent as a sound." in proc.stderr
    assert proc.stdout.count("assistant>") == 2


# (Of the benchmarks, `bench media` takes --mmproj: every benchmark flag must reach its benchmark,
# tests/commands/test_bench_flags.py.)
@pytest.mark.parametrize("command", ["chat", "serve", "bench media"])
def test_mmproj_is_a_flag_of_every_command_that_reads_media(command):
    proc = hearth(*command.split(), "--help")
    assert "--mmproj PATH" in proc.stdout
