#!/usr/bin/env bash
# Create .venv (if missing) and install nmst_lib with everything the book and the tests need.
# Idempotent: re-running only reinstalls when pyproject.toml or this script changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
stamp=.venv/.nmst-setup-stamp
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "[setup] .venv is up to date"
  exit 0
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
# The CPU wheel of torch on these machines; Colab keeps its own torch (pyproject only says torch>=2.1).
.venv/bin/pip install -q "torch==2.13.0"
.venv/bin/pip install -q -e ".[data,test,book]"
echo "$want" > "$stamp"
echo "[setup] done: $(.venv/bin/python -c 'import torch, nmst_lib; print("torch", torch.__version__, "| nmst_lib", nmst_lib.__version__)')"
