#!/usr/bin/env bash
# GPU checks for a machine with CUDA: the CUDA tests (tests/test_gpu.py), then training
# throughput of the base and small shapes in bf16 / fp16 / fp32 (benchmarks/speed/train_speed.py).
# Usage: benchmarks/gpu/run_checks.sh [OUT_DIR]
#   TRANSFORMER_MT_DATA: the shared data folder (multi30k/*.gz) for the tests;
#   DATA: a prepared Multi30k data directory for the throughput runs.
set -uo pipefail
OUT=${1:-${OUT:-/tmp/gpu-checks}}
mkdir -p "$OUT"
REPO=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH=$REPO/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export TRANSFORMER_MT_DATA=${TRANSFORMER_MT_DATA:-$REPO/../shared/data}
DATA=${DATA:-$REPO/runs/multi30k-en-de/data}
cd "$REPO"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  git rev-parse --short HEAD 2>/dev/null; } | tee "$OUT/machine.txt"
timeout 300 python3 -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider 2>&1 \
  | tee "$OUT/gpu_tests.log"
for spec in "base bf16 4096" "base bf16 25000" "base fp16 25000" "base fp32 25000" \
            "small bf16 4096" "small bf16 25000"; do
  set -- $spec
  timeout 150 python3 benchmarks/speed/train_speed.py --data "$DATA" --device cuda --shape "$1" \
    --dtype "$2" --max-tokens "$3" --warmup 5 --steps 20 | tee -a "$OUT/train_throughput.jsonl"
done
