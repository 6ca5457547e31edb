#!/usr/bin/env bash
# train.compile on a CUDA machine, in the order that matters if time runs out: base-shape bf16
# training throughput eager vs compiled against HF Marian (25k- then 4k-token batches), the
# CUDA tests (compiled step equal to eager, compiled bf16 training learns and resumes), then
# beam-4 / greedy decoding of ours against HF generate on the same GPU.
# Usage: benchmarks/gpu/compile_checks.sh [OUT_DIR]
#   TRANSFORMER_MT_DATA: the shared data folder (multi30k/*.gz) for the tests;
#   DATA: a prepared Multi30k data directory for the throughput runs.
set -uo pipefail
OUT=${1:-${OUT:-/tmp/gpu-compile}}
mkdir -p "$OUT"
REPO=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH=$REPO/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export TRANSFORMER_MT_DATA=${TRANSFORMER_MT_DATA:-$REPO/../shared/data}
DATA=${DATA:-$REPO/runs/multi30k-en-de/data}
cd "$REPO"
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda',
torch.version.cuda, 'transformers', transformers.__version__)"
  git rev-parse --short HEAD 2>/dev/null; } | tee "$OUT/machine.txt"
train_speed() {  # TOKENS ENGINE [--compile]
  timeout 200 python3 benchmarks/speed/train_speed.py --data "$DATA" --device cuda \
    --shape base --dtype bf16 --max-tokens "$1" --engine "$2" "${@:3}" --warmup 8 --steps 20 \
    2>>"$OUT/stderr.log" | tee -a "$OUT/train_throughput.jsonl"
}
for tokens in 25000 4096; do
  train_speed "$tokens" ours
  train_speed "$tokens" ours --compile
  train_speed "$tokens" marian
done
timeout 300 python3 -m pytest -q -m gpu tests/test_gpu.py tests/test_train.py \
  -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log"
for engine in ours marian; do
  timeout 150 python3 benchmarks/speed/decode_speed.py --data "$DATA" --device cuda \
    --engine "$engine" --shape base --dtype bf16 2>>"$OUT/stderr.log" \
    | tee -a "$OUT/decode.jsonl"
done
