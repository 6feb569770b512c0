"""Speculation's step costs, measured once per model, machine and llama.cpp build, and kept.

The Speculator picks draft lengths from what a verify batch costs against a plain step. Timings taken during an
answer change from run to run (other programs, turbo clocks), and on quantized models a different verify
schedule changes the answer itself: llama.cpp's batched kernels round differently from single-token steps, so
the greedy answer can flip at a near-tie. Deciding from one kept calibration and from acceptance only makes the
same request give the same answer every run. The calibration is kept beside the extra-buffer probe's answer
(the data folder's machine.json), keyed by everything that changes the costs; `hearth bench spec
--recalibrate` renews it and `hearth doctor` shows it.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

from app.core.store.jsonstore import is_object, read_json, update_json
from app.engine.probes.probe import facts_file, machine_key
from app.engine.decoding.threads import runnable_others

CALIBRATION_SIZES = (1, 2, 3, 5, 9, 17, 33)  # a plain step, and verify batches of 1..32 drafts
ENTRY = "spec_calibration"
BUDGET_S = 3.0  # seconds of measuring after which no further round is taken (at least one measured round)
METHOD = 3  # in the key: a calibration measured another way is measured again
# Calibrations measured in this process, by key: a file that cannot be written still saves the work twice.
_MEASURED: dict[str, dict] = {}

# Wall seconds, the fastest of several tries: other programs only ever add time to a try, so the fastest is
# the closest to the machine's own cost. (Process CPU time is no better: llama.cpp's worker threads spin while
# they wait, and that counts.)
clock = time.perf_counter


def _file_identity(path: str) -> dict:
    p = Path(path).resolve()
    st = p.stat()
    return {"file": str(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _key(fields: dict) -> str:
    raw = json.dumps({**fields, "machine": machine_key(), "method": METHOD}, sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def target_fields(rt) -> dict:
    """What a target's step costs depend on: the model file, its placement and context settings."""
    o = rt.options
    return {"kind": "target", **_file_identity(str(rt.path)), "threads": rt.max_threads,
            "gpu_layers": o.n_gpu_layers, "n_batch": rt.n_batch, "kv_type": o.kv_type, "flash_attn": o.flash_attn,
            "extra_bufts": rt.extra_bufts}


def draft_fields(drafter_rt) -> dict:
    return {**target_fields(drafter_rt), "kind": "draft"}


def _entries() -> dict[str, dict]:
    """The kept calibrations by key, those that hold costs; {} when none can be read."""
    where = facts_file()
    entries = (read_json(where, {}, valid=is_object) if where else {}).get(ENTRY)
    if not isinstance(entries, dict):
        return {}
    return {k: e for k, e in entries.items() if isinstance(e, dict) and isinstance(e.get("costs"), dict)}


def _keep(key: str, entry: dict) -> None:
    _MEASURED[key] = entry
    where = facts_file()
    if where is None:
        return

    def change(facts):
        facts = facts if isinstance(facts, dict) else {}
        entries = facts.get(ENTRY) if isinstance(facts.get(ENTRY), dict) else {}
        entries[key] = entry
        facts[ENTRY] = entries
        return facts

    try:
        update_json(where, change, {}, valid=is_object)
    except OSError as exc:  # a full or read-only disk: this process keeps it, the next one measures again
        print(f"hearth: could not keep the speculation calibration in {where}: {exc.strerror or exc}.",
              file=sys.stderr)


def calibration(fields: dict, measure, renew: bool = False) -> dict:
    """The kept calibration for these fields, measuring it (measure(threads) -> {size: seconds}) when there is
    none or when asked to renew it.

    Measured at the full thread count, but only on a quiet machine: with another program wanting a core, a
    full count stalls at llama.cpp's barriers (a batch took 30x its quiet time here), and a figure that wrong
    must not be kept for good. Then the costs are measured at one thread, which other programs barely slow, and
    serve this process only; the next one measures again."""
    key = _key(fields)
    entry = None if renew else (_MEASURED.get(key) or _entries().get(key))
    if entry is None:
        quiet = fields["threads"] <= 1 or not (runnable_others() or 0)
        threads = fields["threads"] if quiet else 1
        costs = measure(threads)
        entry = {"costs": {str(n): s for n, s in costs.items()}, "model": Path(fields["file"]).name,
                 "kind": fields["kind"], "threads": fields["threads"], "measured_threads": threads,
                 "extra_bufts": fields["extra_bufts"], "gpu_layers": fields["gpu_layers"], "machine": machine_key(),
                 "method": METHOD, "when": time.strftime("%Y-%m-%d %H:%M:%S")}
        if quiet:
            _keep(key, entry)
        else:
            _MEASURED[key] = entry
    return entry


def costs_of(entry: dict) -> dict[int, float]:
    return {int(n): float(s) for n, s in entry["costs"].items()}


def measure_target(decoder, threads: int, reps: int = 3, sizes: tuple[int, ...] = CALIBRATION_SIZES
                   ) -> dict[int, float]:
    """Seconds of one decode per batch size: the fastest of `reps` tries, sizes interleaved so that a busy
    moment hits all alike, the first round only a warm-up (llama.cpp builds a graph per batch size); a bigger
    batch never costs less than a smaller one.

    The batches go after what the decoder holds and are removed again, so a conversation's cache survives (its
    next turn evaluates only its new tokens, in the same batches as without the measurement)."""
    rt = decoder.rt
    filler = rt.tokenize("The quick brown fox jumps over the lazy dog. " * 8, add_special=False)
    sizes = [n for n in sizes if n <= len(filler)]
    kept = len(decoder.tokens)
    if kept + 2 * len(filler) > rt.n_ctx:
        decoder.reset()  # no room after the conversation: it is evaluated again on its next turn
        kept = 0
    decoder.eval_tokens(filler)
    base = len(decoder.tokens)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    was = rt.n_threads
    if threads != was:
        rt.set_threads(threads)
    try:
        began = clock()
        for rep in range(reps + 1):
            for n in sizes:
                started = clock()
                decoder.verify(filler[:n])
                if rep:
                    times[n].append(clock() - started)
                decoder.truncate(base)
            # A slow model (a big one on the CPU, a software GPU) gets one measured round: its steps are long
            # enough that one try is precise, and three would keep its first answer waiting for a minute or more.
            if rep and clock() - began > BUDGET_S:
                break
    finally:
        if not decoder.truncate(kept):
            decoder.reset()
        if rt.n_threads != was:
            rt.set_threads(was)
    costs, most = {}, 0.0
    for n in sizes:
        most = costs[n] = max(min(times[n]), most)
    return costs


def kept() -> list[dict]:
    """Every kept calibration measured on this machine and llama.cpp build, for `hearth doctor`."""
    here = machine_key()
    return [e for e in _entries().values() if e.get("machine") == here and e.get("method") == METHOD]


def describe(entry: dict) -> str:
    """One line: the model, and a verify batch's cost against a plain step by batch size."""
    costs = costs_of(entry)
    plain = costs.get(1) or 0.0
    if entry.get("kind") == "draft":
        shape = f"one draft token {plain * 1000:.2f} ms"
    else:
        shape = ", ".join(f"{n}: {costs[n] / plain:.1f}x" for n in sorted(costs) if n > 1 and plain) or "-"
        shape = f"plain step {plain * 1000:.2f} ms; a batch of n costs {shape}"
    return (f"{entry.get('model')} ({entry.get('kind')}, {entry.get('threads')} threads, extra buffers "
            f"{'on' if entry.get('extra_bufts') else 'off'}, measured {entry.get('when')}): {shape}")
