"""The GUI thread never waits on the engine or the network: event-loop stalls during full-speed generation
and during a download, and a 50,000-token conversation that opens and scrolls without stalls."""

from __future__ import annotations

import random
import time

import pytest

from app.core.chats.store import ChatStore
from tests.ui.conftest import ask
from tests.helpers.heartbeat import MAX_STALL_MS, Heartbeat

LONG_CHAT_TOKENS = 50_000


def test_no_event_loop_stall_during_generation(qtbot, main_window):
    w = main_window
    w.chat.sampling_overrides = {"ignore_eos": True}
    stats: list[dict] = []
    appends = w.chat.transcript.flushes
    ask(qtbot, w, "Write a long story about the sea.", max_tokens=5, wait=True)  # warm the engine's caches
    redraws = w.monitor.redraws
    w.bridge.stats_received.connect(stats.append)
    beat = Heartbeat().start()
    started = time.monotonic()
    done = ask(qtbot, w, "Write a long story about the sea.", max_tokens=120)
    took_s = time.monotonic() - started
    beat.stop()
    assert done["completion_tokens"] == 120
    beat.assert_no_stall("generation")
    # Tokens were appended in batches (never more than one document append per token), and the
    # graphs kept up with the engine's stats (five a second at full speed; fewer on a slow machine), redrawn
    # as often as figures came, up to the monitor's four a second.
    from app.ui.monitor.monitor_view import REDRAW_MS

    assert w.chat.transcript.flushes - appends <= 120 + 2
    # One batching stage (#52.6): a merged piece is on screen when it arrives; the transcript's own timer held
    # each one up to another 80 ms.
    assert max(w.chat.transcript.delays_ms) < 40, w.chat.transcript.delays_ms
    assert len(stats) >= 2
    assert w.monitor.redraws - redraws >= 0.8 * min(len(stats), took_s * 1000 / REDRAW_MS)


def test_no_event_loop_stall_during_a_download(qtbot, idle_window, hub_server):
    w = idle_window
    w.tabs.setCurrentWidget(w.models)
    with qtbot.waitSignal(w.models.hub.results_shown, timeout=10_000):
        w.models.sources.setCurrentWidget(w.models.hub)
    w.models.hub.query.setText("big")
    with qtbot.waitSignal(w.models.hub.results_shown, timeout=20_000):
        w.models.hub.search_button.click()
    assert w.models.hub.select("acme/Big-GGUF", "big-F16.gguf")
    size = len(hub_server.repos["acme/Big-GGUF"].files["big-F16.gguf"])
    hub_server.rate = 8 * 2**20  # an 8 MB file in about a second: many heartbeats, many progress updates
    updates = w.models.jobs.updates
    beat = Heartbeat().start()
    started = time.perf_counter()
    with qtbot.waitSignal(w.models.jobs.job_finished, timeout=60_000) as finished:
        w.models.hub.download_button.click()
    seconds = time.perf_counter() - started
    beat.stop()
    assert size > 4 * 2**20 and finished.args[0] == "download"
    print(f"download {size / 2**20:.0f} MB in {seconds:.2f} s: {beat.summary()}")
    beat.assert_no_stall(f"a {size / 2**20:.0f} MB download ({beat.summary()})", min_beats=int(seconds * 40))
    # Progress reached the bar, throttled: about ten updates a second, not one per chunk.
    assert 3 <= w.models.jobs.updates - updates <= seconds * 12 + 2


def _words(rng: random.Random, n: int) -> str:
    vocab = ("the model reads a file and writes tokens into the cache while the window slides over old text "
             "quantization keeps weights small so a laptop can run large language models at home").split()
    return " ".join(rng.choice(vocab) for _ in range(n))


@pytest.fixture
def long_chat(hearth_home, bundled_model):
    """A real SQLite chat store with one conversation of 50,000 tokens (counted with the bundled model's
    tokenizer) in Markdown with lists and code, and a small newer conversation that the window opens first."""
    import llama_cpp

    vocab = llama_cpp.Llama(str(bundled_model), vocab_only=True, verbose=False)
    rng = random.Random(7)
    store = ChatStore()
    big = store.create("A very long chat")
    tokens = i = 0
    while tokens < LONG_CHAT_TOKENS:
        if i % 2 == 0:
            text = f"Question {i}: {_words(rng, 30)}?"
        else:
            text = (f"Answer {i}. {_words(rng, 120)}\n\n- {_words(rng, 15)}\n- **{_words(rng, 10)}**\n\n"
                    f"```python\ndef step_{i}(x):\n    return x * {i}\n```\n\n{_words(rng, 60)}")
        store.add_message(big, "user" if i % 2 == 0 else "assistant", text,
                          {} if i % 2 == 0 else {"completion_tokens": 300, "gen_tok_s": 80.0})
        tokens += len(vocab.tokenize(text.encode(), add_bos=False, special=False))
        i += 1
    small = store.create("A short chat")
    store.add_message(small, "user", "Hello")
    store.close()
    del vocab
    return {"id": big, "messages": i, "tokens": tokens}


def test_a_50k_token_conversation_opens_and_scrolls_without_stalls(qtbot, long_chat, idle_window):
    w = idle_window
    # What a start leaves until after the first paint is done: the monitor built and the library scan read.
    qtbot.waitUntil(lambda: w.pages.built("monitor") is not None and not w.models.tasks.busy(), timeout=30_000)
    transcript = w.chat.transcript
    renders = transcript.full_renders
    beat = Heartbeat().start()
    started = time.perf_counter()
    w.chat.conversations.select(long_chat["id"])
    w.chat.open_conversation(long_chat["id"])
    qtbot.waitUntil(lambda: not transcript.loading, timeout=60_000)
    open_s = time.perf_counter() - started
    beat.stop()
    print(f"open {long_chat['tokens']:,} tokens: {open_s:.2f} s, {beat.summary()}")
    # Opening renders in time-budgeted batches, yet Qt's own layout and paint of a 200,000-character
    # document come in pieces of 30-56 ms on this project's 2-core machine on a slow day (the code from
    # before this bound was set measured 57-68 ms the same hour, under 50 ms earlier that day): a CPU-speed
    # figure, not the app's. Rendering the conversation in one piece, the defect this guards against,
    # stalls for about a second, so twice the interactive bound still catches it on any CPU.
    beat.assert_no_stall(f"opening {long_chat['tokens']:,} tokens in {open_s:.2f} s ({beat.summary()})",
                         limit_ms=2 * MAX_STALL_MS)
    assert transcript.full_renders == renders + 1
    text = transcript.plain_text()
    assert "Question 0:" in text and f"Answer {long_chat['messages'] - 1}." in text
    bar = transcript.verticalScrollBar()
    assert bar.value() == bar.maximum() > 0, "the conversation opens at its end"

    # Scroll from the end to the top and back, as a user dragging the scroll bar would.
    beat = Heartbeat().start()
    steps = 40
    for k in list(range(steps, -1, -1)) + list(range(0, steps + 1)):
        bar.setValue(bar.maximum() * k // steps)
        qtbot.wait(15)
    beat.stop()
    print(f"scroll: {beat.summary()}")
    beat.assert_no_stall(f"scrolling ({beat.summary()})")

    # The answer in progress appends; it never rebuilds the transcript, and each append stays cheap
    # on this long document.
    flushes, blocks = transcript.flushes, transcript.document().blockCount()
    transcript.begin_stream()
    worst = 0.0
    for n in range(40):  # each a merged piece, as the engine sends them (one batching stage, #52.6)
        cpu = time.thread_time()
        transcript.append_token("".join(f" word{5 * n + k}" for k in range(5)))
        worst = max(worst, (time.thread_time() - cpu) * 1000)
        qtbot.wait(1)
    transcript.end_stream()
    assert transcript.full_renders == renders + 1
    assert transcript.flushes - flushes == 40  # one document append per piece, at once
    print(f"append: worst flush {worst:.2f} ms")
    assert worst < 10, f"appending tokens to a {long_chat['tokens']:,}-token transcript took {worst:.1f} ms"
    assert transcript.document().blockCount() - blocks <= 4  # only the new answer's blocks
    assert transcript.plain_text().rstrip().endswith("word199")
