#!/usr/bin/env bash
# GPU checks for a machine with CUDA, in the order that matters if the device time runs out:
# base-shape bf16 training throughput, eager vs compiled (train.compile) vs compiled into CUDA
# graphs over 8 shape buckets (train.compile=cuda_graphs, train.shape_buckets=8) vs HF Marian, on
# 25k-token batches; the CUDA tests (tests/test_gpu.py and the CUDA cases of tests/test_train.py);
# the same three on 4k-token batches; beam-4 / greedy decoding of ours against HF generate; then
# the other precisions and the small shape (benchmarks/speed/train_speed.py, decode_speed.py).
# Usage: benchmarks/gpu/run_checks.sh [OUT_DIR]
#   TRANSFORMER_MT_DATA: the shared data folder (multi30k/*.gz) for the tests;
#   DATA: a prepared Multi30k data directory for the throughput runs.
# A compiled run spends its first steps compiling: give the whole script 10 minutes or more.
set -uo pipefail
OUT=${1:-${OUT:-/tmp/gpu-checks}}
mkdir -p "$OUT"
REPO=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH=$REPO/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export TRANSFORMER_MT_DATA=${TRANSFORMER_MT_DATA:-$REPO/../shared/data}
DATA=${DATA:-$REPO/runs/multi30k-en-de/data}
cd "$REPO"
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda',
torch.version.cuda, 'transformers', transformers.__version__)"
  git rev-parse --short HEAD 2>/dev/null  # stale on the lent machines: the digest names the code
  (cd benchmarks/speed && python3 -c "from engines import source_digest as d; print('source', d())")
} | tee "$OUT/machine.txt"
train_speed() {  # SHAPE DTYPE TOKENS ENGINE [--compile [cuda_graphs] --shape-buckets N]
  timeout 300 python3 benchmarks/speed/train_speed.py --data "$DATA" --device cuda \
    --shape "$1" --dtype "$2" --max-tokens "$3" --engine "$4" "${@:5}" --warmup 8 --steps 20 \
    2>>"$OUT/stderr.log" | tee -a "$OUT/train_throughput.jsonl"
}
train_speed base bf16 25000 ours
train_speed base bf16 25000 ours --compile cuda_graphs --shape-buckets 8
train_speed base bf16 25000 ours --compile
train_speed base bf16 25000 marian
timeout 400 python3 -m pytest -q -m gpu tests/test_gpu.py tests/test_train.py \
  -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1
tail -3 "$OUT/gpu_tests.log"
for engine in "ours" "ours --compile" "marian"; do
  train_speed base bf16 4096 $engine
done
for engine in ours marian; do
  timeout 150 python3 benchmarks/speed/decode_speed.py --data "$DATA" --device cuda \
    --engine "$engine" --shape base --dtype bf16 2>>"$OUT/stderr.log" \
    | tee -a "$OUT/decode.jsonl"
done
for spec in "base fp16 25000" "base fp32 25000" "small bf16 4096" "small bf16 25000"; do
  train_speed $spec ours
done
