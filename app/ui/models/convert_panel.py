"""Convert a Hugging Face checkpoint (a folder or `owner/name`) to GGUF, optionally quantized."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QFileDialog, QFormLayout, QLineEdit, QWidget

from app.core.gguf import quant_types as qt
from app.ui.widgets import STRETCH, button, combo, hbox, vbox, wrapped

# The page offers fewer choices than the command line: no f32 output, and only the quantizations it offers
# everywhere (`hearth models convert --quantize` also takes Q5_0 and Q4_1).
OUTTYPES = tuple(t for t in qt.CONVERT_OUTTYPES if t != "f32")
QUANTIZE_CHOICES = ("", *(q for q in qt.CONVERT_QUANTS if q in qt.QUANTIZE_TYPES))


class ConvertPanel(QWidget):
    convert_requested = Signal(str, str, object)  # source, outtype, quantize (None: keep outtype)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.source = QLineEdit(placeholderText="A checkpoint folder, or a repository such as owner/name")
        self.browse = button("Folder…", self._on_browse)
        self.outtype = QComboBox()
        self.outtype.addItems(list(OUTTYPES))
        self.quantize_to = combo({q or None: qt.label(q) if q else "no, keep the output type"
                                  for q in QUANTIZE_CHOICES})
        self.convert_button = button("Convert", self._on_convert_clicked)
        self.note = wrapped("Turns a Hugging Face checkpoint (config, tokenizer and safetensors) into a GGUF file "
                            "that joins the library. For a repository only the files the converter reads are "
                            "downloaded.", "hint")
        self.missing = wrapped(color="#f59e0b")

        form = QFormLayout()
        form.addRow("Source", hbox((self.source, 1), self.browse))
        form.addRow("Output type", self.outtype)
        form.addRow("Then quantize", self.quantize_to)
        vbox(self.note, form, self.missing, hbox(STRETCH, self.convert_button), STRETCH, parent=self, margin=6)

        self.source.returnPressed.connect(self._on_convert_clicked)

    def set_converter_note(self, note: str) -> None:
        """'' when the converter is installed, else what to install (the button stays off)."""
        self.missing.setText(note)
        self.missing.setVisible(bool(note))
        self.convert_button.setEnabled(not note)

    def _on_browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Hugging Face checkpoint folder")
        if folder:
            self.source.setText(folder)

    def _on_convert_clicked(self) -> None:
        source = self.source.text().strip()
        if source and self.convert_button.isEnabled():
            self.convert_requested.emit(source, self.outtype.currentText(), self.quantize_to.currentData())
