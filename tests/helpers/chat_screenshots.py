"""The chat's screenshot set of #31: `python -m tests.helpers.chat_screenshots [light|dark] [OUT]` (OUT: /tmp/shots).

The real window, offscreen, against the real engine and the bundled model, in a throwaway HEARTH_HOME, at
1366x768 and 1024x700: a reasoning model's answer (a grammar makes SmolLM2 write <think>…</think>) with its
closed Thinking block, an answer cut off by the length limit with Continue, an exported chat imported back,
a chat with LaTeX whose model is on another machine, the prompt being read (prompt progress), and the
keyboard shortcuts. Each is {state}-{width}x{height}-{theme}.png.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

SIZES = ((1366, 768), (1024, 700))
THINKS = 'root ::= "<think>" [a-z] [a-z ,]{20,80} "</think>" [A-Z] [a-z ,]{20,120} "."'
MATHS = {
    "format": "hearth-chat", "version": 1, "title": "The quadratic formula", "system_prompt": "Be exact.",
    "messages": [
        {"role": "user", "content": "How do I solve ax^2 + bx + c = 0?", "meta": {}},
        {"role": "assistant", "meta": {"model": "Qwen3-8B · Q4_K_M", "model_path": "/home/ana/models/qwen3-8b.gguf",
                                       "thought_s": 12.4, "completion_tokens": 212, "gen_tok_s": 18.3,
                                       "finish_reason": "stop"},
         "content": "<think>Complete the square, then take the root.</think>\n\n"
                    "For $a \\ne 0$ the roots of $ax^2 + bx + c = 0$ are\n\n"
                    "$$x = \\frac{-b \\pm \\sqrt{b^2 - 4ac}}{2a}$$\n\n"
                    "The discriminant $\\Delta = b^2 - 4ac$ decides: two real roots when $\\Delta > 0$, one when "
                    "$\\Delta = 0$, none in $\\mathbb{R}$ when $\\Delta < 0$. For example $x^2 - 3x + 2 = 0$ gives "
                    "$x \\in \\{1, 2\\}$, and\n\n"
                    "$$\\sum_{i=1}^{n} i = \\frac{n(n+1)}{2}$$"},
    ]}


def main(theme: str = "light", out: str = "/tmp/shots") -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ["HEARTH_THEME"] = theme
    os.environ["HEARTH_HOME"] = tempfile.mkdtemp(prefix="hearth-shots-")
    from app.ui.shell.app import make_app
    from app.ui.bridge.event_wait import pause, wait_until
    from app.ui.shell.main_window import MainWindow

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    make_app([])
    window = MainWindow()
    window.resize(*SIZES[0])
    window.show()
    wait_until(lambda: window.bridge.ready, 120)
    chat = window.chat
    chat.sampling.temperature.setValue(0.0)
    saved: list[str] = []

    def answer(action, max_tokens: int, grammar: str | None = None) -> dict:
        chat.sampling.max_tokens.setValue(max_tokens)
        chat.sampling_overrides = {"grammar": grammar} if grammar else {}
        finished: list = []
        window.bridge.generation_finished.connect(finished.append)
        action()
        wait_until(lambda: bool(finished), 300)
        window.bridge.generation_finished.disconnect(finished.append)
        chat.sampling_overrides = {}
        return finished[0]

    def ask(text: str, max_tokens: int, grammar: str | None = None) -> dict:
        chat.input.setPlainText(text)
        return answer(chat.send, max_tokens, grammar)

    def save(state: str, widget=None, sizes=SIZES) -> None:
        for size in sizes:
            window.resize(*size)
            pause(0.6)
            name = f"{state}-{size[0]}x{size[1]}-{theme}.png"
            (widget or window).grab().save(str(folder / name))
            saved.append(name)
        window.resize(*SIZES[0])

    # A reasoning answer, then one cut off by the length limit (Continue in its header).
    chat.prompt_presets.pick("Concise")
    ask("What colour is the sky?", 80, THINKS)
    ask("Tell me a long story about a cat.", 24)
    save("reasoning")
    # The chat exported (Markdown and JSON) and the JSON imported back: the status bar says so.
    window.export_chat("markdown", str(folder / f"exported-{theme}.md"))
    exported = window.export_chat("json", str(folder / f"exported-{theme}.json"))
    window.import_chat(str(exported))
    wait_until(lambda: not chat.transcript.loading, 10)
    save("exported")
    # LaTeX, in a chat whose model is on another machine (the line above the transcript says so).
    maths = Path(os.environ["HEARTH_HOME"]) / "maths.json"
    maths.write_text(json.dumps(MATHS), encoding="utf-8")
    window.import_chat(str(maths))
    wait_until(lambda: not chat.transcript.loading, 10)
    chat.transcript.toggle_thought(0)  # its thinking opened
    save("maths")
    # A long prompt being read: small batches, so that it takes several.
    loaded: list = []
    window.bridge.model_loaded.connect(loaded.append)
    window.load_chosen_model(replace(window.bridge.options, n_batch=16))
    wait_until(lambda: bool(loaded), 120)
    chat.new_conversation()
    for size in SIZES:
        window.resize(*size)
        pause(0.4)
        seen: list = []

        def grab(done: int, total: int, size=size, seen=seen) -> None:
            seen.append(done)
            if len(seen) == 3:
                name = f"prompt-progress-{size[0]}x{size[1]}-{theme}.png"
                window.grab().save(str(folder / name))
                saved.append(name)

        window.bridge.prompt_progress.connect(grab)
        ask(" ".join([f"The {size[0]} cats sat on the mat."] * 40) + " Summarise.", 1)
        window.bridge.prompt_progress.disconnect(grab)
    window.resize(*SIZES[0])
    box = window.show_shortcuts()
    pause(0.4)
    box.grab().save(str(folder / f"shortcuts-{theme}.png"))
    saved.append(f"shortcuts-{theme}.png")
    box.close()
    window.close()
    print("saved", " ".join(saved))
    return 0


if __name__ == "__main__":
    sys.exit(main(*(sys.argv[1:3] or ["light"])))
