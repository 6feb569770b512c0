"""Do llama.cpp's extra buffer types (AMX / weight repacking) work on this machine?

On some CPUs every quantized model segfaults inside the AMX kernels on its
first decode (llama.cpp issue 20824). The only safe test is to try it in a
throwaway child process. The answer is remembered per machine and llama.cpp
build, so the probe runs once; where the types work they stay on.

Run as a child: python -m app.engine.probes.probe MODEL_PATH
"""

from __future__ import annotations

import hashlib
import platform
import subprocess
import sys
import time
from pathlib import Path

from app.core import paths
from app.core.store.jsonstore import is_object, read_json, update_json
from app.core.machine import cpu_name
from app.core.proc import child_command, child_env

PROBE_OK = "hearth probe: extra buffer types work"  # what the child prints when it got through
# Part of the remembered answer's key: a probe that tests more makes older answers stale. Version 2 evaluates a
# prompt of several dozen tokens; version 1's single-token prompt never reached the batched AMX kernels, so it
# reported "extra buffer types work" on an AMX machine (Xeon, amx_tile) where every longer prompt segfaulted.
PROBE_VERSION = 2
# A prompt long enough to be evaluated as one batch through the matrix-matrix kernels (the crash is there).
PROBE_PROMPT = "The quick brown fox jumps over the lazy dog, and the dog does not mind at all. " * 4
PROBE_TIMEOUT_S = 120
# How long a machine's very first load waits for the probe (#49.11): about 1-2 s where it answers (a child loads the
# bundled model and reads one prompt), after which the first run runs as every later one, as fast and with the
# same answers. A probe slower than this (a machine busy with something else) goes on in the background and that
# one load keeps the extra buffer types off.
FIRST_PROBE_WAIT_S = 15.0
REMEMBER = "--remember"  # python -m app.engine.probes.probe --remember MODEL: probe, and keep the answer


def machine_key() -> str:
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    raw = "|".join([f"probe{PROBE_VERSION}", llama_cpp.__version__, info, cpu_name(), platform.machine()])
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def facts_file() -> Path | None:
    """Where machine facts are kept; None when Hearth's data folder cannot be made (a read-only or full disk):
    then the probe's answer holds for this run only."""
    try:
        return paths.machine_facts_file()
    except OSError:
        return None


def cached_result() -> dict | None:
    where = facts_file()
    facts = read_json(where, {}, valid=is_object) if where else {}
    entry = facts.get("extra_bufts")
    if isinstance(entry, dict) and entry.get("key") == machine_key():
        return entry
    return None


def run_probe(model_path: str, command: list[str] | None = None) -> dict:
    """Probe in a child process and remember the result. Never raises for a crash. command: the child to run
    instead of the probe's own (a test's seam: a child that crashes as the AMX kernels do on affected CPUs)."""
    started = time.perf_counter()
    cmd = command or child_command("app.engine.probes.probe", model_path)
    try:
        proc = subprocess.run(cmd, env=child_env(), capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
        ok = proc.returncode == 0 and PROBE_OK in proc.stdout
        rc = proc.returncode
        detail = "extra buffer types work" if ok else _describe_failure(rc, proc.stderr)
        remember = True
    except subprocess.TimeoutExpired:
        ok, rc, detail, remember = False, None, "the probe did not finish in time", False
    entry = {
        "key": machine_key(),
        "ok": ok,
        "returncode": rc,
        "detail": detail,
        "probe_s": round(time.perf_counter() - started, 2),
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    where = facts_file() if remember else None
    if where is not None:
        try:
            # Locked: the speculation calibration (app/engine/speculation/spec_calibration.py) shares the file.
            update_json(where, lambda facts: {**facts, "extra_bufts": entry}, {}, valid=is_object)
        except OSError as exc:  # a full or read-only disk costs the memory of this answer, not the engine
            print(f"hearth: could not remember the probe's answer in {where}: {exc.strerror or exc}.",
                  file=sys.stderr)
    return entry


def _describe_failure(rc: int, stderr: str) -> str:
    if rc is not None and rc < 0:
        import signal

        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"llama.cpp crashed ({name}) with extra buffer types on; Hearth loads models with them off"
    last = [line for line in (stderr or "").splitlines() if line.strip()][-1:]
    return f"the probe failed (exit {rc}{': ' + last[0] if last else ''}); Hearth loads models with them off"


def extra_bufts_decision(model_path: str) -> dict:
    """The remembered answer, probing first if this machine and build were never probed."""
    return cached_result() or run_probe(model_path)


_background: subprocess.Popen | None = None


def decision_or_background_probe(model_path: str, start_probe: bool = True) -> dict:
    """The remembered answer; on a machine never probed, a safe answer now (extra buffer types off) while the
    probe runs in the background and is remembered for the next load. A first start does not wait ~2 s for
    the probe before the model loads. start_probe=False: the caller starts it (start_background_probe) once
    its load is done, so that the probe's child does not take the CPU from that load."""
    cached = cached_result()
    if cached is not None:
        return cached
    if start_probe:
        start_background_probe(model_path)
    return {"ok": False, "background": True,
            "detail": "being probed in the background; this load keeps them off, the next one uses the answer"}


def decision_before_first_load(model_path: str, wait_s: float | None = None) -> dict:
    """The remembered answer; on a machine never probed, the probe first, waited for up to FIRST_PROBE_WAIT_S.

    Before (#19) a first start loaded at once with the extra buffer types off and probed after: every answer of
    that first run was slower (0.83-0.86x of llama-server against 0.97-0.99x later) and, being computed by other
    kernels, could differ from the same request's answer in every later run (#49.11). The probe runs in a
    process of its own that remembers its answer, so a wait cut short loses nothing: the probe goes on and the
    next load uses it."""
    cached = cached_result()
    if cached is not None:
        return cached
    start_background_probe(model_path)
    wait_for_background_probe(FIRST_PROBE_WAIT_S if wait_s is None else wait_s)
    return cached_result() or decision_or_background_probe(model_path, start_probe=False)


def start_background_probe(model_path: str) -> None:
    """The probe in a process of its own session, which remembers the answer itself: it outlives the engine
    that started it. (As a thread of the engine, a one-shot `hearth chat` ended before the probe did, so its
    answer was never kept and every later run probed again, beside its own answer.)"""
    global _background
    if _background is None or _background.poll() is not None:
        _background = subprocess.Popen(child_command("app.engine.probes.probe", REMEMBER, model_path), env=child_env(),
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, start_new_session=True)


def wait_for_background_probe(timeout: float | None = None) -> None:
    if _background is not None:
        try:
            _background.wait(timeout)
        except subprocess.TimeoutExpired:
            pass


def _child(model_path: str) -> int:
    import llama_cpp

    from app.engine.decoding.decode import Decoder
    from app.protocol.messages import LoadOptions, SamplingOptions
    from app.engine.decoding.runtime import Runtime

    rt = Runtime(LoadOptions(model_path=model_path, n_ctx=256, n_batch=64), extra_bufts=True)
    dec = Decoder(rt)
    dec.generate(PROBE_PROMPT, SamplingOptions(temperature=0, repeat_penalty=1.0, max_tokens=4), lambda ev: None)
    del llama_cpp
    print(PROBE_OK, flush=True)
    return 0


def child_main(argv: list[str]) -> int:
    if argv[:1] == [REMEMBER]:  # the background probe: run the probe's child, keep its answer
        run_probe(argv[1])
        return 0
    return _child(argv[0])


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
