"""`hearth bench spec`: plain, prompt-lookup and draft-model decoding of the same prompts, side by side.

Everything runs in this process on the engine's own Decoder and Speculator (no engine process), interleaved
per repeat (plain, lookup, draft, llama-cpp-python's prompt lookup, then the same rotated by one, ...) so that a
busy machine slows every mode alike. Rates are medians; ratios are medians of each repeat's ratio to its own
plain run, by wall time (what a user sees) and by CPU time (what the mode costs, much less swayed by other
people's work on a shared machine).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import numpy as np

from app.bench.basic import _llama_with_extra_bufts
from app.bench.model_options import ModelOptions
from app.protocol.option_spec import count, option
from app.core import paths
from app.core.library.bundled import bundled_model_path
from app.core.metrics import default_threads
from app.engine.decoding.decode import Decoder
from app.engine.speculation.draft_model import DraftModelDrafter
from app.engine.speculation.lookup import LookupDrafter
from app.engine.speculation.prediction import prediction_speculator
from app.engine.probes.probe import extra_bufts_decision
from app.protocol.messages import LoadOptions, SamplingOptions
from app.engine.decoding.runtime import Runtime
from app.engine.speculation.speculative import Speculator
from app.engine.prompt.template import template_for

QUANTS = ("F16", "Q8_0", "Q4_0", "Q4_1", "Q4_K_M")
CODE = '''def parse_config(path):
    """Read a simple key = value file into a dict."""
    result = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if "=" not in line:
                raise ValueError(f"line {number}: expected key = value")
            key, _, value = line.partition("=")
            key = key.strip()
            value = value.strip()
            if value.lower() in ("true", "false"):
                value = value.lower() == "true"
            elif value.isdigit():
                value = int(value)
            elif value.startswith('"') and value.endswith('"'):
                value = value[1:-1]
            result[key] = value
    return result
'''
EXAMPLE = "def add_all(items):\n    total = 0\n    for item in items:\n        total += item\n    return total\n"
# (name, kind, chat messages, start of the answer)
PROMPTS = [
    ("code-rename", "code", [
        {"role": "user", "content": "Rename add_all to sum_items:\n```python\n" + EXAMPLE + "```"},
        {"role": "assistant", "content": "```python\n" + EXAMPLE.replace("add_all", "sum_items") + "```"},
        {"role": "user", "content": "Rename parse_config to load_settings:\n```python\n" + CODE + "```"},
    ], "```python\ndef load_settings(path):\n"),
    ("chat-story", "chat", [{"role": "user", "content": "Tell me a short story about a lighthouse keeper."}], ""),
    ("chat-advice", "chat", [{"role": "user", "content": "How can I sleep better? Give me practical advice."}], ""),
]
MODES = ("plain", "lookup", "draft", "predicted", "mispredicted", "llama-cpp-python lookup")
# Speculative modes whose answers are compared with plain decoding's, token by token.
AGREEMENT = ("lookup", "draft", "predicted", "mispredicted")
LLAMA_TOKENS = 32  # llama-cpp-python's lookup runs at a few tokens per second here: fewer tokens, same prompts


@dataclass
class SpecOptions(ModelOptions):
    quants: str = option(",".join(QUANTS), "--quants", "target quantizations (comma-separated)")
    draft: str | None = option(None, "--draft-model", "draft model (default: the bundled model in Q4_0)", "PATH",
                               also=("--draft",))
    max_tokens: int = option(300, "--max-tokens", "", "N", bound=count(1, "tokens"))
    llama_tokens: int = option(LLAMA_TOKENS, "--llama-tokens", "tokens per llama-cpp-python lookup run (it is slow; "
                               "its rate is per token all the same)", "N", bound=count(1, "tokens"))
    repeats: int = option(3, "--repeats", "runs per figure; medians are reported", "N", bound=count(1, "runs"))
    no_llama: bool = option(False, "--no-llama", "skip llama-cpp-python's prompt lookup")
    recalibrate: bool = option(False, "--recalibrate", "measure the kept speculation costs of each model again "
                               "(hearth doctor shows them)")
    json: bool = option(False, "--json", "the report as JSON on stdout (rows go to stderr)")


def variant(qtype: str, source: Path) -> Path:
    """The bundled model in another quantization, made once into the cache folder."""
    if qtype == "Q4_1" and source == bundled_model_path():
        return source
    out = paths.cache_dir() / "bench-variants" / f"{source.stem}-{qtype}.gguf"
    if not out.exists():
        from app.core.making.quantize import quantize

        quantize(source, qtype, out=out, allow_requantize=True)
    return out


class _FirstToken:
    """Process CPU time at the first token: CPU seconds per token hardly change with the machine's load,
    wall seconds do (other people's work takes turns on the same cores)."""

    def __init__(self):
        self.cpu: float | None = None

    def __call__(self, event: dict) -> None:
        if self.cpu is None and event.get("ev") == "token":
            self.cpu = time.process_time()


def _rates(n: int, wall: float, first: _FirstToken) -> dict:
    cpu = time.process_time() - first.cpu if first.cpu is not None else 0.0
    return {"tok_s": (n - 1) / wall if wall > 0 and n > 1 else 0.0,
            "cpu_tok_s": (n - 1) / cpu if cpu > 0 and n > 1 else 0.0}


def _hearth_run(dec: Decoder, prompt: str, speculator, max_tokens: int) -> dict:
    dec.reset()  # every run evaluates its prompt afresh, as a new chat would
    first = _FirstToken()
    done = dec.generate(prompt, _greedy(max_tokens), first, speculator=speculator)
    out = _rates(done["completion_tokens"], 0.0, first)
    out["tok_s"] = done["gen_tok_s"]
    out["spec"] = done.get("spec")
    out["prediction"] = done.get("prediction")
    out["text"] = done["text"]
    # The answer's tokens but the last, which a plain answer never evaluates: what two runs compare.
    n = done["prompt_tokens"]
    out["tokens"] = dec.tokens[n : n + done["completion_tokens"] - 1]
    return out


def _greedy(max_tokens: int) -> SamplingOptions:
    return SamplingOptions(temperature=0.0, repeat_penalty=1.0, max_tokens=max_tokens, ignore_eos=True)


def first_difference(plain: dict, other: dict) -> int | None:
    """The index of the first answer token where a run left the plain answer; None if it never did."""
    a, b = plain["tokens"], other["tokens"]
    i = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if i is None and (len(a) != len(b) or plain["text"] != other["text"]):
        i = min(len(a), len(b))
    return i


def plain_gap(dec: Decoder, prompt: str, index: int) -> tuple[float, float]:
    """At answer token `index`, where plain decoding chose it: the gap between its best two logits, and how far
    those two logits move when the same tokens are evaluated in batches instead (all at once, or the answer in
    verify-sized chunks after its prompt): the kernels' rounding on this CPU, which verify batches meet. A
    difference at a gap within twice that movement is a near-tie the rounding can flip; a larger gap is a bug."""
    dec.reset()
    done = dec.generate(prompt, _greedy(index + 1), lambda _event: None)
    # The plain loop stops right after sampling its last token: the logits it sampled from are still there.
    stepped = _last_logits(dec)
    history, n_prompt = dec.tokens[:], done["prompt_tokens"]
    top2 = np.argsort(stepped)[-2:]
    moved = 0.0
    for chunk in (len(history), 17, 9):
        dec.reset()
        dec.eval_tokens(history[:n_prompt])
        for start in range(n_prompt, len(history), chunk):
            dec.eval_tokens(history[start : start + chunk])
        moved = max(moved, float(np.abs(_last_logits(dec)[top2] - stepped[top2]).max()))
    return float(stepped[top2[1]] - stepped[top2[0]]), moved


def _last_logits(dec: Decoder) -> np.ndarray:
    return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(dec.rt.ctx, -1), shape=(dec.rt.n_vocab,)).copy()


def _llama_run(llm, tokens: list[int], max_tokens: int) -> dict:
    llm.reset()
    n, started = 0, None
    first = _FirstToken()
    for _ in llm.generate(tokens, top_k=1, temp=0.0, repeat_penalty=1.0, reset=True):
        n += 1
        if started is None:
            started = time.perf_counter()
            first({"ev": "token"})
        if n >= max_tokens:
            break
    return _rates(n, time.perf_counter() - started, first)


def bench_target(label: str, path: Path, draft: Path, args: SpecOptions, extra: bool, on_row=None) -> list[dict]:
    # A fixed count, never adaptive: with flash attention, llama.cpp's CPU attention splits its work by thread
    # count, so on some models (Q4_1 here) one and two threads round a near-tie differently, and comparing
    # answers needs every run on the same count.
    threads = args.threads or default_threads()
    rt = Runtime(LoadOptions(model_path=str(path), n_ctx=2048, n_threads=threads, n_gpu_layers=args.gpu_layers),
                 extra_bufts=extra)
    dec = Decoder(rt)
    template = template_for(rt)[1]
    lookup = Speculator(LookupDrafter())
    lookup.calibrate(dec, renew=args.recalibrate)  # the target's calibration, which every mode below shares
    drafter = DraftModelDrafter(rt.options, str(draft), extra, rt.n_ctx)
    drafted = Speculator(drafter, k_cap=8)
    drafted.calibrate(dec, renew=args.recalibrate)
    if on_row is not None:
        on_row({"target": label, "lookup": lookup.plain_reason, "draft": drafted.plain_reason})
    llm = None
    if not args.no_llama:
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        with _llama_with_extra_bufts(extra):
            llm = llama_cpp.Llama(model_path=str(path), n_ctx=2048, n_threads=rt.n_threads,
                                  n_gpu_layers=args.gpu_layers, verbose=False,
                                  draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10))
    rows = []
    try:
        prompts = [(name, kind, template.render(messages, add_generation_prompt=True) + start)
                   for name, kind, messages, start in PROMPTS]
        # Predictions: the plain answer itself (regenerating at temperature 0), and another prompt's (wrong).
        answers = [_hearth_run(dec, prompt, None, args.max_tokens)["text"] for _, _, prompt in prompts]
        for i, (name, kind, prompt) in enumerate(prompts):
            tokens = rt.tokenize(prompt, add_special=rt.add_bos(), parse_special=True)
            right, wrong = answers[i], answers[(i + 1) % len(answers)]
            jobs = {
                "plain": lambda: _hearth_run(dec, prompt, None, args.max_tokens),
                "lookup": lambda: _hearth_run(dec, prompt, lookup, args.max_tokens),
                "draft": lambda: _hearth_run(dec, prompt, drafted, args.max_tokens),
                "predicted": lambda: _hearth_run(dec, prompt, prediction_speculator(dec, right), args.max_tokens),
                "mispredicted": lambda: _hearth_run(dec, prompt, prediction_speculator(dec, wrong), args.max_tokens),
            }
            if llm is not None:
                jobs["llama-cpp-python lookup"] = lambda: _llama_run(llm, tokens, args.llama_tokens)
            runs: dict[str, list[dict]] = {m: [] for m in jobs}
            order = list(jobs)
            for r in range(args.repeats):
                # Interleaved, and rotated each repeat so that no mode always follows the slowest one.
                for mode in order[r % len(order):] + order[: r % len(order)]:
                    runs[mode].append(jobs[mode]())
            row = _row(label, path.name, name, kind, runs)
            _agreement(row, runs, lambda index: plain_gap(dec, prompt, index))
            rows.append(row)
            if on_row is not None:
                on_row(row)
    finally:
        if llm is not None:
            llm.close()
        drafted.close()
        dec.close()
        rt.close()
    return rows


def _agreement(row: dict, runs: dict[str, list[dict]], gap_at) -> None:
    """For each speculative mode: do all its runs give one answer, is it plain decoding's, and where it is not,
    how near a tie plain decoding's choice was at the first difference."""
    plain = runs["plain"][0]
    row["plain_runs_agree"] = all(r["tokens"] == plain["tokens"] for r in runs["plain"])
    for mode in AGREEMENT:
        if mode not in runs:
            continue
        results = runs[mode]
        entry = row["modes"][mode]
        entry["runs_agree"] = all(r["tokens"] == results[0]["tokens"] and r["text"] == results[0]["text"]
                                  for r in results)
        index = first_difference(plain, results[0])
        entry["same_as_plain"] = index is None
        entry["first_difference"] = index
        entry["plain_gap"], entry["rounding"] = (None, None) if index is None else gap_at(index)


def _row(label: str, model: str, prompt: str, kind: str, runs: dict[str, list[dict]]) -> dict:
    """Medians of the rates, and ratios as the median of each repeat's own ratio: a mode and the plain run
    of the same repeat ran back to back, so a busy or quiet minute cancels out."""
    plain = runs["plain"]
    row = {"target": label, "model": model, "prompt": prompt, "kind": kind, "modes": {}}
    for mode, results in runs.items():
        entry = {}
        for key, ratio in (("tok_s", "ratio"), ("cpu_tok_s", "cpu_ratio")):
            entry[key] = statistics.median(r[key] for r in results)
            entry[ratio] = statistics.median(r[key] / p[key] if p[key] else 0.0 for r, p in zip(results, plain))
        if results[-1].get("spec"):
            s = results[-1]["spec"]
            entry.update(acceptance=s["acceptance"], tokens_per_step=s["tokens_per_step"], k=s["k"],
                         plain_reason=s["plain_reason"])
        if results[-1].get("prediction"):  # the answer's tokens that came where the prediction put them
            entry["prediction_accepted"] = results[-1]["prediction"]["accepted"]
        row["modes"][mode] = entry
    return row


def _header(report: dict) -> list[str]:
    return [f"hearth bench spec: greedy, {report['max_tokens']} tokens ({report['llama_tokens']} for "
            f"llama-cpp-python), median of {report['repeats']} runs, {report['threads']} threads; draft model "
            f"{report['draft']}; predicted: the plain answer as the prediction, mispredicted: another prompt's; "
            "tok/s (ratio vs plain: wall / CPU time)",
            "(=: the calibration ruled drafting out, so this ran the plain loop)",
            f"{'target':<7} {'prompt':<12} " + " ".join(f"{m[:24]:>24}" for m in MODES)]


def _line(r: dict) -> str:
    cells = []
    for m in MODES:
        e = r["modes"].get(m)
        mark = "=" if e and e.get("plain_reason") else " "
        cells.append(f"{e['tok_s']:6.1f} ({e['ratio']:4.2f}/{e['cpu_ratio']:4.2f}){mark}" if e else "-")
    return f"{r['target']:<7} {r['prompt']:<12} " + " ".join(f"{c:>24}" for c in cells) + "\n" + _agreement_line(r)


def _agreement_line(r: dict) -> str:
    """Whether each mode's answer is plain decoding's, and where not, plain's top-two gap at the difference."""
    parts = []
    for m in AGREEMENT:
        e = r["modes"].get(m)
        if not e or "same_as_plain" not in e:
            continue
        verdict = "a near-tie" if e["plain_gap"] is not None and e["plain_gap"] <= 2 * e["rounding"] else "A BUG"
        said = "= plain" if e["same_as_plain"] else (
            f"differs at token {e['first_difference']} (plain's top-two gap {e['plain_gap']:.4f}, batches move them "
            f"{e['rounding']:.4f}: {verdict})")
        parts.append(f"{m} {said}" + ("" if e["runs_agree"] else ", NOT the same every run"))
    if not r.get("plain_runs_agree", True):
        parts.append("plain NOT the same every run")
    return f"{'':<20} answers: " + "; ".join(parts)


def format_table(report: dict) -> str:
    return "\n".join(_header(report) + [_line(r) for r in report["rows"]])


def run(args: SpecOptions) -> int:
    source = Path(args.model)
    extra = bool(extra_bufts_decision(str(bundled_model_path())).get("ok"))
    draft = Path(args.draft) if args.draft else variant("Q4_0", source)
    quants = [q.strip().upper() for q in args.quants.split(",") if q.strip()]
    report = {"max_tokens": args.max_tokens, "llama_tokens": args.llama_tokens, "repeats": args.repeats,
              "threads": args.threads or "default", "draft": draft.name, "extra_bufts": extra,
              "load_before": os.getloadavg()[0], "rows": []}
    out = sys.stderr if args.json else sys.stdout
    print("\n".join(_header(report)), file=out, flush=True)

    def on_row(row: dict) -> None:
        if "modes" in row:
            print(_line(row), file=out, flush=True)
        else:  # a target loaded and calibrated: say what the calibration decided
            print(f"{row['target']}: " + "; ".join(f"{d}: {row[d] or 'may draft'}" for d in ("lookup", "draft")),
                  file=out, flush=True)

    for q in quants:
        report["rows"] += bench_target(q, variant(q, source), draft, args, extra, on_row)
    report["load_after"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"load average: {report['load_before']:.1f} before, {report['load_after']:.1f} after")
    return 0
