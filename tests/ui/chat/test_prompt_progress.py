"""#31.8 in the window: while a long prompt is read the chat, the monitor and the status bar say how far (tokens
read of tokens to read, from the engine's progress events), and while API requests hold the engine the chat says
its answer waits its turn instead of "Generating… 0.0 tok/s"."""

from __future__ import annotations

from dataclasses import replace

from app.protocol import messages as P
from app.ui.chat.chat_view import WAITING_TURN
from app.ui.monitor.monitor_view import unbroken
from tests.ui.conftest import ask, shot

ANSWER_TIMEOUT_MS = 120_000
# Prompts are read BATCH tokens at a time, and progress is said after each batch: a small batch makes a short
# prompt one of several batches (this machine reads 40-600 tokens a second, with the default 512 a long wait).
BATCH = 32


def test_a_long_prompt_says_how_far_it_is_read(qtbot, main_window, tmp_path):
    w = main_window
    qtbot.waitUntil(lambda: w.pages.built("monitor") is not None, timeout=10_000)
    with qtbot.waitSignal(w.bridge.model_loaded, timeout=ANSWER_TIMEOUT_MS):
        w.load_chosen_model(replace(w.bridge.options, n_batch=BATCH))
    seen = []

    def on_progress(done: int, total: int) -> None:  # connected last: the window's own slots have run
        seen.append((done, total, w.chat.hint.text(), w.monitor.summary.text(), w.state_label.text()))
        if len(seen) == 2:
            shot(w, "prompt-progress", tmp_path)

    w.bridge.prompt_progress.connect(on_progress)
    text = " ".join(["the cat sat on the mat"] * 20)  # about 150 tokens with the template's
    done = ask(qtbot, w, text, max_tokens=1)
    total = done["prompt_evaluated"]
    assert total > 2 * BATCH and seen, seen[:1]
    assert [s[0] for s in seen] == sorted(s[0] for s in seen) and seen[0][0] == 0 and seen[-1][0] == total
    assert {s[1] for s in seen} == {total}
    _, _, hint, summary, state = seen[1]
    assert hint == f"Reading the prompt: {BATCH} of {total:,} tokens ({100 * BATCH / total:.0f}%)…"
    assert summary == f"Reading the prompt… {unbroken(f'{BATCH}/{total:,} tokens')}"
    assert state.startswith("Reading the prompt… ")
    assert not w.chat.hint.isVisibleTo(w)  # read and answered: nothing left to say
    assert w.state_label.text() == "Ready"
    # A client that does not draw (the API server, hearth chat) hears none: an API stream begins with the
    # prompt's figures (Anthropic's message_start reads them from the first event).
    events: list = []
    w.bridge.local.chat([{"role": "user", "content": "Again: " + text}],  # not the cached prompt: read anew
                        P.SamplingOptions(max_tokens=1, temperature=0.0), events.append)
    qtbot.waitUntil(lambda: bool(events) and isinstance(events[-1], P.Done), timeout=ANSWER_TIMEOUT_MS)
    assert isinstance(events[0], P.Stats) and not any(isinstance(e, P.Progress) for e in events)
    assert events[-1]["prompt_evaluated"] > 2 * BATCH


def test_while_api_requests_hold_the_engine_the_chat_says_it_waits_its_turn(qtbot, main_window, tmp_path):
    w = main_window
    qtbot.waitUntil(lambda: w.pages.built("monitor") is not None, timeout=10_000)
    # A request on the window's engine from another client, as the Server page's API makes them.
    ahead: list = []
    sampling = P.SamplingOptions(max_tokens=2000, temperature=0.0, ignore_eos=True)
    rid = w.bridge.local.chat([{"role": "user", "content": "Count to a thousand."}], sampling, ahead.append)
    qtbot.waitUntil(lambda: any(isinstance(e, P.Token) for e in ahead), timeout=ANSWER_TIMEOUT_MS)
    ask(qtbot, w, "Hello?", max_tokens=2, wait=False)
    assert w.bridge.waiting_turn
    qtbot.wait(300)  # the engine answers the other request meanwhile; nothing of the window's comes
    assert w.bridge.waiting_turn and w.chat.generating
    assert w.chat.hint.text() == WAITING_TURN and w.chat.hint.isVisibleTo(w)
    assert w.monitor.summary.text() == "Waiting its turn: API requests are answered first…"
    assert w.state_label.text() == "Waiting its turn…" and w.speed_label.text() == ""
    shot(w, "waiting-turn", tmp_path)
    with qtbot.waitSignal(w.bridge.generation_finished, timeout=ANSWER_TIMEOUT_MS) as finished:
        with qtbot.waitSignal(w.bridge.turn_started, timeout=ANSWER_TIMEOUT_MS):
            w.bridge.local.cancel(rid)  # the API's answer ends: the window's turn comes
        assert w.chat.hint.text() != WAITING_TURN
    assert finished.args[0]["completion_tokens"] >= 1
    assert isinstance(ahead[-1], P.Done) and ahead[-1]["finish_reason"] == "cancelled"
