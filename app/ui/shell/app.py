"""Start the Qt application and show the main window."""

from __future__ import annotations

import sys

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QGuiApplication, QIcon
from PySide6.QtWidgets import QApplication

from app.core import resources
from app.core.errors import DependencyMissing
from app.backends.supervisor import Supervisor
from app.ui.shell.theme import apply_theme
from app.ui.shell.indicator_style import VisibleIndicatorStyle
from app.ui.widgets.wheel_guard import WheelSafeStyle


def check_qt_binding() -> None:
    """Refuse a PySide6 whose Signal.emit() loses a reference to True (6.12.0 on Python 3.11).

    Each token is a signal, so such a build aborts the whole app after a few thousand tokens.
    """

    class _Probe(QObject):
        fired = Signal()

    probe = _Probe()
    before = sys.getrefcount(True)
    for _ in range(16):
        probe.fired.emit()
    lost = before - sys.getrefcount(True)
    if lost >= 16:
        import PySide6

        raise DependencyMissing(f"PySide6 {PySide6.__version__} has a reference-counting bug that crashes Hearth; "
                                "install another version with `pip install \"PySide6-Essentials!=6.12.0\"`.")


def make_app(argv: list[str]) -> QApplication:
    check_qt_binding()
    app = QApplication.instance() or QApplication(["hearth", *argv])
    app.setApplicationName("Hearth")
    app.setOrganizationName("Hearth")
    if not isinstance(app.style(), WheelSafeStyle):
        # Fusion, where a wheel over a setting scrolls the page, and a check box has a box on the dark theme.
        app.setStyle(WheelSafeStyle(VisibleIndicatorStyle("Fusion")))
    # Matches resources/hearth.desktop, so Wayland docks show the right icon and name.
    QGuiApplication.setDesktopFileName("io.hearth.Hearth")
    icon = resources.resources_dir() / "icons" / "hearth-256.png"
    if icon.exists():
        app.setWindowIcon(QIcon(str(icon)))
    apply_theme(app)
    hints = QGuiApplication.styleHints()
    if hasattr(hints, "colorSchemeChanged"):
        hints.colorSchemeChanged.connect(lambda _scheme: apply_theme(app))
    return app


class _MessageRelay(QObject):
    """Carries a sentence from any thread to the window's message bridge, queued on the GUI thread."""

    said = Signal(str)


def open_window(engine: Supervisor | None = None):
    """The main window as a start builds it (`hearth gui` and its --startup-time), with the engine that the
    command started before importing Qt (Supervisor.for_window), or one started now, before the window's
    modules import: either way the engine's start and the model's load overlap with the window's."""
    engine = engine or Supervisor.for_window()
    from app.ui.shell.main_window import MainWindow

    return MainWindow(engine=engine)


def run_gui(argv: list[str], engine: Supervisor | None = None) -> int:
    app = make_app(argv)
    from app.core.store.crashlog import enable_fault_log
    from app.ui.shell.single_instance import InstanceServer, hand_over_to_running

    if hand_over_to_running():
        if engine is not None:
            engine.close(timeout=1.0)
        print("Hearth is already open; its window was brought to the front.", file=sys.stderr)
        return 0
    enable_fault_log("gui")  # a native crash leaves a stack dump that the next start names
    from app.ui.shell import crash_report

    window = open_window(engine)
    instance = InstanceServer(window)
    instance.raise_requested.connect(lambda: (window.showNormal(), window.raise_(), window.activateWindow()))
    relay = _MessageRelay(window)
    relay.said.connect(window.show_message)
    crash_report.install(relay.said.emit)
    window.show()
    crash_report.report_previous(window.show_message)
    return app.exec()


def main() -> int:
    from app.ui.shell.display_check import display_problem

    problem = display_problem()  # Qt's own abort says nothing of Hearth's
    if problem:
        print(f"hearth: {problem}", file=sys.stderr)
        return 1
    return run_gui(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
