#!/usr/bin/env bash
# Post-norm (the paper's) against pre-norm at equal steps on Multi30k en->de, the multi30k
# recipe otherwise, the paper's code's initialisation (qkv gain 1/sqrt(2)) for both, the
# recipe's cooldown (its lr_cooldown_share of STEPS: without it a run of 4,000 steps ends at
# eq. (3)'s peak, where post-norm lags pre-norm by 2.2-2.4 val BLEU, with it by 0.3-0.8;
# benchmarks/results/postnorm-vs-prenorm-with-cooldown), validation every 500 steps; two
# single-thread runs at a time (one per core).
# Resumable: run it again and each run goes on from its last checkpoint.
#   benchmarks/multi30k/norm_at_equal_steps.sh DATA_DIR OUT SHAPE [STEPS] [SEEDS]
# SHAPE: tiny (4+4, d_model 128, the recipe's) or base6 (6+6, d_model 128, d_ff 512, 8 heads:
# Table 3's base shape at a quarter of its width, d_ff = 4 d_model as there, and its P_drop 0.1:
# at the recipe's 0.3 this post-norm stack stalls, benchmarks/results/
# postnorm-vs-prenorm-equal-steps-base6).
# COOLDOWN=0: no cooldown (eq. (3) to the end: the runs of the -equal-steps-tiny and -base6
# result folders); COOLDOWN=S: a share S of STEPS instead of the recipe's.
# EXTRA="--train.lr_scale=1" TAG=lr1: more overrides, and a tag in the runs' names.
# NORMS=post (or pre): one norm only, on core CORE (0), so that two invocations with different
# EXTRA share the machine.
# DEVICE=cuda: on the GPU instead, every run of the invocation at once (many small runs share
# one GPU; benchmarks/gpu/postnorm_sweep.sh).
set -euo pipefail
DATA=$1 OUT=$2 SHAPE=$3 STEPS=${4:-4000} SEEDS=${5:-"1 2"}
read -r -a EXTRA <<< "${EXTRA:-}"
COOLDOWN=(${COOLDOWN:+--train.lr_cooldown_share=$COOLDOWN})
TAG=${TAG:+-$TAG}
case $SHAPE in
  tiny) MODEL=() ;;
  base6) MODEL=(--model.n_encoder_layers=6 --model.n_decoder_layers=6 --model.d_model=128
                --model.d_ff=512 --model.n_heads=8 --model.dropout=0.1) ;;
  *) echo "SHAPE: tiny or base6" >&2; exit 2 ;;
esac
run() {  # NORM_FIRST SEED CORE
  local dir="$OUT/$SHAPE-$([ "$1" = true ] && echo pre || echo post)norm$TAG-seed$2" on=()
  local where=(--train.device="${DEVICE:-cpu}")
  if [ "${DEVICE:-cpu}" = cpu ]; then on=(env OMP_NUM_THREADS=1 taskset -c "$3"); where+=(--train.threads=1); fi
  "${on[@]}" transformer-mt train --config multi30k --data "$DATA" \
    --run-dir "$dir" --model.norm_first="$1" --model.qkv_init_gain=0.7071067811865476 \
    "${MODEL[@]}" --train.seed="$2" --train.max_minutes=0 "${COOLDOWN[@]}" \
    --train.max_steps="$STEPS" --train.valid_every=500 --train.save_every=500 \
    --train.keep_last=2 "${where[@]}" "${EXTRA[@]}" > "$dir.log" 2>&1
}
mkdir -p "$OUT"
for seed in $SEEDS; do
  case ${NORMS:-both} in
    both) run false "$seed" 0 & run true "$seed" 1 & ;;
    post) run false "$seed" "${CORE:-0}" & ;;
    pre) run true "$seed" "${CORE:-0}" & ;;
    *) echo "NORMS: post, pre or unset (both)" >&2; exit 2 ;;
  esac
  [ "${DEVICE:-cpu}" = cpu ] && wait
done
wait
