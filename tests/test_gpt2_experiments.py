"""Tests of Chapter 7's GPT-2 experiments (07_gpt2; nmst_lib.experiments.gpt2): the suite's
configs, the results store's gpt2/ folder, readable GPT-2 text in decoded examples and eos traces,
the table/figure builders on small synthetic results (where the right answer is known by
construction) and on a real quick-profile run (train a few steps, decode under every decoder,
result JSON with provenance, load_or_run loads instead of re-running), and the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from nmst_lib import __main__ as cli
from nmst_lib.experiments import gpt2 as G
from nmst_lib.experiments import results as R
from nmst_lib.experiments.config import (
    GPT2_CPU_EPS,
    GPT2_FEATURED_EPS,
    PAPER_EPS,
    config_hash,
    make_config,
)
from nmst_lib.experiments.results import CURRENT, MISSING, STALE, StoredResult

REPO = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("one_thread_per_module")


# ------------------------------------------------------------------ synthetic results


def _decoding(lengths, terminated, *, max_len=1000, method="greedy", first_finish=None, contexts=None,
              continuations=None):
    n = len(lengths)
    contexts = contexts or [f" context {i}" for i in range(n)]
    continuations = continuations or [f" continuation {i}" for i in range(n)]
    d = {"decoder": method, "method": "beam" if method.startswith("beam") else method, "max_len": max_len,
         "num_contexts": n, "L": [1, max_len], "rnt": [1.0, sum(not t for t in terminated) / n],
         "lengths": list(lengths), "terminated": list(terminated),
         "examples": [{"index": i, "context": contexts[i], "continuation": continuations[i], "length": lengths[i],
                       "terminated": terminated[i]} for i in range(n)]}
    if first_finish is not None:
        d["first_finish_steps"] = list(first_finish)
    return d


def _trace(i, tokens, p_eos):
    return {"sequence_index": i, "line_number": 10 * i, "context": [" The", " cat"], "continuation": tokens,
            "p_eos": p_eos, "context_text": " The cat", "continuation_text": "".join(tokens)}


def _record(head, eps=None, seed=0, *, val_ppl=100.0, greedy=None, profile="cpu", decoding=None, traces=None):
    rec = {"profile": profile,
           "config": {"profile": profile, "arch": "gpt2", "head": head, "eps": eps, "seed": seed},
           "metrics": {"val_ppl": val_ppl, "test_ppl": val_ppl * 1.1},
           "decoding": {"greedy": greedy or _decoding([5, 7, 1000, 1000], [True, True, False, False])},
           "data_length_histogram": {"values": [3, 5, 8], "counts": [1, 2, 1]},
           "eos_probabilities": traces if traces is not None else
           [_trace(4, [" sat", ".", "<|endoftext|>"], [0.01, 0.02, 0.9])]}
    rec["decoding"].update(decoding or {})
    return rec


def _stored(rec, status=CURRENT):
    return StoredResult(status, Path(f"/x/{rec['config']['head']}.json"), rec, status)


def test_table2_gives_mean_and_sd_over_seeds_and_reads_rnt_from_lengths():
    va0 = _record("va", val_ppl=100, greedy=_decoding([5, 1000, 1000, 1000], [True, False, False, False]))
    va1 = _record("va", seed=1, val_ppl=120, greedy=_decoding([5, 6, 1000, 1000], [True, True, False, False]))
    st = _record("st", 5e-4, val_ppl=130, greedy=_decoding([5, 6, 7, 8], [True] * 4))
    rows = G.gpt2_table2_rows([va0, va1, st])
    assert [r["model"] for r in rows] == ["VA", "ST (eps=5e-04)"]
    va, s = rows
    assert va["seeds"] == 2 and va["val_ppl"] == pytest.approx(110) and va["val_ppl_sd"] == pytest.approx(math.sqrt(200))
    assert va["rnt"] == pytest.approx((0.75 + 0.5) / 2) and va["L"] == 1000
    assert s["rnt"] == 0.0 and s["rnt_sd"] is None and s["val_ppl_sd"] is None
    # at L = 6 the context of length 7 has not stopped yet (r_nt counts |y| > L)
    assert G.gpt2_table2_rows([st], L=6)[0]["rnt"] == pytest.approx(0.5)


def test_builders_leave_out_results_that_are_not_current():
    va = _record("va")
    rows = G.gpt2_table2_rows([_stored(va), _stored(_record("st", 5e-4), STALE),
                               StoredResult(MISSING, Path("/x"), None, "missing")])
    assert [r["model"] for r in rows] == ["VA"]
    assert G.gpt2_table2_rows([]) == [] and G.gpt2_eos_traces([]) == []
    with pytest.raises(TypeError, match="StoredResult"):
        G.gpt2_table2_rows([42])
    with pytest.raises(TypeError, match="results must be StoredResults or result dicts, got int"):
        G.gpt2_table2_rows(7)
    with pytest.raises(ValueError, match="L must be a positive integer"):
        G.gpt2_table2_rows([va], L=0)


def test_table4_reads_beam_from_first_finish_and_keeps_the_featured_eps_only():
    # beam: the returned sequence is 900 tokens long, but a hypothesis finished at step 3
    beam = _decoding([900, 900], [True, True], method="beam-2", first_finish=[3, None])
    top = _decoding([4, 1000], [True, False], method="top-2")
    recs = [_record("va", decoding={"beam-2": beam, "top-2": top}),
            _record("st", 1e-4, decoding={"beam-2": beam}),
            _record("st", 5e-4, decoding={"beam-2": beam, "top-2": top}),
            _record("nmst", 5e-4, decoding={"top-2": top})]
    rows = G.gpt2_table4_rows(recs, L=10)
    assert GPT2_FEATURED_EPS["cpu"] == 5e-4
    assert [r["model"] for r in rows] == ["VA", "ST (eps=5e-04)", "NMST (eps=5e-04)"]
    assert rows[0]["beam-2"] == pytest.approx(0.5)  # not 1.0, which the returned lengths would say
    assert rows[0]["top-2"] == pytest.approx(0.5) and rows[0]["top-4"] is None
    assert rows[2]["beam-2"] is None and rows[2]["L"] == 10
    assert [r["model"] for r in G.gpt2_table4_rows(recs, eps=1e-4)] == ["VA", "ST (eps=1e-04)"]
    with pytest.raises(ValueError, match="several profiles"):
        G.gpt2_table4_rows([_record("va"), _record("st", 5e-4, profile="quick")])


def test_continuations_show_only_contexts_where_va_does_not_stop_side_by_side():
    ctx = [" A", " B", " C"]
    va = _record("va", greedy=_decoding([4, 1000, 1000], [True, False, False], contexts=ctx,
                                         continuations=[" x.", " loop loop", " again again"]))
    st = _record("st", 5e-4, greedy=_decoding([4, 80, 5], [True, True, True], contexts=ctx))
    nm = _record("nmst", 5e-4, greedy=_decoding([4, 9, 6], [True, True, True], contexts=ctx))
    rows = G.gpt2_continuation_rows([va, st, nm])
    assert [(r["example"], r["model"]) for r in rows] == [
        (1, "VA"), (1, "ST (eps=5e-04)"), (1, "NMST (eps=5e-04)"), (2, "VA"), (2, "ST (eps=5e-04)"),
        (2, "NMST (eps=5e-04)")]
    assert rows[0]["continuation"] == " loop loop" and rows[0]["truncated"] and not rows[0]["terminated"]
    assert rows[1]["length"] == 80 and rows[1]["truncated"] and not rows[2]["truncated"]
    assert len(G.gpt2_continuation_rows([va, st, nm], max_contexts=1)) == 3
    assert len(G.gpt2_continuation_rows([va, st, nm], only_va_nonterminating=False)) == 9
    other = _record("st", 5e-4, greedy=_decoding([4, 80, 5], [True] * 3, contexts=[" A", " Z", " C"]))
    with pytest.raises(ValueError, match="another context"):
        G.gpt2_continuation_rows([va, other])
    with pytest.raises(ValueError, match="max_contexts"):
        G.gpt2_continuation_rows([va], max_contexts=0)


def test_continuations_take_the_lowest_va_seed_that_fails_to_stop():
    # VA seed 0 stops everywhere, seed 1 loops on context 1: the paper's choice (contexts where
    # VA does not stop) is met by seed 1, and each row says which seed it shows
    ctx = [" A", " B"]
    va0 = _record("va", greedy=_decoding([4, 6], [True, True], contexts=ctx))
    va1 = _record("va", seed=1, greedy=_decoding([5, 1000], [True, False], contexts=ctx,
                                                  continuations=[" x.", " loop loop"]))
    st0 = _record("st", 5e-4, greedy=_decoding([4, 80], [True, True], contexts=ctx))
    st1 = _record("st", 5e-4, seed=1, greedy=_decoding([3, 9], [True, True], contexts=ctx))
    rows = G.gpt2_continuation_rows([st1, va0, st0, va1])
    assert sorted((r["example"], r["head"], r["seed"]) for r in rows) == [(1, "st", 0), (1, "va", 1)]
    shown = {r["head"]: r for r in rows}
    assert shown["va"]["continuation"] == " loop loop" and shown["st"]["length"] == 80
    # without the rule every model shows its lowest seed
    both = G.gpt2_continuation_rows([va1, va0, st0], only_va_nonterminating=False)
    assert {(r["head"], r["seed"]) for r in both} == {("va", 0), ("st", 0)}
    # no seed of VA fails to stop: nothing meets the rule
    assert G.gpt2_continuation_rows([va0, st0]) == []


def test_a_finished_continuation_is_shown_without_the_eos_token_text():
    ctx = [" A", " B"]
    va = _record("va", greedy=_decoding([3, 1000], [True, False], contexts=ctx,
                                         continuations=[" x.<|endoftext|>", " loop <|endoftext|> loop"]))
    st = _record("st", 5e-4, greedy=_decoding([1, 5], [True, True], contexts=ctx,
                                               continuations=["<|endoftext|>", " y y y y<|endoftext|>"]))
    rows = G.gpt2_continuation_rows([va, st], only_va_nonterminating=False)
    text = {(r["example"], r["model"]): r["continuation"] for r in rows}
    assert text[(0, "VA")] == " x." and text[(0, "ST (eps=5e-04)")] == ""
    assert text[(1, "ST (eps=5e-04)")] == " y y y y"
    # an unfinished continuation is left as generated: the text is the model's, mid-line eos text included
    assert text[(1, "VA")] == " loop <|endoftext|> loop"


def test_welleck_table4_is_va_against_st_at_its_eps_in_percent_at_L500():
    va = _record("va", val_ppl=20, greedy=_decoding([400, 501, 1000, 500], [True, True, False, True]))
    st = _record("st", G.WELLECK_EPS, val_ppl=21, greedy=_decoding([400, 30, 20, 10], [True] * 4))
    other = _record("st", 5e-4, greedy=_decoding([1000] * 4, [False] * 4))
    rows = G.welleck_table4_rows([st, other, va])
    assert [r["model"] for r in rows] == ["VA", "ST (eps=2.5e-03)"] and G.WELLECK_EPS == 2.5e-3
    assert rows[0]["rnt_percent"] == pytest.approx(50.0) and rows[0]["L"] == 500  # 501 and never: > 500
    assert rows[0]["r_L_percent"] == pytest.approx(75.0)  # Welleck's r_L also counts |y| = 500
    assert rows[1]["rnt_percent"] == 0.0 and rows[1]["val_ppl"] == 21 and rows[1]["eps"] == 2.5e-3
    with pytest.raises(ValueError, match="exceeds"):
        G.welleck_table4_rows([va], L=2000)


def test_length_distributions_are_data_then_va_then_st_from_the_same_contexts():
    va = _record("va", greedy=_decoding([9, 4, 1000], [True, True, False]))
    st = _record("st", G.WELLECK_EPS, greedy=_decoding([3, 8, 40], [True, True, True]))
    series = G.gpt2_length_distributions([st, va, _record("nmst", G.WELLECK_EPS)])
    assert [s["label"] for s in series] == ["data", "VA", "ST (eps=2.5e-03)"]
    assert series[0]["lengths"] == [3, 5, 5, 8] and series[0]["not_terminated"] == 0
    assert series[1]["lengths"] == [4, 9] and series[1]["not_terminated"] == 1
    assert series[2]["lengths"] == [3, 8, 40] and series[2]["max_len"] == 1000


def test_eos_traces_put_every_model_on_the_same_readable_tokens():
    tok = [" sat", ".", "<|endoftext|>"]
    va = _record("va", traces=[_trace(4, tok, [0.01, 0.3, 0.5]), _trace(9, [" a", "<|endoftext|>"], [0.1, 0.2])])
    st = _record("st", 5e-4, traces=[_trace(4, tok, [0.02, 0.4, 0.6]), _trace(9, [" a", "<|endoftext|>"], [0.1, 0.3])])
    lines = G.gpt2_eos_traces([va, st])
    assert [l["sequence_index"] for l in lines] == [4, 9]
    assert lines[0]["tokens"] == tok and lines[0]["text"] == " sat.<|endoftext|>" and lines[0]["context_text"] == " The cat"
    assert [m["label"] for m in lines[0]["models"]] == ["VA", "ST (eps=5e-04)"]
    assert lines[0]["models"][1]["p_eos"] == [0.02, 0.4, 0.6] and lines[0]["models"][1]["eps"] == 5e-4
    assert lines[0]["models"][0]["seeds"] == 1 and lines[0]["models"][0]["p_eos_sd"] is None
    # two seeds of a model: mean and sample sd per token (the paper's curve and band)
    va1 = _record("va", seed=1, traces=[_trace(4, tok, [0.03, 0.5, 0.7])])
    two = G.gpt2_eos_traces([va, va1])[0]["models"][0]
    assert two["seeds"] == 2 and two["p_eos"] == pytest.approx([0.02, 0.4, 0.6])
    assert two["p_eos_sd"] == pytest.approx([math.sqrt(2) * 0.01, math.sqrt(2) * 0.1, math.sqrt(2) * 0.1])
    bad = _record("nmst", 5e-4, traces=[_trace(4, [" stood", ".", "<|endoftext|>"], [0.1, 0.2, 0.3])])
    with pytest.raises(ValueError, match="other tokens"):
        G.gpt2_eos_traces([va, bad])
    short = _record("nmst", 5e-4, traces=[_trace(4, tok, [0.1, 0.2])])
    with pytest.raises(ValueError, match="probabilities for 3 tokens"):
        G.gpt2_eos_traces([short])


def test_eps_tradeoff_has_one_series_per_head_sorted_by_eps():
    recs = [_record("va", val_ppl=20), _record("nmst", 5e-4, val_ppl=23), _record("nmst", 1e-4, val_ppl=21),
            _record("st", 1e-4, val_ppl=25, greedy=_decoding([3, 4, 5, 6], [True] * 4))]
    series = {s["label"]: s for s in G.gpt2_eps_tradeoff(recs)}
    assert list(series) == ["VA", "ST", "NMST"]
    assert series["NMST"]["eps"] == [1e-4, 5e-4] and series["NMST"]["val_ppl"] == [21, 23]
    assert series["VA"]["eps"] == [] and series["VA"]["val_ppl"] == [20] and series["ST"]["rnt"] == [0.0]
    assert series["NMST"]["rnt"] == [0.5, 0.5] and series["NMST"]["L"] == 1000


def test_rnt_curves_list_every_model_and_decoder():
    recs = [_record("va", decoding={"top-2": _decoding([4, 1000], [True, False], method="top-2")}),
            _record("nmst", 1e-4)]
    curves = G.gpt2_rnt_curves(recs)
    assert [(c["label"], c["decoder"]) for c in curves] == [("VA", "greedy"), ("VA", "top-2"),
                                                           ("NMST (eps=1e-04)", "greedy")]


def test_model_label_rejects_what_gpt2_does_not_have():
    assert G.model_label("nmst", 1e-5) == "NMST (eps=1e-05)"
    assert G.model_label("st", 2.5e-3) == "ST (eps=2.5e-03)"  # one digit would say 3e-03
    assert [G.eps_text(e) for e in (1e-4, 5e-4, 2.5e-3, 1.25e-5)] == ["1e-04", "5e-04", "2.5e-03", "1.25e-05"]
    for head, eps in (("entmax", None), ("va", 1e-4), ("st", None)):
        with pytest.raises(ValueError):
            G.model_label(head, eps)


# ---------------------------------------------------------------------- suite configs


def test_suite_configs_per_profile():
    quick = G.gpt2_suite_configs("quick")
    assert [(c.head, c.eps) for c in quick] == [("va", None), ("st", 1e-2), ("nmst", 1e-2)]
    assert all(c.arch == "gpt2" and c.seed == 0 for c in quick)
    assert {"beam-2", "beam-4", "ancestral", "top-2", "nucleus-0.4"} <= set(quick[1].decoding.decoders)
    assert {"consistent-top-2", "consistent-nucleus-0.2"} <= set(quick[0].decoding.decoders)
    cpu = G.gpt2_suite_configs("cpu")
    assert GPT2_CPU_EPS == (1e-4, 5e-4, 2.5e-3)
    one_seed = [("va", None)] + [("st", e) for e in GPT2_CPU_EPS] + [("nmst", e) for e in GPT2_CPU_EPS]
    # three seeds, all of seed 0 first; seeds 1-2 decode greedily only (Table 2's spread)
    assert [(c.head, c.eps, c.seed) for c in cpu] == [(h, e, s) for s in (0, 1, 2) for h, e in one_seed]
    assert len({c.key for c in cpu}) == 21 and all(c.profile == "cpu" for c in cpu)
    assert all(c.decoding.decoders == ("greedy",) for c in cpu if c.seed > 0)
    assert all(c.decoding.decode_max_len == 1000 for c in cpu)
    paper = G.gpt2_suite_configs("paper")
    assert len(paper) == 10 * (1 + 2 * len(PAPER_EPS)) + 1 and paper[-1].eps == G.WELLECK_EPS
    assert {c.seed for c in paper} == set(range(10))
    with pytest.raises(ValueError, match="unknown profile"):
        G.gpt2_suite_configs("huge")


def test_gpt2_results_live_in_their_own_folder_and_rnn_results_stay(tmp_path):
    gpt = make_config("cpu", "gpt2", "nmst", 5e-4)
    assert R.result_path(gpt, tmp_path) == tmp_path / "gpt2" / f"{gpt.key}.json"
    lstm = make_config("cpu", "lstm", "nmst", 5e-4)
    assert R.result_path(lstm, tmp_path) == tmp_path / "wikitext2" / f"{lstm.key}.json"
    assert R.load_result(gpt, tmp_path).status == MISSING
    assert R.load_result(gpt, tmp_path).path.parent.name == "gpt2"


# ------------------------------------------------------- readable text in runs.py (display)


class _WordVocab:
    """A word-level vocabulary (Chapter 6): ``decode`` gives words, no ``display``."""

    pad_id = eos_id = 5

    def __len__(self):
        return 6

    def decode(self, ids):
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else ids
        return ["<eos>" if i == 5 else f"w{i}" for i in ids]


class _BpeVocab(_WordVocab):
    """A BPE vocabulary (Chapter 7): raw pieces from ``decode``, readable ones from ``display``."""

    def decode(self, ids):
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else ids
        return ["<|endoftext|>" if i == 5 else f"\u0120p{i}" for i in ids]

    def display(self, ids):
        return [p.replace("\u0120", " ") for p in self.decode(ids)]


def _tiny_lm_and_data(vocab):
    from nmst_lib import data as D
    from nmst_lib.models import build_model

    torch.manual_seed(0)
    model = build_model("lstm", len(vocab), hidden=8, layers=1, dropout=0.0).eval()
    seqs = [[1, 2, 3, 4, 1, 2, 3, 5], [2, 2, 1, 3, 4, 4, 1, 2, 5]]
    data = D.SequenceData(torch.tensor([t for s in seqs for t in s]), torch.tensor([len(s) for s in seqs]), 3, vocab)
    return model, data


def test_word_level_examples_and_traces_are_unchanged_and_bpe_ones_are_readable():
    from nmst_lib.experiments.runs import (
        decode_at_scale,
        eos_probability_traces,
    )

    model, data = _tiny_lm_and_data(_WordVocab())
    ctx = data.contexts(torch.arange(2))
    ex = decode_at_scale(model, ctx, "greedy", max_len=6, vocab=data.vocab)["examples"][0]
    assert ex["context"] == "w1 w2 w3"  # Chapter 6: words joined by spaces, as before
    tr = eos_probability_traces(model, data, 2, min_len=1)[0]
    assert tr["context"] == ["w1", "w2", "w3"] and tr["continuation"] == ["w4", "w1", "w2", "w3", "<eos>"]
    assert "context_text" not in tr and "continuation_text" not in tr
    # the same model and token ids through a BPE vocabulary: readable pieces, no 'Ġ', text concatenated
    model, data = _tiny_lm_and_data(_BpeVocab())
    ex = decode_at_scale(model, ctx, "greedy", max_len=6, vocab=data.vocab)["examples"][0]
    assert ex["context"] == " p1 p2 p3" and "\u0120" not in ex["continuation"]
    tr = eos_probability_traces(model, data, 2, min_len=1)[0]
    assert tr["context"] == [" p1", " p2", " p3"] and tr["continuation"][-1] == "<|endoftext|>"
    assert tr["context_text"] == " p1 p2 p3" and tr["continuation_text"] == " p4 p1 p2 p3<|endoftext|>"
    assert len(tr["p_eos"]) == len(tr["continuation"])


# ------------------------------------------------------------------------------------ CLI


def test_cli_gpt2_dry_run_lists_the_models_and_their_status(tmp_path, capsys):
    assert cli.main(["gpt2", "--profile", "cpu", "--dry-run", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == [c.key for c in G.gpt2_suite_configs("cpu")]
    assert all(line.split()[1] == "MISSING" for line in lines)
    assert cli.main(["gpt2", "--profile", "cpu", "--dry-run", "--only", "nmst", "--out", str(tmp_path)]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 9  # three eps, three seeds
    assert cli.main(["gpt2", "--profile", "cpu", "--dry-run", "--only", "lstm", "--out", str(tmp_path)]) == 2
    assert "no model of the cpu GPT-2 suite" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["gpt2", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse re-wraps the description
    for option in ("--profile", "--only", "--force", "--dry-run", "--nproc", "--threads", "--out", "NOT pretrained"):
        assert option in text


def test_cli_gpt2_nproc_relaunches_itself_under_torchrun_without_nproc(tmp_path, monkeypatch):
    from nmst_lib.experiments import distributed

    calls = []
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(distributed, "relaunch_with_torchrun", lambda n, args: calls.append((n, args)) or 0)
    assert cli.main(["gpt2", "--profile", "quick", "--only", "nmst", "--nproc", "2", "--out", str(tmp_path),
                     "--threads", "1", "--no-progress", "--force"]) == 0
    assert calls == [(2, ["gpt2", "--profile", "quick", "--only", "nmst", "--out", str(tmp_path), "--threads", "1",
                          "--force", "--no-progress"])]
    assert distributed.torchrun_command(2, calls[0][1])[-len(calls[0][1]) - 2:] == ["-m", "nmst_lib", *calls[0][1]]
    assert cli.main(["gpt2", "--profile", "quick", "--nproc", "0", "--out", str(tmp_path)]) == 2


# ------------------------------------------------------------ a real quick-profile suite


@pytest.fixture(scope="module")
def quick_gpt2(tmp_path_factory):
    """The quick GPT-2 suite (VA, ST, NMST at eps 1e-2; 2 x 32 GPT-2 from scratch; every decoder)
    trained and decoded once, on the fixture corpus with GPT-2's real tokenizer (a data root made
    of both). Skips when the real tokenizer files are not configured."""
    from datasources import (
        NO_REAL_TOKENIZER,
        REAL_TOKENIZER_DIR,
        fixture_data_root,
        use_data_root,
    )

    if REAL_TOKENIZER_DIR is None:
        pytest.skip(NO_REAL_TOKENIZER)
    base = tmp_path_factory.mktemp("gpt2")
    with pytest.MonkeyPatch.context() as mp:
        use_data_root(mp, fixture_data_root(base, REAL_TOKENIZER_DIR))
        results = G.run_gpt2_suite("quick", results_dir=base / "results", checkpoint_dir=base / "ckpt", progress=False)
        yield base, results


def test_quick_suite_end_to_end_writes_every_model_with_provenance(quick_gpt2):
    base, results = quick_gpt2
    configs = G.gpt2_suite_configs("quick")
    assert [r.status for r in results] == [CURRENT] * 3
    for stored, config in zip(results, configs):
        d = json.loads(stored.path.read_text())
        assert stored.path == base / "results" / "gpt2" / f"{config.key}.json"
        assert d["key"] == config.key and d["config_hash"] == config_hash(config) and d["config"]["arch"] == "gpt2"
        prov = d["provenance"]
        for key in ("git_sha", "git_dirty", "torch", "device", "date_utc", "wall_seconds", "command", "train_seconds"):
            assert key in prov, key
        assert prov["train_seconds"] > 0 and prov["wall_seconds"] >= prov["train_seconds"]
        assert d["data"]["vocabulary"]["size"] == 50257 and d["data"]["extra"]["is_wikitext103"] is False
        assert "detokenised" in d["data"]["source"]
        assert math.isfinite(d["metrics"]["val_ppl"]) and d["metrics"]["epochs_run"] >= 1
        # every decoder, beam and the consistent variants included, decoded to L = 40
        assert set(d["decoding"]) == set(config.decoding.decoders) >= set(G.TABLE4_DECODERS) | {"greedy", "ancestral"}
        for name, dec in d["decoding"].items():
            assert dec["max_len"] == 40 and len(dec["lengths"]) == dec["num_contexts"] == 16
            assert all(a >= b for a, b in zip(dec["rnt"], dec["rnt"][1:]))
            for ex in dec["examples"]:  # readable text, not byte-level BPE symbols
                assert "\u0120" not in ex["context"] + ex["continuation"] and ex["context"].startswith(" ")
        for tr in d["eos_probabilities"]:
            assert tr["continuation"][-1] == "<|endoftext|>" and len(tr["p_eos"]) == len(tr["continuation"])
            assert tr["continuation_text"] == "".join(tr["continuation"]) and "\u0120" not in tr["context_text"]
            if config.eps is not None:  # ST/NMST: p(eos) never below the lower bound 1 - (1 - eps)^t
                lb = [1 - (1 - config.eps) ** t for t in range(1, len(tr["p_eos"]) + 1)]
                assert all(p >= b * (1 - 1e-5) for p, b in zip(tr["p_eos"], lb))
    assert {"consistent-top-2", "consistent-nucleus-0.2"} <= set(results[0].data["decoding"])


def test_a_current_result_is_loaded_not_rerun(quick_gpt2, monkeypatch, capsys):
    from nmst_lib.experiments import runs

    base, results = quick_gpt2
    boom = lambda *a, **k: pytest.fail("re-ran a current result")  # noqa: E731
    monkeypatch.setattr(runs, "run_experiment", boom)
    monkeypatch.setattr(runs, "train", boom)  # the gpt2 family's run (run_experiment) trains through it
    config = G.gpt2_suite_configs("quick")[2]
    assert runs.load_or_run(config, results_dir=base / "results").status == CURRENT
    again = G.run_gpt2_suite("quick", results_dir=base / "results", checkpoint_dir=base / "ckpt", progress=False,
                             log=print)
    assert [r.data["provenance"]["date_utc"] for r in again] == [r.data["provenance"]["date_utc"] for r in results]
    assert capsys.readouterr().out.count("current, skipped") == 3
    loaded = G.load_gpt2_results("quick", results_dir=base / "results")
    assert [r.status for r in loaded] == [CURRENT] * 3
    assert [r.status for r in G.load_gpt2_results("quick", results_dir=base / "nowhere")] == [MISSING] * 3
    stale = G.gpt2_suite_configs("quick")[0].replace(decode_max_len=41)
    assert runs.load_or_run(stale, results_dir=base / "results", run=False).status == STALE


def test_builders_on_the_real_quick_results(quick_gpt2):
    _, results = quick_gpt2
    t2 = G.gpt2_table2_rows(results)
    assert [r["model"] for r in t2] == ["VA", "ST (eps=1e-02)", "NMST (eps=1e-02)"]
    assert all(r["L"] == 40 and 0 <= r["rnt"] <= 1 and r["val_ppl"] > 1 and r["num_contexts"] == 16 for r in t2)
    assert t2[0]["rnt"] == results[0].data["decoding"]["greedy"]["rnt"][-1]
    t4 = G.gpt2_table4_rows(results)
    assert len(t4) == 3 and all(0 <= r[d] <= 1 for r in t4 for d in G.TABLE4_DECODERS)
    rows = G.gpt2_continuation_rows(results, only_va_nonterminating=False, max_contexts=2)
    assert [r["model"] for r in rows] == ["VA", "ST (eps=1e-02)", "NMST (eps=1e-02)"] * 2
    assert len({r["context"] for r in rows}) == 2
    nonterm = G.gpt2_continuation_rows(results, max_contexts=None)
    va_open = sum(not t for t in results[0].data["decoding"]["greedy"]["terminated"][:8])
    assert len(nonterm) == 3 * va_open
    w = G.welleck_table4_rows(results, eps=1e-2, L=20)
    assert [r["model"] for r in w] == ["VA", "ST (eps=1e-02)"] and all(0 <= r["rnt_percent"] <= 100 for r in w)
    series = G.gpt2_length_distributions(results, eps=1e-2)
    assert [s["label"] for s in series] == ["data", "VA", "ST (eps=1e-02)"]
    assert series[0]["num_contexts"] == 16 and all(len(s["lengths"]) + s["not_terminated"] == 16 for s in series)
    lines = G.gpt2_eos_traces(results)
    assert lines and all(len(line["models"]) == 3 for line in lines)
    assert all(len(m["p_eos"]) == len(line["tokens"]) for line in lines for m in line["models"])
    trade = G.gpt2_eps_tradeoff(results)
    assert [s["label"] for s in trade] == ["VA", "ST", "NMST"] and trade[2]["eps"] == [1e-2]
    curves = G.gpt2_rnt_curves(results)
    assert len(curves) == sum(len(r.data["decoding"]) for r in results)
    from nmst_lib.report import html_table

    ended = [r for r in rows if r["terminated"] and not r["truncated"]]
    assert ended and not any("<|endoftext|>" in r["continuation"] for r in ended)  # shown as words only
    stored = [ex for res in results for ex in res.data["decoding"]["greedy"]["examples"]
              if ex["terminated"] and ex["length"] <= G.EXAMPLE_TOKENS]
    assert stored and all(ex["continuation"].endswith("<|endoftext|>") for ex in stored)  # the record keeps it
    page = str(html_table(stored, text_columns=("context", "continuation")))
    assert "&lt;|endoftext|&gt;" in page and "<|endoftext|>" not in page  # model text is escaped on a page


# ------------------------------------------------------------------ the committed cpu results


def test_committed_cpu_results_are_current_and_made_by_committed_code():
    """The cpu results Chapter 7 shows ship in nmst_lib/published_results/gpt2: every seed-0 model
    of the cpu suite and its later seeds as they land (issue 23), CURRENT for today's configs, from
    a clean checkout by the gpt2 command, decoded to L = 1,000, with readable text; the builders
    give the chapter's tables from them, one row per model."""
    every = G.load_gpt2_results("cpu", results_dir=R.published_results_dir())
    assert all(s.status == CURRENT for s in every if s.path.stem.endswith("-seed0")), [s.message for s in every]
    assert all(s.status in (CURRENT, MISSING) for s in every), [s.message for s in every]
    stored = [s for s in every if s.status == CURRENT]
    for s in stored:
        prov = s.data["provenance"]
        assert len(prov["git_sha"]) == 40 and prov["git_dirty"] is False and "gpt2" in prov["command"]
        assert s.data["decoding"]["greedy"]["max_len"] == 1000 and s.data["data"]["vocabulary"]["size"] == 50257
        for ex in s.data["decoding"]["greedy"]["examples"]:
            assert "\u0120" not in ex["context"] + ex["continuation"]
    t2 = G.gpt2_table2_rows(stored)
    assert len(t2) == 7 and all(r["L"] == 1000 and 0 <= r["rnt"] <= 1 and r["val_ppl"] > 1 for r in t2)
    t4 = G.gpt2_table4_rows(stored)
    assert [r["model"] for r in t4] == ["VA", "ST (eps=5e-04)", "NMST (eps=5e-04)"]
    assert all(r[d] is not None for r in t4 for d in G.TABLE4_DECODERS)
    assert [r["model"] for r in G.welleck_table4_rows(stored)] == ["VA", "ST (eps=2.5e-03)"]
    assert all(len(line["models"]) == 7 for line in G.gpt2_eos_traces(stored))
