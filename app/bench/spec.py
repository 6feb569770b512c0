"""`hearth bench spec`: plain, prompt-lookup and draft-model decoding of the same prompts, side by side.

Everything runs in this process on the engine's own Decoder and Speculator (no engine process), interleaved
per repeat (plain, lookup, draft, llama-cpp-python's prompt lookup, plain, ...) so that a busy machine slows
every mode alike; medians and ratios against plain decoding are reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from app.bench.basic import _llama_with_extra_bufts
from app.commands.options import add_model_args
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


def register(kinds) -> None:
    p = kinds.add_parser("spec", help="speculative decoding: plain vs prompt lookup vs draft model",
                         description="Greedy decoding of the same prompts with no drafter, prompt lookup, a draft "
                         "model (the bundled model in Q4_0), and llama-cpp-python's LlamaPromptLookupDecoding, "
                         "for each quantization of the target; medians and ratios against plain decoding.")
    add_model_args(p)
    p.add_argument("--quants", default=",".join(QUANTS), help="target quantizations (comma-separated)")
    p.add_argument("--draft", metavar="PATH", help="draft model (default: the bundled model in Q4_0)")
    p.add_argument("--max-tokens", type=int, default=128, metavar="N")
    p.add_argument("--repeats", type=int, default=3, metavar="N", help="runs per figure; medians are reported")
    p.add_argument("--no-llama", action="store_true", help="skip llama-cpp-python's prompt lookup")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def variant(qtype: str, source: Path) -> Path:
    """The bundled model in another quantization, made once into the cache folder."""
    if qtype == "Q4_1" and source == bundled_model_path():
        return source
    out = paths.cache_dir() / "bench-variants" / f"{source.stem}-{qtype}.gguf"
    if not out.exists():
        from app.core.quantize import quantize

        quantize(source, qtype, out=out)
    return out


def _hearth_run(dec: Decoder, prompt: str, speculator, max_tokens: int) -> dict:
    dec.reset()  # every run evaluates its prompt afresh, as a new chat would
    dec.speculator = speculator
    try:
        done = dec.generate(prompt, SamplingOptions(temperature=0.0, repeat_penalty=1.0, max_tokens=max_tokens,
                                                    ignore_eos=True), lambda event: None)
    finally:
        dec.speculator = None
    return {"tok_s": done["gen_tok_s"], "spec": done.get("spec")}


def _llama_run(llm, tokens: list[int], max_tokens: int) -> dict:
    llm.reset()
    n, first = 0, None
    for _ in llm.generate(tokens, top_k=1, temp=0.0, repeat_penalty=1.0, reset=True):
        n += 1
        if first is None:
            first = time.perf_counter()
        if n >= max_tokens:
            break
    elapsed = time.perf_counter() - first
    return {"tok_s": (n - 1) / elapsed if elapsed > 0 else 0.0}


def bench_target(path: Path, draft: Path, args, extra: bool) -> list[dict]:
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
            runs: dict[str, list[dict]] = {m: [] for m in MODES if llm is not None or "llama" not in m}
            for _ in range(args.repeats):
                runs["plain"].append(_hearth_run(dec, prompt, None, args.max_tokens))
                runs["lookup"].append(_hearth_run(dec, prompt, lookup, args.max_tokens))
                runs["draft"].append(_hearth_run(dec, prompt, drafted, args.max_tokens))
                if llm is not None:
                    tokens = rt.tokenize(prompt, add_special=rt.add_bos(), parse_special=True)
                    runs["llama-cpp-python lookup"].append(_llama_run(llm, tokens, args.max_tokens))
            plain = statistics.median(r["tok_s"] for r in runs["plain"])
            row = {"model": path.name, "prompt": name, "kind": kind, "modes": {}}
            for mode, results in runs.items():
                tok_s = statistics.median(r["tok_s"] for r in results)
                entry = {"tok_s": tok_s, "ratio": tok_s / plain if plain else 0.0}
                if results[-1].get("spec"):
                    s = results[-1]["spec"]
                    entry.update(acceptance=s["acceptance"], tokens_per_step=s["tokens_per_step"], k=s["k"])
                row["modes"][mode] = entry
            rows.append(row)
    finally:
        if llm is not None:
            llm.close()
        drafted.close()
        dec.close()
        rt.close()
    return rows


def format_table(report: dict) -> str:
    modes = [m for m in MODES if any(m in r["modes"] for r in report["rows"])]
    head = f"{'target':<28} {'prompt':<12} " + " ".join(f"{m[:22]:>24}" for m in modes)
    lines = [f"hearth bench spec: greedy, {report['max_tokens']} tokens, median of {report['repeats']} runs, "
             f"{report['threads']} threads; draft model {report['draft']}; tok/s (ratio vs plain)", head]
    for r in report["rows"]:
        cells = []
        for m in modes:
            e = r["modes"].get(m)
            cells.append(f"{e['tok_s']:7.1f} ({e['ratio']:4.2f}x)" if e else "-")
        lines.append(f"{r['model'][:28]:<28} {r['prompt']:<12} " + " ".join(f"{c:>24}" for c in cells))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    source = Path(args.model) if args.model else bundled_model_path()
    extra = bool(extra_bufts_decision(str(bundled_model_path())).get("ok"))
    draft = Path(args.draft) if args.draft else variant("Q4_0", source)
    quants = [q.strip().upper() for q in args.quants.split(",") if q.strip()]
    rows: list[dict] = []
    for q in quants:
        rows += bench_target(variant(q, source), draft, args, extra)
    report = {"max_tokens": args.max_tokens, "repeats": args.repeats, "threads": args.threads or "default",
              "draft": draft.name, "extra_bufts": extra, "rows": rows}
    print(json.dumps(report, indent=2) if args.json else format_table(report))
    return 0
