#!/usr/bin/env bash
# Does a model that Marian itself trained translate the same in transformer-mt as in Marian?
# Marian (pymarian 1.12.42, marian_env.sh) trains a transformer of the `small` shape (3+3
# layers, d_model 256, 4 heads, d_ff 1024, all embeddings tied, its own 8k SentencePiece
# vocabulary) for UPDATES updates on Multi30k en->de, one thread, seed 1; Marian decodes
# test_2016_flickr (1,000 sentences) greedy and with beam 4 (normalize 0.6), one sentence per
# batch (so that its length cap is each sentence's own, as ours is); `transformer-mt import
# marian` imports the directory and `translate` decodes the same sentences with the decoding
# settings it imported; both also write the 4-best lists of the first 100 sentences with their
# scores. compare_outputs.py counts the identical lines and n-best lists and the largest score
# difference.
#   benchmarks/compat/marian_parity.sh OUT [UPDATES] [DATA]   (DATA: ../shared/data)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$1 UPDATES=${2:-600} DATA=${3:-$ROOT/../shared/data}
MARIAN=${MARIAN:-$ROOT/.venv-marian/bin/pymarian}
MODEL=$OUT/marian
mkdir -p "$MODEL"
for side in en de; do zcat "$DATA/multi30k/train.$side.gz" > "$OUT/train.$side"; done
zcat "$DATA/multi30k/test_2016_flickr.en.gz" > "$OUT/test.en"
zcat "$DATA/multi30k/test_2016_flickr.de.gz" > "$OUT/test.de"
if [ ! -f "$MODEL/model.npz" ]; then
  "$MARIAN" --type transformer --model "$MODEL/model.npz" \
    --train-sets "$OUT/train.en" "$OUT/train.de" \
    --vocabs "$MODEL/vocab.spm" "$MODEL/vocab.spm" --dim-vocabs 8000 8000 \
    --dim-emb 256 --transformer-dim-ffn 1024 --transformer-heads 4 --enc-depth 3 \
    --dec-depth 3 --tied-embeddings-all --after-batches "$UPDATES" --mini-batch 64 \
    --cpu-threads 1 -w 2000 --seed 1 --learn-rate 0.0005 --lr-warmup 200 \
    --label-smoothing 0.1 --transformer-dropout 0.1 --disp-freq 100 \
    --log "$OUT/marian-train.log" --quiet
  rm -f "$MODEL"/model.npz.optimizer.npz "$MODEL"/model.npz.progress.yml
fi
cat > "$MODEL/decoder.yml" <<YML
models:
  - $MODEL/model.npz
vocabs:
  - $MODEL/vocab.spm
  - $MODEL/vocab.spm
beam-size: 4
normalize: 0.6
word-penalty: 0
YML
marian_decode() {  # BEAM OUTPUT
  "$MARIAN" decode -c "$MODEL/decoder.yml" --cpu-threads 1 --mini-batch 1 --maxi-batch 1 \
    -b "$1" -i "$OUT/test.en" -o "$2" --quiet
}
marian_decode 4 "$OUT/marian.beam4.de"
marian_decode 1 "$OUT/marian.greedy.de"
head -n 100 "$OUT/test.en" > "$OUT/test100.en"
"$MARIAN" decode -c "$MODEL/decoder.yml" --cpu-threads 1 --mini-batch 1 --maxi-batch 1 \
  -b 4 --n-best -i "$OUT/test100.en" -o "$OUT/marian.nbest4.txt" --quiet
transformer-mt import marian "$MODEL" --out "$OUT/ours"
OMP_NUM_THREADS=1 transformer-mt translate --model "$OUT/ours" --input "$OUT/test.en" \
  --output "$OUT/ours.beam4.de"
OMP_NUM_THREADS=1 transformer-mt translate --model "$OUT/ours" --input "$OUT/test.en" \
  --output "$OUT/ours.greedy.de" --beam-size 1 --strategy greedy
OMP_NUM_THREADS=1 transformer-mt translate --model "$OUT/ours" --input "$OUT/test100.en" \
  --output "$OUT/ours.nbest4.txt" --n-best 4
"$MARIAN" --version > "$OUT/MARIAN_VERSION" 2>&1
python3 "$(dirname "$0")/compare_outputs.py" "$OUT" "$OUT/test.de" > "$OUT/parity.json"
cat "$OUT/parity.json"
