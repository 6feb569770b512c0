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

from app.core.library.copies import clean_partial_copies
from app.core.library.discovery import discover, discovery_home, discovery_roots
from app.core.library.entry import (APP_NAMES, DISCOVERED_SOURCES, IMPORT_MODES, MAX_DEPTH, OWNED_SOURCES,
                                    LibraryEntry)
from app.core.library.ids import AmbiguousModel, assign_ids, find
from app.core.library.importing import import_model
from app.core.library.index import forget_missing, index_file, missing_records, register
from app.core.library.listing import entry_for_path, list_models, resolve
from app.core.library.removal import Removal, carry_out, plan_removal, remove_model

__all__ = ["APP_NAMES", "DISCOVERED_SOURCES", "IMPORT_MODES", "MAX_DEPTH", "OWNED_SOURCES", "AmbiguousModel",
           "LibraryEntry", "Removal", "assign_ids", "carry_out", "clean_partial_copies", "discover",
           "discovery_home", "discovery_roots", "entry_for_path", "find", "forget_missing", "import_model",
           "index_file", "list_models", "missing_records", "plan_removal", "register", "remove_model", "resolve"]
