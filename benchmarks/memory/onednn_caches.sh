#!/usr/bin/env bash
# The measurement in benchmarks/results/bf16-memory-bounded: the Multi30k tiny recipe for 160
# steps, one thread, two runs at a time, bf16 under different capacities of oneDNN's primitive
# cache and ideep's computation cache (hardware/onednn.py), and fp32; rss_mib every 20 steps.
# Usage: benchmarks/memory/onednn_caches.sh DATA_DIR [OUT_DIR]
set -euo pipefail
DATA=$1; OUT=${2:-/tmp/mem}
ARGS=(--config benchmarks/multi30k/multi30k-tiny-prenorm.yaml --data "$DATA" --train.max_minutes=0
      --train.max_steps=160 --train.threads=1 --train.log_every=20 --train.valid_every=100000
      --train.save_every=100000)
run() {  # NAME ONEDNN LRU BF16
  env ONEDNN_PRIMITIVE_CACHE_CAPACITY="$2" LRU_CACHE_CAPACITY="$3" python -m transformer_mt train \
    "${ARGS[@]}" --train.bf16="$4" --run-dir "$OUT/$1" > "$OUT/$1.log" 2>&1
}
mkdir -p "$OUT"
run bf16 1024 1024 true & run cache0 0 1024 true & wait    # torch's capacities; oneDNN's off
run fp32 1024 1024 false & run cache64 64 1024 true & wait
run both 0 1 true & run lru1 1024 1 true & wait
run both256 256 256 true & run both32 32 32 true & wait
