"""Issue 23's before/after table, per chapter: the first editions' `cpu` results beside the
converged recipe's, model by model.

    .venv/bin/python scripts/recipe_before_after.py [--family FAMILY] [AFTER_DIR] [--before REV]

FAMILY is the chapter's experiment family: `wikitext2` (Chapter 6, the default), `gpt2`
(Chapter 7), `sparse` (Chapter 8) or `temperature` (Chapter 9). *Before* is the family's
published store at git revision REV: for Chapter 6 the last commit with its 30 first-edition
results (6fce13e; each switched chapter's in `BEFORE_REV`); for the chapters that have not
switched yet, HEAD. *After* is AFTER_DIR, by default the published store (a switched chapter) or
`pending_results/FAMILY` (the others, until they switch). A model is matched across the two by its key without the vocabulary and hidden-size
parts (`-bpe4k`, `-nounk`, `-h162`: Chapter 9's parameter-matched VA is re-matched per vocabulary).

Columns per recipe: seeds stored; the validation score the run was selected by, at its best
epoch (mean over seeds): perplexity per word (before, RNN/LSTM), per BPE piece (after) or per
GPT-2 token, the mean entmax loss, or the epsilon-perplexity of an entmax model selected by it
(different units: only each row's own trend is comparable); whether early stopping fired (seeds
that stopped / seeds); greedy r_nt at the chapter's L (the longest decoded length: 10,000 for
RNN/LSTM, 1,000 for GPT-2; mean over seeds); and the `<unk>` share of the stored greedy
continuations (seed 0). Prints Markdown.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nmst_lib.report import token_share  # noqa: E402

FAMILIES = ("wikitext2", "gpt2", "sparse", "temperature")
BEFORE_REV = {"wikitext2": "6fce13e", "gpt2": "5393220", "sparse": "ea671a5", "temperature": "e5e337c"}
"""For each chapter that has switched, the last commit whose published store holds its
first-edition results (its *after* is then the published store); the other chapters'
first-edition results are still the published ones (HEAD), their converged ones pending."""
SCORE_UNITS = {"val_ppl": "ppl", "val_loss": "loss", "val_eps_ppl": "ε-ppl"}


def store(family: str) -> str:
    return f"nmst_lib/published_results/{family}"


def model_id(key: str) -> str:
    """The key without the seed, the vocabulary parts and Chapter 9's matched hidden size."""
    key = re.sub(r"-seed\d+$", "", key)
    key = re.sub(r"-bpe\d+k|-nounk", "", key)
    return re.sub(r"-h\d+$", "-matched", key)


def seed_of(run: dict) -> int:
    return int(re.search(r"-seed(\d+)$", run["key"]).group(1))


def converged_recipe(run: dict) -> bool:
    """Whether the run is by the converged recipe (WikiText's markers deleted: ``-nounk`` keys)."""
    return "-nounk-" in run["key"]


def from_folder(folder: Path) -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("cpu-*.json"))]


def from_git(rev: str, family: str) -> list[dict]:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout

    names = git("ls-tree", "--name-only", f"{rev}:{store(family)}").split()
    return [json.loads(git("show", f"{rev}:{store(family)}/{n}")) for n in names if n.endswith(".json")]


def score(run: dict) -> tuple[float, str]:
    """The run's selection score at its best epoch and its unit."""
    m = run["metrics"]
    name = m.get("selection", "val_ppl")
    best = next(h for h in m["history"] if h["epoch"] == m["best_epoch"])
    return float(best[name]), SCORE_UNITS[name]


def cells(runs: list[dict]) -> list[str]:
    if not runs:
        return ["0", "—", "—", "—", "—"]
    scores = [score(r) for r in runs]
    units = {u for _, u in scores}
    value = sum(s for s, _ in scores) / len(scores)
    shown = f"{value:,.4f}" if units == {"loss"} else f"{value:,.1f}"
    if units != {"ppl"}:
        shown += f" ({'/'.join(sorted(units))})"
    stopped = sum(bool(r["metrics"]["stopped_early"]) for r in runs)
    rnt = [r["decoding"]["greedy"]["rnt"][-1] for r in runs]
    examples = runs[0]["decoding"]["greedy"].get("examples") or []
    unk = token_share([ex["continuation"] for ex in examples]).fraction if examples else None
    return [str(len(runs)), shown, f"{stopped}/{len(runs)}", f"{sum(rnt) / len(rnt):.3f}",
            "—" if unk is None else f"{100 * unk:.0f} %"]


def table(before: list[dict], after: list[dict]) -> str:
    by_id: dict[str, dict[str, list[dict]]] = {}
    for side, results in (("before", before), ("after", after)):
        for r in results:
            by_id.setdefault(model_id(r["key"]), {"before": [], "after": []})[side].append(r)
    head = ("| model | seeds | val score | stopped early | greedy r_nt(L) | `<unk>` in greedy "
            "| seeds | val score | stopped early | greedy r_nt(L) | `<unk>` in greedy |")
    rows = [head, "|" + "---|" * 11]
    for mid in sorted(by_id, key=lambda m: (not by_id[m]["after"], m)):
        sides = by_id[mid]
        old = cells(sorted(sides["before"], key=seed_of))
        new = cells(sorted(sides["after"], key=seed_of))
        rows.append("| " + " | ".join([mid.removeprefix("cpu-"), *old, *new]) + " |")
    return "\n".join(rows)


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("after", nargs="?", type=Path, default=None,
                        help="folder of the converged results (default: the published store for a "
                             "switched chapter, pending_results/FAMILY for the others)")
    parser.add_argument("--family", choices=FAMILIES, default="wikitext2")
    parser.add_argument("--before", default=None, help="git revision of the first editions' store "
                        f"(default: {', '.join(f'{r} for {f}' for f, r in BEFORE_REV.items())}, HEAD "
                        "for the others)")
    args = parser.parse_args(argv)
    family = args.family
    switched = family in BEFORE_REV
    after = (args.after or (ROOT / (store(family) if switched else f"pending_results/{family}"))).resolve()
    rev = args.before or BEFORE_REV.get(family, "HEAD")
    shown = after.relative_to(ROOT) if after.is_relative_to(ROOT) else after.name
    before_runs = [r for r in from_git(rev, family) if not converged_recipe(r)]
    after_runs = [r for r in from_folder(after) if converged_recipe(r)]
    text = (f"Before: `cpu` {family} results at {rev} (first editions' recipe). "
            f"After: converged recipe ({shown}).\n\n" + table(before_runs, after_runs))
    print(text)
    return text


if __name__ == "__main__":
    main()
