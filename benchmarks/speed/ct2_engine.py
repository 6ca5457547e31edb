"""How fast is `translate --engine ctranslate2` beside our own engine, on the same model and
sentences, and what do CTranslate2's int8 weights change?

Interleaved rounds (the machine's speed drifts minute to minute), each engine in a process of
its own (two OpenMP runtimes in one process slow each other: the one that ran last keeps its
threads spinning): each round times, in turn, our engine (fp32), the CTranslate2 engine on an
fp32 export and on an int8 export (both with our tokenisation, length cap and ranking), and
CTranslate2 alone: one translate_batch of the same sentences with its own rules (beam,
|Y|^alpha, no per-sentence cap), which shows what the exactness around it costs. BLEU
(sacrebleu) of each, and how many outputs equal ours. Usage:

    python benchmarks/speed/ct2_engine.py --model MODEL_DIR \
        --sentences ../shared/data/multi30k/test_2016_flickr.en.gz \
        --references ../shared/data/multi30k/test_2016_flickr.de.gz --out results.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from engines import emit  # noqa: E402

from transformer_mt import Translator  # noqa: E402
from transformer_mt.evaluation.bleu import read_text, sacrebleu_scores  # noqa: E402
from transformer_mt.hardware.malloc import tune_malloc  # noqa: E402
from transformer_mt.inference.search import max_output_lengths  # noqa: E402
from transformer_mt.inference.translator import best_text  # noqa: E402
from transformer_mt.interop.ct2 import CTranslate2Translator, export_ctranslate2  # noqa: E402


def timed(fn) -> tuple[float, list[str]]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def native(ct2: CTranslate2Translator, sources: list[list[int]], cfg) -> list[str]:
    """CTranslate2 on its own: one call, its own length rule and ranking."""
    tokens = [[ct2.source_pieces[t] for t in ids] for ids in sources]
    outs = ct2.engine.translate_batch(tokens, beam_size=cfg.beam_size, max_batch_size=64,
                                      length_penalty=cfg.length_penalty, max_input_length=0)
    return [ct2.vocab.decode([ct2.ids[t] for t in o.hypotheses[0]]) for o in outs]


ENGINES = ("torch-fp32", "ctranslate2-float32", "ctranslate2-int8", "ctranslate2-native-fp32")


def measure(engine: str, model: Path, exports: Path, sentences: list[str]) -> dict:
    """One engine's time over all sentences, in this process, and its outputs."""
    ours = Translator.from_dir(model)
    cfg = ours.decode_cfg
    sources = [ours.encode_source(s, i) for i, s in enumerate(sentences)]
    if engine == "torch-fp32":
        translator = ours
    else:
        quantization = "int8" if engine.endswith("int8") else "float32"
        translator = CTranslate2Translator.from_dirs([exports / quantization])
    if engine == "ctranslate2-native-fp32":
        seconds, out = timed(lambda: native(translator, sources, cfg))
    else:
        seconds, out = timed(lambda: [best_text(n) for n in translator.translate_ids(sources, cfg)])
    return {"sentences_per_s": len(sources) / seconds, "outputs": out}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--sentences", type=Path, required=True)
    p.add_argument("--references", type=Path)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path)
    p.add_argument("--only", choices=ENGINES, help=argparse.SUPPRESS)  # one measurement
    p.add_argument("--exports", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    sentences = read_text(args.sentences)
    if args.only:
        tune_malloc()  # as the translate command does, for either engine
        print(json.dumps(measure(args.only, args.model, args.exports, sentences)))
        return
    refs = read_text(args.references)
    runs: dict[str, list[float]] = {name: [] for name in ENGINES}
    outputs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for q in ("float32", "int8"):
            export_ctranslate2(args.model, Path(tmp) / q, quantization=q)
        for r in range(args.rounds):
            for name in ENGINES:
                done = subprocess.run(
                    [sys.executable, __file__, "--only", name, "--model", str(args.model),
                     "--sentences", str(args.sentences), "--exports", tmp],
                    capture_output=True, text=True, check=True)
                measured = json.loads(done.stdout.strip().splitlines()[-1])
                runs[name].append(measured["sentences_per_s"])
                outputs[name] = measured["outputs"]
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in runs.items()),
                  file=sys.stderr, flush=True)
    ours = Translator.from_dir(args.model)
    cfg = ours.decode_cfg
    sources = [ours.encode_source(s, i) for i, s in enumerate(sentences)]
    caps = max_output_lengths(ours._padded(sources), ours.model.cfg.pad_id, cfg)
    at_cap = sum(len(ours.vocab.encode(t)) + 1 >= int(c)
                 for t, c in zip(outputs["torch-fp32"], caps.tolist(), strict=True))
    result = {
        "question": "translate --engine ctranslate2 vs our engine, same model and sentences",
        "model": str(args.model), "sentences": len(sentences), "decode": dataclasses.asdict(cfg),
        "threads": torch.get_num_threads(), "torch": torch.__version__,
        "ctranslate2": __import__("ctranslate2").__version__,
        "outputs_at_length_cap": at_cap,
        "engines": {name: {
            "sentences_per_s": [round(v, 2) for v in speeds],
            "mean": round(statistics.mean(speeds), 2),
            "vs_torch_fp32_by_round": [round(v / t, 3) for v, t in
                                       zip(speeds, runs["torch-fp32"], strict=True)],
            "bleu": round(sacrebleu_scores(outputs[name], refs)[0], 2),
            "same_as_torch_fp32": sum(a == b for a, b in zip(outputs[name],
                                                             outputs["torch-fp32"], strict=True)),
        } for name, speeds in runs.items()},
    }
    emit(result, args.out)


if __name__ == "__main__":
    main()
