"""Pages a window builds when first asked for, not before it paints: their tab shows an empty placeholder until
then, and opening that tab builds the page at once."""

from __future__ import annotations

from typing import Callable

from PySide6.QtWidgets import QTabWidget, QWidget


class DeferredPages:
    def __init__(self, tabs: QTabWidget):
        self.tabs = tabs
        self._builders: dict[str, Callable[[], QWidget]] = {}
        self._titles: dict[str, str] = {}
        self._placeholders: dict[str, QWidget] = {}
        self._pages: dict[str, QWidget] = {}
        tabs.currentChanged.connect(self._on_tab_opened)

    def add(self, name: str, build: Callable[[], QWidget], tab_title: str | None = None) -> None:
        """A page built by build(); with a tab_title it lives in the next tab, else build() places it."""
        self._builders[name] = build
        if tab_title is not None:
            self._titles[name] = tab_title
            self._placeholders[name] = QWidget()
            self.tabs.addTab(self._placeholders[name], tab_title)

    def get(self, name: str) -> QWidget:
        """The page, built now if it was not yet."""
        if name not in self._pages:
            page = self._pages[name] = self._builders[name]()
            if name in self._placeholders:
                self._swap_in(name, page)
        return self._pages[name]

    def built(self, name: str) -> QWidget | None:
        return self._pages.get(name)

    def all_built(self) -> bool:
        return self._pages.keys() == self._builders.keys()

    def _swap_in(self, name: str, page: QWidget) -> None:
        placeholder = self._placeholders.pop(name)
        index = self.tabs.indexOf(placeholder)
        opened = self.tabs.currentIndex() == index
        blocked = self.tabs.blockSignals(True)  # the same tab stays current: no change to report
        visible = self.tabs.isTabVisible(index)  # a page the simple window leaves out stays out
        self.tabs.removeTab(index)
        self.tabs.insertTab(index, page, self._titles[name])
        self.tabs.setTabVisible(index, visible)
        if opened:
            self.tabs.setCurrentIndex(index)
        self.tabs.blockSignals(blocked)
        placeholder.deleteLater()

    def _on_tab_opened(self, index: int) -> None:
        for name, placeholder in list(self._placeholders.items()):
            if self.tabs.widget(index) is placeholder:
                self.get(name)
