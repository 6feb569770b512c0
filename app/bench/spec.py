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

from app.bench.basic import _llama_with_extra_bufts
from app.bench.model_options import ModelOptions
from app.core import paths
from app.core.bundled import bundled_model_path
from app.engine.decode import Decoder
from app.engine.draft_model import DraftModelDrafter
from app.engine.lookup import LookupDrafter
from app.engine.probe import extra_bufts_decision
from app.engine.protocol import LoadOptions, SamplingOptions
from app.engine.runtime import Runtime
from app.engine.speculative import Speculator
from app.engine.template import ChatTemplate

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
MODES = ("plain", "lookup", "draft", "llama-cpp-python lookup")
LLAMA_TOKENS = 32  # llama-cpp-python's lookup runs at a few tokens per second here: fewer tokens, same prompts


@dataclass
class SpecOptions(ModelOptions):
    quants: str = ",".join(QUANTS)  # target quantizations, comma-separated
    draft: str | None = None  # None: the bundled model in Q4_0
    max_tokens: int = 128
    llama_tokens: int = LLAMA_TOKENS
    repeats: int = 3
    no_llama: bool = False
    json: bool = False


def variant(qtype: str, source: Path) -> Path:
    """The bundled model in another quantization, made once into the cache folder."""
    if qtype == "Q4_1" and source == bundled_model_path():
        return source
    out = paths.cache_dir() / "bench-variants" / f"{source.stem}-{qtype}.gguf"
    if not out.exists():
        from app.core.quantize import quantize

        quantize(source, qtype, out=out)
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
    dec.speculator = speculator
    first = _FirstToken()
    try:
        done = dec.generate(prompt, SamplingOptions(temperature=0.0, repeat_penalty=1.0, max_tokens=max_tokens,
                                                    ignore_eos=True), first)
    finally:
        dec.speculator = None
    out = _rates(done["completion_tokens"], 0.0, first)
    out["tok_s"] = done["gen_tok_s"]
    out["spec"] = done.get("spec")
    return out


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
    threads = args.threads or None
    rt = Runtime(LoadOptions(model_path=str(path), n_ctx=2048, n_threads=threads, n_gpu_layers=args.gpu_layers),
                 extra_bufts=extra)
    dec = Decoder(rt)
    template = ChatTemplate(rt.chat_template(), *rt.bos_eos_text())
    lookup = Speculator(LookupDrafter())
    lookup.calibrate(dec)
    drafter = DraftModelDrafter(rt.options, str(draft), extra, rt.n_ctx)
    drafted = Speculator(drafter, k_cap=8)
    drafted.calibrate(dec)
    if on_row is not None:
        on_row({"target": label, "lookup": lookup.plain_reason, "draft": drafted.plain_reason})
    llm = None
    if not args.no_llama:
        import llama_cpp
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        with _llama_with_extra_bufts(extra):
            llm = llama_cpp.Llama(model_path=str(path), n_ctx=2048, n_threads=rt.n_threads,
                                  n_gpu_layers=args.gpu_layers, verbose=False,
                                  draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10))
    rows = []
    try:
        for name, kind, messages, start in PROMPTS:
            prompt = template.render(messages, add_generation_prompt=True) + start
            tokens = rt.tokenize(prompt, add_special=rt.add_bos(), parse_special=True)
            jobs = {
                "plain": lambda: _hearth_run(dec, prompt, None, args.max_tokens),
                "lookup": lambda: _hearth_run(dec, prompt, lookup, args.max_tokens),
                "draft": lambda: _hearth_run(dec, prompt, drafted, args.max_tokens),
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
        row["modes"][mode] = entry
    return row


def _header(report: dict) -> list[str]:
    return [f"hearth bench spec: greedy, {report['max_tokens']} tokens ({report['llama_tokens']} for "
            f"llama-cpp-python), median of {report['repeats']} runs, {report['threads']} threads; draft model "
            f"{report['draft']}; tok/s (ratio vs plain: wall / CPU time)",
            "(=: the calibration ruled drafting out, so this ran the plain loop)",
            f"{'target':<7} {'prompt':<12} " + " ".join(f"{m[:24]:>24}" for m in MODES)]


def _line(r: dict) -> str:
    cells = []
    for m in MODES:
        e = r["modes"].get(m)
        mark = "=" if e and e.get("plain_reason") else " "
        cells.append(f"{e['tok_s']:6.1f} ({e['ratio']:4.2f}/{e['cpu_ratio']:4.2f}){mark}" if e else "-")
    return f"{r['target']:<7} {r['prompt']:<12} " + " ".join(f"{c:>24}" for c in cells)


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
