#!/usr/bin/env bash
# train.compile on a CUDA machine, in the order that matters if time runs out: base-shape bf16
# training throughput eager vs compiled (25k-token batches), the CUDA tests (compiled step equal
# to eager, training learns and resumes, compiled too), HF Marian at 25k, the three at 4k-token
# batches, then beam-4 / greedy decoding of ours against HF generate on the same GPU.
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
train_speed 25000 ours
train_speed 25000 ours --compile
timeout 300 python3 -m pytest -q -m gpu tests/test_gpu.py tests/test_train.py \
  -p no:cacheprovider 2>&1 | grep -v DEBUG | tee "$OUT/gpu_tests.log"
train_speed 25000 marian
for engine in "ours" "ours --compile" "marian"; do
  train_speed 4096 $engine
done
for engine in ours marian; do
  timeout 150 python3 benchmarks/speed/decode_speed.py --data "$DATA" --device cuda \
    --engine "$engine" --shape base --dtype bf16 2>>"$OUT/stderr.log" \
    | tee -a "$OUT/decode.jsonl"
done
