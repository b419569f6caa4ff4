#!/usr/bin/env bash
# Issue 23's compute plan for Chapter 6's `cpu` profile: every model trained to convergence
# (early stopping fires) on a subword vocabulary, in the order that gives every chapter the most
# as results land: one seed of every configuration first (LSTM, then RNN; VA and the featured
# eps = 5e-4 first), then seeds 1 and 2. Each run resumes from its checkpoint, so the script can be
# stopped and started again; a config whose result is already in OUT is skipped.
#
#   bash scripts/converge_cpu.sh OUT_DIR CHECKPOINT_DIR [SEEDS...]     (default seeds: 0 1 2)
#
# The recipe is the cpu profile's own for Chapter 6 (nmst_lib.experiments.config.CONVERGED_CPU_RECIPE;
# tests/test_suite_overrides.py checks the two agree), so for Chapter 6 the --set overrides below
# change nothing; Chapters 8 and 9 train by recipes that add one field each to these
# (nmst_lib.experiments.config.EPS_PPL_CPU_RECIPE, UNIGRAM_HOLD_CPU_RECIPE), which their suites apply:
#   vocab_kind=bpe vocab_cap=$VOCAB   subword pieces learned on the training split (nmst_lib.data.subwords)
#   drop_unk=true   WikiText's own <unk> markers deleted from every split first (nmst_lib.data.drop_unk_markers):
#       with them kept, greedy search wrote <unk> in 50 % of its output even with subword pieces
#       (pending_results/measuring/unk-kept/)
#   patience=$PATIENCE min_improvement=$MIN_IMPROVEMENT max_epochs=$CAP
#       a plateau rule after Choi et al. App. D (who halve the lr after an epoch without improvement
#       and stop after 10), with our threshold and patience: an epoch that does not lower the validation
#       perplexity by more than 0.5 % halves the lr, two such epochs in a row stop training. Measured first
#       with min_improvement 0 and a cap of 40 (pending_results/measuring/cap40/): the LSTM VA model
#       still gained 0.02-0.7 % per epoch at epoch 40, so early stopping never fired; on that
#       curve this rule stops at about epoch 28, and the cap of 60 leaves room for the slower heads.
# One thread per run: a 2-core machine runs two of these scripts side by side, on different SEEDS
# or on different architectures (ARCHS="lstm" in one, ARCHS="rnn" in the other; default both).
#
# Chapters 8 and 9 follow Chapter 6's recipe (the same --set fields, applied by the suite to every
# model on top of its own settings; nmst_lib.experiments.config.suite_overrides):
#   FAMILY=sparse bash scripts/converge_cpu.sh OUT_DIR CHECKPOINT_DIR        (Chapter 8, 4 models)
#   FAMILY=temperature ONLY=KEY[,KEY] bash scripts/converge_cpu.sh OUT_DIR CHECKPOINT_DIR   (Chapter 9)
# Chapter 9 adds start_below_unigram=$UNIGRAM_HOLD (nmst_lib.experiments.config.UNIGRAM_HOLD_CPU_RECIPE):
# the plateau rule waits until validation perplexity is below 90 % of the unigram model's, because a
# contextual-temperature model starts at temperature 3 and by the rule alone stopped on the unigram
# plateau at epoch 3 (pending_results/measuring/ct-plateau/).
# Chapter 8 adds select_on=eps_ppl (nmst_lib.experiments.config.EPS_PPL_CPU_RECIPE): its entmax models'
# epochs are compared by validation epsilon-perplexity, a perplexity, so that the 0.5 % rule means for
# them what it means for a softmax model; by the mean entmax loss (which spans about 0.15 nats from a
# uniform model to a trained one) the entmax-1.5 model stopped at epoch 8 while still improving
# (pending_results/measuring/entmax-loss-rule/).
# Chapter 8's softmax model is Chapter 6's LSTM VA seed 0 (same training hash; the suite gives it no
# select_on): with the same CHECKPOINT_DIR it is evaluated, not trained again.
#
# Chapter 7's GPT-2 models (FAMILY=gpt2, 7 models) have no vocabulary to choose (GPT-2's own BPE) and
# their own recipe, the GPT-2 cpu profile's since Chapter 7 switched (GPT2_CONVERGED_CPU_RECIPE, so for
# them too the overrides change nothing), measured on the VA model (pending_results/measuring/): the first editions' 150k
# training tokens ran out at epoch 3 (validation perplexity rose from epoch 4, best 458.3), so the
# whole substitute training split (max_train_tokens=null, 405,458 tokens); WikiText's <unk> markers
# deleted before detokenising (drop_unk=true; with them kept every greedy continuation was a loop of
# <unk>); at most $GPT2_CAP epochs, over which the linear lr decay is spread; the same 0.5 % rule.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then echo "usage: bash scripts/converge_cpu.sh OUT_DIR CHECKPOINT_DIR [SEEDS...]" >&2; exit 2; fi
out=$1; ckpt=$2; shift 2
if [ $# -gt 0 ]; then seeds=("$@"); else seeds=(0 1 2); fi
if [ -z "${NMST_DATA_DIR:-}" ] && [ -d ../shared/data ]; then export NMST_DATA_DIR="$(cd ../shared/data && pwd)"; fi
PY=${PYTHON:-.venv/bin/python}
VOCAB=4000 CAP=60 PATIENCE=2 MIN_IMPROVEMENT=0.005 UNIGRAM_HOLD=0.9 GPT2_CAP=30
recipe=(--set vocab_kind=bpe --set vocab_cap=$VOCAB --set drop_unk=true --set max_epochs=$CAP --set patience=$PATIENCE
        --set min_improvement=$MIN_IMPROVEMENT)
if [ "${FAMILY:-}" = temperature ]; then recipe+=(--set start_below_unigram=$UNIGRAM_HOLD); fi
if [ "${FAMILY:-}" = sparse ]; then recipe+=(--set select_on=eps_ppl); fi
if [ "${FAMILY:-}" = gpt2 ]; then
  recipe=(--set max_train_tokens=null --set drop_unk=true --set max_epochs=$GPT2_CAP --set patience=$PATIENCE
          --set min_improvement=$MIN_IMPROVEMENT)
fi
if [ -n "${FAMILY:-}" ] && [ "$FAMILY" != wikitext2 ]; then
  exec "$PY" -m nmst_lib suite "$FAMILY" --profile cpu "${recipe[@]}" ${ONLY:+--only "$ONLY"} --threads 1 \
    --no-progress --out "$out" --checkpoint-dir "$ckpt"
fi
runs=("va -" "nmst 5e-4" "st 5e-4" "nmst 1e-4" "st 1e-4")
key_of() { echo "cpu-$1-$2$([ "$3" = - ] || echo "-eps$3")-bpe$((VOCAB / 1000))k-nounk-seed$4"; }
total=0
for seed in "${seeds[@]}"; do for arch in ${ARCHS:-lstm rnn}; do for run in "${runs[@]}"; do
  read -r head eps <<<"$run"; [ -f "$out/wikitext2/$(key_of "$arch" "$head" "$eps" "$seed").json" ] || total=$((total + 1))
done; done; done
started=$(date +%s); finished=0
echo "[plan] $total runs to go in this lane"
for seed in "${seeds[@]}"; do
  for arch in ${ARCHS:-lstm rnn}; do
    for run in "${runs[@]}"; do
      read -r head eps <<<"$run"
      key=$(key_of "$arch" "$head" "$eps" "$seed")
      if [ -f "$out/wikitext2/$key.json" ]; then echo "[plan] $key: done"; continue; fi
      echo "[plan] $key: $(date -u +%H:%M:%S) start"
      "$PY" -m nmst_lib run --profile cpu --arch "$arch" --head "$head" $([ "$eps" = - ] || echo "--eps $eps") \
        --seed "$seed" "${recipe[@]}" --threads 1 --no-progress --out "$out" --checkpoint-dir "$ckpt"
      finished=$((finished + 1)); spent=$(( $(date +%s) - started ))
      echo "[plan] $key: $(date -u +%H:%M:%S) done; $finished/$total in $((spent / 60)) min, about" \
           "$(( spent * (total - finished) / finished / 60 )) min left (the mean of this lane's runs so far)"
    done
  done
done
