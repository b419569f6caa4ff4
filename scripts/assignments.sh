#!/usr/bin/env bash
# Build the classroom kit: every assignment of assignments/ (one per part of the book) with
# otter-grader, into _build/assignments/<id>/:
#   student/ and <id>-student.zip   what students get (stubs, public tests; no solutions, rubrics or hidden tests)
#   instructor/                     solutions, rubrics and every test
#   <id>-autograder.zip             for `otter run` / `otter grade` / Gradescope
# plus _build/assignments/index.json (questions, points, provenance). Extra arguments go to
# `python -m nmst_lib assignments build` (e.g. --only a1_decoding, --sync-package).
# Grade a submission:  .venv/bin/python -m nmst_lib assignments grade a1_decoding submission.ipynb
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${NMST_DATA_DIR:-}" ] && [ -d ../shared/data ]; then export NMST_DATA_DIR="$(cd ../shared/data && pwd)"; fi
bash scripts/setup.sh
start=$(date +%s)
.venv/bin/python -m nmst_lib assignments build "$@"
echo "[assignments] built in $(( $(date +%s) - start )) s"
