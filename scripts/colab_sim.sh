#!/usr/bin/env bash
# Colab simulation: build the wheel, then run every chapter notebook alone in an empty folder,
# in a fresh Python that has torch & co. but not nmst_lib, with the network cut (unshare), so
# that each chapter's first cell must install the wheel offline (NMST_INSTALL_SPEC) and Chapter 6
# must find the committed cpu results in the package data. See scripts/colab_sim.py.
#   bash scripts/colab_sim.sh [--chapters 01,06] [--keep] [--require-isolation]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
exec .venv/bin/python scripts/colab_sim.py "$@"
