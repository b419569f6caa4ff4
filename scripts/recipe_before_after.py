"""Issue 23's before/after table for Chapter 6: the first editions' `cpu` results (5,000 words,
4 epochs), read from the git history (the commit before Chapter 6 switched, BEFORE_REV), beside
the converged recipe's results (4,000 BPE pieces, WikiText's <unk> markers deleted, early
stopping) in the published store or AFTER_DIR, model by model.

    .venv/bin/python scripts/recipe_before_after.py [AFTER_DIR] [--before REV]

Columns per recipe: seeds stored, validation perplexity (mean over seeds; per word before, per
BPE piece after: different units, so only each row's own trend is comparable), whether early
stopping fired (seeds that stopped / seeds), greedy r_nt at L = 10,000 (mean over seeds) and the
<unk> share of the stored greedy continuations (seed 0). Prints Markdown.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nmst_lib.report import token_share  # noqa: E402

STORE = "nmst_lib/published_results/wikitext2"
BEFORE_REV = "6fce13e"
"""The last commit whose published store holds the 30 first-edition Chapter 6 results."""
MODELS = [(arch, head, eps) for arch in ("rnn", "lstm")
          for head, eps in (("va", None), ("st", 5e-4), ("nmst", 5e-4), ("st", 1e-4), ("nmst", 1e-4))]


def _from_folder(folder: Path) -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("cpu-*.json"))]


def _from_git(rev: str) -> list[dict]:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout

    names = git("ls-tree", "--name-only", f"{rev}:{STORE}").split()
    return [json.loads(git("show", f"{rev}:{STORE}/{n}")) for n in names if n.endswith(".json")]


def _runs(results: list[dict], arch: str, head: str, eps) -> list[dict]:
    out = []
    for data in results:
        c = data["config"]
        same_eps = (c["eps"] is None) if eps is None else (c["eps"] is not None and abs(c["eps"] - eps) < 1e-12)
        if c["arch"] == arch and c["head"] == head and same_eps:
            out.append(data)
    return sorted(out, key=lambda d: d["config"]["seed"])


def _cells(runs: list[dict]) -> list[str]:
    if not runs:
        return ["0", "—", "—", "—", "—"]
    ppl = sum(r["metrics"]["val_ppl"] for r in runs) / len(runs)
    stopped = sum(bool(r["metrics"]["stopped_early"]) for r in runs)
    rnt = [r["decoding"]["greedy"]["rnt"][-1] for r in runs]
    first = runs[0]["decoding"]["greedy"]
    unk = token_share([ex["continuation"] for ex in first["examples"]]).fraction
    return [str(len(runs)), f"{ppl:,.1f}", f"{stopped}/{len(runs)}", f"{sum(rnt) / len(rnt):.3f}", f"{100 * unk:.0f} %"]


def table(before: list[dict], after: list[dict]) -> str:
    head = ("| model | seeds | val ppl (word) | stopped early | greedy r_nt(10⁴) | `<unk>` in greedy "
            "| seeds | val ppl (piece) | stopped early | greedy r_nt(10⁴) | `<unk>` in greedy |")
    rows = [head, "|" + "---|" * 11]
    for arch, h, eps in MODELS:
        name = f"{arch.upper()} {h.upper()}" + ("" if eps is None else f" ε={eps:.0e}".replace("e-0", "e-"))
        old = _cells([r for r in _runs(before, arch, h, eps) if not r["config"].get("drop_unk")])
        new = _cells([r for r in _runs(after, arch, h, eps) if r["config"].get("drop_unk")])
        rows.append("| " + " | ".join([name, *old, *new]) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("after", nargs="?", type=Path, default=ROOT / STORE,
                        help="folder of the converged results (default: the published store)")
    parser.add_argument("--before", default=BEFORE_REV, help=f"git revision of the first editions' store "
                        f"(default {BEFORE_REV})")
    args = parser.parse_args()
    shown = args.after.relative_to(ROOT) if args.after.resolve().is_relative_to(ROOT) else args.after.name
    print(f"Before: `cpu` at {args.before} (5,000 words, 4 epochs). After: converged recipe ({shown}).\n")
    print(table(_from_git(args.before), _from_folder(args.after)))
