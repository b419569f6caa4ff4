#!/usr/bin/env bash
# Create .venv (if missing) and install nmst_lib with everything the book and the tests need.
# Idempotent: re-running only reinstalls when pyproject.toml, constraints.txt or this script changed.
set -euo pipefail
cd "$(dirname "$0")/.."
# Local data (README, "Data"): NMST_DATA_DIR names a folder holding wikitext-2/ and gpt2-tokenizer/.
# On the project's machines that is ../shared/data; a value the user set is kept. (book.sh and
# test.sh export the same for the commands they run; this script only reports it.)
if [ -z "${NMST_DATA_DIR:-}" ] && [ -d ../shared/data ]; then export NMST_DATA_DIR="$(cd ../shared/data && pwd)"; fi
if [ -n "${NMST_DATA_DIR:-}" ]; then
  echo "[setup] data: NMST_DATA_DIR=$NMST_DATA_DIR"
else
  echo "[setup] data: NMST_DATA_DIR not set; WikiText-2 and the GPT-2 tokenizer come from the Hugging Face hub"
fi
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
stamp=.venv/.nmst-setup-stamp
want=$(cat pyproject.toml constraints.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "[setup] .venv is up to date"
  exit 0
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
# The CPU wheel of torch on these machines; Colab keeps its own torch (pyproject only says torch>=2.1).
.venv/bin/pip install -q "torch==2.13.0"
# Every other package at the version in constraints.txt (the pinned book stack; README, "Updating the
# pinned book stack"), so that a new upstream release cannot change the site unseen.
.venv/bin/pip install -q -c constraints.txt -e ".[data,test,book,classroom]"
echo "$want" > "$stamp"
echo "[setup] done: $(.venv/bin/python -c 'import torch, nmst_lib; print("torch", torch.__version__, "| nmst_lib", nmst_lib.__version__)')"
