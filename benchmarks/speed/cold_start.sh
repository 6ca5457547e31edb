#!/usr/bin/env bash
# Cold start: process start to the first translation of one sentence, each program as a user
# runs it, in turns (a repeat runs every program once, so that the machine's drift falls on all
# alike): python alone, `import torch`, `transformer-mt --help`, `transformer-mt translate` of one
# sentence (beam 4, OMP_NUM_THREADS=1), and CTranslate2 from Python (import, load the same model exported
# with `transformer-mt export ctranslate2`, SentencePiece in and out, translate), and with
# MARIAN_DIR Marian's own decoder (`pymarian decode`, one thread, beam 4) on the Marian directory
# that MODEL_DIR was imported from (`transformer-mt import marian`), so that all decode the same
# weights. Wall and CPU seconds of each run in OUT/runs.tsv, medians in OUT/summary.tsv.
#   benchmarks/speed/cold_start.sh MODEL_DIR OUT [REPEATS] [MARIAN_DIR]
# MODEL_DIR: a model or run directory (a run's last checkpoint). Run it on a quiet machine.
# Marian: $MARIAN, default .venv-marian/bin/pymarian (benchmarks/compat/marian_env.sh).
set -euo pipefail
MODEL=$1 OUT=$2 REPEATS=${3:-5} MARIAN_DIR=${4:-}
MARIAN=${MARIAN:-$(cd "$(dirname "$0")/../.." && pwd)/.venv-marian/bin/pymarian}
mkdir -p "$OUT"
[ -d "$MODEL/checkpoints" ] && MODEL="$MODEL/checkpoints/$(ls "$MODEL/checkpoints" | tail -1)"
export OMP_NUM_THREADS=1
TMT=$(command -v transformer-mt)
[ -x "$(dirname "$(command -v python3)")/transformer-mt" ] && TMT="$(dirname "$(command -v python3)")/transformer-mt"
SENTENCE="$OUT/one.txt"
echo "A man in a blue shirt is riding a bike down the street." > "$SENTENCE"
if [ ! -d "$OUT/ct2" ]; then
  "$TMT" export ctranslate2 "$MODEL" --out "$OUT/ct2" > /dev/null
fi
cat > "$OUT/ct2_one.py" <<'EOF'
import os
import sys

import ctranslate2
import sentencepiece

model, sentence = sys.argv[1], open(sys.argv[2], encoding="utf-8").read().strip()
pair = ("source.spm", "target.spm")  # a Marian import's two models, else our joint one
names = pair if os.path.exists(f"{model}/{pair[0]}") else ("sentencepiece.model",) * 2
source, target = (sentencepiece.SentencePieceProcessor(model_file=f"{model}/{n}") for n in names)
translator = ctranslate2.Translator(model, device="cpu", inter_threads=1, intra_threads=1)
result = translator.translate_batch([source.encode(sentence, out_type=str)], beam_size=4)
print(target.decode(result[0].hypotheses[0]))
EOF
declare -A RUN=(
  [python]="python3 -c pass"
  [import_torch]="python3 -c 'import torch'"
  [ours_help]="$TMT --help"
  [ours_translate]="$TMT translate --model $MODEL --input $SENTENCE --output $OUT/ours.out --beam-size 4"
  [ct2_python]="python3 $OUT/ct2_one.py $OUT/ct2 $SENTENCE"
)
ORDER=(python import_torch ours_help ours_translate ct2_python)
if [ -n "$MARIAN_DIR" ]; then
  RUN[marian_decode]="$MARIAN decode -c $MARIAN_DIR/decoder.yml --cpu-threads 1 -b 4 -i $SENTENCE -o $OUT/marian.out --quiet"
  ORDER+=(marian_decode)
fi
printf "repeat\tprogram\twall_s\tcpu_s\n" > "$OUT/runs.tsv"
for r in $(seq "$REPEATS"); do
  for name in "${ORDER[@]}"; do
    /usr/bin/time -f "%e %U %S" -o "$OUT/time.txt" bash -c "${RUN[$name]}" > "$OUT/$name.stdout" 2> /dev/null
    read -r wall user sys < "$OUT/time.txt"
    printf "%s\t%s\t%s\t%.2f\n" "$r" "$name" "$wall" "$(echo "$user + $sys" | bc)" >> "$OUT/runs.tsv"
  done
done
python3 - "$OUT" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(f"{sys.argv[1]}/runs.tsv"), delimiter="\t"))
with open(f"{sys.argv[1]}/summary.tsv", "w") as out:
    out.write("program\tmedian_wall_s\tmin_wall_s\tmax_wall_s\tmedian_cpu_s\n")
    for name in dict.fromkeys(r["program"] for r in rows):
        wall = [float(r["wall_s"]) for r in rows if r["program"] == name]
        cpu = [float(r["cpu_s"]) for r in rows if r["program"] == name]
        out.write(f"{name}\t{statistics.median(wall):.2f}\t{min(wall):.2f}\t{max(wall):.2f}"
                  f"\t{statistics.median(cpu):.2f}\n")
print(open(f"{sys.argv[1]}/summary.tsv").read())
EOF
