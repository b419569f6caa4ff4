#!/usr/bin/env bash
# Set up everything the tests need and run all of them, each check once:
#   1. setup                 .venv with the pinned stack (scripts/setup.sh, constraints.txt)
#   2. library unit tests    from a plain clone without data or network, 2 workers
#                            (scripts/test_plain_clone.sh); the tests that skip there for want of
#                            the real data run in step 8, where the data is
#   3. system packages       Debian's chromium + chromium-driver (browser checks) and bubblewrap
#                            (the grading sandbox) if absent
#   4. classroom kit         every assignment built with otter-grader
#   5. website               jupyter-book build, zero warnings; it executes every chapter with
#                            raise_on_error, which is what nbval checked a second time before;
#      Colab simulation      side by side with the website (independent, one process each): each
#                            chapter alone in a fresh Python, installing the wheel offline
#   6. PDF                   the whole book through LaTeX (scripts/pdf.sh; installs Debian's TeX if absent)
#   7. course edition        the site without solutions (reuses the execution cache); side by side
#                            with the PDF (independent, one process each)
#   8. main pytest run       the site checks in a real browser (tests/site), the classroom grading
#                            (tests/classroom), and the real-data tests skipped in step 2
# Each stage's time is printed at the end of the run (also when a stage fails).
# Extra arguments go to the pytest of step 8. `pytest --nbval-lax chapters/NN_x.ipynb` still
# executes one chapter as a test while writing it.
set -euo pipefail
cd "$(dirname "$0")/.."
# Local data for the chapters and the real-data tests (README, "Data"): on the project's machines
# ../shared/data holds wikitext-2/ and gpt2-tokenizer/; a value the user set is kept.
if [ -z "${NMST_DATA_DIR:-}" ] && [ -d ../shared/data ]; then export NMST_DATA_DIR="$(cd ../shared/data && pwd)"; fi

timings=()
run_started=$(date +%s)
print_timings() {
  local status=$?
  echo
  echo "[test] stage timings (s):"
  local t
  for t in "${timings[@]}"; do echo "  $t"; done
  echo "  total: $(( $(date +%s) - run_started )) s (exit status $status)"
}
trap print_timings EXIT
stage() {  # stage NAME COMMAND...: run it, record its time whether it passes or fails
  local name=$1; shift
  local start; start=$(date +%s)
  echo "[test] === $name ==="
  local status=0
  "$@" || status=$?
  timings+=("$(printf '%-22s %6d' "$name" $(( $(date +%s) - start )))$([ $status = 0 ] || echo "   FAILED ($status)")")
  return $status
}

side_by_side() {  # side_by_side NAME1 FUNCTION1 NAME2 FUNCTION2: two independent stages at once,
  # each's output kept in its own log and printed when both have ended; each timed, both recorded
  local n1=$1 f1=$2 n2=$3 f2=$4 start l1 l2 s1 t1 s2 t2
  start=$(date +%s); l1=$(mktemp); l2=$(mktemp)
  echo "[test] === $n1 and $n2, side by side (their output follows when both have ended) ==="
  ( t=$(date +%s); st=0; "$f1" >"$l1" 2>&1 || st=$?; echo "$st $(( $(date +%s) - t ))" >"$l1.rc" ) &
  local p1=$!
  ( t=$(date +%s); st=0; "$f2" >"$l2" 2>&1 || st=$?; echo "$st $(( $(date +%s) - t ))" >"$l2.rc" ) &
  local p2=$!
  wait "$p1" || true; wait "$p2" || true
  read -r s1 t1 <"$l1.rc" || { s1=1; t1=0; }
  read -r s2 t2 <"$l2.rc" || { s2=1; t2=0; }
  echo "[test] --- $n1 ---"; cat "$l1"; echo "[test] --- $n2 ---"; cat "$l2"
  rm -f "$l1" "$l2" "$l1.rc" "$l2.rc"
  timings+=("$(printf '%-22s %6d' "$n1" "$t1")$([ "$s1" = 0 ] || echo "   FAILED ($s1)")")
  timings+=("$(printf '%-22s %6d' "$n2" "$t2")$([ "$s2" = 0 ] || echo "   FAILED ($s2)")")
  timings+=("$(printf '%-22s %6d' "  (side by side)" $(( $(date +%s) - start )))")
  [ "$s1" = 0 ] && [ "$s2" = 0 ]
}

install_system_packages() {
  # A real browser for the site checks (Debian's chromium + chromedriver), and bubblewrap, the
  # sandbox that grades the classroom kit's submissions (tests/classroom).
  if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1 \
      || ! command -v bwrap >/dev/null 2>&1; then
    local SUDO=""; [ "$(id -u)" = "0" ] || SUDO="sudo"
    echo "[test] installing Debian's chromium, chromium-driver and bubblewrap for the browser and grading tests"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver bubblewrap >/dev/null
  fi
}

stage setup bash scripts/setup.sh

# The library's unit tests once, as a fresh user runs them: a plain clone of this commit, no
# ../shared, no NMST_* variables, no network; two workers (pytest-xdist). The JUnit report names
# the tests that skipped for want of the real data, the tokenizer or a GPU.
junit=$(mktemp "${TMPDIR:-/tmp}/nmst-plain-clone-XXXXXX.xml")
stage unit-tests bash scripts/test_plain_clone.sh -- -n 2 --junitxml="$junit"
mapfile -t skipped < <(.venv/bin/python scripts/skipped_tests.py "$junit")
rm -f "$junit"
echo "[test] ${#skipped[@]} unit tests skipped in the plain clone run again below, with the data"

stage system-packages install_system_packages

# The classroom kit: every assignment's student, instructor and autograder editions (otter-grader);
# tests/classroom grades three submissions per assignment with the built autograders, and the Colab
# simulation runs the built student editions.
stage assignments bash scripts/assignments.sh
export NMST_REQUIRE_ASSIGNMENTS=1

# The website (it executes every chapter; the browser tests check the result) and the Colab
# simulation (each chapter alone in an empty folder, in a fresh Python with torch but without
# nmst_lib, network cut, its first cell installing the freshly built wheel) are independent and
# each runs one process at a time: on two cores they run side by side.
book() { bash scripts/book.sh; }
colab_simulation() { bash scripts/colab_sim.sh; }
side_by_side book book colab-simulation colab_simulation
# The book as a PDF (scripts/pdf.sh: installs Debian's TeX if missing) and the course edition of
# the site (no solution dropdowns), side by side: both only read the execution cache the website
# just filled (the course build copies it first), write to different folders (_build/latex,
# _build/course), and each runs one process (LaTeX is single-threaded).
pdf() { bash scripts/pdf.sh; }
course_book() { bash scripts/book.sh --course; }
side_by_side pdf pdf course-book course_book

export NMST_REQUIRE_SITE=1   # site tests fail (instead of skipping) when the build is missing
# Two workers; --dist loadfile keeps each test file (and its browser and module fixtures) on one.
# --durations: the slowest steps of the run, printed every time (where this stage's time goes).
stage main-pytest .venv/bin/python -m pytest tests/site tests/classroom "${skipped[@]}" \
  -n 2 --dist loadfile -q -p no:cacheprovider --durations=25 "$@"
