"""Engines decoding (or training on) the same batches in turn, so that the machine's drift
(±20 % within minutes on a shared 2-core VM) falls on all of them alike. Each engine runs in its
own worker process, as in decode_speed.py and train_speed.py; the workers take turns batch by
batch, the order rotating from batch to batch. A decoding round is one pass over the 1,014
validation sentences (batches of 64 sorted by length, 30 output tokens forced) greedy and with
beam 4; a training round is one full step (forward, backward, Adam) on each of the `--steps`
batches that train_speed.py times. Speed ratios are the first engine's time over each other's,
per round and over all rounds (with a bootstrap interval over the (round, batch) turns).

    python benchmarks/speed/interleaved.py --data runs/m30k/data --shape base --rounds 5 \\
        --engine "ct2 int8 onednn" --engine "ours int8" --engine "ours int8+kv" --json out.json
    python benchmarks/speed/interleaved.py --task train --data runs/m30k/data --shape base \\
        --engine "fairseq fp32" --engine "ours fp32" --json out.json

Taking turns is not neutral on every machine: on a Firecracker VM with free page reporting,
`--pause 0.25` slowed CTranslate2 by about a quarter and ours by a tenth against each alone,
and training turns slowed fairseq (which returns memory to the system every step) by a third
(benchmarks/results/decode-vs-ctranslate2-in-turns-zen4). Compare each engine's speed here with
its speed alone (decode_speed.py) before trusting a ratio.

fairseq runs with the Python of benchmarks/speed/fairseq_env.sh's environment ($FAIRSEQ_PYTHON,
default .venv-fairseq/bin/python).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

TURNS = {"decode": (("greedy", 1), ("beam4", 4)), "train": (("train", 0),)}


def worker(spec: str, args: argparse.Namespace) -> None:
    """Build the engine of `spec` ("ENGINE DTYPE [BACKEND]"), then answer each line
    "BEAM INDEX" on stdin with the seconds that decoding (or a training step on) batch INDEX
    took."""
    import torch
    from decode_speed import timed
    from engines import build, decoding_batches, decoding_config
    from train_speed import training_batches, training_config

    from transformer_mt.data.dataset import ParallelData
    from transformer_mt.hardware.onednn import bound_onednn_caches

    engine_name, dtype = spec.split()[:2]
    torch.manual_seed(0)
    if args.task == "decode":
        engine = build(engine_name, decoding_config(args.shape), dtype=dtype,
                       threads=torch.get_num_threads())
        batches = decoding_batches(args.data, args.batch_size)
        engine.decode(batches[len(batches) // 2], beam=1, length=args.length)  # warm-up
        sizes = [len(b) for b in batches]  # sentences

        def turn(beam: int, i: int) -> None:
            engine.decode(batches[i], beam=beam, length=args.length)
    else:
        if engine_name == "ours":
            bound_onednn_caches()  # as `train` does
        engine = build(engine_name, training_config(args.shape, dtype).model, dtype=dtype,
                       threads=torch.get_num_threads())
        batches = training_batches(ParallelData(args.data, "train"), max_tokens=args.max_tokens,
                                   n=args.warmup + args.steps)
        for batch in batches[: args.warmup]:
            engine.train_step(*batch)
        batches = batches[args.warmup :]
        sizes = [batch[-1] for batch in batches]  # target tokens

        def turn(beam: int, i: int) -> None:
            engine.train_step(*batches[i])
    print(f"ready {len(batches)} {sum(sizes)} {engine.name}", flush=True)
    for line in sys.stdin:
        beam, index = map(int, line.split())
        seconds = timed(lambda b=beam, i=index: turn(b, i), torch.device("cpu"))
        print(f"{seconds:.6f}", flush=True)


class Worker:
    def __init__(self, spec: str, argv: list[str]):
        engine, _, *backend = spec.split()
        env = dict(os.environ)
        if backend:  # CTranslate2's matrix backend, as run.sh forces it
            env["CT2_USE_MKL"] = {"mkl": "1", "onednn": "0"}[backend[0]]
        here = Path(__file__).resolve().parent
        fairseq_python = here.parents[1] / ".venv-fairseq/bin/python"  # as run.sh's
        python = os.environ.get("FAIRSEQ_PYTHON", str(fairseq_python)) \
            if engine == "fairseq" else sys.executable
        self.proc = subprocess.Popen([python, __file__, "--worker", spec, *argv],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=env, cwd=here)
        ready = self.proc.stdout.readline().split(maxsplit=3)
        if len(ready) < 4 or ready[0] != "ready":
            raise RuntimeError(f"worker {spec!r} did not start")
        self.n_batches, self.size, self.name = int(ready[1]), int(ready[2]), ready[3].strip()

    def run(self, beam: int, index: int) -> float:
        self.proc.stdin.write(f"{beam} {index}\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def bootstrap_ratio(times_a: np.ndarray, times_b: np.ndarray, draws: int = 2000) -> list[float]:
    """95 % interval of sum(a) / sum(b) over resampled turns (paired)."""
    rng = np.random.default_rng(0)
    index = rng.integers(0, len(times_a), size=(draws, len(times_a)))
    ratios = times_a[index].sum(1) / times_b[index].sum(1)
    return [float(np.quantile(ratios, 0.025)), float(np.quantile(ratios, 0.975))]


def main(argv: list[str] | None = None) -> dict:
    from decode_speed import decode_parser

    parser = decode_parser(__doc__, default_dtype="fp32")
    parser.add_argument("--task", choices=sorted(TURNS), default="decode")
    parser.add_argument("--engine", action="append", default=[],
                        help="'ENGINE DTYPE [mkl|onednn]', as decode_speed.py's and "
                        "train_speed.py's --engine and --dtype; the first is the one the others "
                        "are compared with")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pause", type=float, default=0.0, help="seconds before each turn")
    parser.add_argument("--max-tokens", type=int, default=4096, help="train: tokens a batch")
    parser.add_argument("--warmup", type=int, default=3, help="train: untimed steps first")
    parser.add_argument("--steps", type=int, default=10, help="train: batches a round")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker, args)
    if len(args.engine) < 2:
        parser.error("name at least two engines (--engine twice)")
    shared = ["--task", args.task, "--data", str(args.data.resolve()), "--shape", args.shape,
              "--length", str(args.length), "--batch-size", str(args.batch_size),
              "--max-tokens", str(args.max_tokens), "--warmup", str(args.warmup),
              "--steps", str(args.steps)]
    workers = [Worker(spec, shared) for spec in args.engine]
    n_batches, size = workers[0].n_batches, workers[0].size
    unit = "sentences" if args.task == "decode" else "target_tokens"
    turns = TURNS[args.task]
    # times[label][w]: (rounds, batches) seconds of worker w
    times = {label: np.zeros((len(workers), args.rounds, n_batches)) for label, _ in turns}
    for r in range(args.rounds):
        for label, beam in turns:
            for i in range(n_batches):
                for k in range(len(workers)):
                    w = (k + i + r) % len(workers)  # each engine first in turn
                    time.sleep(args.pause)
                    times[label][w, r, i] = workers[w].run(beam, i)
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{label} " + " ".join(f"{size / times[label][w, r].sum():.1f}"
                                   for w in range(len(workers)))
            for label, _ in turns) + f" {unit}/s", file=sys.stderr, flush=True)
    for w in workers:
        w.close()
    result = {"task": args.task, "shape": args.shape, "rounds": args.rounds, unit: size,
              "pause_s": args.pause, "engines": args.engine, "results": {}}
    result |= {"output_tokens": args.length, "batch_size": args.batch_size} \
        if args.task == "decode" else {"max_tokens": args.max_tokens, "steps": args.steps}
    for label, _ in turns:
        per_engine = []
        for w, spec in enumerate(args.engine):
            entry = {"engine": spec, "name": workers[w].name,
                     f"{unit}_per_s_rounds": [size / t for t in times[label][w].sum(1)],
                     f"{unit}_per_s": size * args.rounds / times[label][w].sum()}
            if w:
                per_round = times[label][0].sum(1) / times[label][w].sum(1)
                entry |= {"speed_vs_first": float(times[label][0].sum() / times[label][w].sum()),
                          "speed_vs_first_rounds": per_round.tolist(),
                          "speed_vs_first_median": statistics.median(per_round),
                          "speed_vs_first_95": bootstrap_ratio(times[label][0].ravel(),
                                                               times[label][w].ravel())}
            per_engine.append(entry)
        result["results"][label] = per_engine
    from engines import emit
    return emit(result, args.json)


if __name__ == "__main__":
    main()
