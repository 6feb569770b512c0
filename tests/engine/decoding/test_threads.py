"""The thread controller's decisions on recorded-style timing traces, and the engine following a busy loop."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time

import pytest

from app.engine.decoding.threads import ThreadController

# Token times on this project's 2-core machine, Q4_0 bundled model (#19): idle 2 threads ~8.3 ms, 1 thread
# ~12 ms; one core busy with another program: 2 threads ~185 ms, 1 thread ~13 ms.
IDLE = {1: 0.012, 2: 0.0083}
BUSY = {1: 0.013, 2: 0.185}


def run(controller: ThreadController, tokens: int, times: dict[int, float], others: float | None,
        noise: float = 0.0, rng=None) -> list[int]:
    """Feed `tokens` token times of the machine state `times`; the count in use at each token."""
    rng = rng or random.Random(0)
    controller.others_cores = lambda: others
    used = []
    for _ in range(tokens):
        n = controller.current
        used.append(n)
        t = times[n] * (1 + rng.uniform(-noise, noise))
        switched = controller.observe(t)
        if switched is not None:
            assert switched == controller.current
    return used


def test_an_idle_machine_keeps_every_core():
    c = ThreadController(2)
    used = run(c, 2000, IDLE, others=0.02, noise=0.2)
    assert set(used) == {2} and c.changes == 0 and c.reason == "2 of 2 threads"


def test_a_busy_core_moves_generation_to_one_thread_within_a_few_tokens():
    c = ThreadController(2)
    run(c, 100, IDLE, others=0.02)
    used = run(c, 300, BUSY, others=1.0, noise=0.2)
    # The window the busy program arrived in still looked fast, so the first probe of one thread can lose;
    # the next window shows the slowdown, and one thread wins for good.
    assert used.count(2) <= 8
    assert set(used[30:]) == {1}
    assert c.reason == "1 of 2 threads: other programs are using the CPU"


def test_a_slowdown_the_cpu_reading_misses_still_moves_it():
    """A hypervisor's steal or a reading that is unavailable: the token times alone show it."""
    c = ThreadController(2)
    run(c, 100, IDLE, others=None)
    used = run(c, 300, BUSY, others=None)
    # Without a CPU reading it tries two threads again now and then; each try ends after its first token.
    assert used[-250:].count(1) >= 240


def on_one_thread_after_a_busy_spell() -> ThreadController:
    c = ThreadController(2)
    run(c, 100, IDLE, others=0.0)
    run(c, 100, BUSY, others=1.0)
    assert c.current == 1
    return c


def test_when_the_machine_frees_up_it_goes_back_to_every_core():
    c = on_one_thread_after_a_busy_spell()
    used = run(c, 200, IDLE, others=0.05)
    assert used[-150:] == [2] * 150
    assert c.reason == "2 of 2 threads: the CPU is free again"


def test_noise_alone_never_makes_it_oscillate():
    """Other programs come and go a little (0.3-0.6 cores) while both counts run at the same speed."""
    c = ThreadController(2)
    rng = random.Random(1)
    same = {1: 0.010, 2: 0.010}
    for _ in range(40):
        run(c, 50, same, others=rng.uniform(0.3, 0.6), noise=0.25, rng=rng)
    # Probes happen (others look busy now and then), but a loser waits twice as long each time.
    assert c.changes <= 2 * 8 + 2


def test_a_probe_on_a_busy_machine_costs_a_token_not_a_window():
    c = on_one_thread_after_a_busy_spell()
    # The busy program is still there but the reading says free (it just paused): a probe of 2 threads.
    used = run(c, 40, BUSY, others=0.0)
    # Each probe ends at its first timed token (far slower than one thread's): two tokens at most, one untimed.
    runs = "".join(map(str, used)).split("1")
    assert 2 in used and max(len(r) for r in runs) <= 2
    assert used.count(2) <= 8  # and the probes back off


# A faster CPU where two threads gain less (AVX-512 EPYC, #32): 1 thread 127-135 tok/s, 2 threads 145-161.
FAST = {1: 1 / 131, 2: 1 / 153}


def test_where_two_threads_gain_little_an_idle_machine_still_goes_back_to_them():
    """Started on one thread (a busy moment at the answer's start), then idle, with the odd preempted token: a
    probe of two threads must not need to win by the margin that guards a move down, or one slow token in its
    window costs the rest of the answer (measured before the fix, 100 seeds: the worst 59% of 200 tokens on two
    threads, the tenth worst 86%; after: 80% and 92%)."""
    shares = []
    for seed in range(100):
        rng = random.Random(seed)
        c = ThreadController(2, start=1)
        c.others_cores = lambda: 0.05
        used = []
        for _ in range(200):
            used.append(c.current)
            spike = 1.6 if rng.random() < 0.15 else 1.0
            c.observe(FAST[c.current] * rng.uniform(0.9, 1.1) * spike)
        shares.append(used.count(2) / len(used))
    shares.sort()
    assert shares[0] >= 0.75 and shares[10] >= 0.9


def test_a_move_down_still_needs_the_margin():
    """Both counts within 5% of each other and other programs at half a core: one thread is tried, never kept."""
    c = ThreadController(2)
    run(c, 2000, {1: 0.0105, 2: 0.0100}, others=0.6, noise=0.02)
    assert c.current == 2 and c.reason == "2 of 2 threads"


def test_this_process_s_own_threads_are_not_other_programs():
    """llama.cpp's workers spin a few milliseconds after a decode: the reading at an answer's start must not
    take them for another program. A hashing thread runs without the GIL, so it is a running thread here."""
    import hashlib

    from app.engine.decoding.threads import running_threads

    data = b"x" * 20_000_000
    stop = threading.Event()

    def hash_on():
        while not stop.is_set():
            hashlib.sha256(data).digest()

    worker = threading.Thread(target=hash_on)
    worker.start()
    try:
        time.sleep(0.05)
        seen = max(running_threads("self") for _ in range(20))
    finally:
        stop.set()
        worker.join()
    assert seen >= 2  # this thread and the hashing one
    assert running_threads("self") >= 1  # this one
    assert running_threads("no-such-process") == 0


def test_a_fixed_count_is_kept(bundled_model):
    from app.protocol.messages import LoadOptions
    from app.engine.decoding.runtime import Runtime

    rt = Runtime(LoadOptions(model_path=str(bundled_model), n_ctx=256, n_threads=2), extra_bufts=False)
    try:
        assert rt.threads is None
    finally:
        rt.close()


@pytest.mark.skipif(__import__("os").cpu_count() < 2, reason="needs two cores to take one away")
def test_the_engine_drops_a_thread_when_a_busy_loop_starts_mid_answer(bundled_model):
    """A real answer, a real busy loop on one core: the count falls to 1 and the answer is the same."""
    from app.engine.decoding.decode import Decoder
    from app.protocol.messages import STATS, LoadOptions, SamplingOptions
    from app.engine.decoding.runtime import Runtime

    sampling = SamplingOptions(max_tokens=200, temperature=0.0, repeat_penalty=1.0, ignore_eos=True)
    prompt = "Tell me a long story about a lighthouse."
    # Flash attention off: with it, llama.cpp's CPU attention splits a decode's work by thread count, and on the
    # bundled Q4_1 model one and two threads then round near-ties differently (three of three `hearth bench spec`
    # prompts gave different 300-token answers); without it the count changes nothing the model computes.
    rt = Runtime(LoadOptions(model_path=str(bundled_model), n_ctx=512, flash_attn="off"), extra_bufts=False)
    try:
        assert rt.threads is not None and rt.n_threads == 2
        controller, rt.threads = rt.threads, None  # the reference answer: two threads throughout
        decoder = Decoder(rt)
        plain = decoder.generate(prompt, sampling, lambda e: None)["text"]
        decoder.reset()
        rt.threads = controller
        counts: list[int] = []
        busy: list[subprocess.Popen] = []

        def emit(event):
            if event["ev"] == STATS:
                counts.append(event["n_threads"])
                if len(counts) == 2 and not busy:
                    busy.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))

        try:
            done = decoder.generate(prompt, sampling, emit)
        finally:
            for p in busy:
                p.kill()
        assert busy, "the answer ended before the busy loop started"
        assert 1 in counts[2:]
        assert done["n_threads"] == 1 and "other programs" in done["threads_reason"]
        # The thread count does not change what the model computes.
        assert done["text"] == plain
    finally:
        rt.close()


@pytest.mark.skipif(__import__("os").cpu_count() < 2, reason="needs two cores to take one away")
def test_a_greedy_answer_is_the_same_on_a_busy_machine_under_the_default_settings(bundled_model):
    """Flash attention left to llama.cpp (on, for the CPU): past 256 cells of context its attention splits by
    thread count, so the count a busy machine makes the engine choose would change a greedy answer. The answer
    holds the full count from there, and is the same as on a quiet machine."""
    from app.engine.decoding.decode import Decoder
    from app.protocol.messages import STATS, LoadOptions, SamplingOptions
    from app.engine.decoding.runtime import Runtime
    from app.engine.decoding.threads import SPLIT_KV_CELLS

    from app.bench.spec import PROMPTS
    from app.engine.prompt.template import template_for

    # Measured on the bundled model: this story at 1 and at 2 fixed threads differs from position 263 on (its
    # prompt is 40 tokens); the answer's 240 tokens reach past it.
    sampling = SamplingOptions(max_tokens=240, temperature=0.0, ignore_eos=True)
    rt = Runtime(LoadOptions(model_path=str(bundled_model), n_ctx=512), extra_bufts=False)
    try:
        _name, _kind, messages, start = next(p for p in PROMPTS if p[0] == "chat-story")
        prompt = template_for(rt, "auto")[1].render(messages, add_generation_prompt=True) + start
        assert rt.count_changes_answers and rt.n_threads == 2
        controller, rt.threads = rt.threads, None  # the quiet machine's answer: two threads throughout
        decoder = Decoder(rt)
        plain = decoder.generate(prompt, sampling, lambda e: None)
        assert plain["prompt_tokens"] < SPLIT_KV_CELLS < plain["prompt_tokens"] + 240  # it crosses mid-answer
        decoder.reset()
        rt.threads = controller
        seen: list[tuple[int, str]] = []
        busy: list[subprocess.Popen] = []

        def emit(event):
            if event["ev"] == STATS:
                seen.append((event["n_threads"], event.get("threads_reason", "")))
                if not busy:
                    busy.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
                elif "held" in seen[-1][1]:
                    busy.pop().kill()  # held: the rest runs at two threads whatever the machine does

        try:
            done = decoder.generate(prompt, sampling, emit)
        finally:
            for p in busy:
                p.kill()
        assert 1 in [n for n, _ in seen], "the busy loop never moved the count (the test proves nothing)"
        assert any("held" in reason for _, reason in seen) and done["n_threads"] == 2
        assert done["text"] == plain["text"]
        assert not rt.threads_held  # the next answer's count is free again
    finally:
        rt.close()


def test_an_answer_that_starts_on_a_busy_machine_starts_with_the_cores_left():
    """The first token at the full count can stall for seconds when every core is taken: decide before it."""
    c = ThreadController(2, others_now=lambda: 0)  # the program that sent the request is not counted
    assert c.start_of_answer() is None and c.current == 2
    c.others_now = lambda: 1  # one core taken by another program: start on the one left
    assert c.start_of_answer() == 1 and "other programs" in c.reason
    c.others_now = lambda: 0
    assert c.start_of_answer() == 2 and c.reason == "2 of 2 threads: the CPU is free again"
    c.others_now = lambda: None  # cannot tell: keep what the windows decided
    assert c.start_of_answer() is None and c.current == 2
