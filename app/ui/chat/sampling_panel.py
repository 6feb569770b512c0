"""Sampling presets (precise / balanced / creative) and the individual settings."""

from __future__ import annotations

from PySide6.QtCore import QSignalBlocker, Signal
from PySide6.QtWidgets import QComboBox, QDoubleSpinBox, QFormLayout, QSpinBox, QWidget

from app.ui.widgets.clamped_spin import ClampingDoubleSpinBox, ClampingSpinBox
from app.protocol.option_fields import SAMPLING_FIELDS, kept_fields, with_values
from app.protocol.messages import SamplingOptions

PRESETS: dict[str, dict] = {
    "Precise": {"temperature": 0.2, "top_k": 40, "top_p": 0.9, "min_p": 0.05, "repeat_penalty": 1.0},
    "Balanced": {"temperature": 0.7, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "repeat_penalty": 1.0},
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
        form.addRow("Preset", self.preset)
        # One spin box per field the option table gives a label (self.temperature, self.top_k, ...).
        self._boxes: dict[str, QSpinBox | QDoubleSpinBox] = {}
        for field in SAMPLING_FIELDS:
            if field.label is None:
                continue
            box = self._double(field) if isinstance(getattr(SamplingOptions(), field.name), float) else self._int(field)
            setattr(self, field.name, box)
            self._boxes[field.name] = box
            form.addRow(field.label, box)
        self._form = form
        # The user's settings without a box here (stop strings, the repeat window), kept as they were set.
        self._kept = {name: getattr(SamplingOptions(), name) for name in kept_fields(SAMPLING_FIELDS, set(self._boxes))}
        # The settings the user set (a box changed, a preset chosen); the others show and take the loaded model's
        # recommendation where its file has one (general.sampling.*), as on every other surface.
        self._given: set[str] = set()
        self._recommended: dict = {}
        self.set_options(SamplingOptions(given=[]))
        self.preset.currentTextChanged.connect(self._on_preset_chosen)

    def set_simple(self, simple: bool) -> None:
        """Simple: the preset alone (Precise, Balanced, Creative); full: every setting's box too."""
        for box in self._boxes.values():
            self._form.setRowVisible(box, not simple)

    def _double(self, field) -> QDoubleSpinBox:
        box = ClampingDoubleSpinBox(field.label)
        box.setRange(field.low, field.high)
        box.setSingleStep(field.step)
        box.setDecimals(2)
        box.setToolTip(field.tip)
        box.valueChanged.connect(self._on_value_changed)
        return box

    def _int(self, field) -> QSpinBox:
        box = ClampingSpinBox(field.label)
        box.setRange(int(field.low), int(field.high))
        box.setToolTip(field.tip)
        box.valueChanged.connect(self._on_value_changed)
        return box

    def _on_preset_chosen(self, name: str) -> None:
        values = PRESETS.get(name)
        if values is None:
            return
        self._given |= set(values)
        for key, value in values.items():
            box = self._boxes[key]
            with QSignalBlocker(box):
                box.setValue(value)
        self.changed.emit()

    def _on_value_changed(self, *_):
        self._given |= {name for name, box in self._boxes.items() if box is self.sender()}
        with QSignalBlocker(self.preset):
            self.preset.setCurrentText(self._matching_preset())
        self.changed.emit()

    def _matching_preset(self) -> str:
        current = {k: round(self._boxes[k].value(), 2) for k in PRESETS["Balanced"]}
        for name, values in PRESETS.items():
            if all(abs(current[k] - v) < 1e-6 for k, v in values.items()):
                return name
        return CUSTOM

    def options(self) -> SamplingOptions:
        """The user's sampling settings: the boxes, and the kept settings that have none. Fields no user sets
        (ignore_eos, for benchmarks) are left at their defaults, so that they are never saved as a preference."""
        values = {name: box.value() for name, box in self._boxes.items()}
        kept = {name: list(v) if isinstance(v, list) else v for name, v in self._kept.items()}
        given = sorted(self._given | set(self._kept))  # the settings without a box are the user's as kept
        return with_values(SamplingOptions(), {**kept, **values, "given": given})

    def set_options(self, options: SamplingOptions) -> None:
        self._kept = {name: getattr(options, name) for name in self._kept}
        # Settings saved before Hearth knew which were given are all the user's.
        self._given = set(self._boxes) if options.given is None else set(options.given) & set(self._boxes)
        for key, box in self._boxes.items():
            with QSignalBlocker(box):
                box.setValue(getattr(options, key) if key in self._given else
                             self._recommended.get(key, getattr(SamplingOptions(), key)))
        self._mark_recommended()
        with QSignalBlocker(self.preset):
            self.preset.setCurrentText(self._matching_preset())

    def show_recommended(self, recommended: dict) -> None:
        """A model was loaded: the settings the user has not set show (and take) its recommendation, or Hearth's
        defaults for a model without one."""
        self._recommended = {k: v for k, v in recommended.items() if k in self._boxes}
        for key, box in self._boxes.items():
            if key not in self._given:
                with QSignalBlocker(box):
                    box.setValue(self._recommended.get(key, getattr(SamplingOptions(), key)))
        with QSignalBlocker(self.preset):
            self.preset.setCurrentText(self._matching_preset())
        self._mark_recommended()

    def _mark_recommended(self) -> None:
        for field in SAMPLING_FIELDS:
            box = self._boxes.get(field.name)
            if box is not None:
                from_model = field.name in self._recommended and field.name not in self._given
                box.setToolTip(f"{field.tip} (the model's recommendation, from its file)" if from_model else field.tip)
