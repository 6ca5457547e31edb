#!/usr/bin/env bash
# The Marian-made fixture of tests/test_marian_npz.py: a tiny transformer trained by Marian
# itself (300 updates, one thread, seed 1) on a synthetic word-mapping task, its SentencePiece
# vocabulary trained by Marian, and Marian's own beam-4 n-best lists (normalize 0.6), the same
# at --max-length-factor 0.5 (where the length cap ends most hypotheses) and greedy outputs for
# 50 test sentences, decoded one sentence per batch. The tests check parity against these files
# without installing Marian.
#   benchmarks/compat/marian_fixture.sh [OUT]   (default tests/data/marian; needs marian_env.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/tests/data/marian}
MARIAN=${MARIAN:-$ROOT/.venv-marian/bin/pymarian}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
python3 - <<'PY'
import random
rng = random.Random(7)
english = ("the a man woman dog cat sees holds red blue small big old young house car tree "
           "ball near under with").split()
german = ("der eine mann frau hund katze sieht hält roten blauen kleinen großen alten jungen "
          "haus auto baum ball nahe unter mit").split()
mapping = dict(zip(english, german, strict=True))
def pair():
    words = [rng.choice(english) for _ in range(rng.randint(3, 9))]
    target = [mapping[w] for w in words]
    return " ".join(words), " ".join(target[::-1] if rng.random() < 0.5 else target)
for name, n in (("train", 3000), ("test", 50)):
    pairs = [pair() for _ in range(n)]
    for side, k in (("src", 0), ("tgt", 1)):
        with open(f"{name}.{side}", "w", encoding="utf-8") as f:
            f.write("".join(p[k] + "\n" for p in pairs))
PY
"$MARIAN" --type transformer --model model.npz --train-sets train.src train.tgt \
  --vocabs vocab.spm vocab.spm --dim-vocabs 48 48 \
  --sentencepiece-options "--normalization_rule_name=identity" \
  --dim-emb 32 --transformer-dim-ffn 64 --transformer-heads 4 --enc-depth 2 --dec-depth 2 \
  --tied-embeddings-all --after-batches 300 --mini-batch 32 --cpu-threads 1 -w 500 --seed 1 \
  --learn-rate 0.003 --lr-warmup 50 --label-smoothing 0.1 --max-length 100 \
  --transformer-dropout 0 --quiet
cat > decoder.yml <<'YML'
models:
  - model.npz
vocabs:
  - vocab.spm
  - vocab.spm
beam-size: 4
normalize: 0.6
word-penalty: 0
YML
decode() { "$MARIAN" decode -c decoder.yml --cpu-threads 1 --mini-batch 1 --maxi-batch 1 \
  --quiet "$@" -i test.src; }
decode --n-best -o nbest.txt
decode --n-best --max-length-factor 0.5 -o nbest-cap.txt
decode --beam-size 1 -o greedy.txt
mkdir -p "$OUT"
cp model.npz vocab.spm decoder.yml test.src nbest.txt nbest-cap.txt greedy.txt "$OUT"/
"$MARIAN" --version > "$OUT/MARIAN_VERSION" 2>&1
ls -la "$OUT"
