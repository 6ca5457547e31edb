#!/usr/bin/env bash
# Issue 61's equal-step comparisons on one GPU, every run at once (small models: dozens fit on
# one H200): post- against pre-norm at Transformer-tiny's shape (the recipe's dropout 0.3) and
# at Table 3's base shape scaled to d_model 128 (base6, the paper's P_drop 0.1), 3 seeds each,
# 4,000 steps ending with the recipe's cooldown, then the table and curves per shape. On a CPU
# the same runs take ~48 minutes per pair of cores (benchmarks/multi30k/norm_at_equal_steps.sh).
# Resumable.
#   benchmarks/gpu/postnorm_sweep.sh DATA_DIR OUT [STEPS] [SEEDS]
# DATA_DIR: a prepared Multi30k en-de directory (the quickstart's prepare --config multi30k).
set -euo pipefail
DATA=$1 OUT=$2 STEPS=${3:-4000} SEEDS=${4:-"1 2 3"}
HERE=$(cd "$(dirname "$0")/.." && pwd)
export DEVICE=${DEVICE:-cuda}
for shape in tiny base6; do
  "$HERE/multi30k/norm_at_equal_steps.sh" "$DATA" "$OUT/$shape" "$shape" "$STEPS" "$SEEDS" &
done
wait
for shape in tiny base6; do
  python3 "$HERE/multi30k/curves_at_steps.py" "$OUT/$shape" --steps 500 1000 2000 3000 3500 4000 \
    --json "$OUT/$shape/results.json" --plot "$OUT/$shape/curves.png" > "$OUT/$shape/table.md"
done
cat "$OUT"/*/table.md
