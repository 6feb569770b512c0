"""Command-line flags shared by chat, bench and the GUI launcher, mapped to engine options."""

from __future__ import annotations

import argparse

from app.core.bundled import bundled_model_path
from app.engine.protocol import CONTEXT_POLICIES, FLASH_ATTN, KV_TYPES, LoadOptions, SamplingOptions


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", metavar="PATH", help="GGUF model file (default: the bundled SmolLM2-135M)")
    p.add_argument("--threads", type=int, metavar="N", help="CPU threads (default: physical cores)")
    p.add_argument("--gpu-layers", type=int, default=0, metavar="N", help="layers to offload to the GPU (-1: all)")


def add_load_args(p: argparse.ArgumentParser) -> None:
    add_model_args(p)
    p.add_argument("--ctx", type=int, default=4096, metavar="N", help="context size in tokens (default 4096)")
    p.add_argument("--batch", type=int, default=512, metavar="N", help="prompt batch size (default 512)")
    p.add_argument("--no-mmap", action="store_true", help="read the whole model into memory instead of mapping it")
    p.add_argument("--mlock", action="store_true", help="lock the model in RAM")
    p.add_argument("--kv-type", choices=KV_TYPES, default="f16", help="KV cache type (default f16)")
    p.add_argument("--flash-attn", choices=FLASH_ATTN, default="auto", help="flash attention (default auto)")
    p.add_argument("--draft-model", metavar="PATH", help="small GGUF with the same vocabulary for speculative decoding")
    p.add_argument("--lookup", action="store_true", help="speculative decoding with n-gram drafts from the context")
    p.add_argument("--draft-max", type=int, metavar="N", help="longest draft (default: adaptive)")
    p.add_argument("--context-policy", choices=CONTEXT_POLICIES, default="window",
                   help="what happens when the context is full (default: window)")
    p.add_argument("--sink-tokens", type=int, default=4, metavar="N", help="attention-sink tokens kept (default 4)")
    p.add_argument("--no-keep-system", dest="keep_system", action="store_false",
                   help="let the window slide over the system prompt too")
    p.add_argument("--window-fraction", type=float, default=0.5, metavar="F",
                   help="share of the movable context dropped each time the window slides (default 0.5)")
    p.add_argument("--ignore-fit", action="store_true",
                   help="load even when the memory estimate says the model does not fit (may be very slow)")


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    d = SamplingOptions()
    p.add_argument("--max-tokens", type=int, default=d.max_tokens, metavar="N")
    p.add_argument("--temp", type=float, default=d.temperature, metavar="T", help="temperature (0: greedy)")
    p.add_argument("--top-k", type=int, default=d.top_k, metavar="K")
    p.add_argument("--top-p", type=float, default=d.top_p, metavar="P")
    p.add_argument("--min-p", type=float, default=d.min_p, metavar="P")
    p.add_argument("--repeat-penalty", type=float, default=d.repeat_penalty, metavar="R")
    p.add_argument("--seed", type=int, default=d.seed, metavar="S", help="random seed (-1: random)")
    p.add_argument("--stop", action="append", default=[], metavar="TEXT", help="stop string (repeatable)")


def model_path(args: argparse.Namespace) -> str:
    return str(args.model) if getattr(args, "model", None) else str(bundled_model_path())


def load_options(args: argparse.Namespace) -> LoadOptions:
    return LoadOptions(
        model_path=model_path(args),
        n_ctx=args.ctx,
        n_batch=args.batch,
        n_threads=args.threads,
        n_gpu_layers=args.gpu_layers,
        use_mmap=not args.no_mmap,
        use_mlock=args.mlock,
        kv_type=args.kv_type,
        flash_attn=args.flash_attn,
        draft_model=args.draft_model,
        lookup=args.lookup,
        draft_max=args.draft_max,
        context_policy=args.context_policy,
        sink_tokens=args.sink_tokens,
        keep_system=args.keep_system,
        window_fraction=args.window_fraction,
        ignore_fit=args.ignore_fit,
    )


def sampling_options(args: argparse.Namespace) -> SamplingOptions:
    return SamplingOptions(
        max_tokens=args.max_tokens,
        temperature=args.temp,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        repeat_penalty=args.repeat_penalty,
        seed=args.seed,
        stop=list(args.stop),
    )
