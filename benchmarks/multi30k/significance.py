"""Which Multi30k runs really differ on test? Paired bootstrap resampling (Koehn, 2004) of every
committed test_2016_flickr translation against one baseline's, on sacreBLEU and on tokenized
lowercased BLEU, with `transformer-mt evaluate --baseline`'s arithmetic (sacrebleu --paired-bs).
A run trained on the tok/*.lc.norm.tok files (run.sh LC_TOK=1) commits tokenized lowercase
translations (test_2016_flickr.lc.norm.tok.hyp.*): those are compared on tokenized BLEU only, as
they are, against the baseline's translations tokenized by the tok/ files' pipeline.

    python benchmarks/multi30k/significance.py --baseline multi30k-en-de [--tgt de]

Writes benchmarks/results/multi30k-significance-<src>-<tgt>/results.json and prints a table.
"""

import argparse
import json
import os
import platform
from pathlib import Path

import sacrebleu

from transformer_mt.evaluation.bleu import (
    Comparison,
    TokenizedProtocol,
    evaluate_files,
    moses_tokenize,
    paired_bootstrap,
    read_text,
    tokenized_bleu_metric,
)

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"


def rounded(comparison: Comparison) -> dict[str, float]:
    return {k: round(v, 4) for k, v in vars(comparison).items() if isinstance(v, float)}


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
    tok_hyp_name = f"test_2016_flickr.lc.norm.tok.hyp.{args.tgt}"
    runs = sorted(path.parent for name in (hyp_name, tok_hyp_name)
                  for path in RESULTS.glob(f"multi30k-{args.src}-{args.tgt}*/{name}"))
    baseline = RESULTS / args.baseline / hyp_name
    if not baseline.exists():
        parser.error(f"no {baseline}")
    others = [run for run in runs if run.name != args.baseline]
    if not others:
        parser.error(f"no other multi30k-{args.src}-{args.tgt}* run than the baseline to compare")
    multi30k = args.data / "multi30k"
    tok_ref = multi30k / "tok" / f"test_2016_flickr.lc.norm.tok.{args.tgt}.gz"
    # tokenized translations are scored as they are, the baseline's by the tok/ files' pipeline
    as_they_are = TokenizedProtocol(args.tgt, lowercase=True, compound_split=False,
                                    refs_tokenized=True, hyps_tokenized=True)
    tok_baseline = None
    rows = []
    for run in others:
        if not (run / tok_hyp_name).exists():
            cased = evaluate_files(
                hyp=run / hyp_name, ref=multi30k / f"test_2016_flickr.{args.tgt}.gz",
                lang=args.tgt, lowercase=True, tok_ref=tok_ref, baseline=baseline)
            rows.append({"run": run.name, **{c.metric: rounded(c)
                                             for c in cased.against_baseline}})
            continue
        if tok_baseline is None:
            tok_baseline = moses_tokenize(read_text(baseline), args.tgt, lowercase=True)
        # only tokBLEU: their sacreBLEU would be of tokenized lowercase text
        tok = paired_bootstrap(as_they_are.hypotheses(read_text(run / tok_hyp_name)),
                               tok_baseline, as_they_are.references(read_text(tok_ref)),
                               metric=tokenized_bleu_metric(), name="tokBLEU")
        rows.append({"run": run.name, "tokBLEU": rounded(tok),
                     "tok_bleu_protocol": str(as_they_are)})
    base = rows[0]["tokBLEU"]
    print(f"| run | test tok. lc. BLEU ± 95 % | vs {args.baseline} | p |\n|---|---|---|---|\n"
          f"| {args.baseline} (baseline) | {base['baseline_score']:.2f} ± "
          f"{base['baseline_ci']:.2f} | | |")
    for row in rows:
        tok = row["tokBLEU"]
        print(f"| {row['run']} | {tok['score']:.2f} ± {tok['ci']:.2f} | "
              f"{tok['score'] - tok['baseline_score']:+.2f} | {tok['p_value']:.3f} |")
    # the signatures and protocol are the same for every cased run: the last one's say them
    out = RESULTS / f"multi30k-significance-{args.src}-{args.tgt}"
    out.mkdir(exist_ok=True)
    (out / "results.json").write_text(json.dumps({
        "baseline": args.baseline, "test": f"test_2016_flickr.{args.tgt}",
        "signatures": {c.metric: c.signature for c in cased.against_baseline},
        "tok_bleu_protocol": cased.tok_bleu_protocol,
        "sacrebleu": sacrebleu.__version__, "python": platform.python_version(),
        "runs": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
