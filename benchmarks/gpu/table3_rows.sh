#!/usr/bin/env bash
# Table 3's rows on a lent GPU, JOBS of them at once: benchmarks/table3/run.sh with DEVICE=cuda
# (the CPU protocol's steps and batches), SEEDS of ROWS (default 1 2 of every row but big; the
# rows in the committed results are not trained again), for at most MINUTES; then the table of
# every row recorded, in this copy's results folder, packed whole into OUT/table3.tar.gz (the
# device tool brings back few files: `tar -xzf table3.tar.gz` at the repository's root puts
# the new rows' results, configs and metrics and the redrawn table in place, to commit). A row
# still training at the end is lost with the machine: give MINUTES room for whole rows.
# Usage: benchmarks/gpu/table3_rows.sh OUT [MINUTES]
#   WORK: the run folder with its data/ prepared (default runs/table3-scale4: carry
#   runs/table3-scale4/data to the lent machine)
set -uo pipefail
OUT=$1 MINUTES=${2:-8}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
RESULTS=benchmarks/results/table3-multi30k-scale4
export WORK=${WORK:-$REPO/runs/table3-scale4} DEVICE=${DEVICE:-cuda} JOBS=${JOBS:-16}
export SEEDS=${SEEDS:-1 2} ROWS=${ROWS:-A,B,C,D,E}
# the lent machine has the dependencies but not this package: its command from the source tree
export PYTHONPATH=$REPO/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
mkdir -p "$OUT/bin" && printf '#!/bin/sh\nexec python3 -m transformer_mt "$@"\n' \
  > "$OUT/bin/transformer-mt" && chmod +x "$OUT/bin/transformer-mt"
export PATH=$OUT/bin:$PATH
nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/machine.txt" 2>&1
setsid "$REPO/benchmarks/table3/run.sh" "$REPO/$RESULTS" > "$OUT/train.log" 2>&1 &
leader=$!
for _ in $(seq $((MINUTES * 6))); do kill -0 $leader 2>/dev/null || break; sleep 10; done
kill -- -$leader 2>/dev/null && echo "stopped after $MINUTES minutes" >> "$OUT/train.log"
wait $leader 2>/dev/null
REPORT_ONLY=1 "$REPO/benchmarks/table3/run.sh" "$REPO/$RESULTS" >> "$OUT/train.log" 2>&1
tail -n 30 "$OUT/train.log"
tar -czf "$OUT/table3.tar.gz" -C "$REPO" "$RESULTS" && rm -rf "$OUT/bin"
