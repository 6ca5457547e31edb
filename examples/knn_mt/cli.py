"""kNN-MT from the command line (not in the paper; Khandelwal et al., 2021).

    python examples/knn_mt/cli.py datastore --model MODEL --data PREPARED --out STORE
    python examples/knn_mt/cli.py translate --model MODEL --datastore STORE --input SRC \\
        [--knn-k 16 --knn-temperature 10 --knn-lambda 0.25 --knn-probe 32] [translate's options]

`datastore` decodes a split of a prepared data directory by teacher forcing and stores, for
every target position, the decoder's output state and the token that followed, indexed with
faiss (`pip install -e ".[knn]"`). `translate` mixes the tokens of the nearest stored states into
the model's distribution: the model is wrapped in a `KnnModel`, which follows transformer-mt's
decoding protocol, and decoded by the ordinary `Translator`. A datastore belongs to the weights
that built it; another model is refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the examples folder on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from knn_mt.knn import Datastore, KnnConfig, KnnModel, build_datastore  # noqa: E402
from transformer_mt import Translator  # noqa: E402
from transformer_mt.cli.main import run_command  # noqa: E402
from transformer_mt.cli.options import add_config_options, given  # noqa: E402
from transformer_mt.config import DecodeConfig  # noqa: E402
from transformer_mt.evaluation.bleu import read_text  # noqa: E402
from transformer_mt.storage.files import sha256_file  # noqa: E402
from transformer_mt.storage.model_dir import WEIGHTS_FILE  # noqa: E402
from transformer_mt.storage.run_dir import resolve_model_dir  # noqa: E402

log = logging.getLogger("knn_mt")


def datastore(args: argparse.Namespace) -> int:
    model_dir = resolve_model_dir(args.model)
    log.info("decoding the %s split of %s with %s", args.split, args.data, model_dir)
    start = time.perf_counter()
    store = build_datastore(model_dir, args.data, split=args.split, nlist=args.nlist)
    store.save(args.out, corpus=f"{args.data} {args.split}")
    print(f"datastore: {len(store):,} target positions, {store.index.nlist} cells, built in "
          f"{time.perf_counter() - start:.1f} s; written to {args.out}")
    return 0


def translate(args: argparse.Namespace) -> int:
    model_dir = resolve_model_dir(args.model)
    plain = Translator.from_dir(model_dir, device=args.device, **given(args, "decode"))
    model = plain.model
    store = Datastore.load(args.datastore, model_sha256=sha256_file(model_dir / WEIGHTS_FILE),
                           d_model=model.cfg.d_model)
    # plain.model is quantised already where decode.int8 asks for it
    decode = dataclasses.replace(plain.decode_cfg, int8=False)
    translator = Translator(KnnModel(model, store, KnnConfig(**given(args, "knn"))),
                            plain.vocab, decode)
    lines = "".join(text + "\n" for text in translator.translate(read_text(args.input)))
    if args.output:
        args.output.write_text(lines, encoding="utf-8")
    else:
        sys.stdout.write(lines)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="knn_mt", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ds = sub.add_parser("datastore", help="build a model's datastore over prepared data")
    ds.add_argument("--model", required=True, type=Path, help="model or run directory")
    ds.add_argument("--data", required=True, type=Path, help="prepared data directory")
    ds.add_argument("--split", default="train", help="which split (default: train)")
    ds.add_argument("--out", required=True, type=Path, help="datastore directory to write")
    ds.add_argument("--nlist", type=int,
                    help="k-means cells of the index (default: about 4 sqrt(entries))")
    ds.set_defaults(run=datastore)
    tr = sub.add_parser("translate", help="translate with a model and its datastore")
    tr.add_argument("--model", required=True, type=Path, help="model or run directory")
    tr.add_argument("--datastore", required=True, type=Path, help="from `datastore`")
    tr.add_argument("--input", required=True, type=Path, help="one sentence per line")
    tr.add_argument("--output", type=Path, help="translations (default: stdout)")
    tr.add_argument("--device", default="cpu")
    add_config_options(tr, KnnConfig, "knn")
    add_config_options(tr, DecodeConfig, "decode")
    tr.set_defaults(run=translate)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser().parse_args(argv), prog="knn_mt")


if __name__ == "__main__":
    sys.exit(main())
