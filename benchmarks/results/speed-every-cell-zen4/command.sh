#!/usr/bin/env bash
set -u
cd /work/main
OUT=benchmarks/results/speed-every-cell-zen4
lscpu > /tmp/lscpu.txt
export TRAIN_SPECS="ours fp32;ours bf16;marian fp32;marian bf16;fairseq fp32;fairseq bf16"
export DECODE_SPECS="ours int8;ours auto;ours int8row;ours int8+kv;ct2 fp32 onednn;ct2 int8 onednn"
bash benchmarks/speed/run.sh runs/m30k/data $OUT 3 "small base" > /tmp/run_all.log 2>&1
TRAIN_SPECS="" DECODE_SPECS="ct2 fp32 mkl;ct2 int8 mkl" bash benchmarks/speed/run.sh runs/m30k/data $OUT 1 "small base" decode >> /tmp/run_all.log 2>&1
echo finished >> /tmp/run_all.log
