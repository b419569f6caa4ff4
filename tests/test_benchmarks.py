"""The benchmarks in ``benchmarks/`` still run against the library as it is now.

They are run by hand (and by ``scripts/gpu_checks.sh`` on a GPU), so nothing else notices when a
change in the library breaks one: the layout change moved the ST/NMST eos rules that
``heads_before.py`` imports, and ``decode`` began passing two more arguments to the token
chooser that ``bench_samplers.py`` swaps in; both failed only when a GPU lease ran them. Here
every script is loaded (its imports and module-level code, not its ``main``), and the two that
have a ``--quick`` mode run end to end on tiny sizes and must write a positive, finite ratio.

Every script also records the same provenance stamp (``benchmarks/_provenance.py``) under the
key ``"provenance"``: the helper's fields and dirty flag are checked here, every script but
``bench_gpt2.py`` (about two minutes even at its smallest sizes) runs at tiny sizes and must
write it, and every script is checked to call the helper. The stored results in
``benchmarks/results/`` are historical records, many older than the stamp, and are not checked
for it.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import math
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "benchmarks").glob("bench_*.py"))

def _load_helper():
    """``benchmarks/_provenance.py``, loaded by path (``benchmarks/`` is not put on sys.path)."""
    spec = importlib.util.spec_from_file_location("_provenance", ROOT / "benchmarks" / "_provenance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_provenance = _load_helper()


def assert_stamped(record: dict, script: str) -> None:
    """``record`` holds a complete provenance stamp of a run of ``script`` on this machine."""
    stamp = record[_provenance.KEY]
    assert set(_provenance.FIELDS) <= set(stamp), set(_provenance.FIELDS) - set(stamp)
    assert stamp["schema"] == _provenance.SCHEMA
    assert stamp["git_sha"] is None or re.fullmatch(r"[0-9a-f]{40}", stamp["git_sha"]), stamp["git_sha"]
    assert stamp["git_dirty"] in (True, False, None)
    assert stamp["command"].startswith(f"python benchmarks/{script}")
    assert stamp["device_type"] in ("cpu", "cuda") and stamp["device"]
    assert isinstance(stamp["threads"], int) and stamp["threads"] >= 1
    datetime.datetime.fromisoformat(stamp["date_utc"])


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
    assert_stamped(record, script)
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
    assert_stamped(record, "bench_heads.py")


# --------------------------------------------------------------------- the provenance stamp


def test_every_benchmark_script_stamps_its_result_with_the_shared_helper():
    """Static: each script imports the helper, takes the stamp and writes it under its key, and
    keeps no copy of the device / code-version functions the helper replaced."""
    for path in SCRIPTS:
        text = path.read_text()
        assert "from _provenance import" in text, path.name
        assert "stamp(device, script=__file__" in text, path.name
        assert "KEY: provenance," in text, path.name
        assert not re.search(r"def _(device_name|code_version)\b", text), path.name


def test_stamp_has_every_field_and_a_clean_checkout_is_not_flagged(monkeypatch, capsys):
    sha = "0123456789abcdef0123456789abcdef01234567"
    monkeypatch.setattr(_provenance._results, "code_version",
                        lambda: {"git_sha": sha, "git_dirty": False, "nmst_lib": "9.9"})
    monkeypatch.setattr(_provenance, "benchmarks_dirty", lambda: False)
    stamp = _provenance.stamp("cpu", script="/x/benchmarks/bench_demo.py", argv=["--out", "a b.json"])
    assert tuple(stamp) == _provenance.FIELDS
    assert stamp["git_sha"] == sha and stamp["nmst_lib"] == "9.9"
    assert stamp["git_dirty"] is False and stamp["library_dirty"] is False and stamp["benchmarks_dirty"] is False
    assert stamp["device_type"] == "cpu" and re.fullmatch(r"cpu \(.+, \d+ cores\)", stamp["device"])
    assert stamp["command"] == "python benchmarks/bench_demo.py --out 'a b.json'"
    assert datetime.datetime.fromisoformat(stamp["date_utc"]).utcoffset() == datetime.timedelta(0)
    assert stamp["torch"] == torch.__version__ and stamp["python"] == platform.python_version()
    assert stamp["threads"] == torch.get_num_threads() and stamp["platform"]
    assert capsys.readouterr().err == ""
    assert _provenance.short_version(stamp) == "0123456"


@pytest.mark.parametrize("library, benchmarks, dirty, where", [
    (True, False, True, "nmst_lib/"),
    (False, True, True, "benchmarks/"),
    (True, True, True, "nmst_lib/ and benchmarks/"),
    (None, True, True, "benchmarks/"),
    (None, False, None, None),  # not a git checkout: unknown, no warning
])
def test_a_dirty_checkout_is_stamped_and_warned_about_not_refused(monkeypatch, capsys, library, benchmarks,
                                                                  dirty, where):
    sha = None if library is None else "f" * 40
    monkeypatch.setattr(_provenance._results, "code_version",
                        lambda: {"git_sha": sha, "git_dirty": library, "nmst_lib": "9.9"})
    monkeypatch.setattr(_provenance, "benchmarks_dirty", lambda: benchmarks)
    stamp = _provenance.stamp("cpu", script="bench_demo.py", argv=[])
    assert stamp["git_dirty"] is dirty
    assert stamp["library_dirty"] is library and stamp["benchmarks_dirty"] is benchmarks
    err = capsys.readouterr().err
    if where is None:
        assert err == ""
    else:
        assert len(err.strip().splitlines()) == 1 and err.startswith("warning:"), err
        assert f"uncommitted changes in {where} " in err and '"git_dirty": true' in err
        assert _provenance.short_version(stamp).endswith("-dirty")
    assert _provenance.stamp("cpu", script="bench_demo.py", argv=[], warn=False)["git_dirty"] is dirty
    assert capsys.readouterr().err == ""


def test_uncommitted_reads_git_status_in_a_temporary_repository(tmp_path, monkeypatch):
    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    assert _provenance.uncommitted(tmp_path, "benchmarks") is None  # not a repository
    git("init", "-q")
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "bench_x.py").write_text("x = 1\n")
    spec = ("benchmarks", ":(exclude)benchmarks/results")
    assert _provenance.uncommitted(tmp_path, *spec) is True  # untracked counts
    git("add", "-A")
    git("commit", "-q", "-m", "first")
    assert _provenance.uncommitted(tmp_path, *spec) is False
    (tmp_path / "benchmarks" / "results" / "x.json").write_text("{}\n")
    (tmp_path / "elsewhere.txt").write_text("not benchmark code\n")
    assert _provenance.uncommitted(tmp_path, *spec) is False  # results and other folders do not count
    (tmp_path / "benchmarks" / "bench_x.py").write_text("x = 2\n")
    assert _provenance.uncommitted(tmp_path, *spec) is True
    # a copy of the tree (no .git of its own) inside that repository does not report its status
    copy = tmp_path / "copy"
    (copy / "benchmarks").mkdir(parents=True)
    monkeypatch.setattr(_provenance, "ROOT", copy)
    assert _provenance.benchmarks_dirty() is None
    monkeypatch.setattr(_provenance, "ROOT", tmp_path)
    assert _provenance.benchmarks_dirty() is True


def test_stamp_of_this_checkout_agrees_with_code_version():
    from nmst_lib.experiments.results import code_version

    code = code_version()
    stamp = _provenance.stamp("cpu", script="bench_demo.py", argv=[], warn=False)
    assert stamp["git_sha"] == code["git_sha"] and stamp["library_dirty"] == code["git_dirty"]
    assert "library_checkout" not in stamp  # nmst_lib is imported from this checkout


TINY_RUNS = {
    "bench_entmax.py": ["--batch", "2", "--vocab", "50", "--repeats", "1", "--warmup", "0"],
    "bench_entmax_alpha.py": ["--rows", "2", "--vocab", "50", "--repeats", "1", "--warmup", "0"],
    "bench_temperature.py": ["--hidden", "8", "--layers", "1", "--vocab", "50", "--rank", "4", "--batch-size", "2",
                             "--batches", "1", "--contexts", "2", "--decode-len", "3", "--rounds", "1"],
    "bench_subnormals.py": ["--hidden", "8", "--layers", "1", "--vocab", "50", "--rank", "4", "--batch-size", "2",
                            "--batches", "1", "--rounds", "1"],
    "bench_training.py": ["--hidden", "8", "--layers", "1", "--vocab", "50", "--batch-size", "2", "--batches", "1",
                          "--rounds", "1"],
}


def test_the_other_scripts_write_the_stamp_at_tiny_sizes(tmp_path):
    """The scripts without a test of their own above run end to end at tiny sizes, in one
    interpreter (``runpy`` as ``__main__``, so torch is imported once), and each writes the stamp.
    ``bench_gpt2.py`` is left to the static check: its smallest run takes minutes."""
    code = ("import runpy, sys\n"
            "for path, out, *args in map(lambda a: a.split('|'), sys.argv[1:]):\n"
            "    sys.argv = [path, *args, '--threads', '1', '--out', out]\n"
            "    runpy.run_path(path, run_name='__main__')\n")
    runs = ["|".join([str(ROOT / "benchmarks" / s), str(tmp_path / f"{s}.json"), *a]) for s, a in TINY_RUNS.items()]
    out = subprocess.run([sys.executable, "-c", code, *runs], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"a benchmark failed at tiny sizes:\n{out.stderr[-3000:]}"
    for script in TINY_RUNS:
        assert_stamped(json.loads((tmp_path / f"{script}.json").read_text()), script)
