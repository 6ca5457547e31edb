#!/usr/bin/env bash
# The first sweep (benchmarks/results/multi30k-recipe-sweep-gpu/README.md): seven Multi30k en->de recipes
# at the step counts the 2-core CPU fits in ~85 minutes (small: ~4,500; tiny: ~8,000), at once
# on one GPU, through gpu_variants.sh. Usage: OUT=DIR benchmarks/multi30k/gpu_sweep.sh
B=benchmarks/multi30k
VALID_EVERY=${VALID_EVERY:-1000} exec "$(dirname "$0")/gpu_variants.sh" \
  "tiny-cased cased $B/multi30k-tiny.yaml 8000" "tiny-lc lc $B/multi30k-tiny.yaml 8000" \
  "small-cased cased $B/multi30k.yaml 4500" "small-lc lc $B/multi30k.yaml 4500" \
  "small-cased-lr1 cased $B/multi30k.yaml 4500 --train.lr_scale=1.0" \
  "small-lc-lr1 lc $B/multi30k.yaml 4500 --train.lr_scale=1.0" \
  "tiny-cased-12k cased $B/multi30k-tiny.yaml 12000"
