#!/usr/bin/env bash
# Parse a parsing run's dev and test sentences with MODEL and score them as EVALB does:
# OUT/{valid,test}.NAME.parsed, .scores.json (EVALB's summaries and the strict one) and .log
# (the repairs). SLOTS and REVERSE as given to run.sh; options after NAME go to `parse trees`;
# SPLITS="valid" parses dev only (default: valid test).
# Usage: benchmarks/parsing/parse_splits.sh OUT MODEL NAME [--word-slots] [--balanced] ...
set -euo pipefail
OUT=$1 MODEL=$2 NAME=$3
shift 3
for split in ${SPLITS:-valid test}; do
  transformer-mt parse trees --model "$MODEL" --input "$OUT/corpus/$split.words" \
    --output "$OUT/$split.$NAME.parsed" ${SLOTS:+--slots "$SLOTS"} ${REVERSE:+--reverse} "$@" \
    2>&1 | tee "$OUT/$split.$NAME.log"
  transformer-mt parse score --gold "$OUT/corpus/$split.gold" --test "$OUT/$split.$NAME.parsed" \
    --json "$OUT/$split.$NAME.scores.json" | grep -E "^(-- |f1 )"
done
