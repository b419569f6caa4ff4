#!/usr/bin/env bash
# Install the website's JavaScript from npm (versions pinned in package-lock.json) and copy
# the few files the built pages load into book/_assets/vendor/ (git-ignored), from where
# Sphinx copies them to _build/html/_static/. Pages then work offline and from file://.
#
#   mathjax/tex-svg-full.js      MathJax 3, TeX input with every extension, SVG output
#                                (self-contained: no web fonts, no lazy-loaded extensions)
#   require/require.js           RequireJS, needed by the ipywidgets HTML manager
#   html-manager/embed-amd.js    @jupyter-widgets/html-manager 1.x (ipywidgets 8), with
#                                the font files its CSS refers to
#
# Idempotent: does nothing when every file is already there. `--force` re-copies.
set -euo pipefail
cd "$(dirname "$0")/.."
vendor=book/_assets/vendor
wanted=(mathjax/tex-svg-full.js require/require.js html-manager/embed-amd.js)

have_all() {
  local f
  for f in "${wanted[@]}"; do [ -s "$vendor/$f" ] || return 1; done
}

if [ "${1:-}" != "--force" ] && have_all; then
  echo "[assets] local JS assets present in $vendor"
  exit 0
fi

command -v npm >/dev/null || { echo "[assets] npm is required (apt-get install -y nodejs npm)" >&2; exit 1; }
if [ ! -d node_modules/mathjax ] || [ ! -d node_modules/requirejs ] || [ ! -d node_modules/@jupyter-widgets/html-manager ]; then
  echo "[assets] npm ci (package-lock.json)"
  npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
fi

rm -rf "$vendor/mathjax" "$vendor/require" "$vendor/html-manager"
mkdir -p "$vendor/mathjax" "$vendor/require" "$vendor/html-manager"
cp node_modules/mathjax/es5/tex-svg-full.js "$vendor/mathjax/"
cp node_modules/mathjax/LICENSE "$vendor/mathjax/LICENSE"
cp node_modules/requirejs/require.js "$vendor/require/"
# the HTML manager's bundle plus the (Font Awesome) fonts it references by relative URL
hm=node_modules/@jupyter-widgets/html-manager/dist
cp "$hm/embed-amd.js" "$hm"/*.woff2 "$hm"/*.woff "$hm"/*.ttf "$hm"/*.eot "$hm"/*.svg "$vendor/html-manager/"
cp node_modules/@jupyter-widgets/html-manager/LICENSE "$vendor/html-manager/LICENSE" 2>/dev/null || true
have_all
echo "[assets] copied $(du -sh "$vendor" | cut -f1) of JS assets into $vendor"
