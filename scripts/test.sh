#!/usr/bin/env bash
# Set up everything the tests need and run all of them:
#   library unit tests (first from a plain clone without data or network, scripts/test_plain_clone.sh,
#   then with the real data), chapter notebooks under nbval, the website build (zero warnings),
#   the headless-browser checks of the built site, the Colab simulation (scripts/colab_sim.sh), the
#   course edition of the site, and the classroom kit (built, then graded: tests/classroom).
set -euo pipefail
cd "$(dirname "$0")/.."
# Local data for the chapters and the real-data tests (README, "Data"): on the project's machines
# ../shared/data holds wikitext-2/ and gpt2-tokenizer/; a value the user set is kept.
if [ -z "${NMST_DATA_DIR:-}" ] && [ -d ../shared/data ]; then export NMST_DATA_DIR="$(cd ../shared/data && pwd)"; fi
bash scripts/setup.sh

# The library's unit tests as a fresh user runs them: a plain clone of this commit, no ../shared,
# no NMST_* variables, no network (scripts/test_plain_clone.sh; 1.5-3 minutes on 2 cores).
bash scripts/test_plain_clone.sh

# A real browser for the site checks (Debian's chromium + chromedriver).
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ]; then SUDO=""; else SUDO="sudo"; fi
  echo "[test] installing Debian's chromium and chromium-driver for the browser tests"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi

# Build the website first (it executes every chapter); the browser tests check the result.
bash scripts/book.sh
# The book as a PDF (scripts/pdf.sh: installs Debian's TeX if missing, reuses the execution cache).
bash scripts/pdf.sh
# The course edition of the site (no solution dropdowns; reuses the execution cache just filled).
bash scripts/book.sh --course

# The classroom kit: every assignment's student, instructor and autograder editions (otter-grader);
# tests/classroom grades three submissions per assignment with the built autograders.
bash scripts/assignments.sh
export NMST_REQUIRE_ASSIGNMENTS=1

# Colab simulation: each chapter alone in an empty folder, in a fresh Python with torch but without
# nmst_lib, network cut, its first cell installing the freshly built wheel (about 3 minutes).
bash scripts/colab_sim.sh

export NMST_REQUIRE_SITE=1   # site tests fail (instead of skipping) when the build is missing
.venv/bin/python -m pytest tests chapters --nbval-lax -q -p no:cacheprovider "$@"
