"""The matrix's quality columns: each row's model file against the F16 variant, mean KL divergence and the share of
positions with the same top token, scored by app/bench/quality.py (llama-perplexity's definitions) on a short
built-in text or the user's (`--quality-text FILE`).

The base's log-probabilities are computed once per run and every distinct file is scored against them, in this
process, one model at a time. Quick runs score one chunk of 128 tokens (63 positions: a first look, with wide
standard errors); full runs every chunk of 256 the text has (up to four).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from app.bench.matrix_plan import CODE
from app.core.errors import HearthError

QUICK = {"ctx": 128, "chunks": 1}
FULL = {"ctx": 256, "chunks": 4}

TEXT = """How a local model answers, step by step

When you type a question, the program first turns your words into tokens: pieces of words that the model knows
by number. A short English word is usually one token; a long or rare word is split into several, and a space or a
line break is part of the token that follows it. The model then reads every token of the prompt at once, in one
batch, and builds a cache of keys and values for each layer, so that it never has to read the prompt again.

Generation is a loop. At each step the model looks at everything so far and gives a score to every token in its
vocabulary; the scores become probabilities, and the sampler picks one. With the temperature at zero it always
takes the most likely token, which is why the same question gives the same answer. The chosen token is added to
the cache, and the loop goes on until the model writes its end-of-turn token or reaches the length limit.

Each step reads all of the model's weights from memory, so the speed of generation is set mostly by memory
bandwidth, not by arithmetic. A smaller file is faster for that reason alone: a four-bit quant reads a quarter of
the bytes of a sixteen-bit one. The price is precision. Rounding the weights changes the scores a little at every
step, and once in a while it changes which token comes out on top. From that point the answer can drift away
from the one the original model would have written.

That is why quality is measured against the original on text like your own. The mean KL divergence says how far
the quant's probabilities are from the original's, on average over the positions of the text; the same-top share
says how often both would have picked the same next token. Code and arithmetic tend to suffer first, because a
single wrong token there is a wrong answer, while in ordinary prose a different word often means the same thing.

Here is the kind of function a user might ask the model to edit:

""" + CODE + """
The function groups orders by customer, subtracts any discount, adds the tax and returns the report together with
the grand total. Renaming a variable in it is an easy task for a person and a fair test for a small model.
"""


def measure_quality(rows: list[dict], base_path: str | Path, text: str | None, quick: bool, threads: int,
                    report=None) -> dict:
    """Adds row["quality"] ({kld_mean, kld_se, same_top, same_top_se, ppl_ratio}, or {"error": sentence}) to every
    row with a model file; returns the run's summary for result["quality"]."""
    from app.bench.quality import score

    plan = QUICK if quick else FULL
    say = report or (lambda _message: None)
    summary = {"text": "built-in" if text is None else "given", "ctx": plan["ctx"], "base": str(base_path)}
    body = TEXT if text is None else text
    with tempfile.TemporaryDirectory(prefix="hearth-matrix-quality-") as tmp:
        store = Path(tmp) / "base-logprobs.npy"
        say("quality: scoring the F16 base")
        try:
            base = score(str(base_path), body, plan["ctx"], threads, None, store, max_chunks=plan["chunks"])
        except HearthError as exc:
            summary["error"] = str(exc)
            for row in rows:
                if row.get("model_file"):
                    row["quality"] = {"error": str(exc)}
            return summary
        summary.update(positions=base["positions"], chunks=base["chunks"], base_ppl=base["ppl"])
        mapped = np.load(store, mmap_mode="r")
        done: dict[str, dict] = {}
        for row in rows:
            path = row.get("model_file")
            if not path:
                continue
            if path not in done:
                if Path(path).resolve() == Path(base_path).resolve():
                    done[path] = {"kld_mean": 0.0, "kld_se": 0.0, "same_top": 1.0, "same_top_se": 0.0,
                                  "ppl_ratio": 1.0, "base": True}
                else:
                    say(f"quality: {row['qtype']} against F16")
                    try:
                        f = score(path, body, plan["ctx"], threads, mapped, None)
                        done[path] = {k: f[k] for k in ("kld_mean", "kld_se", "same_top", "same_top_se")}
                        done[path]["ppl_ratio"] = f["ppl"] / base["ppl"]
                    except HearthError as exc:
                        done[path] = {"error": str(exc)}
            row["quality"] = dict(done[path])
        del mapped
    return summary
