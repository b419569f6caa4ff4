#!/usr/bin/env bash
# Run the library's unit tests as a fresh user would: from a plain `git clone` of the current
# commit in an empty temporary folder (so no ../shared beside it), with no NMST_* variable set
# (NMST_DATA_DIR, NMST_WIKITEXT_DIR, ...), Hugging Face offline (HF_HUB_OFFLINE=1,
# HF_DATASETS_OFFLINE=1, empty HF_HOME and caches), and, where the machine allows it, no network
# at all: pytest runs in a new network namespace (`unshare -n` as root, else `unshare -rn`), which
# has only a loopback device. The tests must pass on the committed fixture corpus
# (tests/fixtures/) alone; tests that need the real data skip and say why (pytest -ra).
#
#   bash scripts/test_plain_clone.sh              # every library test: tests/ without tests/site, tests/classroom
#   bash scripts/test_plain_clone.sh --data-only  # only the tests that read data (see below)
#   bash scripts/test_plain_clone.sh -- -k cli    # extra arguments after -- go to pytest
#
# scripts/test.sh runs the whole library suite here once, on two workers (`-- -n 2`, pytest-xdist),
# with a JUnit report whose skipped tests (real data, tokenizer, CUDA) its main run runs again with
# the data (scripts/skipped_tests.py); no library test runs twice.
# --data-only runs test_data, test_experiments, test_cli, test_models and test_gpu: every test
# that reads data, tokenizers, checkpoints or data variables. tests/site and tests/classroom are
# never run here: they check the built website and the built classroom editions.
#
# The clone is of HEAD (committed changes only). Python: .venv/bin/python of this checkout (or
# $NMST_PLAIN_CLONE_PYTHON); the clone's own nmst_lib is imported (checked), not this checkout's.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
py=${NMST_PLAIN_CLONE_PYTHON:-$repo/.venv/bin/python}
[ -x "$py" ] || { echo "[plain-clone] no Python at $py: run scripts/setup.sh first" >&2; exit 1; }

tests=(tests --ignore=tests/site --ignore=tests/classroom)
if [ "${1:-}" = "--data-only" ]; then
  tests=(tests/test_data.py tests/test_experiments.py tests/test_cli.py tests/test_models.py tests/test_gpu.py); shift
fi
[ "${1:-}" = "--" ] && shift

start=$(date +%s)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nmst-plain-clone.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
commit=$(git rev-parse HEAD)
git clone -q --no-checkout "$repo" "$tmp/repo"
git -C "$tmp/repo" checkout -q --detach "$commit"
[ ! -e "$tmp/shared" ] || { echo "[plain-clone] $tmp/shared exists" >&2; exit 1; }
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "[plain-clone] note: uncommitted changes in $repo are not in the clone (testing commit ${commit:0:12})"
fi

# The environment of a fresh clone: no NMST_* variables, Hugging Face offline, empty caches.
for v in $(env | sed -n 's/^\(NMST_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export HF_HOME="$tmp/home/hf" XDG_CACHE_HOME="$tmp/home/cache" MPLCONFIGDIR="$tmp/home/mpl"
export PYTHONPATH="$tmp/repo" PYTHONDONTWRITEBYTECODE=1

# Cut the network: a new network namespace (only a loopback device, which we bring up).
netns=()
if [ "$(id -u)" = "0" ] && unshare -n true 2>/dev/null; then
  netns=(unshare -n); how="no network (new network namespace: unshare -n)"
elif unshare -rn true 2>/dev/null; then
  netns=(unshare -rn); how="no network (new user + network namespace: unshare -rn)"
else
  how="network NOT cut (unshare -n / -rn unavailable here); HF_HUB_OFFLINE/HF_DATASETS_OFFLINE only"
fi

cd "$tmp/repo"
where=$("$py" -c 'import nmst_lib, os; print(os.path.dirname(nmst_lib.__file__))')
[ "$where" = "$tmp/repo/nmst_lib" ] || { echo "[plain-clone] imports nmst_lib from $where, not the clone" >&2; exit 1; }
echo "[plain-clone] commit ${commit:0:12} cloned into $tmp/repo (no ../shared, no NMST_* variables); $how"
echo "[plain-clone] pytest ${tests[*]} $*"
status=0
if [ ${#netns[@]} -gt 0 ]; then
  # inside the namespace: loopback up, then make sure the outside really is unreachable
  inner='command -v ip >/dev/null && ip link set lo up 2>/dev/null
"$1" - <<"PY" || exit 1
import socket, sys
try:
    socket.create_connection(("1.1.1.1", 443), timeout=3).close()
except OSError:
    sys.exit(0)
sys.exit("[plain-clone] the network is reachable inside the namespace")
PY
exec "$@"'
  "${netns[@]}" bash -c "$inner" _ "$py" -m pytest "${tests[@]}" -q -p no:cacheprovider -ra "$@" || status=$?
else
  "$py" -m pytest "${tests[@]}" -q -p no:cacheprovider -ra "$@" || status=$?
fi
echo "[plain-clone] finished in $(( $(date +%s) - start )) s with status $status"
exit "$status"
