set -e
cd "$(dirname "$0")/../.."
D=runs/multi30k-en-de-drop-seed7/data
C=benchmarks/multi30k/multi30k-tiny-prenorm.yaml
COMMON="--train.bf16=true --train.warmup_steps=4000 --train.save_every=100000 --train.valid_every=100000 --model.attention_dropout=0.1 --model.activation_dropout=0.1 --train.max_steps=600"
for round in 1 2; do
rm -rf /tmp/p1 /tmp/p2
transformer-mt train --config $C --data $D --run-dir /tmp/p1 $COMMON --train.max_tokens=2048 > /tmp/p1.$round.log 2>&1
OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node 2 -m transformer_mt train --config $C --data $D --run-dir /tmp/p2 $COMMON --train.max_tokens=1024 --train.threads=1 --train.device=cpu > /tmp/p2.$round.log 2>&1
for p in p1 p2; do echo "round $round $p: $(grep -o 'tok_s [0-9]*' /tmp/$p.$round.log | tail -4 | tr '\n' ' ') | $(grep -o 'train_seconds[^,]*' /tmp/$p/checkpoints/*/state.json 2>/dev/null | tail -1)"; done
done
