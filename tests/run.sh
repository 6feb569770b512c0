#!/usr/bin/env bash
# Installs Hearth with its test dependencies and runs the whole suite.
# Everything the tests need is installed or started from here (or by the tests themselves).
set -euo pipefail
cd "$(dirname "$0")/.."
# torch first, pinned to the CPU build on this machine's disk, so that the convert extra cannot pull a CUDA one.
python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e ".[test,convert,package]"
export QT_QPA_PLATFORM=offscreen
python3 -m pytest -q -p no:cacheprovider "$@"
