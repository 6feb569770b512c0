"""One loaded model in the engine: runtime, decoder, chat template, and the
decision about extra buffer types. The host turns commands into calls here."""

from __future__ import annotations

import threading
from dataclasses import replace

from app.core.gguf.chat_formats import check_override
from app.core.errors import ContextTooLong, HearthError, InvalidRequest
from app.core.gguf.purpose import cannot_generate
from app.core.gguf.sampling import recommended_sampling
from app.engine.decoding.decode import Decoder
from app.engine.context.h2o import h2o_load
from app.engine.prompt.literal import literal_spans
from app.engine.speculation.prediction import prediction_speculator
from app.engine.probes.probe import decision_before_first_load
from app.protocol.messages import LoadOptions, SamplingOptions
from app.engine.decoding.runtime import Runtime
from app.engine.decoding.sampling import check_logit_bias
from app.engine.decoding.slots import Slots
from app.engine.speculation.speculative import check_speculation_options, make_speculator
from app.engine.prompt.template import opens_thinking, template_for, turn_stops
from app.engine.context.policy import make_policy
from app.engine.context.window import system_prefix
from app.engine.media.session_media import SessionMedia


class NotAChatModel(InvalidRequest):
    """A model that cannot write text was asked to (an API client gets a 400)."""


class Session:
    def __init__(self, runtime: Runtime, probe: dict | None):
        self.rt = runtime
        self.probe = probe
        self.embedder = None  # app.engine.decoding.embedding.Embedder, made on the first embeddings request
        o = runtime.options
        try:
            self.chat_format, self.template = template_for(runtime, o.chat_template)
            self.opens_thinking = opens_thinking(self.template)
        except BaseException:
            runtime.close()
            raise
        # Images and sounds: the projector beside the model, or the sentence why there is none that works.
        self.media = SessionMedia(runtime)
        # An embedding or reranking model is refused for chat with this sentence (app/core/gguf/purpose.py).
        self.refusal = cannot_generate(runtime.path.name, runtime.meta("general.architecture"), runtime.meta)
        # The model's own recommended sampling (general.sampling.*), for the settings a request leaves to it.
        self.recommended = recommended_sampling(runtime.meta)
        # Where the template's turn marker is plain text in this vocabulary, it ends the answer as a stop string.
        # (Kept on the runtime: every slot's decoder reports such a stop as the turn's end, not a client's stop.)
        runtime.turn_stops = turn_stops(self.template, runtime.special_texts())

        def policy():
            return make_policy(o.context_policy, runtime, o.sink_tokens, o.keep_system, o.window_fraction,
                               o.h2o_heavy, o.h2o_recent)

        # Parallel slots: one Decoder per KV sequence, driven by the host between its commands; the first
        # slot's is the session's decoder (what `describe` reports).
        self.slots = Slots(runtime, policy) if runtime.n_parallel > 1 else None
        if self.slots is not None:
            self.decoder = self.slots.slots[0].decoder
        else:
            self.decoder = Decoder(runtime)
            self.decoder.context_policy = policy()
        try:
            # With slots, each answer gets a speculator of its own (_generate); checked here all the same.
            self.decoder.speculator = make_speculator(runtime, self.decoder)
        except BaseException:
            self.close()  # nothing stays loaded half-way
            raise

    @classmethod
    def load(cls, options: LoadOptions, probe_model: str | None = None, progress=None) -> "Session":
        probe = None
        extra = options.extra_bufts
        if extra is None:
            probe = decision_before_first_load(probe_model or options.model_path)
            extra = bool(probe.get("ok"))
        check_speculation_options(options)
        check_override(options.chat_template)  # a wrong name or file is said before the weights are read
        if options.n_parallel > 1 and options.draft_model:
            # A draft model has a context of its own that the slots' shared batch cannot carry.
            raise HearthError("A draft model serves one request at a time: with --parallel, use --lookup "
                              "(prompt lookup drafts in every slot) or drop --draft-model.")
        attention = None
        if options.context_policy == "h2o":  # its scores are read from the graph: flash attention off
            options, attention = h2o_load(options)
        return cls(Runtime(options, extra_bufts=extra, progress=progress, attention=attention), probe)

    def describe(self) -> dict:
        info = self.rt.describe()
        if self.probe is not None:
            info["extra_bufts_probe"] = self.probe
        info["chat_template"] = self.template.source[:2000]
        info["opens_thinking"] = self.opens_thinking  # answers start inside <think> (app/core/chats/reasoning.py)
        # Trained for tools: its template takes them (else they are described in the system prompt).
        info["knows_tools"] = bool(getattr(self.template, "knows_tools", False))
        info["cannot_generate"] = self.refusal
        info["recommended_sampling"] = self.recommended
        info["chat_format"] = {**self.chat_format.to_dict(), "turn_stops": self.rt.turn_stops}
        info["window"] = self.decoder.context_policy.state(self.decoder)
        speculator = self.decoder.speculator
        info["drafter"] = speculator.drafter.name if speculator is not None else None
        # Decided at load (calibration): the window says at once why it will not draft, not after an answer.
        info["spec_plain_reason"] = speculator.plain_reason if speculator is not None else None
        if self.slots is not None:
            info["slots"] = self.slots.batching()
        info["media"] = self.media.describe()
        return info

    def chat(self, messages: list[dict], sampling: SamplingOptions, emit, cancelled: threading.Event,
             truncate: bool = True, tools: list[dict] | None = None) -> dict | None:
        """The answer's Done event; None with slots, where the answer has only started (Done comes by emit)."""
        self._check_generates()
        if not truncate and len(messages) > self.rt.n_ctx:  # every message is at least a token: no need to render
            raise ContextTooLong(f"These {len(messages):,} messages cannot fit the model's context of "
                                 f"{self.rt.n_ctx} tokens (each takes at least one); send fewer.")
        if truncate:
            messages = self._past_the_window_left_out(messages)
        messages, media = self.media.take(messages)  # media parts become markers; the media, checked
        prefill = _prefill(messages)
        if prefill is not None:
            # The last message is the start of the answer (assistant prefill, as Anthropic's API and llama-server
            # take it): the answer continues that text rather than starting a new turn after it.
            prompt = self.template.render(messages[:-1], add_generation_prompt=True, tools=tools,
                                          cancelled=cancelled) + prefill
        else:
            prompt = self.template.render(messages, add_generation_prompt=True, tools=tools, cancelled=cancelled)
        stops = self.rt.turn_stops
        if stops:
            sampling = replace(sampling, stop=[*sampling.stop, *(s for s in stops if s not in sampling.stop)])
        literal = literal_spans(prompt, messages, self.rt.special_texts())
        system_text = system_prefix(self.template, messages, prompt)
        if media:
            with self.media.prompt(prompt, media, literal, self.decoder.tokenize_text) as pieces:
                return self._generate(prompt, system_text, sampling, emit, cancelled, truncate, literal, pieces)
        return self._generate(prompt, system_text, sampling, emit, cancelled, truncate, literal)

    def complete(self, prompt: str, sampling: SamplingOptions, emit, cancelled: threading.Event,
                 truncate: bool = True) -> dict | None:
        self._check_generates()
        if truncate:
            prompt = self._tail_that_can_fit(prompt)
        return self._generate(prompt, None, sampling, emit, cancelled, truncate)

    def _past_the_window_left_out(self, messages: list[dict]) -> list[dict]:
        """A conversation to be cut to fit, less what the cut would surely drop, known from bytes alone as the
        API's early refusal of a hopeless prompt is (Runtime.surely_longer): the messages before those that fill
        the context by themselves, and the head of one that fills it alone. Rendering and tokenizing all of a
        9 MB conversation only to keep its last few thousand tokens took 45 s and 1.3 GB (issue 56). The leading
        system messages stay: the context policy keeps them."""
        room = self.rt.n_ctx
        lead = 0
        while lead < len(messages) and messages[lead].get("role") == "system":
            lead += 1
        filled = 0
        for i in range(len(messages) - 1, lead - 1, -1):
            content = messages[i].get("content")
            filled += self.rt.fewest_tokens(content) if isinstance(content, str) else 0
            if filled > room:
                kept = messages[:lead] + messages[i:]
                if isinstance(content, str):
                    kept[lead] = {**messages[i], "content": self._tail_that_can_fit(content)}
                return kept
        return messages

    def _tail_that_can_fit(self, text: str) -> str:
        """The end of a text that surely holds more than a context of tokens: no more than a context of the
        longest tokens can spell (the rest could not be kept)."""
        longest = self.rt.longest_token_bytes()
        if not longest or not self.rt.surely_longer(text, self.rt.n_ctx):
            return text
        keep = self.rt.n_ctx * longest
        data = text.encode("utf-8", "surrogatepass")
        return data[-keep:].decode("utf-8", "ignore") if len(data) > keep else text

    def _check_generates(self) -> None:
        if self.refusal:
            raise NotAChatModel(self.refusal)

    def _generate(self, prompt: str, system_text: str | None, sampling, emit, cancelled, truncate,
                  literal=(), media=None) -> dict | None:
        check_logit_bias(sampling, self.rt.n_vocab)  # before the prompt is read
        sampling = self.with_recommended(sampling)
        if self.slots is not None:
            make = None  # each answer drafts on its own: a prediction, or the model's prompt lookup
            if sampling.prediction:
                make = lambda decoder: prediction_speculator(decoder, sampling.prediction)  # noqa: E731
            elif self.decoder.speculator is not None:
                make = lambda decoder: make_speculator(self.rt, decoder)  # noqa: E731
            self.slots.start(prompt, system_text, sampling, emit, cancelled, truncate, literal, make, media)
            return None
        self.decoder.context_policy.system_text = system_text
        speculator = prediction_speculator(self.decoder, sampling.prediction) if sampling.prediction else None
        return self.decoder.generate(prompt, sampling, emit, cancelled, truncate, literal, speculator, media)

    def with_recommended(self, sampling: SamplingOptions) -> SamplingOptions:
        """The request's settings, with the model's recommendation for each one the user did not give."""
        if sampling.given is None or not self.recommended:
            return sampling
        taken = {name: value for name, value in self.recommended.items() if name not in sampling.given}
        return replace(sampling, **taken) if taken else sampling

    def embed(self, inputs: list) -> dict:
        """Unit-length embeddings of texts or token lists (see app/engine/decoding/embedding.py), at once."""
        return self._embedder().embed(inputs)

    def embedding(self, inputs: list):
        """The same as an EmbedJob, done a piece at a time between the engine's other work."""
        return self._embedder().job(inputs)

    def _embedder(self):
        if self.embedder is None:
            from app.engine.decoding.embedding import Embedder

            self.embedder = Embedder(self.rt)
        return self.embedder

    def reset(self) -> None:
        if self.slots is not None:
            self.slots.reset()
            return
        self.decoder.reset()
        self.decoder.context_policy.reset()

    def close(self) -> None:
        self.media.close()  # before the model it belongs to
        if self.embedder is not None:
            self.embedder.close()
            self.embedder = None
        if self.slots is not None:
            self.slots.close()  # the decoders too, the session's included
            self.slots = None
            self.rt.close()
            return
        if self.decoder.speculator is not None:
            self.decoder.speculator.close()
            self.decoder.speculator = None
        self.decoder.close()
        self.rt.close()


def _prefill(messages: list[dict]) -> str | None:
    """The text of a final assistant message the answer continues; None when the conversation ends otherwise."""
    last = messages[-1] if messages else None
    if not isinstance(last, dict) or last.get("role") != "assistant" or last.get("tool_calls") \
            or not isinstance(last.get("content"), str) or len(messages) < 2:
        return None
    return last["content"]
