"""The window a user meets: simple (the default) or full (#55 A).

Simple is what someone coming from LM Studio's User level, Jan or GPT4All expects: the chats, the conversation,
the message box, the model picker and Attach; sampling as one choice (Precise, Balanced, Creative); the monitor
folded into the status bar's figures with a Graphs button; the Models page as the library with Download, Import,
Load and the fit verdict, everything else behind "Show details"; the pages for developers (Tools, Benchmark,
Connections, Server) out of the way. Full is every control and graph. The choice is one setting, offered at the
first start and kept in Settings; each page shows itself for a mode with `set_simple(bool)`.
"""

from __future__ import annotations

SIMPLE, FULL = "simple", "full"
MODES = {SIMPLE: "Simple", FULL: "Full"}
SETTING = "window_mode"
# The pages a simple window leaves out (View › Full window brings them back).
FULL_ONLY_PAGES = ("Tools", "Benchmark", "Connections", "Server")


def chosen(settings: dict) -> str:
    """The mode the settings hold; simple where none was chosen (or the file says something else)."""
    value = settings.get(SETTING)
    return value if value in MODES else SIMPLE


def was_chosen(settings: dict) -> bool:
    """Whether the user has chosen (the first start offers the choice)."""
    return settings.get(SETTING) in MODES
