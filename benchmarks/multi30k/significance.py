"""Which Multi30k runs really differ on test? Paired bootstrap resampling (Koehn, 2004) of every
committed test_2016_flickr translation against one baseline's, on sacreBLEU and on tokenized
lowercased BLEU, with `transformer-mt evaluate --baseline`'s arithmetic (sacrebleu --paired-bs).

    python benchmarks/multi30k/significance.py --baseline multi30k-en-de [--tgt de]

Writes benchmarks/results/multi30k-significance-<src>-<tgt>/results.json and prints a table.
"""

import argparse
import json
import os
import platform
from pathlib import Path

import sacrebleu

from transformer_mt.evaluate import evaluate_files

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="a results directory's name")
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--data", type=Path,
                        default=Path(os.environ.get("TRANSFORMER_MT_DATA",
                                                    REPO.parent / "shared" / "data")))
    args = parser.parse_args()
    hyp_name = f"test_2016_flickr.hyp.{args.tgt}"
    pattern = f"multi30k-{args.src}-{args.tgt}*/{hyp_name}"
    runs = sorted(path.parent.name for path in RESULTS.glob(pattern))
    if args.baseline not in runs:
        parser.error(f"no {RESULTS / args.baseline / hyp_name}")
    others = [run for run in runs if run != args.baseline]
    if not others:
        parser.error(f"no other {pattern} than the baseline's to compare")
    multi30k = args.data / "multi30k"
    rows = []
    for run in others:
        scores = evaluate_files(
            hyp=RESULTS / run / hyp_name, ref=multi30k / f"test_2016_flickr.{args.tgt}.gz",
            lang=args.tgt, lowercase=True,
            tok_ref=multi30k / "tok" / f"test_2016_flickr.lc.norm.tok.{args.tgt}.gz",
            baseline=RESULTS / args.baseline / hyp_name)
        rows.append({"run": run, **{c.metric: {k: round(v, 4) for k, v in vars(c).items()
                                                if isinstance(v, float)}
                                    for c in scores.against_baseline}})
    base = rows[0]["tokBLEU"]
    print(f"| run | test tok. lc. BLEU ± 95 % | vs {args.baseline} | p |\n|---|---|---|---|\n"
          f"| {args.baseline} (baseline) | {base['baseline_score']:.2f} ± "
          f"{base['baseline_ci']:.2f} | | |")
    for row in rows:
        tok = row["tokBLEU"]
        print(f"| {row['run']} | {tok['score']:.2f} ± {tok['ci']:.2f} | "
              f"{tok['score'] - tok['baseline_score']:+.2f} | {tok['p_value']:.3f} |")
    # the signatures and protocol are the same for every run: the last run's say them
    out = RESULTS / f"multi30k-significance-{args.src}-{args.tgt}"
    out.mkdir(exist_ok=True)
    (out / "results.json").write_text(json.dumps({
        "baseline": args.baseline, "test": f"test_2016_flickr.{args.tgt}",
        "signatures": {c.metric: c.signature for c in scores.against_baseline},
        "tok_bleu_protocol": scores.tok_bleu_protocol,
        "sacrebleu": sacrebleu.__version__, "python": platform.python_version(),
        "runs": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
