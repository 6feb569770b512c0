"""Sampling presets (precise / balanced / creative) and the individual settings."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QDoubleSpinBox, QFormLayout, QSpinBox, QWidget

from app.engine.protocol import SamplingOptions

PRESETS: dict[str, dict] = {
    "Precise": {"temperature": 0.2, "top_k": 40, "top_p": 0.9, "min_p": 0.05, "repeat_penalty": 1.1},
    "Balanced": {"temperature": 0.7, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "repeat_penalty": 1.1},
    "Creative": {"temperature": 1.0, "top_k": 100, "top_p": 0.98, "min_p": 0.02, "repeat_penalty": 1.05},
}
CUSTOM = "Custom"


class SamplingPanel(QWidget):
    changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        self.preset = QComboBox()
        self.preset.addItems([*PRESETS, CUSTOM])
        self.temperature = self._double(0.0, 2.0, 0.05, "0 = always the most likely token (greedy)")
        self.top_k = self._int(0, 1000, "keep only the K most likely tokens (0 = off)")
        self.top_p = self._double(0.0, 1.0, 0.01, "keep the most likely tokens up to this total probability")
        self.min_p = self._double(0.0, 1.0, 0.01, "drop tokens less likely than this share of the best one")
        self.repeat_penalty = self._double(0.5, 2.0, 0.01, "discourage repeating recent tokens")
        self.max_tokens = self._int(1, 32768, "longest answer in tokens")
        self.seed = self._int(-1, 2**31 - 1, "-1 = a new random seed per answer")
        for label, widget in (("Preset", self.preset), ("Temperature", self.temperature), ("Top-K", self.top_k),
                              ("Top-P", self.top_p), ("Min-P", self.min_p), ("Repeat penalty", self.repeat_penalty),
                              ("Max tokens", self.max_tokens), ("Seed", self.seed)):
            form.addRow(label, widget)
        self.set_options(SamplingOptions())
        self.preset.currentTextChanged.connect(self._on_preset_chosen)

    def _double(self, lo, hi, step, tip) -> QDoubleSpinBox:
        box = QDoubleSpinBox()
        box.setRange(lo, hi)
        box.setSingleStep(step)
        box.setDecimals(2)
        box.setToolTip(tip)
        box.valueChanged.connect(self._on_value_changed)
        return box

    def _int(self, lo, hi, tip) -> QSpinBox:
        box = QSpinBox()
        box.setRange(lo, hi)
        box.setToolTip(tip)
        box.valueChanged.connect(self._on_value_changed)
        return box

    def _fields(self) -> dict:
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "min_p": self.min_p,
                "repeat_penalty": self.repeat_penalty, "max_tokens": self.max_tokens, "seed": self.seed}

    def _on_preset_chosen(self, name: str) -> None:
        values = PRESETS.get(name)
        if values is None:
            return
        for key, value in values.items():
            box = self._fields()[key]
            box.blockSignals(True)
            box.setValue(value)
            box.blockSignals(False)
        self.changed.emit()

    def _on_value_changed(self, *_):
        self.preset.blockSignals(True)
        self.preset.setCurrentText(self._matching_preset())
        self.preset.blockSignals(False)
        self.changed.emit()

    def _matching_preset(self) -> str:
        current = {k: round(self._fields()[k].value(), 2) for k in PRESETS["Balanced"]}
        for name, values in PRESETS.items():
            if all(abs(current[k] - v) < 1e-6 for k, v in values.items()):
                return name
        return CUSTOM

    def options(self) -> SamplingOptions:
        f = self._fields()
        return SamplingOptions(temperature=f["temperature"].value(), top_k=f["top_k"].value(),
                               top_p=f["top_p"].value(), min_p=f["min_p"].value(),
                               repeat_penalty=f["repeat_penalty"].value(), max_tokens=f["max_tokens"].value(),
                               seed=f["seed"].value())

    def set_options(self, options: SamplingOptions) -> None:
        for key, box in self._fields().items():
            box.blockSignals(True)
            box.setValue(getattr(options, key))
            box.blockSignals(False)
        self.preset.blockSignals(True)
        self.preset.setCurrentText(self._matching_preset())
        self.preset.blockSignals(False)
