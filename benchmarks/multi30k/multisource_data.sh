#!/usr/bin/env bash
# Multi30k many-to-one data for en->de (not in the paper; a data departure): the training
# captions in English, French and Czech, each paired with the same German caption (the corpus is
# multi-way parallel), so the German side is seen three times per epoch; validation en->de
# only; one joint SentencePiece vocabulary over the four languages.
# Usage: benchmarks/multi30k/multisource_data.sh RUN_OUT [VOCAB_SIZE]   (default 10000)
# writes RUN_OUT/data, which run.sh then uses as it is: run.sh en de MINUTES RUN_OUT
set -euo pipefail
OUT=$1; VOCAB=${2:-10000}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
M30K=${TRANSFORMER_MT_DATA:-$REPO/../shared/data}/multi30k
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
zcat "$M30K/train.en.gz" "$M30K/train.fr.gz" "$M30K/train.cs.gz" > "$TMP/train.src"
zcat "$M30K/train.de.gz" "$M30K/train.de.gz" "$M30K/train.de.gz" > "$TMP/train.tgt"
zcat "$M30K/val.en.gz" > "$TMP/val.en"
zcat "$M30K/val.de.gz" > "$TMP/val.de"
transformer-mt prepare --train-src "$TMP/train.src" --train-tgt "$TMP/train.tgt" \
  --valid-src "$TMP/val.en" --valid-tgt "$TMP/val.de" --src-lang en --tgt-lang de \
  --vocab-size "$VOCAB" --config "$REPO/benchmarks/multi30k/multi30k-tiny-prenorm.yaml" \
  --out "$OUT/data"
