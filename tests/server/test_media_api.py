"""#53.5: images and sounds through the API, in each dialect's own shapes, from the official clients: a real
`hearth serve` with tiny models that see (Gemma 3) and hear (Qwen2-Audio), each with its projector beside it in
the library, and the bundled model, which has none. At temperature 0 every dialect gives the answer the engine
gives for the same image and question (and two images give two answers); every bad medium is a 400 in the
dialect's own error shape, in one sentence, within a second."""

from __future__ import annotations

import base64
import shutil
import threading
import time

import httpx
import pytest

from app.bench.sample_media import png_bytes, wav_bytes
from app.engine.decoding.runtime import Runtime
from app.engine.process.session import Session
from app.protocol.media import media_part
from app.protocol.messages import LoadOptions, SamplingOptions
from tests.protocol.test_media import bomb_png
from tests.server.conftest import KEY, start_server, stop_server

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
ollama = pytest.importorskip("ollama")

CTX = 2048  # a Qwen2-Audio sound is 750 tokens
N = 12
QUESTION = "What is in this picture?"
SOUND_QUESTION = "What is this sound?"
IMAGES = (1, 3)  # seeds of two images the tiny Gemma 3 tells apart (tests/engine/media/test_media_greedy.py)
SOUNDS = (1, 2)
TEXT_ONLY = "SmolLM2-135M-Instruct.Q4_1"  # the bundled model: no projector
HEADERS = {"Authorization": f"Bearer {KEY}"}


def png(seed: int) -> bytes:
    return png_bytes(128, 128, seed)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def data_url(data: bytes, kind: str = "image/png") -> str:
    return f"data:{kind};base64,{b64(data)}"


def engine_answers(model, parts: list[tuple[str, bytes]], question: str) -> list[str]:
    """The engine's own greedy answers (Hearth's session in this process, as `hearth chat --image` runs it), one
    per medium, loaded as the server loads it (its context, one thread)."""
    session = Session(Runtime(LoadOptions(model_path=str(model), n_ctx=CTX, n_threads=1), extra_bufts=False), None)
    try:
        return [session.chat([{"role": "user", "content": [media_part(kind, data), {"type": "text", "text": question}]}],
                             SamplingOptions(temperature=0.0, max_tokens=N), lambda event: None,
                             threading.Event())["text"] for kind, data in parts]
    finally:
        session.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_media):
    """(the server's base URL, {family: the engine's answers}): Gemma 3 loaded at the start, Qwen2-Audio and the
    bundled model loaded on demand from the same library (three at once)."""
    home = tmp_path_factory.mktemp("media_home")
    for family in ("gemma3", "qwen2audio"):
        folder = home / "data" / "models" / family
        folder.mkdir(parents=True)
        shutil.copy(tiny_media[family].model, folder)
        shutil.copy(tiny_media[family].mmproj, folder)  # beside the model: the library pairs them
    never = home / "data" / "models" / "never-loaded"  # a pair listed from the library's pairing alone
    never.mkdir()
    shutil.copy(tiny_media["gemma3"].model, never / "seer.gguf")
    shutil.copy(tiny_media["gemma3"].mmproj, never / "mmproj-seer.gguf")
    proc, base = start_server("--api-key", KEY, "--model", str(home / "data" / "models" / "gemma3" / "gemma3.gguf"),
                              "--max-models", "3", env={"HEARTH_HOME": str(home)}, ctx=CTX)
    for model in ("qwen2audio", TEXT_ONLY):  # loaded now: a refusal is timed on a model already loaded
        assert httpx.post(base + "/chat/completions", headers=HEADERS, timeout=120, json={
            "model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}]}).status_code == 200
    expected = {"gemma3": engine_answers(tiny_media["gemma3"].model, [("image", png(s)) for s in IMAGES], QUESTION),
                "qwen2audio": engine_answers(tiny_media["qwen2audio"].model,
                                             [("audio", wav_bytes(2.0, s)) for s in SOUNDS], SOUND_QUESTION)}
    try:
        yield base, expected
    finally:
        assert stop_server(proc)


@pytest.fixture
def oai(served):
    return openai.OpenAI(base_url=served[0], api_key=KEY, max_retries=0, timeout=120)


def chat_image(seed: int) -> list[dict]:
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(png(seed))}},
                                         {"type": "text", "text": QUESTION}]}]


def test_chat_completions_image_url_gives_the_engines_answer_and_two_images_two(served, oai):
    _, expected = served
    answers = [oai.chat.completions.create(model="gemma3", messages=chat_image(seed), temperature=0,
                                           max_tokens=N).choices[0].message.content for seed in IMAGES]
    assert answers == expected["gemma3"]
    assert answers[0] != answers[1]
    streamed = oai.chat.completions.create(model="gemma3", messages=chat_image(IMAGES[0]), temperature=0,
                                           max_tokens=N, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == expected["gemma3"][0]


def test_chat_completions_input_audio_to_the_model_that_hears(served, oai):
    _, expected = served
    answers = [oai.chat.completions.create(model="qwen2audio", temperature=0, max_tokens=N, messages=[
        {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": b64(wav_bytes(2.0, seed)),
                                                                             "format": "wav"}},
                                     {"type": "text", "text": SOUND_QUESTION}]}]).choices[0].message.content
               for seed in SOUNDS]
    assert answers == expected["qwen2audio"]
    assert answers[0] != answers[1]


def test_models_say_what_each_model_takes_in(served, oai):
    base, _ = served
    listed = {m["id"]: m["meta"] for m in httpx.get(base + "/models", headers=HEADERS).json()["data"]}
    assert listed["gemma3"]["modalities"] == ["text", "image"]  # from the loaded model's description
    assert listed["qwen2audio"]["modalities"] == ["text", "audio"]
    assert listed[TEXT_ONLY]["modalities"] == ["text"]
    assert listed["seer"] == {**listed["seer"], "loaded": False, "modalities": ["text", "image"]}  # from the pairing
    assert oai.models.retrieve("qwen2audio").model_extra["meta"]["modalities"] == ["text", "audio"]
    # Ollama's clients (Open WebUI among them) offer images where /api/show says "vision".
    client = ollama.Client(host=base.removesuffix("/v1"), headers=HEADERS, timeout=120)
    assert "vision" in client.show("gemma3").capabilities and "audio" not in client.show("gemma3").capabilities
    assert "audio" in client.show("qwen2audio").capabilities and "vision" not in client.show("qwen2audio").capabilities
    assert not {"vision", "audio"} & set(client.show(TEXT_ONLY).capabilities)


# --- bad media: one sentence in the dialect's own shape, within a second --------------------------------------------
@pytest.fixture(scope="module")
def bomb() -> bytes:
    """10000x10000 black pixels: a few hundred KB sent, 300 MB once decoded."""
    return bomb_png(10000)


def timed(call):
    started = time.perf_counter()
    response = call()
    return response, time.perf_counter() - started


def openai_refusal(base: str, body: dict, path: str = "/chat/completions") -> tuple[dict, float]:
    response, took = timed(lambda: httpx.post(base + path, headers=HEADERS, json=body, timeout=60))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["message"].count(". ") == 0 and "\n" not in error["message"]  # one sentence
    return error, took


def chat_body(model: str, part: dict) -> dict:
    return {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": [part, {"type": "text",
                                                                                             "text": "What?"}]}]}


def test_bad_media_in_chat_completions_are_one_sentence_within_a_second(served, bomb, oai):
    base, _ = served
    image = {"type": "image_url", "image_url": {"url": data_url(png(1))}}
    cases = {
        "bomb": (chat_body("gemma3", {"type": "image_url", "image_url": {"url": data_url(bomb)}}),
                 "messages[0].content[0]", "is 10000x10000 pixels (100 MP); images may have at most 40 MP"),
        "text as png": (chat_body("gemma3", {"type": "image_url", "image_url": {
            "url": data_url(b"a shopping list\n" * 20)}}), "messages[0].content[0]",
            "is not an image (PNG, JPEG, GIF, BMP, WebP)"),
        "http url": (chat_body("gemma3", {"type": "image_url", "image_url": {"url": "http://example.com/cat.png"}}),
                     "messages[0].content[0].image_url.url", "fetches nothing from the network"),
        "no projector": (chat_body(TEXT_ONLY, image), "messages[0].content[0]",
                         f"{TEXT_ONLY} cannot see images: it has no projector"),
        "image to the model that hears": (chat_body("qwen2audio", image), "messages[0].content[0]",
                                          "qwen2audio cannot see images: its projector mmproj-qwen2audio.gguf takes "
                                          "sounds only"),
    }
    for name, (body, param, says) in cases.items():
        error, took = openai_refusal(base, body)
        assert error["param"] == param and says in error["message"], (name, error)
        assert took < 1.0, (name, took)
        print(f"chat completions, {name}: {took * 1000:.0f} ms")
    with pytest.raises(openai.BadRequestError) as raised:  # as the official client sees it
        oai.chat.completions.create(model=TEXT_ONLY, messages=chat_body(TEXT_ONLY, image)["messages"], max_tokens=4)
    assert raised.value.status_code == 400 and TEXT_ONLY in raised.value.message


# --- Anthropic's Messages -------------------------------------------------------------------------------------------


def image_block(data: bytes, media_type: str = "image/png") -> dict:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": b64(data)}}


def test_anthropic_image_block_gives_the_engines_answer(served):
    base, expected = served
    claude = anthropic.Anthropic(base_url=base.removesuffix("/v1"), api_key=KEY, max_retries=0, timeout=120)
    answers = [claude.messages.create(model="gemma3", max_tokens=N, extra_body={"temperature": 0}, messages=[
        {"role": "user", "content": [image_block(png(seed)), {"type": "text", "text": QUESTION}]}]).content[0].text
        for seed in IMAGES]
    assert answers == expected["gemma3"]
    counted = claude.messages.count_tokens(model="gemma3", messages=[
        {"role": "user", "content": [image_block(png(1)), {"type": "text", "text": QUESTION}]}])
    plain = claude.messages.count_tokens(model="gemma3", messages=[{"role": "user", "content": QUESTION}])
    assert counted.input_tokens > plain.input_tokens  # the image's tokens count


def test_bad_media_in_anthropic_messages_are_its_error_within_a_second(served, bomb):
    base, _ = served
    cases = {
        "bomb": ("gemma3", image_block(bomb), "is 10000x10000 pixels (100 MP)"),
        "text as png": ("gemma3", image_block(b"a shopping list\n" * 20), "is not an image (PNG, JPEG"),
        "url source": ("gemma3", {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
                       "fetches nothing from the network"),
        "no projector": (TEXT_ONLY, image_block(png(1)), f"{TEXT_ONLY} cannot see images: it has no projector"),
    }
    for name, (model, block, says) in cases.items():
        response, took = timed(lambda: httpx.post(base + "/messages", headers=HEADERS, timeout=60, json={
            "model": model, "max_tokens": 4, "messages": [{"role": "user", "content": [
                block, {"type": "text", "text": "What?"}]}]}))
        assert response.status_code == 400, (name, response.text)
        body = response.json()
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", (name, body)
        assert says in body["error"]["message"], (name, body)
        assert name == "no projector" or "'messages.0.content.0" in body["error"]["message"], (name, body)
        assert took < 1.0, (name, took)
        print(f"anthropic messages, {name}: {took * 1000:.0f} ms")


# --- the Responses API ----------------------------------------------------------------------------------------------
def responses_input(seed: int) -> list[dict]:
    return [{"type": "message", "role": "user", "content": [
        {"type": "input_image", "image_url": data_url(png(seed)), "detail": "auto"},
        {"type": "input_text", "text": QUESTION}]}]


def test_responses_input_image_gives_the_engines_answer_and_a_stored_one_is_read_back(served, oai):
    _, expected = served
    responses = [oai.responses.create(model="gemma3", input=responses_input(seed), temperature=0,
                                      max_output_tokens=N) for seed in IMAGES]
    assert [r.output_text for r in responses] == expected["gemma3"]
    # Stored with its image, as sent: listed back, and a later turn continues the conversation about it.
    items = oai.responses.input_items.list(responses[0].id).data
    assert items[0].content[0].type == "input_image" and items[0].content[0].image_url == data_url(png(IMAGES[0]))
    follow = oai.responses.create(model="gemma3", previous_response_id=responses[0].id, input="And its colors?",
                                  temperature=0, max_output_tokens=N)
    same = oai.chat.completions.create(model="gemma3", temperature=0, max_tokens=N, messages=[
        *chat_image(IMAGES[0]), {"role": "assistant", "content": expected["gemma3"][0]},
        {"role": "user", "content": "And its colors?"}])
    assert follow.output_text == same.choices[0].message.content
    sound = oai.responses.create(model="qwen2audio", temperature=0, max_output_tokens=N, input=[
        {"type": "message", "role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": b64(wav_bytes(2.0, SOUNDS[0])), "format": "wav"}},
            {"type": "input_text", "text": SOUND_QUESTION}]}])
    assert sound.output_text == expected["qwen2audio"][0]


def test_bad_media_in_responses_are_one_sentence_within_a_second(served, bomb, oai):
    base, _ = served
    first = oai.responses.create(model="gemma3", input=responses_input(1), max_output_tokens=1)

    def body(model: str, part: dict, **extra) -> dict:
        return {"model": model, "max_output_tokens": 4, **extra, "input": [{"type": "message", "role": "user",
                                                                            "content": [part]}]}

    image = {"type": "input_image", "image_url": data_url(png(1)), "detail": "auto"}
    cases = {
        "bomb": (body("gemma3", {**image, "image_url": data_url(bomb)}), "input[0].content[0]",
                 "is 10000x10000 pixels (100 MP)"),
        "text as png": (body("gemma3", {**image, "image_url": data_url(b"a shopping list\n" * 20)}),
                        "input[0].content[0]", "is not an image (PNG, JPEG"),
        "http url": (body("gemma3", {**image, "image_url": "http://example.com/cat.png"}),
                     "input[0].content[0].image_url", "fetches nothing from the network"),
        "file_id": (body("gemma3", {"type": "input_image", "file_id": "file-1", "detail": "auto"}),
                    "input[0].content[0].file_id", "has no Files API"),
        "no projector": (body(TEXT_ONLY, image), "input[0].content[0]", f"{TEXT_ONLY} cannot see images"),
        # The image of a stored turn, continued on a model that cannot see it: the stored conversation is named.
        "stored image, no projector": (body(TEXT_ONLY, {"type": "input_text", "text": "And now?"},
                                            previous_response_id=first.id),
                                       "previous_response_id.content[0]", f"{TEXT_ONLY} cannot see images"),
    }
    for name, (request, param, says) in cases.items():
        error, took = openai_refusal(base, request, "/responses")
        assert error["param"] == param and says in error["message"], (name, error)
        assert took < 1.0, (name, took)
        print(f"responses, {name}: {took * 1000:.0f} ms")


# --- Ollama's API ---------------------------------------------------------------------------------------------------


def test_ollama_images_give_the_engines_answer_on_chat_and_generate(served):
    base, expected = served
    client = ollama.Client(host=base.removesuffix("/v1"), headers=HEADERS, timeout=120)
    greedy = {"temperature": 0, "num_predict": N}
    chats = [client.chat(model="gemma3", options=greedy, messages=[
        {"role": "user", "content": QUESTION, "images": [png(seed)]}]).message.content for seed in IMAGES]
    assert chats == expected["gemma3"]
    generated = client.generate(model="gemma3", prompt=QUESTION, images=[png(IMAGES[1])], options=greedy)
    assert generated.response == expected["gemma3"][1]


def test_bad_images_in_ollamas_api_are_its_error_within_a_second(served, bomb):
    base, _ = served
    cases = {
        "bomb": ("gemma3", b64(bomb), "'messages[0].images[0]' is 10000x10000 pixels (100 MP)"),
        "text as png": ("gemma3", b64(b"a shopping list\n" * 20), "'messages[0].images[0]' is not an image (PNG"),
        "http url": ("gemma3", "http://example.com/cat.png", "fetches nothing from the network"),
        "no projector": (TEXT_ONLY, b64(png(1)), f"{TEXT_ONLY} cannot see images: it has no projector"),
    }
    for name, (model, image, says) in cases.items():
        for path, body in (("/api/chat", {"messages": [{"role": "user", "content": "What?", "images": [image]}]}),
                           ("/api/generate", {"prompt": "What?", "images": [image]})):
            response, took = timed(lambda: httpx.post(base.removesuffix("/v1") + path, headers=HEADERS, timeout=60,
                                                      json={"model": model, "stream": False, **body}))
            assert response.status_code == 400, (name, path, response.text)
            assert list(response.json()) == ["error"], (name, path, response.text)
            error = response.json()["error"]
            assert says.replace("messages[0].", "" if path == "/api/generate" else "messages[0].") in error, \
                (name, path, error)
            assert took < 1.0, (name, path, took)
            print(f"ollama {path}, {name}: {took * 1000:.0f} ms")


def test_a_remote_backend_sends_images_and_sounds_in_openais_parts(served):
    """A Hearth whose model runs on another machine (the remote backend: the window's Connections, `hearth chat
    --endpoint`) sends a medium as OpenAI's image_url or input_audio part, and reads what the server's model takes
    from its model list: the answers are the engine's own, at temperature 0."""
    from app.backends.client import EngineClient
    from app.backends.remote import RemoteEndpoint
    from app.protocol import messages as P

    base, expected = served
    greedy = SamplingOptions(temperature=0.0, max_tokens=N)
    for family, kind, parts, question in (
            ("gemma3", "image", [png(s) for s in IMAGES], QUESTION),
            ("qwen2audio", "audio", [wav_bytes(2.0, s) for s in SOUNDS], SOUND_QUESTION)):
        with EngineClient(RemoteEndpoint(base, api_key=KEY, model=family)) as remote:
            info = remote.load(P.LoadOptions())
            assert info["media"]["vision" if kind == "image" else "audio"] is True, info["media"]
            answers = [list(remote.chat([{"role": "user", "content": [media_part(kind, data),
                                                                      {"type": "text", "text": question}]}],
                                        greedy))[-1]["text"] for data in parts]
        assert answers == expected[family]
    with EngineClient(RemoteEndpoint(base, api_key=KEY, model=TEXT_ONLY)) as remote:
        media = remote.load(P.LoadOptions())["media"]
    assert media["vision"] is False and media["audio"] is False  # the window and the CLI say so before sending
