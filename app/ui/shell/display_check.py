"""Whether Qt's X11 platform plugin can load, asked before Qt is started.

Qt 6.5+ needs libxcb-cursor0 for its xcb plugin, and Ubuntu does not install it with the desktop. Without it
Qt prints its own error ("Could not load the Qt platform plugin "xcb"") and aborts the process, with nothing of
Hearth's. So before the window starts on X11, each library the plugin links against (libqxcb.so and
libQt6XcbQpa.so's NEEDED entries, less Qt's own and the C/C++ runtime) is opened with dlopen as Qt would open
it; a library that does not load is named in one sentence with the packages that provide it, and Hearth exits
(or `hearth` without a command chats in the terminal instead, app/commands/default.py).

Qt-free, so it runs before PySide6's platform plugin is ever loaded.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Callable

# soname -> (Debian/Ubuntu package, Fedora package)
X11_LIBRARIES = {
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libX11.so.6": ("libx11-6", "libX11"),
}


def uses_xcb(env: dict | None = None, platform: str | None = None) -> bool:
    """Whether Qt would start on X11 here: Linux, and QT_QPA_PLATFORM names xcb first, or names nothing outside a
    Wayland session (there Qt takes its wayland plugin, which needs none of these)."""
    env = os.environ if env is None else env
    if not (platform or sys.platform).startswith("linux"):
        return False
    chosen = (env.get("QT_QPA_PLATFORM") or "").strip()
    if chosen:
        return chosen.split(";")[0].split(":")[0].strip() == "xcb"
    return not env.get("WAYLAND_DISPLAY") and bool(env.get("DISPLAY"))


def _loads(name: str) -> bool:
    try:
        ctypes.CDLL(name)
    except OSError:
        return False
    return True


def missing_libraries(load: Callable[[str], bool] = _loads) -> list[str]:
    """The X11 libraries of X11_LIBRARIES that do not load, in the table's order (the likely one first)."""
    return [name for name in X11_LIBRARIES if not load(name)]


def problem_sentence(missing: list[str]) -> str:
    """One sentence: what is missing, what to install (Debian/Ubuntu, Fedora), and the terminal chat instead."""
    debian = " ".join(dict.fromkeys(X11_LIBRARIES[name][0] for name in missing))
    fedora = " ".join(dict.fromkeys(X11_LIBRARIES[name][1] for name in missing))
    names = ", ".join(missing)
    return (f"Hearth's window cannot open: Qt's X11 plugin needs {names}, which {'is' if len(missing) == 1 else 'are'} "
            f"missing or cannot be loaded; install {'it' if len(missing) == 1 else 'them'} with `sudo apt install {debian}` "
            f"(Fedora: `sudo dnf install "
            f"{fedora}`), or chat in the terminal with `hearth chat`.")


def display_problem(env: dict | None = None, load: Callable[[str], bool] = _loads) -> str | None:
    """The sentence that says why the window cannot open here, or None where it can (or where Qt would not use
    X11, whose needs are not these)."""
    if not uses_xcb(env):
        return None
    missing = missing_libraries(load)
    return problem_sentence(missing) if missing else None
