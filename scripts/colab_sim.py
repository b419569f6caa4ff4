"""Colab simulation: run every chapter notebook the way Colab does, alone, with the library
installed from the freshly built wheel, offline. Run by ``scripts/colab_sim.sh`` (and by
``scripts/test.sh``).

What Colab gives a reader, and how this script reproduces it:

* **The notebook alone.** Colab opens ``chapters/NN_name.ipynb`` in ``/content`` with no
  repository beside it. Here each chapter is copied alone into its own empty temporary
  folder (no ``../shared``, no ``nmst_lib/`` next to it) and executed there.
* **A Python with torch and the usual packages, but not our library.** Each chapter gets a
  fresh virtual environment (``--without-pip``) whose ``site-packages`` holds one ``.pth``
  line pointing at a folder of symlinks to every package of the project's ``.venv`` except
  ``nmst_lib`` (its editable finder, its ``.pth`` and its ``dist-info``): torch, numpy,
  matplotlib, pandas, ipywidgets, tqdm, ipykernel, pip, ... are importable, ``nmst_lib`` is
  not (checked before the notebook starts and again by a cell injected before the install
  cell). A ``.pth`` inside an added folder is not executed, so nothing of ``.venv``'s own
  start-up runs.
* **The install cell installs the wheel.** ``NMST_INSTALL_SPEC`` is the wheel built from this
  working tree, ``PIP_NO_INDEX=1``: the chapter's first cell must install it with pip,
  offline, its dependencies satisfied by what is already there (as Colab's torch is). An
  injected last cell checks that ``nmst_lib`` came from the wheel into the chapter's
  environment and that its published results are package data.
* **No network, no local data.** ``NMST_DATA_DIR`` / ``NMST_WIKITEXT_DIR`` /
  ``NMST_RESULTS_DIR`` / ``NMST_PROFILE`` are unset, ``HF_HUB_OFFLINE=1``,
  ``HF_DATASETS_OFFLINE=1``, ``HOME`` is an empty temporary folder (so no user cache of an
  earlier run is seen), and the execution runs inside new user + network namespaces
  (``unshare -rn``, else ``unshare -n`` as root) whose only interface is loopback (the
  kernel's sockets): the script checks that DNS and an outside address fail there. If
  neither ``unshare`` works (a container without namespaces), it says so loudly and runs
  with the offline variables only; ``--require-isolation`` makes that an error.

Chapter 6 must show the committed ``cpu`` results (read from the wheel's package data),
not fall back to the quick profile: the script fails unless its output (printed or
Markdown) says "Showing the cpu profile" (the profile name may be in backticks).

**Assignments** (when ``_build/assignments`` is built, ``scripts/assignments.sh``): each
assignment's instructor edition (solutions filled in) runs the same way, alone, and an injected
last cell runs ``grader.check`` on every autograded question: the public tests must come from the
wheel (``nmst_lib.classroom.public_tests_dir``: Colab has no ``tests/`` folder) and all pass.
Assignment 3's experiment reads WikiText-2, which Colab gets from the Hugging Face hub; here the
local copy (``NMST_DATA_DIR``, when set) stands in for the hub in the assignments' kernels only.
``--no-assignments`` skips them.

Usage: ``python scripts/colab_sim.py [--chapters 01,06] [--no-assignments] [--keep] [--require-isolation]``.
Prints one line per chapter with its time; exit status 0 only if every chapter passed.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PUBLISHED_GLOB = "nmst_lib/published_results/*/*.json"
PUBLIC_TESTS_GLOB = "nmst_lib/classroom/public_tests/*/*.py"
ASSIGNMENTS_BUILD = REPO / "_build" / "assignments"
# Entries of the project's site-packages that Colab does not have: our own library.
HIDDEN = ("nmst_lib", "nmst_lib-*", "nmst_lib.*", "__editable__*nmst_lib*", "__editable___nmst_lib*")
MARK = "# [colab-sim] injected cell"
# What Chapter 6 prints (stream or Markdown) about the results it shows: the cpu profile, never quick.
CH6_SHOWN = re.compile(r"Showing the `?cpu`? profile")
CH6_WRONG = re.compile(r"Showing the `?quick`? profile|QUICK profile")


def say(msg: str) -> None:
    print(f"[colab-sim] {msg}", flush=True)


# ------------------------------------------------------------------------------ preparation

def build_wheel(work: Path) -> Path:
    """Build nmst_lib's wheel from a copy of the working tree (no build/ folder left in the
    repository), offline (no build isolation: setuptools comes from this environment)."""
    src = work / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "nmst_lib", src / "nmst_lib",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    dist = work / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "-w", str(dist), str(src)], check=True, cwd=work,
                   env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    wheels = sorted(dist.glob("nmst_lib-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"[colab-sim] expected one wheel in {dist}, found {[w.name for w in wheels]}")
    wheel = wheels[0]
    with zipfile.ZipFile(wheel) as z:
        inside = sorted(n for n in z.namelist() if fnmatch.fnmatch(n, PUBLISHED_GLOB))
    committed = sorted(p.relative_to(REPO).as_posix() for p in REPO.glob(PUBLISHED_GLOB))
    if inside != committed or not committed:
        raise SystemExit(f"[colab-sim] the wheel holds {len(inside)} published results, the tree {len(committed)}: "
                         f"check [tool.setuptools.package-data] in pyproject.toml")
    with zipfile.ZipFile(wheel) as z:
        tests_inside = sorted(n for n in z.namelist() if fnmatch.fnmatch(n, PUBLIC_TESTS_GLOB))
    tests_committed = sorted(p.relative_to(REPO).as_posix() for p in REPO.glob(PUBLIC_TESTS_GLOB))
    if tests_inside != tests_committed:
        raise SystemExit(f"[colab-sim] the wheel holds {len(tests_inside)} public test files of the assignments, the tree "
                         f"{len(tests_committed)}: check [tool.setuptools.package-data] in pyproject.toml")
    say(f"built {wheel.name} ({wheel.stat().st_size / 1e6:.2f} MB, {len(inside)} published results and "
        f"{len(tests_inside)} public test files of the assignments inside)")
    return wheel


def make_base_packages(work: Path) -> Path:
    """A folder of symlinks to everything in this environment's site-packages except nmst_lib:
    what a Colab runtime has before the chapter installs the library."""
    site = Path(sysconfig.get_paths()["purelib"])
    base = work / "colab-base-packages"
    base.mkdir()
    hidden = []
    for entry in sorted(site.iterdir()):
        if any(fnmatch.fnmatch(entry.name.lower(), pat.lower()) for pat in HIDDEN):
            hidden.append(entry.name)
            continue
        if entry.suffix == ".pth":  # would not be executed from an added folder anyway
            continue
        (base / entry.name).symlink_to(entry)
    for needed in ("torch", "numpy", "matplotlib", "pandas", "ipywidgets", "tqdm", "ipykernel", "pip", "nbformat"):
        if not (base / needed).exists():
            raise SystemExit(f"[colab-sim] {needed} is missing from {site}: run scripts/setup.sh first")
    say(f"Colab-like base packages: {len(list(base.iterdir()))} entries of {site} (hidden: {', '.join(hidden)})")
    return base


def make_runtime(work: Path, name: str, base: Path) -> Path:
    """A fresh virtual environment for one chapter: no pip of its own, the base packages by a
    .pth line, no nmst_lib. Returns its python."""
    env_dir = work / "runtimes" / name
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "colab_base_packages.pth").write_text(f"{base}\n")
    probe = subprocess.run(
        [str(python), "-c", "import importlib.util as u, sys\n"
                            "missing = [m for m in ('torch', 'numpy', 'matplotlib', 'pandas', 'ipykernel', 'pip') "
                            "if u.find_spec(m) is None]\n"
                            "print(*missing, file=sys.stderr)\n"
                            "sys.exit(3 if u.find_spec('nmst_lib') else 4 if missing else 0)"],
        cwd=work, capture_output=True, text=True, env=_clean_env(os.environ, work / "home"))
    if probe.returncode == 3:
        raise SystemExit(f"[colab-sim] nmst_lib is importable in the fresh runtime {env_dir}: isolation broken")
    if probe.returncode != 0:
        raise SystemExit(f"[colab-sim] the fresh runtime {env_dir} lacks Colab's packages: {probe.stderr}")
    return python


def write_kernelspec(jupyter_path: Path, name: str, python: Path) -> str:
    kernel = f"colab-sim-{name}"
    spec_dir = jupyter_path / "kernels" / kernel
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Colab simulation ({name})", "language": "python"}))
    return kernel


def _clean_env(environ, home: Path) -> dict:
    """The environment of a Colab-like runtime: none of the project's variables, offline."""
    env = {k: v for k, v in environ.items()
           if not k.startswith(("NMST_", "PYTHON", "VIRTUAL_ENV", "JUPYTER", "MPLBACKEND", "XDG_", "PIP_"))}
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1",
               HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYDEVD_DISABLE_FILE_VALIDATION="1")
    return env


# -------------------------------------------------------------------------------- isolation

def _loopback_up() -> None:
    """Bring up ``lo`` in a new network namespace (SIOCGIFFLAGS / SIOCSIFFLAGS), so the
    kernel's ZMQ sockets on 127.0.0.1 work while nothing else is reachable."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sh", fcntl.ioctl(s, 0x8913, struct.pack("16sh", b"lo", 0)))[1]
        fcntl.ioctl(s, 0x8914, struct.pack("16sh", b"lo", flags | 0x1))


def _network_is_cut() -> tuple[bool, str]:
    try:
        socket.getaddrinfo("pypi.org", 443)
        return False, "DNS resolves pypi.org"
    except OSError:
        pass
    try:
        socket.create_connection(("1.1.1.1", 443), timeout=3).close()
        return False, "1.1.1.1:443 is reachable"
    except OSError as err:
        return True, f"DNS fails and 1.1.1.1:443 fails ({err})"


def isolation_prefix() -> tuple[list[str], str]:
    """The command prefix that runs a process without network: ``unshare -rn`` (user + network
    namespace, no privileges needed where user namespaces are allowed), else ``unshare -n``
    as root. Empty when neither works here."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return [], "no `unshare` command on this machine"
    tried = []
    for flags in (["-rn"], ["-n"]):
        cmd = [unshare, *flags]
        probe = subprocess.run([*cmd, "true"], capture_output=True, text=True)
        if probe.returncode == 0:
            return cmd, " ".join(["unshare", *flags])
        tried.append(f"unshare {' '.join(flags)}: {probe.stderr.strip() or probe.returncode}")
    return [], "; ".join(tried)


# -------------------------------------------------------------------------------- execution

def _published_names() -> list[str]:
    """The checkout's published results, as ``family/key.json``: what the wheel must carry."""
    return sorted(p.relative_to(REPO / "nmst_lib" / "published_results").as_posix() for p in REPO.glob(PUBLISHED_GLOB))


def _injected_cells(runtime_python: str):
    import nbformat

    before = nbformat.v4.new_code_cell(
        f"{MARK}: Colab starts without nmst_lib and without the repository\n"
        "import importlib.util, os, sys\n"
        "assert importlib.util.find_spec('nmst_lib') is None, 'nmst_lib importable before the install cell'\n"
        f"assert os.path.realpath(sys.executable) == os.path.realpath({runtime_python!r}), sys.executable\n"
        "assert sorted(os.listdir('.')) == [n for n in sorted(os.listdir('.')) if n.endswith('.ipynb')], os.listdir('.')\n"
        "assert not os.path.exists('../shared') and not os.path.exists('../nmst_lib')\n")
    after = nbformat.v4.new_code_cell(
        f"{MARK}: the library came from the wheel, with its published results as package data\n"
        "import importlib.metadata, json, os, sys\n"
        "import nmst_lib\n"
        "from nmst_lib.experiments.results import published_results_dir, is_source_checkout\n"
        "assert nmst_lib.__file__.startswith(sys.prefix), (nmst_lib.__file__, sys.prefix)\n"
        "url = json.loads(importlib.metadata.distribution('nmst-lib').read_text('direct_url.json'))['url']\n"
        "assert url == 'file://' + os.environ['NMST_INSTALL_SPEC'], url\n"
        "assert not is_source_checkout()\n"
        # every published result of the checkout travels in the wheel (each chapter's folder)
        f"assert sorted(p.relative_to(published_results_dir()).as_posix() for p in published_results_dir().glob('*/*.json')) == {_published_names()!r}\n"
        "print('[colab-sim] nmst_lib', nmst_lib.__version__, 'from', os.path.dirname(nmst_lib.__file__))\n")
    return before, after


def run_chapter(entry: dict, timeout: int) -> tuple[bool, float, str]:
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import (
        CellExecutionError,
        CellTimeoutError,
        DeadKernelError,
    )

    path = Path(entry["notebook"])
    nb = nbformat.read(path, as_version=4)
    before, after = _injected_cells(entry["python"])
    nb.cells = [before, *nb.cells, after]
    if entry.get("questions"):
        nb.cells.append(nbformat.v4.new_code_cell(
            f"{MARK}: grader.check passes every autograded question with the public tests shipped in the wheel\n"
            "import sys\n"
            "from nmst_lib.classroom import public_tests_dir\n"
            f"where = public_tests_dir({entry['name']!r})\n"
            "assert where.startswith(sys.prefix), ('public tests not from the installed wheel', where)\n"
            f"for q in {entry['questions']!r}:\n"
            "    result = grader.check(q)\n"
            "    assert result.passed_all_public, (q, result)\n"
            f"print('[colab-sim] grader.check passed', {len(entry['questions'])}, 'questions with tests from', where)\n"))
    os.environ["PATH"] = f"{Path(entry['python']).parent}{os.pathsep}{os.environ['PATH']}"
    saved = {k: os.environ.get(k) for k in entry.get("env", {})}
    os.environ.update(entry.get("env", {}))
    # Unix-socket (ipc) transport: the kernel talks to this process without any TCP port.
    # The socket paths must be absolute: the kernel runs in the chapter's folder, this process elsewhere.
    km = KernelManager(kernel_name=entry["kernel"], transport="ipc",
                       ip=os.path.join(os.environ["JUPYTER_RUNTIME_DIR"], f"{entry['name'][:2]}-ipc"))
    client = NotebookClient(nb, km=km, kernel_name=entry["kernel"], timeout=timeout, allow_errors=False,
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    try:
        client.execute()
        ok, why = True, ""
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as err:
        ok, why = False, str(err)
    finally:
        os.environ["PATH"] = os.environ["PATH"].split(os.pathsep, 1)[1]
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if km.has_kernel:  # we made the kernel manager, so nbclient leaves the kernel to us
            km.shutdown_kernel(now=True)
    seconds = time.perf_counter() - start
    text = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text.append(out.get("text", ""))
            elif out.get("output_type") in ("execute_result", "display_data"):
                data = out.get("data", {})
                text += [data.get(kind, "") for kind in ("text/plain", "text/markdown", "text/html")]
    text = "\n".join(t if isinstance(t, str) else "".join(t) for t in text)
    if ok and path.name.startswith("06_"):
        if not CH6_SHOWN.search(text) or CH6_WRONG.search(text):
            ok, why = False, (f"Chapter 6 did not show the committed cpu results from the package data (no "
                              f"{CH6_SHOWN.pattern!r} in its output, or {CH6_WRONG.pattern!r}); its status lines:\n" +
                              "\n".join(line for line in text.splitlines()
                                        if "profile" in line.lower() or "not shown" in line)[:3000])
    nbformat.write(nb, path.with_suffix(".executed.ipynb"))
    return ok, seconds, why


def execute_stage(plan_file: Path) -> int:
    plan = json.loads(plan_file.read_text())
    if plan["isolation"]:
        _loopback_up()
        cut, how = _network_is_cut()
        if not cut:
            say(f"network NOT cut inside `{plan['isolation']}`: {how}")
            return 2
        say(f"network cut ({plan['isolation']}): {how}")
    else:
        say(f"WARNING: network NOT cut ({plan['why_not_isolated']}); offline by PIP_NO_INDEX=1 and "
            f"HF_*_OFFLINE=1 only")
    os.environ.clear()
    os.environ.update(plan["env"])
    results = []
    for entry in plan["chapters"]:
        os.environ["NMST_INSTALL_SPEC"] = plan["wheel"]
        ok, seconds, why = run_chapter(entry, plan["timeout"])
        results.append((entry["name"], ok, seconds))
        say(f"{entry['name']:28s} {'ok    ' if ok else 'FAILED'} {seconds:6.1f} s")
        if not ok:
            say(f"{entry['name']} failed (executed copy: {Path(entry['notebook']).with_suffix('.executed.ipynb')}):\n"
                f"{why[-6000:]}")
    total = sum(s for *_, s in results)
    failed = [n for n, ok, _ in results if not ok]
    say(f"{len(results) - len(failed)}/{len(results)} chapters passed in {total:.0f} s"
        + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chapters", default=None, metavar="LIST",
                        help="comma-separated chapter prefixes or names, e.g. 01,06 [every chapters/*.ipynb]")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell [600]")
    parser.add_argument("--no-assignments", action="store_true",
                        help="skip the assignments' instructor editions (run when _build/assignments is built)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (executed notebooks)")
    parser.add_argument("--require-isolation", action="store_true",
                        help="fail when the network cannot be cut (no working unshare)")
    parser.add_argument("--execute-plan", default=None, help=argparse.SUPPRESS)  # internal: the isolated stage
    args = parser.parse_args(argv)
    if args.execute_plan:
        return execute_stage(Path(args.execute_plan))
    if args.timeout < 1:
        parser.error(f"--timeout must be a positive number of seconds, got {args.timeout}")

    notebooks = sorted((REPO / "chapters").glob("[0-9][0-9]_*.ipynb"))
    if args.chapters:
        wanted = [w.strip() for w in args.chapters.split(",") if w.strip()]
        chosen = [nb for nb in notebooks if any(nb.name.startswith(w) or nb.stem == w for w in wanted)]
        unknown = [w for w in wanted if not any(nb.name.startswith(w) or nb.stem == w for nb in notebooks)]
        if unknown or not chosen:
            parser.error(f"no chapter matches {unknown or wanted}; chapters: {', '.join(nb.stem for nb in notebooks)}")
        notebooks = chosen
    if not notebooks:
        raise SystemExit(f"[colab-sim] no chapter notebooks in {REPO / 'chapters'}")

    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="nmst-colab-sim-"))
    try:
        wheel = build_wheel(work)
        base = make_base_packages(work)
        jupyter_path = work / "jupyter"
        chapters = []
        for nb in notebooks:
            python = make_runtime(work, nb.stem, base)
            folder = work / "content" / nb.stem  # Colab's /content, one per chapter, nothing else in it
            folder.mkdir(parents=True)
            shutil.copy2(nb, folder / nb.name)
            chapters.append({"name": nb.stem, "notebook": str(folder / nb.name), "python": str(python),
                             "kernel": write_kernelspec(jupyter_path, nb.stem, python)})
        index = ASSIGNMENTS_BUILD / "index.json"
        if not args.no_assignments and not args.chapters and index.is_file():
            built = json.loads(index.read_text(encoding="utf-8"))["assignments"]
            for name, info in built.items():
                nb = ASSIGNMENTS_BUILD / name / "instructor" / f"{name}.ipynb"
                python = make_runtime(work, name, base)
                folder = work / "content" / name
                folder.mkdir(parents=True)
                shutil.copy2(nb, folder / nb.name)
                chapters.append({"name": name, "notebook": str(folder / nb.name), "python": str(python),
                                 "kernel": write_kernelspec(jupyter_path, name, python),
                                 "questions": [q["name"] for q in info["questions"] if q["kind"] == "autograded"],
                                 # Assignment 3's experiment reads WikiText-2, which Colab gets from the hub;
                                 # with the network cut, the local copy stands in for the hub (and only here)
                                 "env": ({"NMST_DATA_DIR": os.environ["NMST_DATA_DIR"]}
                                         if os.environ.get("NMST_DATA_DIR") else {})})
        elif not args.no_assignments and not args.chapters:
            say(f"no assignments: {index} is missing (bash scripts/assignments.sh builds them)")
        say(f"{len(chapters)} fresh runtimes without nmst_lib (checked), each chapter alone in {work / 'content'}/*/"
            f" ({time.perf_counter() - started:.0f} s of preparation)")
        prefix, how = isolation_prefix()
        if not prefix and args.require_isolation:
            raise SystemExit(f"[colab-sim] cannot cut the network here ({how}) and --require-isolation was given")
        env = _clean_env(os.environ, work / "home")
        env["JUPYTER_PATH"] = str(jupyter_path)
        env["JUPYTER_DATA_DIR"] = str(work / "jupyter-data")
        env["JUPYTER_RUNTIME_DIR"] = str(work / "jupyter-runtime")
        (work / "jupyter-runtime").mkdir()
        plan = {"wheel": str(wheel), "chapters": chapters, "timeout": args.timeout, "env": env,
                "isolation": how if prefix else None, "why_not_isolated": None if prefix else how}
        plan_file = work / "plan.json"
        plan_file.write_text(json.dumps(plan, indent=1))
        rc = subprocess.run([*prefix, sys.executable, str(Path(__file__).resolve()), "--execute-plan",
                             str(plan_file)]).returncode
        say(f"done in {time.perf_counter() - started:.0f} s (exit {rc})")
        return rc
    finally:
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
