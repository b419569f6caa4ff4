#!/usr/bin/env bash
# The GPU part of the project's checks, as one command on a machine with a CUDA GPU:
#   1. the tests that need CUDA: tests/test_gpu.py and tests/test_metrics_sparse.py (every test
#      of the suite that skips without CUDA lives in these two files)
#   2. the measured time of Chapter 6's paper profile on this GPU
#      (nmst_lib.experiments.choices.estimate_profile_time, throughputs timed here)
#   3. every benchmark of benchmarks/ on CUDA (ratios against baselines measured in the same run)
#   4. the rest of the library's unit tests with CUDA present (the code picks the GPU by itself,
#      so this is the one code path running on it)
#
#   scripts/gpu_checks.sh OUT [SECONDS]
#
# OUT receives log.txt, the JUnit reports, paper-estimate.json and bench-<name>.json (13 files).
# A device tool that brings back only a few files (this project's returns 8) loses the rest
# without a word, so there write to a scratch folder and pack it:
#   bash scripts/gpu_checks.sh /tmp/gpu 500; tar czf "$OUT/gpu-checks.tgz" -C /tmp/gpu .
# The device image may lack packages the tests import (datasets, IPython, nbformat, ipywidgets,
# entmax): carry them as wheels, or read those failures as missing imports, not GPU faults.
#
# SECONDS (default 480) is the whole budget: each stage runs under `timeout` with what is left, so
# that a slow stage cannot take the report of the others with it. PYTHON is the interpreter that has torch
# (default: .venv/bin/python when scripts/setup.sh made one, else python3);
# the library is imported from this checkout (PYTHONPATH), nothing is installed. ONLY (a grep -E
# pattern) runs only the stages whose names match it, e.g. ONLY='cuda tests|bench heads'.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu_checks.sh OUT [SECONDS]}
budget=${2:-480}
default_py=python3
[ -x .venv/bin/python ] && default_py=.venv/bin/python
py=${PYTHON:-$default_py}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
started=$(date +%s)
left() { echo $(( budget - ($(date +%s) - started) )); }
stage() {  # stage NAME SECONDS COMMAND...: run with at most SECONDS (and what is left), log rc and time
  local name=$1 cap=$2; shift 2
  if [ -n "${ONLY:-}" ] && ! grep -qE "$ONLY" <<<"$name"; then echo "[gpu] $name: not asked for (ONLY)"; return; fi
  local limit; limit=$(left)
  (( cap < limit )) && limit=$cap
  if (( limit < 10 )); then echo "[gpu] $name: not run (budget spent)"; return; fi
  local t0; t0=$(date +%s)
  echo "[gpu] $name: start (limit ${limit} s)"
  timeout "$limit" "$@"
  echo "[gpu] $name: rc $? in $(( $(date +%s) - t0 )) s"
}
{
  echo "[gpu] $(date -u +%FT%TZ) commit $(git rev-parse HEAD 2>/dev/null || echo unknown)" \
       "library changes: $(git status --porcelain -- nmst_lib pyproject.toml 2>/dev/null | wc -l)" \
       "benchmark changes: $(git status --porcelain -- benchmarks ':(exclude)benchmarks/results' 2>/dev/null | wc -l)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  "$py" -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__,
'cuda', torch.version.cuda, 'device', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)"
  stage "cuda tests" 150 "$py" -m pytest -q -p no:cacheprovider -n 8 tests/test_gpu.py tests/test_metrics_sparse.py \
    --junitxml="$out/junit-cuda.xml"
  stage "paper-profile estimate" 90 "$py" - "$out/paper-estimate.json" <<'EOF'
import dataclasses, json, sys
from nmst_lib.experiments.choices import estimate_profile_time
est = estimate_profile_time("paper", measure=True)
record = dataclasses.asdict(est) | {"total_seconds": est.total_seconds}
json.dump(record, open(sys.argv[1], "w"), indent=1)
print(json.dumps({k: v for k, v in record.items() if k != "per_run"}, indent=1))
EOF
  stage "bench heads" 40 "$py" benchmarks/bench_heads.py --out "$out/bench-heads.json"
  stage "bench heads, eos-heavy" 40 "$py" benchmarks/bench_heads.py --eos-logit 15 --out "$out/bench-heads-eos-heavy.json"
  stage "bench entmax" 40 "$py" benchmarks/bench_entmax.py --out "$out/bench-entmax.json"
  stage "bench entmax alpha" 40 "$py" benchmarks/bench_entmax_alpha.py --out "$out/bench-entmax_alpha.json"
  stage "bench training" 50 "$py" benchmarks/bench_training.py --out "$out/bench-training.json"
  stage "bench temperature" 50 "$py" benchmarks/bench_temperature.py --out "$out/bench-temperature.json"
  stage "bench decoding" 60 "$py" benchmarks/bench_decoding.py --output "$out/bench-decoding.json"
  stage "bench samplers" 50 "$py" benchmarks/bench_samplers.py --output "$out/bench-samplers.json"
  stage "bench gpt2" 60 "$py" benchmarks/bench_gpt2.py --out "$out/bench-gpt2.json"
  stage "unit tests" 600 "$py" -m pytest -q -p no:cacheprovider -n 12 tests --ignore=tests/site \
    --ignore=tests/classroom --ignore=tests/test_gpu.py --ignore=tests/test_metrics_sparse.py \
    --junitxml="$out/junit-all.xml"
  echo "[gpu] done in $(( $(date +%s) - started )) s"
} 2>&1 | tee "$out/log.txt"
