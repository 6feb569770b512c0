"""#52.2: the settings file has one declared shape (app/ui/settings/shape.py): typed strictly, versioned, with
migrations. A value that does not fit is kept aside and said, the rest used; an older file is brought up to this
format; a newer Hearth's file is read for what this one knows and never written down to this format."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from app.ui.settings import shape


def _file():
    from app.core import paths

    path = paths.settings_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@pytest.mark.parametrize(("key", "wrong"), [
    ("enter_sends", "true"),                      # a string is no bool, though it reads like one
    ("theme", "purple"),                          # not one of the themes
    ("window_mode", "expert"),
    ("imported_models", ["/m/a.gguf", 3]),
    ("model_load_options", {"/m/a.gguf": 5}),
    ("connections", [{"url": 5}]),
    ("connections", [{"model": "m"}]),            # no url
    ("server", {"host": "127.0.0.1", "port": 70000}),
    ("server", {"tools": "time"}),
    ("load_options", ["n_ctx", 2048]),
])
def test_a_value_that_does_not_fit_is_kept_aside_said_and_the_rest_used(hearth_home, key, wrong):
    from app.ui.settings.store import load_settings, problems

    path = _file()
    written = {"version": shape.VERSION, "theme": "dark", "enter_sends": False, key: wrong}
    if key in ("theme", "enter_sends"):
        written = {"version": shape.VERSION, "window_mode": "full", key: wrong}
    path.write_text(json.dumps(written), encoding="utf-8")
    loaded = load_settings()
    assert key not in loaded and loaded == {k: v for k, v in written.items() if k not in (key, "version")}
    [said] = problems()
    assert key in said and "reset" in said
    [kept] = path.parent.glob(path.name + ".bad-*")
    assert json.loads(kept.read_text(encoding="utf-8")) == written  # the user's file, whole
    assert key not in json.loads(path.read_text(encoding="utf-8"))
    assert load_settings() == loaded and problems() == []  # said once


def test_what_the_shape_declares_is_what_the_window_reads(hearth_home):
    from app.ui.settings.store import load_settings

    good = {"enter_sends": False, "theme": "light", "window_mode": "simple", "imported_models": ["/m/a.gguf"],
            "connections": [{"url": "http://127.0.0.1:8080", "model": None}], "reuse_answer_drafts": False,
            "server": {"host": "0.0.0.0", "port": 9000, "cors": [], "offer_tools": True, "tools_in_chat": False,
                       "tools": ["time"]},
            "model_load_options": {"/m/a.gguf": {"n_ctx": 2048}}, "my_own_note": {"kept": True}}
    _file().write_text(json.dumps({"version": shape.VERSION, **good}), encoding="utf-8")
    assert load_settings() == good  # unknown keys pass through
    assert shape.value({}, "enter_sends") is True and shape.value({}, "theme") == "system"
    assert shape.value({}, "connections") == [] and shape.value(good, "server")["port"] == 9000


def test_an_older_file_is_brought_to_this_format(hearth_home):
    """Format 0 (no version): a user whose window has been open before had the full window; they keep it."""
    from app.ui.settings.store import load_settings, update_settings

    path = _file()
    path.write_text(json.dumps({"window_geometry": "AdnQywADAAAA", "theme": "dark"}), encoding="utf-8")
    assert load_settings() == {"window_geometry": "AdnQywADAAAA", "theme": "dark", "window_mode": "full"}
    update_settings(enter_sends=False)
    assert json.loads(path.read_text(encoding="utf-8")) == {
        "window_geometry": "AdnQywADAAAA", "theme": "dark", "window_mode": "full", "enter_sends": False,
        "version": shape.VERSION}


def test_a_first_start_is_not_taken_for_an_older_file(hearth_home):
    """A file this Hearth wrote before the user chose a window carries the version: it is no older user's."""
    from app.ui.settings.store import load_settings, update_settings

    update_settings(theme="dark")
    assert json.loads(_file().read_text(encoding="utf-8"))["version"] == shape.VERSION
    update_settings(window_geometry="AdnQywADAAAA")
    assert "window_mode" not in load_settings()


def test_a_newer_hearths_file_is_read_for_what_this_one_knows_and_never_written_down(hearth_home):
    from app.ui.settings.store import load_settings, problems, update_settings

    path = _file()
    newer = {"version": shape.VERSION + 5, "theme": "dark", "assistants": [{"name": "x"}]}
    path.write_text(json.dumps(newer), encoding="utf-8")
    loaded = load_settings()
    assert loaded["theme"] == "dark" and "version" not in loaded
    assert any("newer Hearth" in p and f"format {shape.VERSION + 5}" in p for p in problems())
    update_settings(theme="light")
    assert json.loads(path.read_text(encoding="utf-8")) == {**newer, "theme": "light"}


def test_every_key_the_window_writes_is_declared(qtbot, hearth_home):
    """A setting added to the window without its declaration would pass unchecked: the window's own file must
    fit the shape, key for key."""
    from app.ui.connections.saved import remember_connection
    from app.ui.shell.app import make_app
    from app.ui.shell.main_window import MainWindow

    make_app([])
    window = MainWindow(load_on_start=False)
    qtbot.addWidget(window)
    window.show()
    try:
        remember_connection(window.settings, "http://127.0.0.1:9", "a-model")
        server = window._build_server()  # the Server page keeps its last start that worked
        qtbot.addWidget(server)
        server._keep(server.serve_options())
        window.open_settings().accept()  # the Settings dialog's values
        window.set_mode("simple")
    finally:
        window.close()
    data = json.loads(_file().read_text(encoding="utf-8"))
    assert data["version"] == shape.VERSION and shape.wrong_keys(data) == []
    assert {"connections", "server", "theme", "enter_sends", "window_mode", "window_geometry"} <= set(data)
    declared = {f.name for f in fields(shape.Settings)}
    assert set(data) <= declared, set(data) - declared
