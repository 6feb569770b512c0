"""One loaded model in the engine: runtime, decoder, chat template, and the
decision about extra buffer types. The host turns commands into calls here."""

from __future__ import annotations

import threading

from app.engine.decode import Decoder
from app.engine.probe import extra_bufts_decision
from app.engine.protocol import LoadOptions, SamplingOptions
from app.engine.runtime import Runtime
from app.engine.speculative import check_speculation_options, make_speculator
from app.engine.template import ChatTemplate
from app.engine.window import make_policy, system_prefix


class Session:
    def __init__(self, runtime: Runtime, probe: dict | None):
        self.rt = runtime
        self.probe = probe
        self.decoder = Decoder(runtime)
        self.embedder = None  # app.engine.embedding.Embedder, made on the first embeddings request
        bos, eos = runtime.bos_eos_text()
        self.template = ChatTemplate(runtime.chat_template(), bos, eos)
        o = runtime.options
        self.decoder.context_policy = make_policy(o.context_policy, runtime, o.sink_tokens, o.keep_system,
                                                  o.window_fraction)
        try:
            self.decoder.speculator = make_speculator(runtime, self.decoder)
        except BaseException:
            self.close()  # nothing stays loaded half-way
            raise

    @classmethod
    def load(cls, options: LoadOptions, probe_model: str | None = None, progress=None) -> "Session":
        probe = None
        extra = options.extra_bufts
        if extra is None:
            probe = extra_bufts_decision(probe_model or options.model_path)
            extra = bool(probe.get("ok"))
        check_speculation_options(options)
        return cls(Runtime(options, extra_bufts=extra, progress=progress), probe)

    def describe(self) -> dict:
        info = self.rt.describe()
        if self.probe is not None:
            info["extra_bufts_probe"] = self.probe
        info["chat_template"] = self.template.source[:2000]
        info["window"] = self.decoder.context_policy.state(self.decoder)
        speculator = self.decoder.speculator
        info["drafter"] = speculator.drafter.name if speculator is not None else None
        return info

    def chat(self, messages: list[dict], sampling: SamplingOptions, emit, cancelled: threading.Event,
             truncate: bool = True, tools: list[dict] | None = None) -> dict:
        prompt = self.template.render(messages, add_generation_prompt=True, tools=tools)
        self.decoder.context_policy.system_text = system_prefix(self.template, messages, prompt)
        return self.decoder.generate(prompt, sampling, emit, cancelled, truncate)

    def complete(self, prompt: str, sampling: SamplingOptions, emit, cancelled: threading.Event,
                 truncate: bool = True) -> dict:
        self.decoder.context_policy.system_text = None
        return self.decoder.generate(prompt, sampling, emit, cancelled, truncate)

    def embed(self, inputs: list) -> dict:
        """Unit-length embeddings of texts or token lists (see app/engine/embedding.py)."""
        if self.embedder is None:
            from app.engine.embedding import Embedder

            self.embedder = Embedder(self.rt)
        return self.embedder.embed(inputs)

    def reset(self) -> None:
        self.decoder.reset()
        self.decoder.context_policy.reset()

    def close(self) -> None:
        if self.embedder is not None:
            self.embedder.close()
            self.embedder = None
        if self.decoder.speculator is not None:
            self.decoder.speculator.close()
            self.decoder.speculator = None
        self.decoder.close()
        self.rt.close()
