"""Does `translate --engine ctranslate2` give our engine's outputs at every length penalty the
presets use? For each alpha (and normalisation), both engines decode the same sentences with
the same settings; every output that differs is scored by our model (log P, and our ranking
score, of both outputs) to tell a near tie of the two engines' arithmetic from a search
difference, and its lengths are recorded. Usage:

    python benchmarks/compat/ct2_agreement.py --model MODEL_DIR \
        --sentences ../shared/data/multi30k/test_2016_flickr.en.gz \
        --alphas 0 0.6 1.0 1.2 --out results.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import tempfile
from pathlib import Path

import torch

from transformer_mt import Translator
from transformer_mt.evaluation.bleu import read_text
from transformer_mt.hardware.cpu_speed import cpu_model
from transformer_mt.inference.search import length_norm, max_output_lengths
from transformer_mt.interop.ct2 import CTranslate2Translator, export_ctranslate2


def forced_log_prob(ours: Translator, source: list[int], tokens: tuple[int, ...]) -> float:
    """log P(tokens + EOS | source) under our model, in float64 sums."""
    cfg = ours.model.cfg
    target = [*tokens, cfg.eos_id]
    with torch.inference_mode():
        logits = ours.model(torch.tensor([source]), torch.tensor([[cfg.bos_id, *tokens]]))
    logp = logits.log_softmax(-1)[0].gather(1, torch.tensor(target)[:, None])
    return float(logp.double().sum())


def compare(ours: Translator, ct2: CTranslate2Translator, sources: list[list[int]], cfg
            ) -> dict:
    mine, theirs = ours.translate_ids(sources, cfg), ct2.translate_ids(sources, cfg)
    differ = []
    for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
        if [t.tokens for t in a[:1]] == [t.tokens for t in b[:1]]:  # blank: both []
            continue
        lp = {name: forced_log_prob(ours, sources[i], t.tokens)
              for name, t in (("ours", a[0]), ("ct2", b[0]))}
        score = {name: lp[name] / float(length_norm(len(t.tokens) + 1, cfg))
                 for name, t in (("ours", a[0]), ("ct2", b[0]))}
        differ.append({"sentence": i, "ours_len": len(a[0].tokens), "ct2_len": len(b[0].tokens),
                       "ours_score": score["ours"], "ct2_score": score["ct2"],
                       "score_gap": score["ours"] - score["ct2"],
                       "ct2_reported_score": b[0].score, "ours_reported_score": a[0].score,
                       "ct2_at_cap": len(b[0].tokens) + 1 >= int(max_output_lengths(
                           torch.tensor([sources[i]]), ours.model.cfg.pad_id, cfg))})
    return {"sentences": len(sources), "identical": len(sources) - len(differ),
            "ct2_longer": sum(d["ct2_len"] > d["ours_len"] for d in differ),
            "ct2_shorter": sum(d["ct2_len"] < d["ours_len"] for d in differ),
            "largest_score_gap": max((abs(d["score_gap"]) for d in differ), default=0.0),
            "differ": differ}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--sentences", type=Path, required=True)
    p.add_argument("--alphas", type=float, nargs="+", default=[0.0, 0.6, 1.2])
    p.add_argument("--normalizations", nargs="+", default=["gnmt"])
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    ours = Translator.from_dir(args.model)
    sources = [ours.encode_source(s, i) for i, s in enumerate(read_text(args.sentences))]
    results = {"model": str(args.model), "sentences": str(args.sentences),
               "machine": cpu_model(), "python": platform.python_version(),
               "torch": torch.__version__, "threads": torch.get_num_threads(), "runs": []}
    import ctranslate2

    results["ctranslate2"] = ctranslate2.__version__
    with tempfile.TemporaryDirectory() as tmp:
        ct2 = CTranslate2Translator.from_dirs([export_ctranslate2(args.model, Path(tmp) / "c")])
        for norm in args.normalizations:
            for alpha in args.alphas:
                cfg = dataclasses.replace(ours.decode_cfg, length_penalty=alpha,
                                          length_normalization=norm)
                run = compare(ours, ct2, sources, cfg)
                results["runs"].append({"alpha": alpha, "normalization": norm} | run)
                print(f"{norm} alpha {alpha}: {run['identical']} / {run['sentences']} identical"
                      f" ({run['ct2_longer']} CTranslate2 longer, {run['ct2_shorter']} shorter;"
                      f" largest score gap {run['largest_score_gap']:.2e})", file=sys.stderr)
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
