"""`hearth bench media`: a model that sees (or hears), Hearth against llama.cpp's own llama-mtmd-cli on the same
files, as ratios from one run.

Both sides get the same model and projector, the same image (or sound) and question, the same threads, context
and greedy sampling, and write N tokens (end of text ignored). Per run, each gets a new image (a seeded picture:
no side can reuse an encoding from the run before), and Hearth's engine starts each run from an empty cache, as
the command-line tool does. Runs alternate (Hearth, llama-mtmd-cli, Hearth, ...) so machine noise hits both;
medians are reported, and each ratio is llama-mtmd-cli's time over Hearth's (above 1: Hearth is faster):

- encode: the image through the projector and its embeddings into the context (libmtmd's encode and decode;
  for llama-mtmd-cli, from its "encoding mtmd batch" to its last "decoded (batch n/n)" line);
- prompt: everything before the first token: the encode, the image's embeddings and the text evaluated;
- generation: tokens per second after the first.

Then Hearth alone: a second question about the same image in one chat, which must cost no second encode
(the engine keeps what it evaluated, by the image's hash).

llama-mtmd-cli comes with an engine runtime built with llama.cpp's tools (`hearth runtimes build vulkan
--tools`), or from $HEARTH_LLAMA_MTMD_CLI; it runs on the CPU (no device, as Hearth's cpu runtime), with the
extra buffer types as Hearth decided them.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from app.bench.model_options import ModelOptions
from app.protocol.option_spec import count, option
from app.core import env
from app.core.errors import HearthError
from app.core.metrics import default_threads

CTX = 2048
QUESTION = "Describe this picture."
SOUND_QUESTION = "What is this sound?"
CLI_ENV = env.LLAMA_MTMD_CLI.name
CLI_TRIES = 3
# What llama-mtmd-cli logs (with -v: its timings are llama.cpp's own log lines): each log line starts with its
# time, minutes.seconds.milliseconds.microseconds, which times the encode finer than its "done in N ms".
CLI_FIGURES = {
    "prompt_ms": r"prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens",
    "eval": r"\beval time =\s+([\d.]+) ms /\s+(\d+) runs",
}
CLI_STAMP = r"^(\d+)\.(\d+)\.(\d+)\.(\d+) I "
# From the encode's start to the last batch of the embeddings decoded: what Hearth's media_s times (libmtmd's
# mtmd_helper_eval_chunk_single, the encode and the decode of its embeddings into the context).
CLI_ENCODE = ("encoding mtmd batch", "mtmd batch encoding done", re.compile(r"decoded \(batch (\d+)/(\d+)\)"))


@dataclass
class MediaBenchOptions(ModelOptions):
    mmproj: str | None = option(None, "--mmproj", "the projector (default: the mmproj file beside the model)", "PATH")
    audio: bool = option(False, "--audio", "a sound instead of an image (a model that hears)")
    tokens: int = option(64, "--tokens", "tokens generated per run (default {default})", "N", bound=count(1, "tokens"))
    repeats: int = option(3, "--repeats", "runs per side; medians are reported", "N", bound=count(1, "runs"))
    json: bool = option(False, "--json")


def find_cli() -> Path | None:
    """$HEARTH_LLAMA_MTMD_CLI, else the one built with an engine runtime (--tools), native before portable."""
    from app.core.making.runtime_build import find_tool

    return find_tool("llama-mtmd-cli", env.LLAMA_MTMD_CLI.get())


def medium_bytes(audio: bool, seed: int) -> bytes:
    from app.bench.sample_media import png_bytes, wav_bytes

    return wav_bytes(2.0, seed) if audio else png_bytes(256, 256, seed)


def run_cli(cli: Path, model: str, mmproj: str, medium: Path, audio: bool, tokens: int, threads: int,
            repack: bool) -> dict:
    """One llama-mtmd-cli run; its figures from its own log (encode ms, prompt ms and tokens, eval ms and runs)."""
    env = {k: v for k, v in os.environ.items() if k != "GGML_VK_VISIBLE_DEVICES"}  # the CPU: no device
    cmd = [str(cli), "-m", model, "--mmproj", mmproj, "--audio" if audio else "--image", str(medium),
           "-p", SOUND_QUESTION if audio else QUESTION, "-n", str(tokens), "--temp", "0", "--ignore-eos",
           "-t", str(threads), "-tb", str(threads), "-c", str(CTX), "-dev", "none", "-ngl", "0",
           "-v", *([] if repack else ["--no-repack"])]
    # Its log is written by a thread of its own, and at exit the last lines (the timings) are at times lost: a run
    # that lost them is run again.
    for _ in range(CLI_TRIES):
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=900, env=env,
                              stdin=subprocess.DEVNULL)  # its answer may be any bytes (a random model's are)
        out = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise HearthError(f"llama-mtmd-cli failed (exit {proc.returncode}): {out.strip().splitlines()[-1:]}")
        found = {key: re.search(pattern, out) for key, pattern in CLI_FIGURES.items()}
        missing = [key for key, m in found.items() if m is None]
        if not missing:
            break
    else:
        raise HearthError(f"llama-mtmd-cli printed no {', '.join(missing)} in {CLI_TRIES} runs; its output ended: "
                          f"{out[-300:]!r}")
    encode_ms, with_decode_ms = encode_time_ms(out)
    prompt_ms, eval_ms = float(found["prompt_ms"].group(1)), float(found["eval"].group(1))
    runs = int(found["eval"].group(2))
    # Its prompt eval time counts every decode before the first token, the image's embeddings' too.
    return {"encode_s": with_decode_ms / 1000, "prompt_s": (encode_ms + prompt_ms) / 1000,
            "gen_tok_s": runs / (eval_ms / 1000) if eval_ms > 0 else 0.0}


def encode_time_ms(out: str) -> tuple[float, float]:
    """(the encode alone, the encode and the decode of its embeddings) in ms, from the stamps of the lines around
    them (each batch of media, summed)."""
    encode = both = 0.0
    began = None
    for line in out.splitlines():
        stamp = re.match(CLI_STAMP, line)
        if stamp is None:
            continue
        minutes, seconds, ms, us = (int(g) for g in stamp.groups())
        at = minutes * 60_000 + seconds * 1000 + ms + us / 1000
        last = CLI_ENCODE[2].search(line)
        if CLI_ENCODE[0] in line:
            began = at
        elif CLI_ENCODE[1] in line and began is not None:
            encode += at - began
        elif last and last.group(1) == last.group(2) and began is not None:
            both, began = both + at - began, None
    if encode <= 0 or both <= 0:
        raise HearthError("llama-mtmd-cli logged no encode of the image; its log format may have changed.")
    return encode, both


class HearthSide:
    """The engine as `hearth chat --image` runs it (the binding's runtime, in this process)."""

    def __init__(self, opts: MediaBenchOptions, mmproj: str, threads: int, repack: bool):
        from app.engine.decoding.runtime import Runtime
        from app.engine.process.session import Session
        from app.protocol.messages import LoadOptions

        self.session = Session(Runtime(LoadOptions(model_path=opts.model, mmproj=mmproj, n_ctx=CTX,
                                                   n_threads=threads, n_gpu_layers=0), extra_bufts=repack), None)
        media = self.session.describe().get("media") or {}
        if not media.get("audio" if opts.audio else "vision"):
            why = media.get("mmproj_error") or "its projector does not take " + ("sounds" if opts.audio else "images")
            self.close()
            raise HearthError(f"{Path(opts.model).name} cannot be benchmarked with "
                              f"{'a sound' if opts.audio else 'an image'}: {why}.")
        self.opts = opts

    def ask(self, data: bytes, fresh: bool = True, follow_up: list[dict] | None = None) -> tuple[dict, list]:
        from app.protocol.media import media_part
        from app.protocol.messages import SamplingOptions

        if fresh:
            self.session.reset()
        kind = "audio" if self.opts.audio else "image"
        messages = [{"role": "user", "content": [media_part(kind, data),
                                                 {"type": "text", "text": SOUND_QUESTION if self.opts.audio
                                                  else QUESTION}]}, *(follow_up or [])]
        done = self.session.chat(messages, SamplingOptions(temperature=0.0, max_tokens=self.opts.tokens,
                                                           ignore_eos=True), lambda event: None, threading.Event())
        return done, messages

    def close(self) -> None:
        self.session.close()


def run(opts: MediaBenchOptions) -> int:
    from app.core.gguf.modelfile import check_model_file
    from app.core.library.projectors import chosen_projector
    from app.engine.probes.probe import extra_bufts_decision

    check_model_file(opts.model)
    if opts.gpu_layers:
        raise HearthError("hearth bench media measures on the CPU, both sides (Hearth's cpu runtime and "
                          "llama-mtmd-cli with no device): leave out --gpu-layers.")
    mmproj = chosen_projector(opts.model, opts.mmproj)[0]
    if not mmproj:
        raise HearthError(f"{Path(opts.model).name} has no projector beside it: name one with --mmproj.")
    cli = find_cli()
    if cli is None:
        raise HearthError("llama-mtmd-cli is not built here: build it with `hearth runtimes build vulkan --tools` "
                          f"(llama.cpp's tools beside the runtime), or name one in ${CLI_ENV}.")
    threads = opts.threads or default_threads()
    repack = bool(extra_bufts_decision(opts.model).get("ok"))
    hearth = HearthSide(opts, mmproj, threads, repack)
    ours, theirs = [], []
    try:
        with tempfile.TemporaryDirectory(prefix="hearth-bench-media-") as work:
            medium = Path(work) / ("sound.wav" if opts.audio else "picture.png")
            medium.write_bytes(medium_bytes(opts.audio, 99))
            hearth.ask(medium.read_bytes())  # warm-up, both sides: first touches of the mapped weights
            run_cli(cli, opts.model, mmproj, medium, opts.audio, 4, threads, repack)
            for i in range(opts.repeats):
                medium.write_bytes(medium_bytes(opts.audio, i + 1))  # a new one each run: nothing to reuse
                done, _ = hearth.ask(medium.read_bytes())
                ours.append({"encode_s": done.get("media_s", 0.0), "prompt_s": done["prompt_s"],
                             "gen_tok_s": done["gen_tok_s"], "encoded": done.get("media_encoded")})
                theirs.append(run_cli(cli, opts.model, mmproj, medium, opts.audio, opts.tokens, threads, repack))
                print(f"run {i + 1}/{opts.repeats}: Hearth encode {ours[-1]['encode_s'] * 1000:.0f} ms, prompt "
                      f"{ours[-1]['prompt_s'] * 1000:.0f} ms, {ours[-1]['gen_tok_s']:.1f} tok/s; llama-mtmd-cli "
                      f"{theirs[-1]['encode_s'] * 1000:.0f} ms, {theirs[-1]['prompt_s'] * 1000:.0f} ms, "
                      f"{theirs[-1]['gen_tok_s']:.1f} tok/s", file=sys.stderr)
            # The same image asked about again in the same chat: no second encode.
            first, messages = hearth.ask(medium.read_bytes())
            again, _ = hearth.ask(medium.read_bytes(), fresh=False, follow_up=[
                {"role": "assistant", "content": first["text"]}, {"role": "user", "content": "And its colours?"}])
    finally:
        hearth.close()
    result = report(opts, mmproj, threads, repack, ours, theirs, again)
    print(json.dumps(result, indent=2) if opts.json else table(result))
    return 0


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def report(opts, mmproj, threads, repack, ours, theirs, again) -> dict:
    hearth = {k: round(_median(ours, k), 4) for k in ("encode_s", "prompt_s", "gen_tok_s")}
    cli = {k: round(_median(theirs, k), 4) for k in ("encode_s", "prompt_s", "gen_tok_s")}

    def ratio(a: float, b: float) -> float:
        return round(a / b, 3) if b > 0 else 0.0

    return {"model": Path(opts.model).name, "mmproj": Path(mmproj).name, "kind": "audio" if opts.audio else "image",
            "threads": threads, "extra_bufts": repack, "tokens": opts.tokens, "repeats": opts.repeats,
            "load_average": [round(x, 2) for x in os.getloadavg()], "hearth": hearth, "llama_mtmd_cli": cli,
            "ratios": {"encode": ratio(cli["encode_s"], hearth["encode_s"]),
                       "prompt": ratio(cli["prompt_s"], hearth["prompt_s"]),
                       "generation": ratio(hearth["gen_tok_s"], cli["gen_tok_s"])},
            "repeat": {"media_encoded": again.get("media_encoded"), "prompt_s": round(again["prompt_s"], 4)}}


def table(r: dict) -> str:
    h, c, x = r["hearth"], r["llama_mtmd_cli"], r["ratios"]
    rows = [f"{r['model']} + {r['mmproj']}, {r['kind']}, {r['threads']} threads, {r['tokens']} tokens, "
            f"medians of {r['repeats']} runs (load average {', '.join(map(str, r['load_average']))})",
            f"{'':<22}{'Hearth':>12}{'llama-mtmd-cli':>16}{'ratio':>8}",
            f"{'encode (ms)':<22}{h['encode_s'] * 1000:>12.1f}{c['encode_s'] * 1000:>16.1f}{x['encode']:>7.2f}x",
            f"{'to first token (ms)':<22}{h['prompt_s'] * 1000:>12.1f}{c['prompt_s'] * 1000:>16.1f}{x['prompt']:>7.2f}x",
            f"{'generation (tok/s)':<22}{h['gen_tok_s']:>12.1f}{c['gen_tok_s']:>16.1f}{x['generation']:>7.2f}x",
            f"the same {r['kind']} asked about again: {r['repeat']['media_encoded']} encodes, "
            f"{r['repeat']['prompt_s'] * 1000:.1f} ms to the first token",
            "ratio: llama-mtmd-cli's time over Hearth's (generation: Hearth's speed over its); above 1: Hearth is "
            "faster"]
    return "\n".join(rows)
