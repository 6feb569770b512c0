"""The library's entry and the names its rooms share: sources, import modes, how deep discovery walks."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

OWNED_SOURCES = ("hearth", "imported", "quantized")
DISCOVERED_SOURCES = ("huggingface", "lmstudio", "gpt4all", "ollama")
APP_NAMES = {"huggingface": "the Hugging Face cache", "lmstudio": "LM Studio", "gpt4all": "GPT4All",
             "ollama": "Ollama", "bundled": "Hearth's installation"}
IMPORT_MODES = ("link", "copy", "move")
MAX_DEPTH = 6  # how deep discovery walks below a root


@dataclass
class LibraryEntry:
    name: str
    path: str
    size_bytes: int
    source: str  # bundled | hearth | imported | quantized | huggingface | lmstudio | gpt4all | ollama | file
    owned: bool  # Hearth may delete it
    architecture: str | None = None
    parameters: int | None = None
    quantization: str | None = None
    context_length: int | None = None
    parts: int = 1  # files in a split GGUF set
    error: str | None = None  # why the metadata could not be read
    # Unique in the library, even ignoring case: what the CLI, the API (`model`) and the window name it by.
    # The file's stem, qualified by its source (or a hash of its path) where another entry shares the stem.
    id: str = ""
    # Its projector (app/core/library/projectors.py): the mmproj file beside it, and what the pair can do
    # ("sees images", "hears audio"); None and [] for a model that reads text only.
    projector: str | None = None
    abilities: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)
