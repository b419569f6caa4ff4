#!/usr/bin/env bash
# Build the book as a PDF: _build/latex/book.pdf, also copied to _build/html/book.pdf (the site's
# download menu links it there). Jupyter Book 1's LaTeX route, `jupyter-book build . --builder
# pdflatex` (XeLaTeX through sphinx-jupyterbook-latex, latexmk), with the edition on the title page,
# explorers as their static figures and solutions at the end of each chapter (book/_ext/nmst_pdf.py).
#
# Build the website first (bash scripts/book.sh): this reuses its execution cache
# (_build/.jupyter_cache), so no chapter runs again. Installs Debian's TeX packages when xelatex,
# latexmk, pdftotext or the FreeFont fonts are missing (as scripts/test.sh installs chromium).
# Prints the PDF's page count and the build time.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${NMST_DATA_DIR:-}" ] && [ -d ../shared/data ]; then export NMST_DATA_DIR="$(cd ../shared/data && pwd)"; fi
bash scripts/setup.sh

# TeX from Debian: XeLaTeX and the LaTeX packages Sphinx and sphinx-jupyterbook-latex load, latexmk,
# the FreeFont OpenType fonts (Sphinx's XeLaTeX fonts), Latin Modern Math (unicode-math), and
# poppler-utils (pdftotext, pdfinfo, pdftoppm for the checks). About 1.2 GB installed.
TEX_PACKAGES="texlive-xetex texlive-latex-recommended texlive-latex-extra texlive-fonts-recommended \
fonts-lmodern tex-gyre latexmk fonts-freefont-otf poppler-utils"
if ! command -v xelatex >/dev/null 2>&1 || ! command -v latexmk >/dev/null 2>&1 \
   || ! command -v pdftotext >/dev/null 2>&1 || [ -z "$(fc-list FreeSerif 2>/dev/null)" ]; then
  if [ "$(id -u)" = "0" ]; then SUDO=""; else SUDO="sudo"; fi
  echo "[pdf] installing Debian's TeX packages: $TEX_PACKAGES"
  t0=$(date +%s)
  $SUDO apt-get update -qq -o DPkg::Lock::Timeout=900
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=900 \
    --no-install-recommends $TEX_PACKAGES >/dev/null
  echo "[pdf] TeX installed in $(( $(date +%s) - t0 )) s"
fi

export PYDEVD_DISABLE_FILE_VALIDATION=1
unset MPLBACKEND
start=$(date +%s)
# -W: a warning fails the build (e.g. an output no LaTeX mime type can show: never a silent gap)
.venv/bin/jupyter-book build . --builder pdflatex -W -n --keep-going "$@"
end=$(date +%s)

pdf=_build/latex/book.pdf
[ -f "$pdf" ] || { echo "[pdf] build produced no $pdf" >&2; exit 1; }
if [ -d _build/html ]; then
  cp "$pdf" _build/html/book.pdf.tmp && mv _build/html/book.pdf.tmp _build/html/book.pdf
fi
pages=$(pdfinfo "$pdf" | awk '/^Pages:/ {print $2}')
echo "[pdf] built $(pwd)/$pdf: $pages pages in $((end - start)) s"
