"""`hearth bench`: pp512 and tg128 as llama-bench defines them, the decode loop's own
cost per token, and llama-cpp-python's `Llama.generate()` measured in the same run.

pp512: 512 prompt tokens evaluated in one batch from an empty cache.
tg128: 128 tokens generated one at a time, each decoded (llama-bench decodes 128
single-token batches); here each step also samples and emits the token event the
engine would send, so the figure is what a user gets.
Runs are interleaved (Hearth, Llama.generate, Hearth, ...) so machine noise hits
both alike; medians are reported.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import statistics
import time
from dataclasses import dataclass

from app.bench.model_options import ModelOptions
from app.protocol.option_spec import count, option
from app.core.library.bundled import bundled_model_path
from app.core.errors import HearthError
from app.core.metrics import default_threads
from app.core.gguf.modelfile import check_model_file
from app.protocol import messages as P
from app.engine.decoding.decode import Decoder
from app.engine.probes.probe import extra_bufts_decision
from app.engine.decoding.runtime import Runtime

PP_TOKENS = 512
TG_TOKENS = 128
PROMPT = "Once upon a time"


@dataclass
class BasicOptions(ModelOptions):
    repeats: int = option(5, "--repeats", "runs per figure; medians are reported", "N", bound=count(1, "runs"))
    json: bool = option(False, "--json")


def _emitter():
    """Tag and serialize each event exactly as the engine host does (app/engine/process/host.py), into /dev/null."""
    fd = os.open(os.devnull, os.O_WRONLY)

    def emit(event: dict) -> None:
        event["id"] = 1
        os.write(fd, P.encode(event))

    return emit, fd


def measure_pp(dec: Decoder, rng: random.Random) -> float:
    toks = [rng.randrange(100, dec.rt.n_vocab) for _ in range(PP_TOKENS)]
    dec.reset()
    t = time.perf_counter()
    dec.eval_tokens(toks)
    return PP_TOKENS / (time.perf_counter() - t)


def measure_tg(dec: Decoder, sampling: P.SamplingOptions, emit) -> dict:
    """One tg128 run through the real decode loop; llama.cpp's eval timer gives its share."""
    dec.reset()
    rt = dec.rt
    # A prompt of several tokens is counted by llama.cpp as prompt eval, so the eval
    # counter afterwards holds exactly the generation decodes.
    rt.perf_reset()
    sampling.max_tokens = TG_TOKENS + 1  # 129 samples, 128 decodes
    sampling.ignore_eos = True
    done = dec.generate(PROMPT, sampling, emit)
    perf = rt.perf()
    decodes = perf["n_eval"]
    wall_ms = done["gen_s"] * 1000
    return {
        "tok_s": decodes / done["gen_s"],
        "eval_ms_per_token": perf["t_eval_ms"] / decodes,
        "wall_ms_per_token": wall_ms / decodes,
        "overhead_ms_per_token": (wall_ms - perf["t_eval_ms"]) / decodes,
        "decodes": decodes,
    }


@contextlib.contextmanager
def _llama_with_extra_bufts(enabled: bool):
    """`Llama()` has no switch for extra buffer types; where they crash, it must not use them either."""
    import llama_cpp
    import llama_cpp.llama_cpp as bindings

    # Llama() calls the function through the bindings module (llama_cpp.llama imports it as llama_cpp):
    # patching only the package's re-export left extra buffer types on, and on an AMX machine its first
    # batch segfaulted.
    original = bindings.llama_model_default_params

    def patched():
        params = original()
        params.use_extra_bufts = enabled
        return params

    llama_cpp.llama_model_default_params = bindings.llama_model_default_params = patched
    try:
        yield
    finally:
        llama_cpp.llama_model_default_params = bindings.llama_model_default_params = original


def measure_llama_generate(llm) -> float:
    tokens = llm.tokenize(PROMPT.encode(), add_bos=True)
    gen = llm.generate(tokens, temp=0.0, top_k=1, repeat_penalty=1.0, reset=True)
    next(gen)  # prompt evaluated and first token sampled
    t = time.perf_counter()
    for _ in range(TG_TOKENS):  # 128 decodes + samples
        next(gen)
    dt = time.perf_counter() - t
    gen.close()
    return TG_TOKENS / dt


def run_bench(path: str, threads: int, gpu_layers: int, repeats: int, with_llama: bool = True) -> dict:
    check_model_file(path)
    try:
        probe_model = str(bundled_model_path())
    except HearthError:
        probe_model = path
    extra = bool(extra_bufts_decision(probe_model).get("ok"))
    options = P.LoadOptions(model_path=path, n_ctx=1024, n_batch=PP_TOKENS, n_threads=threads,
                            n_gpu_layers=gpu_layers)
    rt = Runtime(options, extra_bufts=extra)
    dec = Decoder(rt)
    emit, fd = _emitter()
    llm = None
    if with_llama:
        import llama_cpp

        with _llama_with_extra_bufts(extra):
            llm = llama_cpp.Llama(model_path=path, n_ctx=1024, n_batch=PP_TOKENS, n_threads=threads,
                                  n_threads_batch=threads, n_gpu_layers=gpu_layers, verbose=False)
    rng = random.Random(1234)
    try:
        # Warm-up, as llama-bench does: first touches of the mapped weights are not speed.
        measure_pp(dec, rng)
        measure_tg(dec, P.SamplingOptions(temperature=0.0, repeat_penalty=1.0), emit)
        if llm is not None:
            measure_llama_generate(llm)
        pp, greedy, chain, llama_tg = [], [], [], []
        for _ in range(repeats):
            pp.append(measure_pp(dec, rng))
            chain.append(measure_tg(dec, P.SamplingOptions(seed=42), emit))
            # Paired and adjacent: the ratio compares runs that saw the same machine load.
            greedy.append(measure_tg(dec, P.SamplingOptions(temperature=0.0, repeat_penalty=1.0), emit))
            if llm is not None:
                llama_tg.append(measure_llama_generate(llm))
    finally:
        os.close(fd)
        dec.close()
        rt.close()
        if llm is not None:
            llm.close()

    def med(runs, key):
        return statistics.median(r[key] for r in runs)

    tg = med(greedy, "tok_s")
    eval_ms = med(greedy, "eval_ms_per_token")
    overhead = med(greedy, "overhead_ms_per_token")
    result = {
        "model": os.path.basename(path),
        "model_path": path,
        "threads": threads,
        "gpu_layers": gpu_layers,
        "extra_bufts": extra,
        "repeats": repeats,
        "pp512": statistics.median(pp),
        "pp512_runs": pp,
        "tg128": tg,
        "tg128_runs": [r["tok_s"] for r in greedy],
        "eval_ms_per_token": eval_ms,
        "overhead_ms_per_token": overhead,
        "overhead_share": overhead / med(greedy, "wall_ms_per_token"),
        "eval_bound_ratio": eval_ms / med(greedy, "wall_ms_per_token"),
        "tg128_default_sampler": med(chain, "tok_s"),
        "sampler_chain_ms_per_token": med(chain, "overhead_ms_per_token") - overhead,
    }
    if llama_tg:
        result["llama_generate_tg"] = statistics.median(llama_tg)
        result["llama_generate_tg_runs"] = llama_tg
        # Each round ran both back to back; the median of the per-round ratios cancels
        # most of the load that other processes put on a shared machine.
        paired = [h["tok_s"] / l for h, l in zip(greedy, llama_tg)]
        result["ratio_vs_llama_generate"] = statistics.median(paired)
        result["ratio_runs"] = paired
    return result


def format_report(r: dict) -> str:
    lines = [
        f"Hearth bench: {r['model']}, {r['threads']} threads, {r['gpu_layers']} GPU layers, "
        f"extra buffer types {'on' if r['extra_bufts'] else 'off'}, median of {r['repeats']} runs",
        f"  pp512                          {r['pp512']:8.1f} tok/s  (runs {min(r['pp512_runs']):.1f}-{max(r['pp512_runs']):.1f})",
        f"  tg128, greedy                  {r['tg128']:8.1f} tok/s  (runs {min(r['tg128_runs']):.1f}-{max(r['tg128_runs']):.1f})",
        f"    llama.cpp eval time          {r['eval_ms_per_token']:8.3f} ms/token",
        f"    Hearth loop overhead         {r['overhead_ms_per_token']:8.3f} ms/token "
        f"({100 * r['overhead_share']:.1f}% of a token)",
        f"    share of eval-bound speed    {100 * r['eval_bound_ratio']:8.1f} %",
        f"  tg128, default sampler chain   {r['tg128_default_sampler']:8.1f} tok/s  "
        f"(the chain costs {r['sampler_chain_ms_per_token']:.3f} ms/token)",
    ]
    if "llama_generate_tg" in r:
        lines += [
            f"  Llama.generate() tg128         {r['llama_generate_tg']:8.1f} tok/s",
            f"  ratio Hearth / Llama.generate  {r['ratio_vs_llama_generate']:8.2f} x  (median of per-round ratios "
            f"{min(r['ratio_runs']):.2f}-{max(r['ratio_runs']):.2f})",
        ]
    return "\n".join(lines)


def run(options: BasicOptions) -> int:
    result = run_bench(options.model, options.threads or default_threads(), options.gpu_layers,
                       max(1, options.repeats))
    print(json.dumps(result, indent=2) if options.json else format_report(result))
    return 0
