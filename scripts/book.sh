#!/usr/bin/env bash
# Build the website of "When Do Language Models Stop?" with zero warnings.
#   1. scripts/setup.sh          creates .venv and installs nmst_lib with the book's extras
#   2. scripts/fetch_js_assets.sh copies MathJax, RequireJS and the ipywidgets HTML manager
#                                 from npm into book/_assets/vendor (pages work offline)
#   3. jupyter-book build . -W -n --keep-going   executes the chapters (cached in
#                                 _build/.jupyter_cache) and fails on any warning
# Prints the path of the built index.html and the build time.
# Extra arguments go to `jupyter-book build` (e.g. --all for a clean rebuild of every page).
set -euo pipefail
cd "$(dirname "$0")/.."
# Local data for the chapters (README, "Data"): on the project's machines ../shared/data holds
# wikitext-2/ and gpt2-tokenizer/; a value the user set is kept; without either, the hub.
if [ -z "${NMST_DATA_DIR:-}" ] && [ -d ../shared/data ]; then export NMST_DATA_DIR="$(cd ../shared/data && pwd)"; fi
bash scripts/setup.sh
bash scripts/fetch_js_assets.sh

export PYDEVD_DISABLE_FILE_VALIDATION=1   # quiet debugger warning on stderr of executed cells
unset MPLBACKEND                          # kernels must use the inline backend: figures become PNG outputs

start=$(date +%s)
.venv/bin/jupyter-book build . -W -n --keep-going "$@"
end=$(date +%s)

index="$(pwd)/_build/html/index.html"
[ -f "$index" ] || { echo "[book] build produced no $index" >&2; exit 1; }
echo "[book] built $index in $((end - start)) s"
