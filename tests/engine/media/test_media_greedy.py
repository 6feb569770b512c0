"""Hearth's own decode loop with images and sounds gives, at temperature 0, the token ids libmtmd gives when
driven as llama-mtmd-cli drives it (tests/engine/media/mtmd_reference.py), on two architectures that see
(Gemma 3: non-causal attention over the image; Qwen2-VL: M-RoPE positions) and one that hears (Qwen2-Audio).
Two images (two sounds) give two answers: a projection left at zero would pass a naive comparison."""

from __future__ import annotations

import threading

import pytest

from app.bench.sample_media import png_bytes, wav_bytes
from app.engine.decoding.runtime import Runtime
from app.engine.process.session import Session
from app.protocol.media import media_part
from app.protocol.messages import LoadOptions, SamplingOptions
from tests.engine.media.mtmd_reference import reference_ids

N_CTX = 2048  # a Qwen2-Audio sound is 750 tokens
THREADS = 2
N = 16
QUESTION = "What is in this picture?"
SOUND_QUESTION = "What is this sound?"
# Two media each model tells apart within N tokens (a random 64-wide model is weak at it, the audio one most:
# libmtmd pads a 2 s sound to 30 s of 750 tokens).
SEEDS = {"gemma3": (1, 3), "qwen2vl": (1, 3), "qwen2audio": (1, 2)}
# The prompt llama-mtmd-cli renders with each tiny model's template (its leading BOS text left to the vocabulary).
PROMPTS = {
    "gemma3": "<start_of_turn>user\n<__media__>{q}<end_of_turn>\n<start_of_turn>model\n",
    "qwen2vl": "<|im_start|>user\n<__media__>{q}<|im_end|>\n<|im_start|>assistant\n",
    "qwen2audio": "<|im_start|>user\n<__media__>{q}<|im_end|>\n<|im_start|>assistant\n",
}


def medium(family: str, seed: int) -> bytes:
    return wav_bytes(2.0, seed) if family == "qwen2audio" else png_bytes(128, 128, seed)


def load(made, **options) -> Session:
    return Session(Runtime(LoadOptions(model_path=str(made.model), n_ctx=N_CTX, n_threads=THREADS, **options),
                           extra_bufts=False), None)


def ask(session: Session, messages: list[dict], n: int = N) -> tuple[list[int], dict]:
    """The answer's token ids (as the decoder hands them out) and its Done event."""
    ids: list[int] = []
    decoder = session.decoder
    plain = type(decoder).hand_out

    def recording(tok, *rest):
        ids.append(tok)
        return plain(decoder, tok, *rest)

    decoder.hand_out = recording  # the loop reads it once per answer: every token it hands out passes here
    try:
        done = session.chat(messages, SamplingOptions(temperature=0.0, max_tokens=n), lambda event: None,
                            threading.Event())
    finally:
        del decoder.hand_out
    return [t for t in ids if not session.rt.is_eog(t)], done


def question(family: str, seed: int, text: str | None = None) -> dict:
    kind = "audio" if family == "qwen2audio" else "image"
    text = text or (SOUND_QUESTION if kind == "audio" else QUESTION)
    return {"role": "user", "content": [media_part(kind, medium(family, seed)), {"type": "text", "text": text}]}


@pytest.mark.parametrize("family", ["gemma3", "qwen2vl", "qwen2audio"])
def test_greedy_ids_match_libmtmd_and_two_media_give_two_answers(tiny_media, family):
    made = tiny_media[family]
    session = load(made)
    try:
        assert session.describe()["media"]["mmproj"] == made.mmproj.name  # paired: it lies beside the model
        answers = {}
        first, second = SEEDS[family]
        text = SOUND_QUESTION if family == "qwen2audio" else QUESTION
        for seed in (first, second):
            ours, done = ask(session, [question(family, seed)])
            theirs = reference_ids(made.model, made.mmproj, PROMPTS[family].format(q=text),
                                   [medium(family, seed)], N, N_CTX, THREADS)
            assert ours == theirs, (family, seed)
            assert done["media"] == 1 and done["media_encoded"] == 1
            answers[seed] = ours
        assert answers[first] != answers[second]
    finally:
        session.close()


@pytest.mark.parametrize("family", ["gemma3", "qwen2vl"])
def test_a_second_question_about_the_same_image_does_not_encode_it_again(tiny_media, family):
    made = tiny_media[family]
    session = load(made)
    fresh = load(made)
    try:
        first, done = ask(session, [question(family, 1)])
        conversation = [question(family, 1), {"role": "assistant", "content": done["text"]},
                        {"role": "user", "content": "And what colour is it?"}]
        again, done2 = ask(session, conversation)
        assert done2["media_encoded"] == 0  # the cache held the image: reused, not encoded
        assert done2["prompt_evaluated"] < done2["prompt_tokens"]
        # The reuse changed nothing: a session that never saw the conversation answers the same.
        alone, done3 = ask(fresh, conversation)
        assert done3["media_encoded"] == 1
        assert again == alone
        # Another image in the same place is encoded, and nothing of the first one is reused past it.
        other = [question(family, 3), *conversation[1:]]
        swapped, done4 = ask(session, other)
        assert done4["media_encoded"] == 1
        fresh.reset()
        assert swapped == ask(fresh, other)[0]
    finally:
        session.close()
        fresh.close()
