"""Issue 23's compute plan on a 2-core CPU: one queue of models that several lanes share.

    python scripts/train_queue.py plan                 the queue, one model per line, in order
    python scripts/train_queue.py start WORK [LANES]   LANES (default 2) lanes in the background
    python scripts/train_queue.py start WORK --update-tree   first move WORK/tree to this HEAD
    python scripts/train_queue.py start WORK --fit MINUTES   only models that end within MINUTES
    python scripts/train_queue.py status WORK          done, running and still to run, with times
    python scripts/train_queue.py land WORK [KEY ...]  copy finished results into the published store
    python scripts/train_queue.py lane WORK            one lane in the foreground (what start runs)

Every model of the ``cpu`` suites of Chapters 6-9 by its chapter's converged recipe
(``nmst_lib.experiments.config.CPU_RECIPES``; the same fields as ``scripts/converge_cpu.sh``),
in the order that gives every chapter the most as results land: one seed of every
configuration first (Chapter 7, Chapter 8, then Chapter 9, its parameter-matched models (the
plain VA, fast, and MoS+) first), then seeds 1 and 2 of Chapters 7 and 6, then seeds 1 and 2 of Chapters 9 and 8
(``SEED_GROUPS``, ``SEED_ORDER``), and last the further seeds of the models that no counted
finding reads (``beyond_only``).

``start`` makes ``WORK/tree``, a clean worktree of this checkout's HEAD, the first time (so
that every result is stamped with a clean commit; an existing one is kept, so that a restarted
plan trains with the code it began with), clears the claims of lanes that no longer run, and
starts the lanes there, each a ``nice`` background process logging to ``WORK/logs/``. A lane
takes the first model that is neither done nor claimed, claims it (``WORK/claims/KEY``, made
atomically with ``mkdir``), trains or resumes it in a child process
(``python -m nmst_lib suite FAMILY --only KEY --set ...``, one thread; checkpoints in
``WORK/ckpt``, the result in ``WORK/out/FAMILY/KEY.json``) and goes on until the queue is
empty. A model is done when a CURRENT result of it is in ``WORK/out``, in ``pending_results/``
or in the published store of the worktree, so a plan restarted on a new machine skips what is
committed. Lanes stop when the session that started them ends; ``start`` again resumes every
model from its last epoch. Commit each result as it lands (``pending_results/README.md``):
``land`` copies every finished result of ``WORK/out`` that is not committed yet (or the KEYs
named) into ``nmst_lib/published_results/FAMILY/`` of this checkout, byte for byte and
atomically, refusing one that is not CURRENT or was made from a dirty tree, and prints what a
commit message and the record need (perplexities, epochs, the stopping rule, greedy decoding,
commit, hours) beside the same configuration's other seeds.

``--update-tree`` moves ``WORK/tree`` to this checkout's HEAD before the lanes start (refused
while a lane runs), so that a plan whose suites grew (e.g. the seeds of Chapters 7 and 8) trains
them from a newer clean commit. A model resumed there from an older commit's checkpoint is
stamped with the new commit: do it only when the training code of the models in flight is the
same at both (``git diff OLD NEW -- nmst_lib`` says), and say so where the results are committed.

``NEXT_EPS`` widens Chapter 6's grid before the chapter takes it: the models of Chapter 6's suite
at Choi et al.'s best eps = 1e-5 (not yet in ``CPU_EPS``) are queued after every seed-0 model, run
through ``python -m nmst_lib run`` (the suite does not list them), and land in
``pending_results/wikitext2/`` (the published store holds only suite configs); when all of them are
there, ``CPU_EPS`` takes 1e-5, they move to the store and the chapter reads them.

``--fit MINUTES`` is for a machine that may not outlive the session: a lane then starts a model
only when its expected training time (:func:`estimate_minutes`, from the measured times of its
nearest published relatives) ends within MINUTES of ``start``, and always resumes a model whose
checkpoint survived. Without it a model longer than the session is begun and, when the next
session gets a fresh machine, lost: in session 31 the two CT-MoS models of Chapter 9 (about 2.5
and 2 hours in, of 4-7) were lost that way, so the lanes took the hour-long models of Chapters 7
and 6 first, which land within a session.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nmst_lib.experiments import CURRENT, get_family  # noqa: E402
from nmst_lib.experiments.config import (  # noqa: E402
    CONVERGED_CPU_RECIPE,
    CPU_EPS,
    EPS_PPL_CPU_RECIPE,
    GPT2_CONVERGED_CPU_RECIPE,
    UNIGRAM_HOLD_CPU_RECIPE,
    make_config,
)
from nmst_lib.experiments.results import published_results_dir  # noqa: E402
from nmst_lib.experiments.sparse import PAPER_ALPHA  # noqa: E402
from nmst_lib.files import atomic_write_bytes  # noqa: E402

RECIPES = {"wikitext2": CONVERGED_CPU_RECIPE, "gpt2": GPT2_CONVERGED_CPU_RECIPE,
           "sparse": EPS_PPL_CPU_RECIPE, "temperature": UNIGRAM_HOLD_CPU_RECIPE}
"""Each family's converged recipe: the ``--set`` fields of its suite (Chapter 6's and, since
Chapter 7 switched, Chapter 7's change nothing: they are the profile's own)."""

MINUTES = {"wikitext2": 50, "gpt2": 65, "sparse": 130, "temperature": 150}
"""Measured minutes of training per model on one shared core (``provenance.train_seconds`` of the
converged results, sessions 15-18), for the estimates of ``status``: Chapter 6 20-83 (mean 50),
Chapter 7 42-85 (its seeds 1-2 decode greedily only, so a little less), Chapter 8's entmax models
117-128, Chapter 9's contextual-temperature VA 157 (its parameter-matched VA 142)."""

SEED_ORDER = ("gpt2", "wikitext2", "temperature", "sparse")
"""Within a seed, Chapter 7's models first (the most perplexity findings, about 50 minutes a
model), then Chapter 6's, Chapter 9's (every model a perplexity finding compares, all but
CT-NMST; about 2.5 hours each), then Chapter 8's (whose entmax models take about 2 hours each)."""

SEED_GROUPS = (("gpt2", "wikitext2"), ("temperature", "sparse"))
"""After every seed-0 model, the further seeds group by group, each group's seed 1 before its
seed 2. Chapters 7 and 6 come first: their findings have no band but their seeds' (with one
seed of converged runs they are *not run*, and two seeds give a standard error with one degree
of freedom), so their third seeds move verdicts. Chapters 9 and 8 read a one-seed comparison
against a stated floor (twice Chapter 6's relative seed spread, at least 10 %), which seeds can
only widen; their seeds 1 and 2 (about 2-4 hours a model) come after. In session 24 the lanes
trained only while a session ran (about 6 CPU hours per session), and the first group had 21
models to go (about 20 CPU hours: three or four sessions), the second 30 with MoS+'s two further
seeds (about 70)."""


NEXT_EPS = (1e-5,)
"""The eps that Chapter 6's grid (``CPU_EPS``) takes next: Choi et al.'s best, the eps of their
Table 1's best NMST models and of Figures 2 and 8, where no theorem forces termination within
L = 10,000 (t1/2 = 69,315). Its models (RNN and LSTM, ST and NMST, seeds 0-2) are
:func:`next_grid_configs`: queued after every seed-0 model, landed in ``pending_results/``."""


def next_grid_configs() -> list:
    """Chapter 6's configs at :data:`NEXT_EPS` that its suite does not hold yet: the configs
    :func:`nmst_lib.experiments.runs.suite_configs` will make when ``CPU_EPS`` takes them (the
    same ``make_config`` call and recipe), seed by seed, the RNNs first (about 30 minutes each
    against the LSTMs' 70), ST before NMST."""
    return [make_config("cpu", arch, head, eps, seed, **RECIPES["wikitext2"])
            for seed in range(3) for arch in ("rnn", "lstm") for eps in NEXT_EPS
            if not any(abs(eps - e) <= 1e-12 for e in CPU_EPS) for head in ("st", "nmst")]


def is_next_grid(family: str, config) -> bool:
    """Whether ``config`` is one of :func:`next_grid_configs` (trained by ``run``, landed pending)."""
    return family == "wikitext2" and config.key in {c.key for c in next_grid_configs()}


def beyond_only(family: str, config) -> bool:
    """Whether every finding that reads this model is beyond the papers (read by the same rule,
    never counted; ``nmst_lib.findings.Claim.beyond``), so that its further seeds move no count and
    run after every other model's: Chapter 8's entmax and NMST-entmax models at an α other than
    Martins et al.'s ``PAPER_ALPHA`` (the α of their WikiText findings, Table 3), and every single-softmax
    model of Chapter 9 (CT-VA and its ablations, its range [1/2, 3/2], the plain LSTM of CT-VA's
    size, CT-NMST): the contextual-temperature paper's only temperature model is CT-MoS, so its
    findings are read on the mixtures (MoS, CT-MoS and its ablations, MoS+). Every model of
    Chapters 6 and 7 is read by a counted finding."""
    m = get_family(family).training_config(config)
    if family == "sparse":
        return m.head != "va" and abs(m.alpha - PAPER_ALPHA) > 1e-9
    if family == "temperature":
        return m.temperature is None or m.temperature.mixtures == 1
    return False


def queue() -> list[tuple[str, object]]:
    """(family, config) of every model of the plan, in run order."""
    suites = {name: get_family(name).configs("cpu", **RECIPES[name]) for name in RECIPES}

    def seed(name, config) -> int:
        return get_family(name).training_config(config).seed

    # Chapter 7's ST and NMST model of each eps one after the other, so that its pairs land together
    gpt2 = sorted((c for c in suites["gpt2"] if c.seed == 0), key=lambda c: (c.eps or 0.0, c.head != "st"))
    first = [("gpt2", c) for c in gpt2] + [("sparse", c) for c in suites["sparse"] if seed("sparse", c) == 0]
    temperature = [c for c in suites["temperature"] if seed("temperature", c) == 0]
    # the parameter-matched models (a plain LSTM, fast, and MoS+) before the contextual-temperature ones
    temperature.sort(key=lambda c: get_family("temperature").training_config(c).model.hidden == 128)
    first += [("temperature", c) for c in temperature]
    first += [("wikitext2", c) for c in suites["wikitext2"] if c.seed == 0]
    group = {name: i for i, names in enumerate(SEED_GROUPS) for name in names}
    later = sorted(((name, c) for name in SEED_ORDER for c in suites[name] if seed(name, c) != 0),
                   key=lambda job: (beyond_only(*job), group[job[0]], seed(*job),
                                    SEED_ORDER.index(job[0])))  # stable within
    return first + [("wikitext2", c) for c in next_grid_configs()] + later


def model_stem(key: str) -> str:
    """A model's key without its seed (``cpu-lstm-va-bpe4k-nounk-seed1`` -> ``cpu-lstm-va-bpe4k-nounk``):
    what its seeds share."""
    return key.rsplit("-seed", 1)[0]


def _words(key: str) -> list[str]:
    """A model's key as words, without its seed (``[cpu, lstm, va, bpe4k, nounk]``)."""
    return model_stem(key).split("-")


def measured_minutes(family: str, store: Path | None = None) -> dict[str, float]:
    """The measured training minutes (``provenance.train_seconds``) of every published result of
    ``family`` that records them, by key: the store is read once, then every estimate of a call
    uses this."""
    store = published_results_dir() if store is None else store
    found = {}
    for path in sorted((store / family).glob("*.json")) if (store / family).is_dir() else []:
        seconds = json.loads(path.read_text(encoding="utf-8")).get("provenance", {}).get("train_seconds")
        if seconds:
            found[path.stem] = seconds / 60
    return found


class MeasuredByFamily(dict):
    """:func:`measured_minutes` by family, each family's store read the first time it is asked
    for: one per look at the queue (``status``, :func:`next_job`)."""

    def __missing__(self, family: str) -> dict[str, float]:
        self[family] = found = measured_minutes(family)
        return found


def estimate_minutes(family: str, config, store: Path | None = None,
                     measured: dict[str, float] | None = None) -> float:
    """Expected minutes of training of ``config`` on one shared core: the median of
    ``provenance.train_seconds`` over the published results of its family whose keys share the most
    leading words with its own (its other seeds, when any are published; else its nearest
    relatives, e.g. the other CT-MoS models for a CT-MoS of a new temperature map), else the
    family's measured mean ``MINUTES``. ``measured`` is :func:`measured_minutes` when a caller
    estimates many models (read from ``store`` when not given)."""
    measured = measured_minutes(family, store) if measured is None else measured
    words, best, times = _words(config.key), 0, []
    for key, minutes in measured.items():
        other = _words(key)
        shared = next((i for i, (a, b) in enumerate(zip(words, other)) if a != b), min(len(words), len(other)))
        if shared < best or shared == 0:
            continue
        if shared > best:
            best, times = shared, []
        times.append(minutes)
    return statistics.median(times) if times else float(MINUTES[family])


def has_checkpoint(work: Path, key: str) -> bool:
    """Whether a checkpoint of ``key`` survived in ``WORK/ckpt`` (either format)."""
    return any((work / "ckpt" / f"{key}{suffix}").is_file() for suffix in (".safetensors", ".pt"))


def next_job(work: Path, until: float | None = None):
    """The next model of the queue that is neither done nor claimed, claimed for this lane.

    A model whose checkpoint survived (a lane stopped mid-run) comes first, in the queue's order: its
    hours are already spent and it lands soonest. Then the queue's order; with ``until`` (a time,
    seconds since the epoch) only a model whose :func:`estimate_minutes` ends before it, so that a
    lane never starts what the session cannot finish. None when no model qualifies."""
    measured = MeasuredByFamily()
    open_jobs = [(f, c) for f, c in queue() if where_done(f, c, work) is None]
    resumable = {c.key for _, c in open_jobs if has_checkpoint(work, c.key)}
    # a stable sort: the resumable ones first, each group in the queue's order
    for family, config in sorted(open_jobs, key=lambda job: job[1].key not in resumable):
        if until is not None and config.key not in resumable:
            if estimate_minutes(family, config, measured=measured[family]) > (until - time.time()) / 60:
                continue
        if claim(work, config.key):
            return family, config
    return None


def where_done(family: str, config, work: Path | None, tree: Path = ROOT) -> str | None:
    """Where a CURRENT result of ``config`` is stored (None: nowhere): the repository's stores
    first, so that ``WORK/out`` names a finished result that is not committed yet (to land)."""
    fam = get_family(family)
    places = [("published", published_results_dir()), ("pending_results", tree / "pending_results")]
    if work is not None:
        places.append(("WORK/out", work / "out"))
    for label, folder in places:
        if folder.is_dir() and fam.load(config, folder).status == CURRENT:
            return label
    return None


def claim(work: Path, key: str) -> bool:
    """Claim ``key`` for this lane (atomic: ``mkdir`` fails when another lane has it)."""
    (work / "claims").mkdir(parents=True, exist_ok=True)
    try:
        (work / "claims" / key).mkdir()
    except FileExistsError:
        return False
    (work / "claims" / key / "pid").write_text(str(os.getpid()))
    return True


def release(work: Path, key: str) -> None:
    folder = work / "claims" / key
    (folder / "pid").unlink(missing_ok=True)
    folder.rmdir()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clear_stale_claims(work: Path) -> list[str]:
    """Remove the claims whose lane no longer runs (a session ended); returns their keys."""
    cleared = []
    for folder in sorted((work / "claims").glob("*")) if (work / "claims").is_dir() else []:
        pid_file = folder / "pid"
        pid = int(pid_file.read_text()) if pid_file.is_file() else 0
        if not pid or not _alive(pid):
            release(work, folder.name)
            cleared.append(folder.name)
    return cleared


def suite_command(family: str, config, work: Path) -> list[str]:
    """The child process that trains or resumes one model and stores its result: its suite with
    ``--only``, or, for a model of :func:`next_grid_configs`, ``run`` with its arch, head, eps and
    seed (the same ``make_config``)."""
    sets = [arg for field, value in RECIPES[family].items() for arg in ("--set", f"{field}={json.dumps(value)}")]
    common = ["--profile", "cpu", *sets, "--threads", "1", "--no-progress", "--out", str(work / "out"),
              "--checkpoint-dir", str(work / "ckpt")]
    if is_next_grid(family, config):
        return [sys.executable, "-m", "nmst_lib", "run", "--arch", config.arch, "--head", config.head,
                "--eps", repr(config.eps), "--seed", str(config.seed), *common]
    return [sys.executable, "-m", "nmst_lib", "suite", family, "--only", config.key, *common]


def run_lane(work: Path, until: float | None = None) -> None:
    """Take models from the queue until none is left to take (with ``until``: none that ends in
    time, :func:`next_job`)."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    while not stop:
        job = next_job(work, until)
        if job is None:
            left = "" if until is None else f" that ends by {time.strftime('%H:%M', time.localtime(until))}"
            print(f"[lane {os.getpid()}] {time.strftime('%H:%M:%S')} nothing left to take{left}", flush=True)
            return
        family, config = job
        started = time.time()
        print(f"[lane {os.getpid()}] {time.strftime('%H:%M:%S')} {family} {config.key}: start", flush=True)
        try:
            status = subprocess.run(suite_command(family, config, work), cwd=ROOT).returncode
        finally:
            release(work, config.key)
        print(f"[lane {os.getpid()}] {time.strftime('%H:%M:%S')} {family} {config.key}: exit {status} after "
              f"{(time.time() - started) / 60:.0f} min", flush=True)
        if status != 0:  # a failing model is not retried in a loop; the log says why
            return


def update_tree(work: Path, rev: str) -> None:
    """Move ``WORK/tree`` (a clean worktree) to commit ``rev``; refused while a lane holds a
    claim, since its child trains with the tree's code."""
    claims = work / "claims"
    live = [p.name for p in sorted(claims.glob("*")) if (p / "pid").is_file()
            and _alive(int((p / "pid").read_text()))] if claims.is_dir() else []
    if live:
        raise SystemExit(f"lanes are running ({', '.join(live)}): stop them before --update-tree")
    subprocess.run(["git", "-C", str(work / "tree"), "checkout", "--quiet", "--detach", rev], check=True)


def start(work: Path, lanes: int, update: bool = False, fit: float | None = None) -> None:
    work.mkdir(parents=True, exist_ok=True)
    tree = work / "tree"
    if update and tree.is_dir():
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        update_tree(work, head)
        print(f"[start] {tree} moved to {head[:10]}")
    if not tree.is_dir():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), "HEAD"], check=True)
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain"], capture_output=True, text=True,
                           check=True).stdout
    if dirty.strip():
        raise SystemExit(f"{tree} has local changes; results would be stamped git_dirty:\n{dirty}")
    for key in clear_stale_claims(work):
        print(f"[start] {key}: the claim of a lane that no longer runs is cleared")
    (work / "logs").mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if "NMST_DATA_DIR" not in env and (ROOT.parent / "shared" / "data").is_dir():
        env["NMST_DATA_DIR"] = str(ROOT.parent / "shared" / "data")
    for i in range(lanes):
        log_path = work / "logs" / f"lane{i + 1}-{time.strftime('%Y%m%d-%H%M%S')}.log"  # a new log per start
        log = open(log_path, "a")
        until = [] if fit is None else ["--until", f"{time.time() + fit * 60:.0f}"]
        proc = subprocess.Popen(["nice", "-n", "19", sys.executable, str(tree / "scripts" / "train_queue.py"),
                                 "lane", str(work), *until], cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        print(f"[start] lane {i + 1}: pid {proc.pid}, log {log_path}")
        time.sleep(5)  # let it claim before the next lane looks


def status(work: Path) -> None:
    rows, todo_minutes = [], 0
    claimed = {p.name for p in (work / "claims").glob("*")} if (work / "claims").is_dir() else set()
    measured = MeasuredByFamily()
    for family, config in queue():
        done = where_done(family, config, work, tree=work / "tree" if (work / "tree").is_dir() else ROOT)
        state = ("done, to land (WORK/out)" if done == "WORK/out" else f"done ({done})") if done else (
            "running" if config.key in claimed else "to run")
        minutes = ""
        if not done:
            expected = estimate_minutes(family, config, measured=measured[family])
            todo_minutes += expected
            minutes = f"~{expected:.0f} min"
        rows.append(f"{state:26} {minutes:9} {family:12} {config.key}")
    print("\n".join(rows))
    n_done = sum(r.startswith("done") for r in rows)
    print(f"\n{n_done} of {len(rows)} done; the rest is about {todo_minutes / 60:.0f} CPU hours "
          f"({todo_minutes / 60 / 2:.0f} h on two lanes; estimate_minutes per model)")


def summary(data: dict) -> str:
    """One line of what the record of a landed result needs (any family's result)."""
    m, prov = data["metrics"], data["provenance"]
    stop = "early stop" if m.get("stopped_early") else "epoch cap"
    line = (f"val {m['val_ppl']:.1f}, test {m['test_ppl']:.1f} (best epoch {m['best_epoch']} of "
            f"{m['epochs_run']}, {stop})")
    greedy = data.get("decoding", {}).get("greedy")
    if greedy:
        line += (f"; greedy {greedy['not_terminated']} of {greedy['num_contexts']} unfinished at "
                 f"L = {greedy['max_len']}")
    return line + f"; clean {prov['git_sha'][:7]}, {prov.get('train_seconds', 0) / 3600:.1f} h training"


def land(work: Path, keys: list[str], store: Path | None = None, pending: Path | None = None) -> list[Path]:
    """Copy the finished, not yet committed results of ``WORK/out`` (only ``keys`` when given)
    into the published store (those of :func:`next_grid_configs` into ``pending_results/``, since
    the store holds only suite configs); returns the files written."""
    store = published_results_dir() if store is None else store
    pending = ROOT / "pending_results" if pending is None else pending
    # a key can name a model of two families (Chapter 8's softmax model is Chapter 6's LSTM VA,
    # with the same key), so jobs are (family, config) pairs, never a dict by key
    jobs = [(f, c) for f, c in queue() if not keys or c.key in keys]
    unknown = [k for k in keys if k not in {c.key for _, c in jobs}]
    if unknown:
        raise SystemExit(f"not in the plan: {', '.join(unknown)} (see `train_queue.py plan`)")
    waiting = [(f, c) for f, c in jobs if where_done(f, c, work) == "WORK/out"]
    for key in keys:
        if not any(c.key == key for _, c in waiting):
            where = [f"{f}: {where_done(f, c, work) or 'not done'}" for f, c in jobs if c.key == key]
            raise SystemExit(f"{key}: no finished result waits in {work / 'out'} ({'; '.join(where)})")
    written = []
    for family, config in waiting:
        key = config.key
        source = work / "out" / family / f"{key}.json"
        data = json.loads(source.read_text(encoding="utf-8"))
        if data["provenance"].get("git_dirty") is not False:
            raise SystemExit(f"{key}: made from a tree with local changes (git_dirty); not landed")
        folder = (pending if is_next_grid(family, config) else store) / family
        target = folder / f"{key}.json"
        atomic_write_bytes(target, source.read_bytes())
        written.append(target)
        print(f"[land] {family} {key}{' (pending_results)' if folder.parent == pending else ''}: {summary(data)}")
        for other in sorted(folder.glob(f"{model_stem(key)}-seed*.json")):
            if other != target:
                print(f"         beside {other.stem}: {summary(json.loads(other.read_text(encoding='utf-8')))}")
    if not written:
        print("[land] nothing to land")
    return written


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("plan", help="the queue, in order")
    s = sub.add_parser("start", help="start the lanes in the background")
    s.add_argument("work", type=Path)
    s.add_argument("lanes", type=int, nargs="?", default=2)
    s.add_argument("--update-tree", action="store_true", help="move WORK/tree to this HEAD first")
    s.add_argument("--fit", type=float, metavar="MINUTES",
                   help="start only models expected to end within MINUTES (and resume any with a checkpoint)")
    sub.add_parser("status").add_argument("work", type=Path)
    s = sub.add_parser("lane")
    s.add_argument("work", type=Path)
    s.add_argument("--until", type=float, help="a time (seconds since the epoch) models must end by")
    s = sub.add_parser("land", help="copy finished results into the published store")
    s.add_argument("work", type=Path)
    s.add_argument("keys", nargs="*")
    args = p.parse_args(argv)
    if args.command == "plan":
        for family, config in queue():
            print(f"{family:12} {config.key}")
    elif args.command == "start":
        if args.lanes < 1:
            raise SystemExit("lanes must be >= 1")
        if args.fit is not None and args.fit <= 0:
            raise SystemExit(f"--fit must be a positive number of minutes, got {args.fit}")
        start(args.work.resolve(), args.lanes, update=args.update_tree, fit=args.fit)
    elif args.command == "status":
        status(args.work.resolve())
    elif args.command == "land":
        land(args.work.resolve(), args.keys)
    else:
        run_lane(args.work.resolve(), args.until)


if __name__ == "__main__":
    main()
