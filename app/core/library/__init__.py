"""The local model library: what Hearth can load without downloading anything.

Sources, in the order they are listed:
- bundled: the SmolLM2 model that ships with Hearth;
- hearth: GGUF files in Hearth's models folder (downloads, quantized files);
- imported: files the user imported: copied or moved into the models folder
  (Hearth owns them), or linked, i.e. recorded where they are (Hearth does not);
- huggingface, lmstudio, gpt4all, ollama: GGUF files other apps keep on disk,
  found read-only and never copied, moved or deleted.

The index of imports is a JSON file under paths.data_dir(). Metadata of each
file is read with gguf_info and cached by (path, size, mtime), so listing a
library of big models stays quick. Discovery looks under the user's home, or
under HEARTH_DISCOVERY_HOME (tests point it at a temporary folder);
HEARTH_NO_DISCOVERY=1 turns it off.

The library is one room of app/core, a module a job (#52): the entry and its names (entry), the index of imports
(index), the metadata cache (metadata), other apps' models (discovery), the listing and a name resolved to an
entry (listing), ids (ids), importing (importing, with its half-written copies in copies) and removal (removal);
beside them, the Hub (hub), the memory fit (fit), whether a draft can pay (draft_pay) and the bundled model
(bundled). What every client asks for is named here, at the package's top.
"""

from __future__ import annotations

import importlib

from app.core.library.entry import (APP_NAMES, DISCOVERED_SOURCES, IMPORT_MODES, MAX_DEPTH, OWNED_SOURCES,
                                    LibraryEntry)

# Where each name clients ask for lives. Imported when first asked for, not with the package: the window imports
# app.core.library.bundled before its first paint, and the library's readers bring in gguf and numpy.
_WHERE = {
    "clean_partial_copies": "copies",
    "discover": "discovery", "discovery_home": "discovery", "discovery_roots": "discovery",
    "AmbiguousModel": "ids", "assign_ids": "ids", "find": "ids",
    "import_model": "importing",
    "forget_missing": "index", "index_file": "index", "missing_records": "index", "register": "index",
    "entry_for_path": "listing", "list_models": "listing", "resolve": "listing",
    "Removal": "removal", "carry_out": "removal", "plan_removal": "removal", "remove_model": "removal",
}

__all__ = ["APP_NAMES", "DISCOVERED_SOURCES", "IMPORT_MODES", "MAX_DEPTH", "OWNED_SOURCES", "LibraryEntry",
           *_WHERE]


def __getattr__(name: str):
    room = _WHERE.get(name)
    if room is None:
        raise AttributeError(f"module 'app.core.library' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"app.core.library.{room}"), name)
    globals()[name] = value
    return value
