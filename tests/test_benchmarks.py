"""The benchmarks in ``benchmarks/`` still run against the library as it is now.

They are run by hand (and by ``scripts/gpu_checks.sh`` on a GPU), so nothing else notices when a
change in the library breaks one: the layout change moved the ST/NMST eos rules that
``heads_before.py`` imports, and ``decode`` began passing two more arguments to the token
chooser that ``bench_samplers.py`` swaps in; both failed only when a GPU lease ran them. Here
every script is loaded (its imports and module-level code, not its ``main``), and the two that
have a ``--quick`` mode run end to end on tiny sizes and must write a positive, finite ratio.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "benchmarks").glob("bench_*.py"))


def test_the_benchmark_folder_has_its_scripts():
    assert len(SCRIPTS) >= 8, [p.name for p in SCRIPTS]


def test_every_benchmark_script_loads_against_the_current_library():
    """Each script's imports and module-level code run (``runpy`` with a name other than
    ``__main__``, so no benchmark starts); one fresh interpreter for all of them."""
    code = ("import runpy, sys\n"
            "for path in sys.argv[1:]:\n"
            "    runpy.run_path(path, run_name='loaded_by_test_benchmarks')\n")
    out = subprocess.run([sys.executable, "-c", code, *map(str, SCRIPTS)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"a benchmark script no longer loads:\n{out.stderr[-3000:]}"


@pytest.mark.parametrize("script, ratio_keys", [
    ("bench_decoding.py", ("ratio",)),
    ("bench_samplers.py", ("per_step", "end_to_end")),
])
def test_quick_benchmark_runs_and_writes_positive_finite_ratios(tmp_path, script, ratio_keys):
    target = tmp_path / "result.json"
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--quick", "--threads", "1",
                          "--output", str(target)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{script} --quick failed:\n{out.stderr[-3000:]}"
    record = json.loads(target.read_text())
    ratios = []
    for key in ratio_keys:
        value = record[key]
        if isinstance(value, list):  # rows of {"speedup": ...}
            ratios += [row["speedup"] for row in value]
        else:
            ratios.append(value)
    assert ratios and all(isinstance(r, float) and math.isfinite(r) and r > 0 for r in ratios), ratios


def test_bench_heads_runs_on_tiny_logits_and_eos_logit_makes_every_row_eos_dominated(tmp_path):
    """``bench_heads.py --eos-logit 15`` times the layers where eos holds more than half of the
    full softmax on every row (as for a trained ST model); every layer's ratio is written."""
    target = tmp_path / "heads.json"
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_heads.py"), "--batch", "2", "--steps",
                          "3", "--vocab", "50", "--repeats", "1", "--warmup", "0", "--threads", "1",
                          "--eos-logit", "15", "--out", str(target)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, f"bench_heads.py failed:\n{out.stderr[-3000:]}"
    record = json.loads(target.read_text())
    assert record["share_of_rows_eos_dominated"] == 1.0 and record["eos_logit_added"] == 15.0
    assert {"st", "nmst", "st_shift", "nmst_shift"} <= set(record["ratio"])
    assert all(math.isfinite(r) and r > 0 for r in record["ratio"].values()), record["ratio"]
