"""Which decoder layer's attention aligns words best? Alignment error rate (AER, Och & Ney 2003)
of our attention alignments on Multi30k test_2016_flickr, per decoder layer and query position,
against eflomal (Östling & Tiedemann 2016, `pip install eflomal`, a well-kept statistical
aligner that needs no download), since no gold German-English word alignments are on this
machine.

eflomal aligns the whitespace words of Multi30k train + test (lowercased) in both directions;
on the test sentences its intersection counts as the Sure links and its union as the Possible
ones. Our alignments: the model teacher-forced on the reference translation, each target piece
linked to the source piece its layer's heads (averaged) attend to most (EOS left out), piece
links turned into word links (inference/alignment.py). A monotone diagonal (target word j ->
source word round(j * S / T)) is the floor to beat. 95% intervals: bootstrap over sentences.

    python benchmarks/alignment/quality.py --model runs/speed/run --data ../shared/data \\
        --eflomal /work/.venv-eflomal/bin/eflomal-align --work /tmp/align \\
        --out benchmarks/results/alignment-quality-multi30k/en-de-prenorm.json
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import subprocess
import sys
from pathlib import Path

import torch

from transformer_mt.data.corpora import locate
from transformer_mt.data.text import read_parallel
from transformer_mt.inference.alignment import (
    QUERIES,
    AlignmentChoice,
    alignment_weights,
    hard_alignment,
    word_index,
    word_pairs,
)
from transformer_mt.inference.attention_maps import attention_maps
from transformer_mt.inference.translator import Translator
from transformer_mt.storage.run_dir import resolve_model_dir

Links = set[tuple[int, int]]


def read(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def eflomal_links(eflomal: str, src: list[str], tgt: list[str], work: Path
                  ) -> tuple[list[Links], list[Links]]:
    """eflomal's forward and reverse links of each pair, as (source word, target word)."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "src.txt").write_text("\n".join(s.lower() for s in src) + "\n", encoding="utf-8")
    (work / "tgt.txt").write_text("\n".join(t.lower() for t in tgt) + "\n", encoding="utf-8")
    subprocess.run([eflomal, "-s", str(work / "src.txt"), "-t", str(work / "tgt.txt"),
                    "-f", str(work / "fwd.txt"), "-r", str(work / "rev.txt"), "--overwrite"],
                   check=True)

    def links(name: str) -> list[Links]:
        return [{tuple(map(int, p.split("-"))) for p in line.split()}
                for line in read(work / name)]

    return links("fwd.txt"), links("rev.txt")


def read_gold(path: Path, swap: bool) -> dict[int, Links]:
    """Hand-made links by 0-based test line; `swap` turns english-german into german-english."""
    gold = {}
    for line in read(path):
        if line.startswith("#") or not line.strip():
            continue
        number, links = line.split("\t")
        pairs = [tuple(map(int, p.split("-"))) for p in links.split()]
        gold[int(number) - 1] = {(j, i) if swap else (i, j) for i, j in pairs}
    return gold


def counts(a: Links, sure: Links, possible: Links) -> tuple[int, int, int, int]:
    return len(a & sure), len(a & possible), len(a), len(sure)


def aer(rows: list[tuple[int, int, int, int]]) -> dict:
    a_s, a_p, a, s = (sum(c) for c in zip(*rows, strict=True))
    return {"aer": 1 - (a_s + a_p) / (a + s), "precision": a_p / a, "recall": a_s / s}


def interval(rows: list[tuple[int, int, int, int]], draws: int = 1000) -> list[float]:
    rng = random.Random(0)
    values = sorted(aer(rng.choices(rows, k=len(rows)))["aer"] for _ in range(draws))
    return [values[int(0.025 * draws)], values[int(0.975 * draws)]]


def diagonal(n_src: int, n_tgt: int) -> Links:
    return {(min(round(j * n_src / n_tgt), n_src - 1), j) for j in range(n_tgt)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--data", required=True, type=Path, help="../shared/data")
    p.add_argument("--eflomal", required=True, help="the eflomal-align program")
    p.add_argument("--work", required=True, type=Path)
    p.add_argument("--gold", type=Path, default=Path(__file__).parent /
                   "gold-multi30k-test-en-de.txt", help="hand-made english-german links")
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()

    model_dir = resolve_model_dir(args.model)
    translator = Translator.from_dir(model_dir)
    model, vocab = translator.model, translator.vocab
    src_lang, tgt_lang = json.loads((model_dir / "config.json").read_text())["languages"]
    splits = {f.name: read_parallel(f.src, f.tgt)[:2]
              for f in locate("multi30k", f"{src_lang}-{tgt_lang}", args.data)}
    train, test = splits["train"], splits["test"]
    fwd, rev = eflomal_links(args.eflomal, train[0] + test[0], train[1] + test[1], args.work)
    fwd, rev = fwd[len(train[0]):], rev[len(train[0]):]
    gold = read_gold(args.gold, swap=(src_lang, tgt_lang) == ("de", "en"))

    n_layers, n_heads = model.cfg.n_decoder_layers, model.cfg.n_heads
    choices = {f"layer {layer} {query}": AlignmentChoice(layer, None, query)
               for layer in range(n_layers) for query in QUERIES}
    choices |= {f"layer {layer} head {h} predicting": AlignmentChoice(layer, (h,))
                for layer in range(n_layers) for h in range(n_heads)}
    choices = {name: c.resolve(n_layers, n_heads) for name, c in choices.items()}
    rows: dict[str, list] = {name: [] for name in choices} | {"diagonal": []}
    gold_rows: dict[str, list] = {name: [] for name in [*rows, "eflomal intersection",
                                                         "eflomal union"]}
    model.eval()
    skipped: list[int] = []
    for k, (source, target) in enumerate(zip(*test, strict=True)):
        sure, possible = fwd[k] & rev[k], fwd[k] | rev[k]
        src_ids = translator.encode_source(source, k)
        out_ids = vocab.encode_target(target)
        _, maps = attention_maps(model, torch.tensor([src_ids]),
                                 torch.tensor([[model.cfg.bos_id, *out_ids]]))
        src_pieces = [vocab.piece(i) for i in src_ids[:-1]]
        tgt_pieces = [vocab.piece(i, "target") for i in out_ids]
        if (word_index(src_pieces)[-1] + 1, word_index(tgt_pieces)[-1] + 1) != \
                (len(source.split()), len(target.split())):
            skipped.append(k)  # pieces and whitespace disagree on the words
            continue
        for name, choice in choices.items():
            w = alignment_weights(maps.cross[choice.layer, 0], len(src_pieces), len(out_ids),
                                  choice)
            links = set(word_pairs(hard_alignment(w), src_pieces, tgt_pieces))
            rows[name].append(counts(links, sure, possible))
            if k in gold:
                gold_rows[name].append(counts(links, gold[k], gold[k]))
        monotone = diagonal(len(source.split()), len(target.split()))
        rows["diagonal"].append(counts(monotone, sure, possible))
        if k in gold:
            gold_rows["diagonal"].append(counts(monotone, gold[k], gold[k]))
            for name, links in (("eflomal intersection", sure), ("eflomal union", possible)):
                gold_rows[name].append(counts(links, gold[k], gold[k]))
        if k % 200 == 0:
            print(f"{k} / {len(test[0])}", file=sys.stderr)
    results = {name: aer(r) | {"aer_95": interval(r)} for name, r in rows.items()}
    on_gold = {name: aer(r) | {"aer_95": interval(r)} for name, r in gold_rows.items() if r}
    best = min((n for n in results if "head" not in n and n != "diagonal"),
               key=lambda n: results[n]["aer"])
    report = {
        "question": "which decoder layer's cross-attention aligns words best (AER vs eflomal)",
        "model": str(args.model), "languages": [src_lang, tgt_lang],
        "decoder_layers": n_layers, "norm_first": model.cfg.norm_first,
        "sentences": len(test[0]), "reference": "eflomal 2.0.0, train+test lowercased "
        "whitespace words; sure = forward & reverse, possible = forward | reverse",
        "sure_links": sum(len(f & r) for f, r in zip(fwd, rev, strict=True)),
        "possible_links": sum(len(f | r) for f, r in zip(fwd, rev, strict=True)),
        "skipped": skipped, "results": results, "best_layer": best,
        "gold": {"file": args.gold.name, "sentences": len(gold_rows["diagonal"]),
                 "links": sum(len(v) for v in gold.values()),
                 "note": "sure links only: AER = 1 - F1",
                 "results": on_gold},
        "machine": {"cpu": platform.processor() or platform.machine(),
                    "torch": torch.__version__, "python": platform.python_version()},
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True).stdout.strip(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    for name, r in results.items():
        g = on_gold.get(name)
        print(f"{name:32s} AER {r['aer']:.3f} [{r['aer_95'][0]:.3f}, {r['aer_95'][1]:.3f}]  "
              f"P {r['precision']:.3f}  R {r['recall']:.3f}" +
              (f"   gold AER {g['aer']:.3f} [{g['aer_95'][0]:.3f}, {g['aer_95'][1]:.3f}]"
               if g else ""))
    for name in ("eflomal intersection", "eflomal union"):
        g = on_gold[name]
        print(f"{name} on the gold set: AER {g['aer']:.3f} "
              f"[{g['aer_95'][0]:.3f}, {g['aer_95'][1]:.3f}]")
    print("best layer (all heads):", best)


if __name__ == "__main__":
    main()
