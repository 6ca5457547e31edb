"""Decoding speed against Marian itself (the C++ toolkit behind OPUS-MT), on the same weights.

One Marian model of a preset's shape (`small`, `base`) is made by Marian (`pymarian` train, one
update on Multi30k's training text, Marian's own 8k SentencePiece vocabulary), its end-of-sentence
bias set to -1e4 so that no output ends early, and imported into ours (`transformer-mt import
marian`). Both engines then translate the same file of sentences that are each exactly LENGTH
pieces long, so that every output runs to the length cap, max-length-factor x (LENGTH + 1)
pieces, a whole number of decoder steps for both engines (an output that reaches Marian's cap
ends with its last piece: docs/interop.md), greedy and beam 4, batches of 64 sentences; the
result records the pieces each engine wrote per sentence. Each engine runs
as its command line ships (`pymarian decode`; `transformer-mt translate`), in turns, round
after round; a configuration's speed is (sentences - few) / (time of all - time of few), which
cancels process start and model loading.

Threads: Marian's `--cpu-threads N` runs N workers, each decoding its own batches on one thread;
ours runs each batch on N intra-op threads (OMP_NUM_THREADS=N), or with "ours fp32 workers=N"
N batches at once, each on its own thread (`translate --workers N`). Int8: Marian's `--gemm-type`
packed8avx512 (or packed8avx2, as this CPU has) or intgemm8avx512 (intgemm8avx2, ...) on the
model its converter packed for that type, ours `--int8`. The decoder's `--gemm-type` names the
packed8 types (it refuses the intgemm ones: "Unknown GEMM type"); an intgemm8 model carries its
type and is decoded without the flag.

    python benchmarks/speed/marian_decode.py --data runs/m30k/data --shape small \\
        --work runs/marian-speed --rounds 3 --threads 1 --json out.json

Needs benchmarks/compat/marian_env.sh's environment ($MARIAN, default .venv-marian/bin/pymarian).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
import sentencepiece as spm

from transformer_mt.config import load_config
from transformer_mt.hardware.cpu_speed import cpu_model

REPO = Path(__file__).resolve().parents[2]
MARIAN = Path(os.environ.get("MARIAN", REPO / ".venv-marian" / "bin" / "pymarian"))
FEW = 8  # sentences of the short run that measures start-up and loading


def make_marian_model(work: Path, data: Path, shape: str, factor: float) -> Path:
    """Marian's model at `shape` (one update on the training text), EOS never winning."""
    model_dir = work / "marian"
    if (model_dir / "decoder.yml").exists():
        return model_dir
    model_dir.mkdir(parents=True, exist_ok=True)
    cfg = load_config(shape).model
    subprocess.run(
        [str(MARIAN), "--type", "transformer", "--model", str(model_dir / "trained.npz"),
         "--train-sets", str(data / "train.src.txt"), str(data / "train.tgt.txt"),
         "--vocabs", str(model_dir / "vocab.spm"), str(model_dir / "vocab.spm"),
         "--dim-vocabs", "8000", "8000", "--dim-emb", str(cfg.d_model),
         "--transformer-dim-ffn", str(cfg.d_ff), "--transformer-heads", str(cfg.n_heads),
         "--enc-depth", str(cfg.n_encoder_layers), "--dec-depth", str(cfg.n_decoder_layers),
         "--tied-embeddings-all", "--after-batches", "1", "--mini-batch", "16",
         "--cpu-threads", "1", "-w", "2000", "--seed", "1", "--quiet"], check=True)
    with np.load(model_dir / "trained.npz", allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files}
    eos = spm.SentencePieceProcessor(model_file=str(model_dir / "vocab.spm")).eos_id()
    arrays["decoder_ff_logit_out_b"][..., eos] = -1e4  # outputs run to the length cap
    np.savez(model_dir / "model.npz", **arrays)
    for leftover in model_dir.glob("trained.npz*"):  # training's optimizer state and configs
        leftover.unlink()
    model, vocab = (model_dir / "model.npz").resolve(), (model_dir / "vocab.spm").resolve()
    (model_dir / "decoder.yml").write_text(  # absolute paths: Marian reads them from its cwd
        f"models:\n  - {model}\nvocabs:\n  - {vocab}\n  - {vocab}\nbeam-size: 4\n"
        f"normalize: 0\nword-penalty: 0\nmax-length-factor: {factor}\n", encoding="utf-8")
    return model_dir


def fixed_length_sentences(vocab: Path, n: int, length: int, seed: int = 1) -> list[str]:
    """`n` sentences of whole-word pieces that the vocabulary encodes as exactly `length`."""
    sp = spm.SentencePieceProcessor(model_file=str(vocab))
    words = [p[1:] for p in (sp.id_to_piece(i) for i in range(len(sp)))
             if p.startswith("\u2581") and p[1:].isalpha() and len(p) > 2]
    rng, out = random.Random(seed), []
    while len(out) < n:
        sentence = " ".join(rng.choice(words) for _ in range(length))
        if len(sp.encode(sentence)) == length:
            out.append(sentence)
    return out


def marian_model(model_dir: Path, gemm_type: str) -> Path:
    """Marian's model for `gemm_type`: the npz for float32, else the binary model that Marian's
    converter packs for that type (`pymarian convert`, made once): given a float32 npz, the
    decoder's --gemm-type alone leaves the products in float32."""
    if gemm_type == "float32":
        return model_dir / "model.npz"
    converted = model_dir / f"model.{gemm_type}.bin"
    if not converted.exists():
        subprocess.run([str(MARIAN), "convert", "-f", str(model_dir / "model.npz"), "-t",
                        str(converted), "--gemm-type", gemm_type], check=True,
                       stdout=subprocess.DEVNULL)
    return converted


def commands(engine: str, beam: int, threads: int, model: Path, factor: float,
             source: Path, output: Path) -> tuple[list[str], dict[str, str]]:
    """The command line of `engine` ("marian float32", "ours int8", "ours fp32 workers=2",
    ...) and its environment."""
    name, dtype, *options = engine.split()
    env = os.environ | {"OMP_NUM_THREADS": str(threads)}
    if name == "marian":  # int8 types decode the model converted to them (marian_model)
        gemm = [] if dtype.startswith("intgemm") else ["--gemm-type", dtype]
        return [str(MARIAN), "decode", "-c", str(model / "decoder.yml"), "--models",
                str(marian_model(model, dtype)), "--cpu-threads", str(threads),
                "--mini-batch", "64", "--maxi-batch", "100", "--maxi-batch-sort", "src", "-b",
                str(beam), *gemm, "-i", str(source), "-o", str(output), "--quiet"], env
    return ["transformer-mt", "translate", "--model", str(model), "--input", str(source),
            "--output", str(output), "--beam-size", str(beam), "--strategy",
            "beam" if beam > 1 else "greedy", "--batch-size", "64", "--alpha", "0",
            "--max-length-factor", str(factor), "--max-length-offset", "100000",
            *(["--int8"] if dtype == "int8" else []),
            *[part for option in options for part in f"--{option}".split("=")]], env


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - start


def output_lengths(path: Path, vocab: Path) -> list[int]:
    sp = spm.SentencePieceProcessor(model_file=str(vocab))
    return [len(sp.encode(line)) for line in path.read_text(encoding="utf-8").splitlines()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True, help="a prepared Multi30k directory")
    p.add_argument("--shape", default="small")
    p.add_argument("--work", type=Path, required=True, help="models and inputs (kept)")
    p.add_argument("--sentences", type=int, default=1024)
    p.add_argument("--length", type=int, default=19, help="pieces per source sentence")
    p.add_argument("--factor", type=float, default=1.5, help="the length cap's factor")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--beams", default="1 4")
    p.add_argument("--engine", action="append", dest="engines",
                   help='"marian float32", "marian packed8avx512", "marian intgemm8avx512", '
                        '"ours fp32", "ours int8" (default: marian float32 and packed8, ours '
                        "fp32 and int8)")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    engines = args.engines or ["marian float32", "marian packed8avx512", "ours fp32", "ours int8"]
    marian = make_marian_model(args.work, args.data, args.shape, args.factor)
    ours = args.work / "ours"
    if not (ours / "model.safetensors").exists():
        subprocess.run(["transformer-mt", "import", "marian", str(marian), "--out", str(ours)],
                       check=True)
    vocab = marian / "vocab.spm"
    sentences = fixed_length_sentences(vocab, args.sentences, args.length)
    files = {"all": args.work / "all.src", "few": args.work / "few.src"}
    files["all"].write_text("\n".join(sentences) + "\n", encoding="utf-8")
    files["few"].write_text("\n".join(sentences[:FEW]) + "\n", encoding="utf-8")
    steps = args.factor * (args.length + 1)  # decoder steps per sentence, in both engines
    if steps != int(steps):
        p.error(f"--factor x (--length + 1) = {steps}: choose them to give whole steps")
    cells = [(e, b) for b in map(int, args.beams.split()) for e in engines]
    times: dict[str, list[dict]] = {f"{e} beam {b}": [] for e, b in cells}
    lengths: dict[str, float] = {}
    for r in range(args.rounds):
        for engine, beam in cells[r % len(cells):] + cells[: r % len(cells)]:  # rotating order
            key, model = f"{engine} beam {beam}", marian if engine.startswith("marian") else ours
            run = {}
            for which in ("few", "all"):
                out = args.work / f"{key.replace(' ', '_')}.{which}.out"
                run[which] = timed(*commands(engine, beam, args.threads, model, args.factor,
                                             files[which], out))
            times[key].append(run)
            if key not in lengths:  # pieces written: one per decoder step
                lengths[key] = statistics.mean(output_lengths(out, vocab))
            print(f"round {r + 1} {key}: {run['all']:.2f} s all, {run['few']:.2f} s few",
                  flush=True)
    rate = {k: [(args.sentences - FEW) / (t["all"] - t["few"]) for t in v]
            for k, v in times.items()}
    result = {"question": "decoding speed against Marian itself on the same weights",
              "machine": cpu_model(), "threads": args.threads, "shape": args.shape,
              "sentences": args.sentences, "source_pieces": args.length,
              "decoder_steps_per_sentence": int(steps), "measured_steps": lengths,
              "sentences_per_s": {k: [round(x, 2) for x in v] for k, v in rate.items()},
              "median_sentences_per_s": {k: round(statistics.median(v), 2)
                                         for k, v in rate.items()},
              "seconds": times}
    for beam in map(int, args.beams.split()):
        for ours_engine in (e for e in engines if e.startswith("ours")):
            for peer in (e for e in engines if e.startswith("marian")):
                a, b = f"{ours_engine} beam {beam}", f"{peer} beam {beam}"
                ratios = [x / y for x, y in zip(rate[a], rate[b], strict=True)]
                result.setdefault("ratios", {})[f"{a} / {b}"] = {
                    "median": round(statistics.median(ratios), 3),
                    "rounds": [round(x, 3) for x in ratios]}
    print(json.dumps({k: result[k] for k in ("median_sentences_per_s", "measured_steps",
                                             "ratios")}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
