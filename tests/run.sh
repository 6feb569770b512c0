#!/usr/bin/env bash
# Installs Hearth with its test dependencies and runs the whole suite.
# Everything the tests need is installed or started from here (or by the tests themselves).
set -euo pipefail
cd "$(dirname "$0")/.."
# torch first, pinned to the CPU build on this machine's disk, so that the convert extra cannot pull a CUDA one.
python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e ".[test,convert,package]"
# The package tests validate the desktop entry with desktop-file-validate, check the installed app against a
# real Secret Service (GNOME Keyring on a private D-Bus), and open its window on Xvfb, which needs the xcb
# libraries the .deb depends on. Where apt cannot install them, those checks fall back (the tests' own
# desktop-entry parser, the no-keyring path) or skip (the X window).
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
    && ! { command -v desktop-file-validate && command -v gnome-keyring-daemon && command -v dbus-run-session \
           && command -v Xvfb && command -v xwininfo && ldconfig -p | grep "libxcb-icccm.so.4"; } >/dev/null; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      desktop-file-utils gnome-keyring dbus-daemon appstream xvfb x11-utils libxcb-icccm4 libxcb-keysyms1; } \
    >/dev/null 2>&1 || echo "run.sh: could not install the package tests' tools; those checks fall back" >&2
fi
export QT_QPA_PLATFORM=offscreen
python3 -m pytest -q -p no:cacheprovider "$@"
