"""Issue 23's before/after table for Chapter 6: the published `cpu` results (5,000 words, 4 epochs)
beside the converged recipe's results in pending_results/ (4,000 BPE pieces, WikiText's <unk>
markers deleted, early stopping), model by model.

    .venv/bin/python scripts/recipe_before_after.py [PENDING_DIR]

Columns per recipe: seeds stored, validation perplexity (mean over seeds; per word before, per
BPE piece after: different units, so only each row's own trend is comparable), whether early
stopping fired (seeds that stopped / seeds), greedy r_nt at L = 10,000 (mean over seeds) and the
<unk> share of the stored greedy continuations (seed 0). Prints Markdown.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nmst_lib.report import token_share  # noqa: E402

BEFORE = ROOT / "nmst_lib" / "published_results" / "wikitext2"
MODELS = [(arch, head, eps) for arch in ("rnn", "lstm")
          for head, eps in (("va", None), ("st", 5e-4), ("nmst", 5e-4), ("st", 1e-4), ("nmst", 1e-4))]


def _runs(folder: Path, arch: str, head: str, eps) -> list[dict]:
    out = []
    for path in sorted(folder.glob(f"cpu-{arch}-{head}-*.json")) if folder.is_dir() else []:
        data = json.loads(path.read_text(encoding="utf-8"))
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


def table(after_dir: Path) -> str:
    head = ("| model | seeds | val ppl (word) | stopped early | greedy r_nt(10⁴) | `<unk>` in greedy "
            "| seeds | val ppl (piece) | stopped early | greedy r_nt(10⁴) | `<unk>` in greedy |")
    rows = [head, "|" + "---|" * 11]
    for arch, h, eps in MODELS:
        name = f"{arch.upper()} {h.upper()}" + ("" if eps is None else f" ε={eps:.0e}".replace("e-0", "e-"))
        before = _cells(_runs(BEFORE, arch, h, eps))
        after = _cells([r for r in _runs(after_dir, arch, h, eps) if r["config"].get("drop_unk")])
        rows.append("| " + " | ".join([name, *before, *after]) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    pending = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "pending_results" / "wikitext2"
    print("Before: published `cpu` (5,000 words, 4 epochs). After: converged recipe "
          f"({pending.relative_to(ROOT) if pending.is_relative_to(ROOT) else pending.name}).\n")
    print(table(pending))
