"""Which chat format a model gets, and why: decided from its metadata and vocabulary alone.

A GGUF's own Jinja template wins. Many GGUFs carry none (all base models, many conversions); rendering
those as ChatML regardless put `<|im_end|>` in every answer of a vocabulary that has no such token, and
nothing stopped the answer. So without a template the format is chosen by the vocabulary: a family's turn
markers exist as tokens only in the models trained with them (`<start_of_turn>` in Gemma's, `<|eot_id|>`
in Llama 3's). The name is one of llama.cpp's built-in templates (llama_chat_builtin_templates), which
render those families. A vocabulary with none of the markers gets a plain completion format, said as such.

The same decision serves `models inspect` (which reads only the header, app/core/gguf/info.py) and the
engine (which reads the loaded vocabulary): both pass the marker texts that the vocabulary holds.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

from app.core.errors import HearthError

# (llama.cpp built-in name, the tokens that mark the family): the first family whose markers are all in the
# vocabulary is chosen, so a family whose markers include another's comes first (mistral-v7 before v3).
FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("chatml", ("<|im_start|>", "<|im_end|>")),
    ("gemma", ("<start_of_turn>", "<end_of_turn>")),
    ("llama3", ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")),
    ("llama4", ("<|header_start|>", "<|header_end|>", "<|eot|>")),
    ("phi3", ("<|user|>", "<|assistant|>", "<|end|>")),
    ("zephyr", ("<|user|>", "<|assistant|>")),
    ("command-r", ("<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>")),
    ("deepseek3", ("<｜User｜>", "<｜Assistant｜>")),
    ("mistral-v7", ("[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[INST]", "[/INST]")),
    ("mistral-v3", ("[INST]", "[/INST]")),
)
# Architectures whose family is known: it breaks a tie where a vocabulary holds several families' markers.
ARCHITECTURES = {
    "gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma", "gemma3n": "gemma",
    "qwen2": "chatml", "qwen2moe": "chatml", "qwen3": "chatml", "qwen3moe": "chatml",
    "phi3": "phi3", "command-r": "command-r", "cohere2": "command-r", "llama4": "llama4",
}
MARKERS = frozenset(m for _, marks in FAMILIES for m in marks)
BUILTIN_NAMES = frozenset(name for name, _ in FAMILIES) | {
    # llama.cpp's other built-ins a user may ask for by name (`--chat-template vicuna`); all render plain roles.
    "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "mistral-v1", "mistral-v3-tekken",
    "mistral-v7-tekken", "vicuna", "vicuna-orca", "openchat", "deepseek", "deepseek2", "phi4", "falcon3",
    "granite", "exaone3", "minicpm", "monarch", "orion", "chatglm3", "chatglm4", "glmedge", "megrez",
}
PLAIN = "plain"  # "User: … / Assistant: …": text any model continues, with a stop at the next "User:"
PLAIN_SOURCE = (
    "{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'] }}\n\n"
    "{% elif m['role'] == 'assistant' %}Assistant: {{ m['content'] }}\n"
    "{% else %}User: {{ m['content'] }}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)
# A model that says it was tuned to chat (general.name, .finetune, .basename, the file name).
_TUNED = re.compile(r"(instruct|chat|(^|[-_. ])it($|[-_. ])|sft|dpo|rlhf|orpo|assistant|hermes|tulu|zephyr)", re.I)


class ChatFormatError(HearthError):
    pass


@dataclass(frozen=True)
class ChatFormat:
    kind: str  # "model" (the GGUF's own Jinja) | "builtin" (a llama.cpp name) | "file" (a Jinja file) | "plain"
    name: str  # the built-in's name, the file's path, "model's own" or "plain"
    why: str  # one sentence for inspect, the load pane and --json
    base_model: bool = False  # no template and nothing in the metadata says it was tuned to chat
    source: str | None = None  # the Jinja text for "model", "file" and "plain"

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("source")
        return data


def looks_tuned(*names: str | None) -> bool:
    return any(n and _TUNED.search(n) for n in names)


def choose_format(template: str | None, vocab_markers, architecture: str | None = None,
                  names: tuple[str | None, ...] = (), override: str | None = None) -> ChatFormat:
    """The chat format for a model. vocab_markers: which of MARKERS its vocabulary holds as tokens;
    names: general.name, general.finetune, general.basename and the file name, for the base-model label;
    override: the user's choice (a built-in name, a Jinja file, "plain"; None or "auto": choose)."""
    present = set(vocab_markers) & MARKERS
    base = not template and not looks_tuned(*names)
    if override and override != "auto":
        return _chosen_by_user(override, base)
    if template:
        return ChatFormat("model", "model's own", "The model file carries its own chat template.", False, template)
    candidates = [name for name, marks in FAMILIES if all(m in present for m in marks)]
    if candidates:
        preferred = ARCHITECTURES.get(architecture or "")
        name = preferred if preferred in candidates else candidates[0]
        marks = dict(FAMILIES)[name]
        why = (f"The file has no chat template; its vocabulary has {' '.join(marks)}, the turn markers of "
               f"llama.cpp's built-in '{name}' template.")
        return ChatFormat("builtin", name, why, base)
    why = ("The file has no chat template and its vocabulary holds no known turn markers, so chats are written as "
           "plain 'User:' / 'Assistant:' text." + (" It looks like a base model: text completion suits it better."
                                                   if base else ""))
    return ChatFormat("plain", PLAIN, why, base, PLAIN_SOURCE)


def check_override(override: str | None) -> None:
    """Raises ChatFormatError for a template choice that names neither a built-in nor a readable file."""
    if override and override != "auto":
        _chosen_by_user(override, False)


def _chosen_by_user(override: str, base: bool) -> ChatFormat:
    if override == PLAIN:
        return ChatFormat("plain", PLAIN, "Chosen by you: plain 'User:' / 'Assistant:' text.", base, PLAIN_SOURCE)
    if override in BUILTIN_NAMES:
        return ChatFormat("builtin", override, f"Chosen by you: llama.cpp's built-in '{override}' template.", base)
    path = Path(override).expanduser()
    if not path.is_file():
        names = ", ".join(sorted(BUILTIN_NAMES | {PLAIN}))
        raise ChatFormatError(f"'{override}' is neither a chat template file nor a built-in template name "
                              f"({names}).")
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ChatFormatError(f"The chat template file {path} cannot be read ({exc}).") from None
    if len(source) > 1_000_000:
        raise ChatFormatError(f"The chat template file {path} is over a million characters; it is not a template.")
    return ChatFormat("file", str(path), f"Chosen by you: the Jinja template in {path}.", base, source)


def model_names(meta, path: str | Path) -> tuple[str | None, ...]:
    """What a model is called, for the base-model label: meta(key) -> a metadata value (any type, or None)."""
    names = (meta("general.name"), meta("general.finetune"), meta("general.basename"), Path(path).stem)
    return tuple(n if isinstance(n, str) else None for n in names)


def format_for_file(info, override: str | None = None) -> ChatFormat:
    """The format a model file gets, from its header alone (an app.core.gguf.info.GGUFInfo): what
    `models inspect` says before the model is ever loaded, decided as the engine decides it."""
    return choose_format(info.chat_template, info.vocab_markers, info.architecture,
                         model_names((info.metadata or {}).get, info.path), override)
