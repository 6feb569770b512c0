"""GBNF, the grammar language llama.cpp samples under: its size limit, and llama-cpp-python's own
JSON-schema-to-GBNF converter loaded without llama.cpp.

The converter (llama_cpp/llama_grammar.py) is plain Python, but importing it as `llama_cpp.llama_grammar` runs
the package's __init__, which loads libllama into the caller's process. The API server and the window turn
schemas into grammars, and llama.cpp must run only in the engine process (a crash there costs a restart, not
the server), so the file is loaded on its own under a private name. A frozen bundle keeps modules in an
archive, so it ships this one as a file too (packaging/hooks/hook-llama_cpp.py).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

MAX_GRAMMAR_CHARS = 1 << 20  # the longest grammar the engine accepts; a schema's converter stops past it
# llama.cpp parses a grammar recursively: groups nested ~20000 deep overflow the engine's stack (measured:
# 8000 parsed and sampled fine). JSON schemas nest a group per character of a string's maxLength.
MAX_GRAMMAR_DEPTH = 2000
_PRIVATE = "_hearth_llama_grammar"


def converter() -> ModuleType:
    """llama-cpp-python's llama_grammar module (SchemaConverter, JSON_GBNF), without libllama."""
    module = sys.modules.get(_PRIVATE)
    if module is not None:
        return module
    spec = importlib.util.find_spec("llama_cpp")  # a top-level package's spec: found, not imported
    source = (Path(next(iter(spec.submodule_search_locations or ()), "")) / "llama_grammar.py"
              if spec is not None else None)
    if source is None or not source.is_file():
        raise ImportError("llama-cpp-python's llama_grammar.py was not found: reinstall Hearth.")
    file_spec = importlib.util.spec_from_file_location(_PRIVATE, source)
    module = importlib.util.module_from_spec(file_spec)
    sys.modules[_PRIVATE] = module  # before running it: its dataclasses look their module up by name
    file_spec.loader.exec_module(module)
    return module
