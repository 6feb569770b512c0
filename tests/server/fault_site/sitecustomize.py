"""Faults injected into a real `hearth serve` and its engine process (tests/server/edge/test_busy_slot.py).

Put on PYTHONPATH, Python imports this at the start of every process (the server, and the engine, which
inherits the environment). It wraps functions at each stage a request passes through, in whichever process
imports their module, so that a request whose text holds "FAULT:<stage>" fails there with an unexpected
error, as a bug would. Nothing is changed for any other request. HEARTH_TEST_SCAN_DELAY_S makes every
listing of the model library that long (a huge or stuck folder; tests/server/test_library_scan.py).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import time


class InjectedFault(RuntimeError):
    pass


def _marked(stage: str, value) -> bool:
    return f"FAULT:{stage}" in str(value)


def _patch_requests(module) -> None:  # server: parsing the body into a request
    chat_request = module.chat_request

    def chat(body, *args, **kwargs):
        if _marked("parse", body):
            raise InjectedFault("injected at parse")
        return chat_request(body, *args, **kwargs)

    module.chat_request = chat


def _patch_messages(module) -> None:  # server: a command encoded for the engine's pipe
    encode = module.encode

    def encoding(message):
        if "cmd" in message and _marked("send", message.get("messages")):
            raise ValueError("injected at send")
        return encode(message)

    module.encode = encoding


def _patch_openai_api(module) -> None:  # server: the answer encoded for the client
    shape = module._Shape
    pieces, whole = shape._pieces, shape.whole

    def failing_pieces(self, text):
        if _marked("encode", self.gen.messages):
            self.calls_seen = getattr(self, "calls_seen", 0) + 1
            if self.calls_seen > 2:
                raise InjectedFault("injected at encode")
        return pieces(self, text)

    def failing_whole(self, text, done):
        if _marked("encode", self.gen.messages):
            raise InjectedFault("injected at encode")
        return whole(self, text, done)

    shape._pieces, shape.whole = failing_pieces, failing_whole


def _patch_session(module) -> None:  # engine: the chat template
    chat = module.Session.chat

    def templating(self, messages, *args, **kwargs):
        if _marked("template", messages):
            raise InjectedFault("injected at template")
        return chat(self, messages, *args, **kwargs)

    module.Session.chat = templating


def _patch_decode(module) -> None:  # engine: tokenizing the prompt, and generating
    decoder = module.Decoder
    tokenize, begin, hand_out = decoder.tokenize_prompt, decoder.begin, decoder.hand_out

    def tokenizing(self, prompt_text, *args, **kwargs):
        if _marked("tokenize", prompt_text):
            raise InjectedFault("injected at tokenize")
        return tokenize(self, prompt_text, *args, **kwargs)

    def beginning(self, prompt_text, *args, **kwargs):
        self.fault_in = 5 if _marked("generate", prompt_text) else None  # tokens before the fault
        return begin(self, prompt_text, *args, **kwargs)

    def handing_out(self, *args, **kwargs):
        if getattr(self, "fault_in", None) is not None:
            self.fault_in -= 1
            if self.fault_in <= 0:
                self.fault_in = None
                raise InjectedFault("injected at generate")
        return hand_out(self, *args, **kwargs)

    decoder.tokenize_prompt, decoder.begin, decoder.hand_out = tokenizing, beginning, handing_out


def _patch_library(module) -> None:  # a library whose folders take long to walk
    delay = float(os.environ.get("HEARTH_TEST_SCAN_DELAY_S") or 0)
    list_models = module.list_models

    def slow(*args, **kwargs):
        time.sleep(delay)
        return list_models(*args, **kwargs)

    if delay:
        module.list_models = slow


PATCHES = {"app.core.library": _patch_library, "app.server.openai.chat_request": _patch_requests, "app.protocol.messages": _patch_messages,
           "app.server.openai.endpoints": _patch_openai_api, "app.engine.process.session": _patch_session,
           "app.engine.decoding.decode": _patch_decode}


class _Patcher(importlib.abc.MetaPathFinder):
    """Runs a module's patch right after the module itself has run."""

    def find_spec(self, name, path, target=None):
        patch = PATCHES.get(name)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Patcher())
