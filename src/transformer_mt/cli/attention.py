"""`transformer-mt attention`: one sentence's attention weights drawn and saved."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from ..inference.attention_maps import KINDS, attention_maps
from ..inference.attention_view import (
    SentenceAttention,
    draw_from,
    draw_grid,
    draw_html,
    save_npz,
)
from ..inference.translator import Translator
from ..training.checkpoint import resolve_model_dir


def add_parser(sub) -> None:
    p = sub.add_parser(
        "attention", help="draw one sentence's attention weights (the paper's Figures 3-5)",
        description="Run a model on one sentence, teacher-forced on --target (default: the "
                    "model's own translation), and write to --out: every layer's and head's "
                    "weights as attention.npz (numpy.load, allow_pickle=False), a layer x head "
                    "grid of heatmaps for each kind (encoder.png, decoder.png, cross.png), a "
                    "self-contained page with kind/layer/head selectors (attention.html, "
                    "opens from disk), and "
                    "with --from the paper's Figure 3 view (every head of one encoder layer "
                    "from one source token). Layers are titled 'layer 5 of 6 (index 4)'.")
    p.add_argument("--model", required=True, type=Path, help="model or run directory")
    p.add_argument("--source", required=True, help="the source sentence")
    p.add_argument("--target", help="the target to teacher-force (default: the translation)")
    p.add_argument("--out", required=True, type=Path, help="directory to write")
    p.add_argument("--from", dest="from_word", metavar="WORD",
                   help="a source word or piece: draw every head of --layer from it")
    p.add_argument("--layer", type=int, help="the encoder layer of --from, 0-based (default: "
                                             "the last)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    translator = Translator.from_dir(resolve_model_dir(args.model))
    model, vocab = translator.model, translator.vocab
    src_ids = translator.encode_source(args.source, 0)
    out_ids = vocab.encode_target(args.target) if args.target is not None else \
        list(translator.translate_nbest([args.source])[0][0].tokens)
    tgt_in = [model.cfg.bos_id, *out_ids]
    _, maps = attention_maps(model, torch.tensor([src_ids]), torch.tensor([tgt_in]))
    view = SentenceAttention.of(maps, [vocab.piece(i) for i in src_ids],
                                [vocab.piece(i, "target") for i in tgt_in])
    args.out.mkdir(parents=True, exist_ok=True)
    written = [save_npz(view, args.out / "attention.npz")]
    written += [draw_grid(view, kind, args.out / f"{kind}.png") for kind in KINDS]
    written.append(draw_html(view, args.out / "attention.html"))
    if args.from_word:
        query = source_index(view.source, args.from_word)
        n = model.cfg.n_encoder_layers
        layer = n - 1 if args.layer is None else args.layer
        if not 0 <= layer < n:
            raise ValueError(f"--layer {layer}: the encoder has layers 0 .. {n - 1}")
        written.append(draw_from(view, query, layer, args.out / f"from-{query}.png"))
    print(f"translation: {vocab.decode(out_ids)}")
    for path in written:
        print(path)
    return 0


def source_index(pieces: list[str], word: str) -> int:
    """The position of `word` among the source pieces (as a piece, or one starting a word)."""
    for i, piece in enumerate(pieces):
        if piece in (word, "\u2581" + word):
            return i
    raise ValueError(f"--from {word!r} is not a source piece; the pieces: {' '.join(pieces)}")
