"""What an empty chat says (#55 A): what to do, three example prompts that suit the loaded model, and what that
model is good and bad at, in plain words. Qt-free: the transcript draws it (Transcript.show_welcome)."""

from __future__ import annotations

from dataclasses import dataclass

# By size, what people can expect: a 135M model writes short, fluent text and gets facts wrong; a 7B one
# answers most everyday questions. The figures are parameters, from the model file.
SMALL, MEDIUM = 1.0e9, 6.0e9


@dataclass(frozen=True)
class Welcome:
    title: str
    lines: tuple[str, ...]
    examples: tuple[str, ...]


def welcome(info: dict | None, title: str = "") -> Welcome:
    """The welcome for the model `info` describes (the engine's Loaded event), named `title` in the window."""
    if not info:
        return Welcome("No model is loaded yet",
                       ("Choose a model in the list above and press Load; then type a message below and press Enter.",),
                       ())
    name = title or str(info.get("name") or "the model")
    params = float(info.get("n_params") or 0)
    base = bool((info.get("chat_format") or {}).get("base_model"))
    lines = [f"Type a message below and press Enter. {name} answers here, on this computer, offline."]
    if base:
        lines.append("It is a base model: it continues text rather than following instructions, so start the text "
                     "you want it to go on with.")
        return Welcome(f"Chat with {name}", tuple(lines),
                       ("Once upon a time, in a small village by the sea,", "The three primary colors are",
                        "def fibonacci(n):"))
    if params and params < SMALL:
        lines.append("It is a small model: quick, with short answers, but often wrong about facts. It is good at "
                     "simple writing and rewording; check anything it states.")
        examples = ("Name three colors.", "Write a short poem about the sea.", "Say 'good morning' in a friendly way.")
    elif params and params < MEDIUM:
        lines.append("It is a mid-sized model: good at everyday questions, writing and simple code; it can still "
                     "get facts wrong, so check what matters.")
        examples = ("Explain what a GGUF file is in two sentences.", "Write a Python function that reverses a string.",
                    "Give me three ideas for a weekend trip.")
    else:
        lines.append("It answers everyday questions, writes and explains code, and follows longer instructions; "
                     "like every model it can be wrong, so check what matters.")
        examples = ("Explain the difference between a list and a tuple in Python.",
                    "Summarize the causes of the French Revolution in five points.",
                    "Draft a polite email asking to move a meeting to Friday.")
    return Welcome(f"Chat with {name}", tuple(lines), examples)
