#!/usr/bin/env bash
# The parser that reads its sentence (benchmarks/results/parsing-prenorm-words-long): run.sh
# with the parsing-cpu preset, the words as slots (SLOTS=words) and pre-norm layers
# (--model.norm_first; the paper's post-norm layers do not learn to read the sentence here,
# benchmarks/results/parsing-which-models-read), 4,000 steps of 4,096-token batches, warmup 500,
# the rate cooled down linearly to 0 over the last 1,000 steps with 5 checkpoints in them, and
# the checkpoint from step 2,000 on that parses dev best (SELECT_FROM). About 3 hours of training
# on one Zen 3 core, then the parses (one dev parse per checkpoint).
#   benchmarks/parsing/recipe.sh [OUT_DIR]      (default runs/parse-reading)
# TRAIN_ARGS are added after the recipe's (a later override wins), e.g. --train.threads=1.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
RECIPE="--train.max_steps=4000 --train.warmup_steps=500 --train.valid_every=500 --train.save_every=500 \
--train.keep_last=20 --train.lr_cooldown_share=0.25 --train.cooldown_saves=5 --model.norm_first=true"
SLOTS=words SELECT_FROM=${SELECT_FROM:-2000} TRAIN_ARGS="$RECIPE ${TRAIN_ARGS:-}" \
  exec "$HERE/run.sh" 0 "${1:-$HERE/../../runs/parse-reading}"
