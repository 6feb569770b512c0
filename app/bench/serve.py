"""`hearth bench serve`: an API server's speed under concurrent load, Hearth's own and others' side by side.

For each server: one stream (requests back to back), then N streams at once; the figures are aggregate
generated tokens per second (all answers' tokens over the wall time of the phase), its ratio to the single
stream, and time to first token at the 50th and 95th percentile under load. Every server gets the same
prompts, greedy decoding and answers of a fixed length (`ignore_eos`, which llama-server and vLLM take too),
so the same work is timed everywhere.

With `--rounds R` the servers take turns R times (Hearth, the others, Hearth again, ...) and the table shows
each figure's median: on a shared machine one phase's speed moves by 10% from minute to minute, and taking
turns gives every server the same minutes.

The load is driven through Hearth's own remote backend (app.backends.remote) - the client side of the seam that
the window and `hearth chat --endpoint` use - one thread per stream. Hearth's server runs as a child
process, `hearth serve --parallel N`, as a user would start it; the servers to compare with (`--against URL`,
e.g. llama.cpp's `llama-server -np 4` or `python -m llama_cpp.server`) are started by the user.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from app.core import proc
from app.core.errors import HearthError
from app.bench.model_options import CONTEXT_BOUND, SLOTS
from app.protocol import messages as P
from app.protocol.option_spec import Bound, count, option

PROMPTS = [  # different openings, so no stream rides on another's cached prompt
    "Write a long story about a lighthouse keeper and a storm.",
    "Explain, step by step, how a steam engine works.",
    "Describe a walk through a busy market in the morning.",
    "Tell the history of the bicycle in detail.",
    "Write a letter from a sailor to his family at home.",
    "Describe how bread is baked, from the field to the table.",
    "Write a travel guide to an imaginary island.",
    "Explain how a library organises its books.",
]
START_TIMEOUT_S = 180.0


@dataclass
class ServeBenchOptions:
    model: str | None = None  # for Hearth's own server; None: the bundled model
    threads: int | None = None
    gpu_layers: int | None = None  # None: hearth serve's own default
    parallel: int = option(4, "--parallel", "concurrent streams and Hearth's slots (default {default})", "N",
                           bound=Bound(2, SLOTS[1], takes=f"2 to {SLOTS[1]:g} streams (the benchmark compares N "
                                       "streams with one)"))
    requests: int = option(3, "--requests", "answers per stream in each phase (default {default})", "R",
                           bound=count(1, "requests"))
    max_tokens: int = option(128, "--max-tokens", "tokens per answer (default {default})", "N",
                             bound=count(1, "tokens"))
    ctx: int = option(2048, "--ctx", "Hearth's context per slot (default {default})", "N", bound=CONTEXT_BOUND)
    rounds: int = option(1, "--rounds", "the servers take turns R times; the table shows medians (default "
                         "{default})", "R", bound=count(1, "rounds"))
    against: list[str] = option(flag="--against", help="also load another OpenAI-compatible server (its /v1 base "
                                "URL; repeatable)", metavar="URL", repeat=True, default_factory=list)
    api_key: str | None = option(None, "--api-key", "the --against servers' API key", "KEY")
    responses: bool = option(False, "--responses", "also time Hearth's /v1/responses beside its "
                             "/v1/chat/completions (one client for both)")
    json: bool = option(False, "--json", "the report as JSON on stdout (progress goes to stderr)")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a few dozen numbers."""
    ordered = sorted(values)
    rank = max(1, round(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


class Target:
    """One server under test, reached through the remote backend."""

    def __init__(self, label: str, base_url: str, api_key: str | None = None, model: str | None = None):
        from app.backends.client import EngineClient
        from app.backends.remote import RemoteEndpoint

        self.label, self.base_url = label, base_url
        self.client = EngineClient(RemoteEndpoint(base_url, api_key=api_key, model=model))
        info = self.client.load(P.LoadOptions())
        self.model = info.get("model")

    def ask(self, prompt: str, max_tokens: int) -> dict:
        sampling = P.SamplingOptions(max_tokens=max_tokens, temperature=0.0, repeat_penalty=1.0, ignore_eos=True)
        for event in self.client.chat([{"role": "user", "content": prompt}], sampling):
            if isinstance(event, P.Failed):
                raise event.error()
            if isinstance(event, P.Done):
                return event
        raise HearthError(f"{self.label} ended an answer without finishing it.")

    def close(self) -> None:
        self.client.close()


class HttpTarget:
    """Hearth's own server through one of its two OpenAI paths, streamed by the same small httpx client, so that
    /v1/responses and /v1/chat/completions are timed alike: time to the first text, tokens as the server counts
    them (chat's usage chunk, the Responses API's response.completed)."""

    def __init__(self, label: str, base_url: str, path: str):
        import httpx

        self.label, self.base_url, self.path = label, base_url, path
        self.http = httpx.Client(base_url=base_url, timeout=300)
        models = self.http.get("/models").json()["data"]
        self.model = next((m["id"] for m in models if m.get("meta", {}).get("loaded")), models[0]["id"])

    def _body(self, prompt: str, max_tokens: int) -> dict:
        common = {"model": self.model, "stream": True, "temperature": 0.0, "repeat_penalty": 1.0, "ignore_eos": True}
        if self.path == "/responses":
            return {**common, "input": prompt, "max_output_tokens": max_tokens, "store": False}
        return {**common, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                "stream_options": {"include_usage": True}}

    def ask(self, prompt: str, max_tokens: int) -> dict:
        started = time.perf_counter()
        ttft, tokens = None, None
        with self.http.stream("POST", self.path, json=self._body(prompt, max_tokens)) as answer:
            if answer.status_code != 200:
                raise HearthError(f"{self.label}: {answer.status_code} {answer.read().decode()[:200]}")
            for line in answer.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                if ttft is None and ('.output_text.delta"' in line or '"content":"' in line
                                     and '"content":""' not in line):
                    ttft = time.perf_counter() - started
                if '"usage"' in line:
                    event = json.loads(line[6:])
                    usage = (event.get("response") or {}).get("usage") or event.get("usage")
                    if usage:
                        tokens = usage.get("output_tokens", usage.get("completion_tokens"))
        if tokens is None:
            raise HearthError(f"{self.label} ended an answer without its usage.")
        return {"completion_tokens": tokens, "ttft_s": ttft}

    def close(self) -> None:
        self.http.close()


def run_phase(target: Target, streams: int, requests: int, max_tokens: int) -> dict:
    """`streams` threads, each asking `requests` questions back to back; aggregate figures of the phase."""
    dones: list[dict] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def stream(index: int) -> None:
        for r in range(requests):
            try:
                done = target.ask(PROMPTS[(index * requests + r) % len(PROMPTS)], max_tokens)
            except BaseException as exc:  # reported once the phase is over
                with lock:
                    errors.append(exc)
                return
            with lock:
                dones.append(done)

    started = time.perf_counter()
    threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    if errors:
        raise HearthError(f"{target.label}: {errors[0]}")
    tokens = sum(_tokens(d) for d in dones)
    ttfts = [d["ttft_s"] for d in dones if d.get("ttft_s") is not None]
    return {"streams": streams, "requests": len(dones), "tokens": tokens, "wall_s": round(wall, 3),
            "tok_s": tokens / wall if wall > 0 else 0.0,
            "ttft_p50_ms": percentile(ttfts, 50) * 1000 if ttfts else None,
            "ttft_p95_ms": percentile(ttfts, 95) * 1000 if ttfts else None,
            "short_answers": sum(1 for d in dones if _tokens(d) < max_tokens),
            "counted_by": "server" if all(d.get("completion_tokens") is not None for d in dones) else "stream chunks"}


def _tokens(done: dict) -> int:
    """An answer's tokens: the server's count, or (a server that sends none, llama-cpp-python's) its stream
    chunks, one token each on llama.cpp servers."""
    count = done.get("completion_tokens")
    return int(count if count is not None else done.get("stream_chunks") or 0)


def measure(target: Target, o: ServeBenchOptions, say) -> dict:
    single = run_phase(target, 1, o.requests, o.max_tokens)
    say(f"  {target.label}: 1 stream {single['tok_s']:.1f} tok/s")
    loaded = run_phase(target, o.parallel, o.requests, o.max_tokens)
    say(f"  {target.label}: {o.parallel} streams {loaded['tok_s']:.1f} tok/s aggregate")
    return {"single": single, "parallel": loaded,
            "ratio": loaded["tok_s"] / single["tok_s"] if single["tok_s"] else None}


def median_row(target: Target, rounds: list[dict]) -> dict:
    """A server's row of the report: each figure's median over its rounds, and the rounds themselves."""
    def med(phase: str, key: str):
        values = [r[phase][key] for r in rounds if r[phase][key] is not None]
        return statistics.median(values) if values else None

    row = {"server": target.label, "url": target.base_url, "model": target.model, "rounds": rounds}
    for phase in ("single", "parallel"):
        row[phase] = {**rounds[-1][phase], **{key: med(phase, key) for key in ("tok_s", "ttft_p50_ms", "ttft_p95_ms")},
                      "short_answers": sum(r[phase]["short_answers"] for r in rounds)}
    row["ratio"] = row["parallel"]["tok_s"] / row["single"]["tok_s"] if row["single"]["tok_s"] else None
    return row


def serve_args(o: ServeBenchOptions) -> list[str]:
    """The `hearth serve` command line of the server under test: every load option the benchmark was given."""
    args = ["serve", "--port", "0", "--parallel", str(o.parallel), "--ctx", str(o.ctx)]
    if o.model:
        args += ["--model", o.model]
    if o.threads:
        args += ["--threads", str(o.threads)]
    if o.gpu_layers is not None:
        args += ["--gpu-layers", str(o.gpu_layers)]
    return args


def start_hearth(o: ServeBenchOptions) -> tuple[subprocess.Popen, str]:
    """`hearth serve --parallel N --port 0` as a child process; returns it and its base URL once it serves."""
    child = subprocess.Popen(proc.hearth_command(*serve_args(o)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=proc.child_env())
    line = _first_line(child)
    if " at http" not in line:
        child.kill()
        detail = (child.stderr.read() or "").strip().splitlines()
        raise HearthError(f"hearth serve did not start: {(detail[-1] if detail else line.strip()) or 'no output'}")
    return child, line.split(" at ", 1)[1].split()[0]


def _first_line(child: subprocess.Popen) -> str:
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(child.stdout.readline()), daemon=True)
    reader.start()
    reader.join(START_TIMEOUT_S)
    return got[0] if got else ""


def run(o: ServeBenchOptions) -> int:
    say = (lambda *a, **k: print(*a, **k, file=sys.stderr)) if o.json else print
    say(f"hearth bench serve: {o.parallel} streams x {o.requests} answers of {o.max_tokens} tokens, "
        f"against 1 stream x {o.requests}")
    load_at_start = _load_average()
    child, base = start_hearth(o)
    targets: list[Target] = []
    try:
        if o.responses:  # the two paths by one client, then the others
            targets.append(HttpTarget(f"Hearth --parallel {o.parallel} /v1/chat/completions", base,
                                      "/chat/completions"))
            targets.append(HttpTarget(f"Hearth --parallel {o.parallel} /v1/responses", base, "/responses"))
        else:
            targets.append(Target(f"Hearth --parallel {o.parallel}", base))
        targets.extend(Target(url, url, o.api_key) for url in o.against)
        for target in targets:
            target.ask(PROMPTS[0], 8)  # warm-up: the first request pays for caches and lazy set-up
        rounds: list[list[dict]] = [[] for _ in targets]
        for r in range(o.rounds):
            if o.rounds > 1:
                say(f" round {r + 1} of {o.rounds}")
            for target, kept in zip(targets, rounds):
                kept.append(measure(target, o, say))
        rows = [median_row(target, kept) for target, kept in zip(targets, rounds)]
    finally:
        for target in targets:
            target.close()
        child.terminate()
        try:
            child.wait(15)
        except subprocess.TimeoutExpired:
            child.kill()
    report = {"kind": "hearth-bench-serve", "parallel": o.parallel, "requests": o.requests, "rounds": o.rounds,
              "max_tokens": o.max_tokens, "load_avg_start": load_at_start, "load_avg": _load_average(), "rows": rows}
    report["comparisons"] = comparisons(report)
    if o.responses:
        report["responses_vs_chat"] = responses_vs_chat(report)
    print(json.dumps(report, indent=2) if o.json else format_table(report))
    return 0


def format_table(report: dict) -> str:
    n = report["parallel"]
    lines = [f"| server | 1 stream tok/s | {n} streams tok/s (aggregate) | ratio | TTFT p50 / p95 ms at {n} |",
             "| --- | --- | --- | --- | --- |"]
    notes: list[str] = []
    for row in report["rows"]:
        p = row["parallel"]
        ttft = (f"{p['ttft_p50_ms']:.0f} / {p['ttft_p95_ms']:.0f}" if p["ttft_p50_ms"] is not None else "n/a")
        lines.append(f"| {row['server']} | {row['single']['tok_s']:.1f} | {p['tok_s']:.1f} | "
                     f"{row['ratio']:.2f}x | {ttft} |")
        short = row["single"]["short_answers"] + p["short_answers"]
        if short or p["counted_by"] != "server":
            notes.append(f"{row['server']}: {short} answers ended before {report['max_tokens']} tokens (it ignores "
                         f"ignore_eos); tokens counted by {p['counted_by']}.")
    lines.extend("\n" + note for note in notes)
    if report.get("rounds", 1) > 1:
        lines.insert(0, f"Medians of {report['rounds']} rounds, the servers taking turns.\n")
    for c in comparisons(report):
        if len(c["per_round"]) > 1:
            lines.append(f"\nHearth / {c['server']} at {n} streams: {c['median_of_rounds']:.2f}x, the median of "
                         f"the rounds (each round: {', '.join(f'{x:.2f}x' for x in c['per_round'])}); "
                         f"the medians' ratio {c['ratio_of_medians']:.2f}x")
        else:
            lines.append(f"\nHearth / {c['server']} at {n} streams: {c['ratio_of_medians']:.2f}x")
    versus = report.get("responses_vs_chat")
    if versus:
        lines.append(f"\n/v1/responses against /v1/chat/completions on the same server: "
                     f"{versus['single_tok_s_ratio']:.3f}x at 1 stream, {versus['parallel_tok_s_ratio']:.3f}x at {n} "
                     f"(medians of the rounds); first token p50 at {n} streams "
                     f"{versus['parallel_ttft_p50_ms']['responses']:.0f} ms vs "
                     f"{versus['parallel_ttft_p50_ms']['chat']:.0f} ms")
    if report.get("load_avg") is not None:
        lines.append(f"\nload average at the start and the end: {report['load_avg_start']:.2f}, "
                     f"{report['load_avg']:.2f}")
    return "\n".join(lines)


def responses_vs_chat(report: dict) -> dict:
    """The Responses path against chat completions on the same server, round by round: tokens/s at one stream and
    at N (medians of the rounds' ratios), and the time to first token (p50 at N streams)."""
    chat, responses = report["rows"][0], report["rows"][1]
    out = {}
    for phase in ("single", "parallel"):
        ratios = [r[phase]["tok_s"] / c[phase]["tok_s"] for c, r in zip(chat["rounds"], responses["rounds"])
                  if c[phase]["tok_s"]]
        out[f"{phase}_tok_s_ratio"] = statistics.median(ratios) if ratios else None
        out[f"{phase}_ttft_p50_ms"] = {"chat": chat[phase]["ttft_p50_ms"], "responses": responses[phase]["ttft_p50_ms"]}
    return out


def comparisons(report: dict) -> list[dict]:
    """Hearth's aggregate at N streams against each other server's.

    The figure is the median of the rounds' ratios: within a round the two servers ran minutes apart, so the
    machine's drift (10% from minute to minute here) cancels in each ratio, as in `hearth bench gui`'s pairs.
    The ratio of the two medians, which mixes minutes, is given beside it."""
    hearth = report["rows"][0]
    found = []
    for row in report["rows"][1:]:
        if not row["parallel"]["tok_s"] or row["server"].startswith("Hearth"):  # Hearth's own other path
            continue
        per_round = [h["parallel"]["tok_s"] / r["parallel"]["tok_s"]
                     for h, r in zip(hearth["rounds"], row["rounds"]) if r["parallel"]["tok_s"]]
        found.append({"server": row["server"], "per_round": per_round,
                      "median_of_rounds": statistics.median(per_round) if per_round else None,
                      "ratio_of_medians": hearth["parallel"]["tok_s"] / row["parallel"]["tok_s"]})
    return found


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None



def run_endpoint(url: str, api_key: str | None, model: str | None, repeats: int, max_tokens: int,
                 as_json: bool) -> int:
    """`hearth bench --endpoint URL`: one remote server's time to first token and generation speed, medians of
    `repeats` answers of max_tokens (after a warm-up answer)."""
    target = Target(url, url, api_key, model)
    try:
        target.ask(PROMPTS[0], 8)
        dones = [target.ask(PROMPTS[i % len(PROMPTS)], max_tokens) for i in range(repeats)]
    finally:
        target.close()
    ttft = [d["ttft_s"] for d in dones if d.get("ttft_s") is not None]
    rates = [d["gen_tok_s"] for d in dones if d.get("gen_tok_s")]
    report = {"kind": "hearth-bench-endpoint", "url": url, "model": target.model, "repeats": repeats,
              "max_tokens": max_tokens, "ttft_ms_median": percentile(ttft, 50) * 1000 if ttft else None,
              "gen_tok_s_median": percentile(rates, 50) if rates else None,
              "completion_tokens": [d.get("completion_tokens") for d in dones]}
    if as_json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{url} ({target.model}): {repeats} answers of up to {max_tokens} tokens, medians")
    print(f"  time to first token  {report['ttft_ms_median']:.0f} ms" if ttft else "  time to first token  n/a")
    print(f"  generation           {report['gen_tok_s_median']:.1f} tok/s" if rates else
          "  generation           n/a (the server sent no token counts)")
    return 0
