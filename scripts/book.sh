#!/usr/bin/env bash
# Build the website of "When Do Language Models Stop?" with zero warnings.
#   1. scripts/setup.sh          creates .venv and installs nmst_lib with the book's extras
#   2. scripts/fetch_js_assets.sh copies MathJax, RequireJS and the ipywidgets HTML manager
#                                 from npm into book/_assets/vendor (pages work offline)
#   3. jupyter-book build . -W -n --keep-going   executes the chapters (cached in
#                                 _build/.jupyter_cache) and fails on any warning
# Prints the path of the built index.html and the build time.
# Extra arguments go to `jupyter-book build` (e.g. --all for a clean rebuild of every page).
#
# `bash scripts/book.sh --course` builds the COURSE edition instead, for a class running this term:
# the same site without the exercises' solution dropdowns (book/_ext/nmst_book.py, item 4), in
# _build/course/_build/html. It reuses the public build's execution cache (copied), so run the
# public build first to avoid executing every chapter again.
set -euo pipefail
cd "$(dirname "$0")/.."
# Local data for the chapters (README, "Data"): on the project's machines ../shared/data holds
# wikitext-2/ and gpt2-tokenizer/; a value the user set is kept; without either, the hub.
if [ -z "${NMST_DATA_DIR:-}" ] && [ -d ../shared/data ]; then export NMST_DATA_DIR="$(cd ../shared/data && pwd)"; fi
bash scripts/setup.sh
bash scripts/fetch_js_assets.sh

export PYDEVD_DISABLE_FILE_VALIDATION=1   # quiet debugger warning on stderr of executed cells
unset MPLBACKEND                          # kernels must use the inline backend: figures become PNG outputs

course=0
if [ "${1:-}" = "--course" ]; then course=1; shift; fi
start=$(date +%s)
if [ "$course" = 1 ]; then
  # The course configuration: _config.yml plus nmst_course_edition, written under _build (never committed).
  mkdir -p _build/course/_build
  .venv/bin/python - <<'PY'
import yaml
config = yaml.safe_load(open("_config.yml", encoding="utf-8"))
config["title"] = config["title"] + " (course edition)"
config["sphinx"]["config"]["nmst_course_edition"] = True   # book/_ext/nmst_book.py removes the solutions
# local_extensions are resolved against the config file's folder: name them absolutely
import os
config["sphinx"]["local_extensions"] = {k: os.path.abspath(v) for k, v in config["sphinx"]["local_extensions"].items()}
with open("_build/course/_config.yml", "w", encoding="utf-8") as f:
    yaml.safe_dump(config, f, sort_keys=False)
PY
  if [ -d _build/.jupyter_cache ]; then rm -rf _build/course/_build/.jupyter_cache; cp -r _build/.jupyter_cache _build/course/_build/; fi
  .venv/bin/jupyter-book build . --config _build/course/_config.yml --path-output _build/course -W -n --keep-going "$@"
  index="$(pwd)/_build/course/_build/html/index.html"
else
  # The execution cache keys a chapter on its own cells only, and Sphinx re-reads only pages whose
  # source changed: a new result in the published store or a change to the library the chapters
  # import would leave every page showing its old outputs (a Chapter 6 page that still counted 8
  # stored runs after 10 had landed). So the cache and every build environment made from it (the
  # public and course doctrees, which the PDF build shares) are kept only while the library's
  # sources and published results are the ones they were made with.
  inputs=$(find nmst_lib -type f \( -name '*.py' -o -name '*.json' \) -print0 | sort -z | xargs -0 sha256sum \
           | sha256sum | cut -d' ' -f1)
  stamp=_build/.jupyter_cache/nmst-library-inputs.sha256
  if [ -d _build/.jupyter_cache ] && [ "$(cat "$stamp" 2>/dev/null)" != "$inputs" ]; then
    echo "[book] nmst_lib or its published results changed since the cached executions: every chapter runs again"
    rm -rf _build/.jupyter_cache _build/.doctrees _build/jupyter_execute \
           _build/course/_build/.jupyter_cache _build/course/_build/.doctrees _build/course/_build/jupyter_execute
  fi
  .venv/bin/jupyter-book build . -W -n --keep-going "$@"
  mkdir -p _build/.jupyter_cache && echo "$inputs" > "$stamp"
  index="$(pwd)/_build/html/index.html"
fi
end=$(date +%s)

[ -f "$index" ] || { echo "[book] build produced no $index" >&2; exit 1; }
echo "[book] built $index in $((end - start)) s"
