#!/usr/bin/env bash
# Every engine side by side on this machine, each configuration in its own process, RUNS times;
# then report.py writes results.json and README.md beside the raw JSONL.
# Usage: benchmarks/speed/run.sh DATA_DIR [OUT_DIR] [RUNS] [SHAPES] [PARTS]
#   e.g. benchmarks/speed/run.sh runs/multi30k-en-de/data benchmarks/results/archive/speed 3 "small base"
#   PARTS: "train decode" (default), or one of them
#   TRAIN_SPECS / DECODE_SPECS (environment, ";"-separated) replace the engine lists below,
#   e.g. TRAIN_SPECS="ours fp32;marian fp32"
#   fairseq specs (e.g. "fairseq fp32") run with $FAIRSEQ_PYTHON, the Python of the environment
#   that benchmarks/speed/fairseq_env.sh makes (default .venv-fairseq/bin/python)
# DATA_DIR: Multi30k en-de prepared with an 8k vocabulary (benchmarks/multi30k/run.sh makes one).
set -euo pipefail
DATA=$1
OUT=${2:-benchmarks/results/archive/speed}
RUNS=${3:-3}
SHAPES=${4:-small base}
PARTS=${5:-train decode}
HERE=$(cd "$(dirname "$0")" && pwd)
FAIRSEQ_PYTHON=${FAIRSEQ_PYTHON:-$HERE/../../.venv-fairseq/bin/python}
python_for() { if [ "$1" = fairseq ]; then echo "$FAIRSEQ_PYTHON"; else echo python3; fi; }
mkdir -p "$OUT/raw"
export PYTHONWARNINGS=ignore TRANSFORMERS_VERBOSITY=error
GIB=1073741824
IFS=";" read -ra train_specs <<< "${TRAIN_SPECS:-ours fp32;ours bf16;marian fp32;marian bf16;torch fp32;torch bf16;ours fp32 default;ours bf16 default;marian fp32 tuned;marian bf16 tuned;torch fp32 tuned;torch bf16 tuned}"
# CTranslate2 with each matrix backend (MKL, oneDNN): the comparison takes its faster one
IFS=";" read -ra decode_specs <<< "${DECODE_SPECS:-ours fp32;ours bf16;ours auto;ours int8;ours int8row;marian fp32;marian bf16;ct2 fp32 mkl;ct2 fp32 onednn;ct2 int8 mkl;ct2 int8 onednn;torch fp32}"
for run in $(seq 1 "$RUNS"); do
  for shape in $SHAPES; do
    for spec in "${train_specs[@]}"; do
      [[ " $PARTS " == *" train "* ]] || break
      set -- $spec
      # controls: ours with glibc's default malloc, peers with ours' thresholds (malloc_tuning.py)
      case "${3:-}" in
        tuned) MALLOC="MALLOC_MMAP_THRESHOLD_=$GIB MALLOC_TRIM_THRESHOLD_=$GIB" ;;
        default) MALLOC="TRANSFORMER_MT_MALLOC=default" ;;
        *) MALLOC="" ;;
      esac
      env $MALLOC "$(python_for "$1")" "$HERE/train_speed.py" --data "$DATA" --engine "$1" --dtype "$2" --shape "$shape" \
        --warmup 3 --steps 10 2>/dev/null | tail -1 | sed "s/^{/{\"run\": $run, /" >> "$OUT/raw/train.jsonl"
    done
    for spec in "${decode_specs[@]}"; do
      [[ " $PARTS " == *" decode "* ]] || break
      set -- $spec
      case "${3:-}" in mkl) BACKEND="CT2_USE_MKL=1" ;; onednn) BACKEND="CT2_USE_MKL=0" ;; *) BACKEND="" ;; esac
      env $BACKEND "$(python_for "$1")" "$HERE/decode_speed.py" --data "$DATA" --engine "$1" --dtype "$2" --shape "$shape" \
        2>/dev/null | tail -1 | sed "s/^{/{\"run\": $run, /" >> "$OUT/raw/decode.jsonl"
    done
    echo "run $run, $shape: done $(date -u +%T)"
  done
done
python3 "$HERE/report.py" "$OUT"
