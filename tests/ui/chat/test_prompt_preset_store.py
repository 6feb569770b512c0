"""System-prompt presets on disk (app/ui/chat/preset_store.py): starters until the user changes them, saved by
name (a name in other case replaces), deleted, and a damaged file read as no file."""

from __future__ import annotations

import pytest

from app.ui.chat.preset_store import (STARTERS, PresetError, delete_preset, find_preset, load_presets,
                                     presets_file, save_preset)


def test_starters_then_the_users_own_kept_in_order_and_replaced_by_name():
    assert [p["name"] for p in load_presets()] == [p["name"] for p in STARTERS]
    save_preset("  Pirate  voice ", "Talk like a pirate.")
    save_preset("concise", "One sentence.")  # the starter "Concise", edited
    presets = load_presets()
    assert [p["name"] for p in presets] == [*(p["name"] for p in STARTERS), "Pirate voice"]
    assert presets[0] == {"name": "Concise", "text": "One sentence."}
    assert find_preset(" Talk like a pirate.\n", presets) == "Pirate voice" and find_preset("", presets) is None
    delete_preset("CONCISE")
    assert "Concise" not in [p["name"] for p in load_presets()]
    delete_preset("Pirate voice")
    delete_preset("Coding assistant")
    delete_preset("Translator")
    assert load_presets() == []  # all deleted stays deleted: the starters do not come back


def test_a_preset_needs_a_name_and_a_text_and_a_damaged_file_reads_as_none():
    with pytest.raises(PresetError, match="needs a name"):
        save_preset("  ", "text")
    with pytest.raises(PresetError, match="system prompt is empty"):
        save_preset("Empty", " \n")
    presets_file().parent.mkdir(parents=True, exist_ok=True)
    presets_file().write_text("{not json", encoding="utf-8")
    assert load_presets() == STARTERS
    presets_file().write_text('{"presets": [{"name": 3}, {"name": "Ok", "text": "fine"}]}', encoding="utf-8")
    assert load_presets() == [{"name": "Ok", "text": "fine"}]
