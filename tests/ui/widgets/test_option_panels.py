"""The window's option panels give back every setting they were given, also those they have no control for."""

from __future__ import annotations

from dataclasses import replace

from app.protocol.messages import LoadOptions, SamplingOptions


def test_sampling_panel_keeps_stop_strings_and_the_repeat_window(qtbot):
    from app.ui.chat.sampling_panel import SamplingPanel

    panel = SamplingPanel()
    qtbot.addWidget(panel)
    wanted = SamplingOptions(max_tokens=77, temperature=0.4, top_k=12, top_p=0.8, min_p=0.02, repeat_penalty=1.2,
                             repeat_last_n=128, seed=7, stop=["###", "</s>"])
    panel.set_options(wanted)
    # Settings saved before Hearth recorded which were given: every one is the user's.
    assert replace(panel.options(), given=None) == wanted
    assert set(panel.options().given) >= {"temperature", "top_k", "top_p", "min_p", "repeat_penalty"}
    panel.temperature.setValue(0.9)  # the user changes a box: the rest stays
    assert replace(panel.options(), given=None) == SamplingOptions(**{**wanted.to_dict(), "temperature": 0.9})


def test_sampling_panel_shows_the_models_recommendation_where_the_user_set_nothing(qtbot):
    from app.ui.chat.sampling_panel import SamplingPanel

    panel = SamplingPanel()
    qtbot.addWidget(panel)
    panel.set_options(SamplingOptions(given=[]))  # a fresh install: nothing set
    panel.show_recommended({"temperature": 0.6, "top_p": 0.9})
    assert (panel.temperature.value(), panel.top_p.value()) == (0.6, 0.9)
    assert "recommendation" in panel.temperature.toolTip()
    assert "temperature" not in panel.options().given  # the engine applies the model's, on every surface alike
    panel.temperature.setValue(1.1)  # the user's own choice wins, and is kept past the next model
    panel.show_recommended({"temperature": 0.2})
    assert panel.temperature.value() == 1.1 and "temperature" in panel.options().given
    assert panel.top_p.value() == SamplingOptions().top_p  # that model recommends no top_p: Hearth's default
    assert "recommendation" not in panel.temperature.toolTip()


def test_sampling_panel_does_not_keep_benchmark_only_fields(qtbot):
    from app.ui.chat.sampling_panel import SamplingPanel

    panel = SamplingPanel()
    qtbot.addWidget(panel)
    panel.set_options(SamplingOptions(ignore_eos=True))
    assert panel.options().ignore_eos is False  # it is saved as the user's preference: must not stick


def test_load_settings_keep_the_settings_without_a_control(qtbot):
    from app.ui.models.load_settings import LoadSettings

    panel = LoadSettings()
    qtbot.addWidget(panel)
    wanted = LoadOptions(model_path="m.gguf", n_ctx=2048, n_batch=256, n_threads=2, draft_max=6,
                         window_fraction=0.25, kv_type="q8_0", context_policy="truncate-middle", sink_tokens=2,
                         keep_system=False, lookup=True)
    panel.set_options(wanted)
    assert panel.options("m.gguf") == wanted
    # A decision for one load is not carried to the next.
    panel.set_options(LoadOptions(model_path="m.gguf", ignore_fit=True))
    assert panel.options("m.gguf").ignore_fit is False


def test_threads_default_to_auto_and_a_number_fixes_them(qtbot):
    from app.protocol.messages import LoadOptions
    from app.ui.models.load_settings import LoadSettings

    panel = LoadSettings()
    qtbot.addWidget(panel)
    assert panel.threads.text().startswith("Auto") and panel.options("m.gguf").n_threads is None
    panel.set_options(LoadOptions(model_path="m.gguf", n_threads=1))
    assert panel.options("m.gguf").n_threads == 1
    panel.set_options(LoadOptions(model_path="m.gguf"))
    assert panel.options("m.gguf").n_threads is None
