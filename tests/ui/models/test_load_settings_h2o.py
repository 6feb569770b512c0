"""The window's load settings offer the h2o context policy, labelled experimental, and carry its budgets."""

from __future__ import annotations

from app.protocol.messages import LoadOptions


def test_h2o_is_listed_as_experimental_and_round_trips_with_its_budgets(qtbot):
    from app.ui.models.load_settings import LoadSettings

    panel = LoadSettings()
    qtbot.addWidget(panel)
    labels = [panel.policy.itemText(i) for i in range(panel.policy.count())]
    assert "h2o (experimental)" in labels and "window" in labels
    wanted = LoadOptions(model_path="m.gguf", context_policy="h2o", h2o_heavy=0.3, h2o_recent=0.4, sink_tokens=8)
    panel.set_options(wanted)
    assert panel.policy.currentText() == "h2o (experimental)" and panel.sinks.isEnabled()
    assert not panel.flash.isEnabled() and "flash attention is off" in panel.flash.toolTip()
    assert panel.options("m.gguf") == wanted  # the budgets have no box here: carried unchanged
    panel.policy.setCurrentIndex(panel.policy.findData("stop"))
    assert panel.options("m.gguf").context_policy == "stop" and not panel.sinks.isEnabled()
    assert panel.flash.isEnabled()

