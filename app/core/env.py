"""Every environment variable Hearth reads, in one place: its name, type, meaning and default.

Code asks a variable here (`env.HOME.get()`), never `os.environ` by name, so the list below is the whole list
(as Ollama keeps its envconfig/config.go); the guide shows it (docs/install.md, "Environment variables"), and
tests/core/test_env.py fails when a module reads a HEARTH_ variable any other way or the guide leaves one out.
Tests change Hearth's behaviour through seams they inject (a probe command, a transport), not through
variables the product reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable


def _flag(raw: str) -> bool:
    return raw.strip().lower() not in ("", "0", "no", "false", "off")


@dataclass(frozen=True)
class Var:
    name: str
    meaning: str
    kind: Callable[[str], Any] = str  # how its text becomes a value (str, float, int, _flag)
    default: Any = None

    def get(self) -> Any:
        """Its value, or the default where it is unset, empty or not of its kind."""
        raw = os.environ.get(self.name)
        if raw is None or raw == "":  # a value of spaces is a value: a blank API key must be refused, not unset
            return self.default
        try:
            return self.kind(raw)
        except ValueError:
            return self.default

    @property
    def is_set(self) -> bool:
        return bool(os.environ.get(self.name, ""))


HOME = Var("HEARTH_HOME", "one folder for all of Hearth's data, settings, logs and caches (a portable install, tests)")
API_KEY = Var("HEARTH_API_KEY", "the API key hearth serve requires, and hearth chat/bench --endpoint send")
THEME = Var("HEARTH_THEME", "the window's theme, light or dark, over the Settings' choice")
EMBED_MODEL = Var("HEARTH_EMBED_MODEL", "the documents' embedding model: any embedding GGUF")
RUNTIMES_DIR = Var("HEARTH_RUNTIMES_DIR", "where built GPU runtimes are kept and looked for first (shared caches)")
DISCOVERY_HOME = Var("HEARTH_DISCOVERY_HOME", "the home folder under which other apps' models are looked for")
NO_DISCOVERY = Var("HEARTH_NO_DISCOVERY", "1: do not list other apps' models (LM Studio, Ollama, GPT4All...)",
                   _flag, False)
BUNDLED_MODEL = Var("HEARTH_BUNDLED_MODEL", "the default model's file, instead of the bundled SmolLM2")
ENGINE_NICE = Var("HEARTH_ENGINE_NICE", "set by Hearth for an engine that runs below its caller's priority "
                  "(the documents' embedder): its niceness", int)
STEP_CLOCK = Var("HEARTH_STEP_CLOCK", "set by Hearth for its engine: the file of the watchdog's step clock")
STEP_TIMEOUT = Var("HEARTH_STEP_TIMEOUT", "the watchdog's budget for one engine step, in seconds (as --step-timeout)",
                   float)
LLAMA_VERBOSE = Var("HEARTH_LLAMA_VERBOSE", "1: llama.cpp's own log in full in the engine log", _flag, False)
VULKAN_INCLUDE = Var("HEARTH_VULKAN_INCLUDE", "newer Vulkan headers for building the Vulkan runtime")
LLAMA_SDIST = Var("HEARTH_LLAMA_SDIST", "a llama-cpp-python sdist already on disk, for building runtimes and tools")
LLAMA_MTMD_CLI = Var("HEARTH_LLAMA_MTMD_CLI", "llama.cpp's llama-mtmd-cli for `hearth bench media` to compare "
                     "against, where it is not built beside a runtime")

ALL = (HOME, API_KEY, THEME, EMBED_MODEL, RUNTIMES_DIR, DISCOVERY_HOME, NO_DISCOVERY, BUNDLED_MODEL, ENGINE_NICE,
       STEP_CLOCK, STEP_TIMEOUT, LLAMA_VERBOSE, VULKAN_INCLUDE, LLAMA_SDIST, LLAMA_MTMD_CLI)
