"""`transformer-mt attention`: one sentence's attention weights drawn and saved."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..storage.files import atomic_dir


def add_parser(sub) -> None:
    p = sub.add_parser(
        "attention", help="draw one sentence's attention weights (the paper's Figures 3-5)",
        description="Run a model on one sentence, teacher-forced on --target (default: the "
                    "model's own translation), and write to --out: every layer's and head's "
                    "weights as attention.npz (numpy.load, allow_pickle=False), a layer x head "
                    "grid of heatmaps for each kind (encoder.png, decoder.png, cross.png), a "
                    "self-contained page with kind/layer/head selectors (attention.html, "
                    "opens from disk), the weights in bertviz's head-view layout "
                    "(bertviz.json), with --from the paper's Figure 3 view (every head of one "
                    "encoder layer from one source token) and with --head its Figure 4 view "
                    "(one head's full attention as lines). --words draws words instead of "
                    "subword pieces. Layers are titled 'layer 5 of 6 (index 4)'.")
    p.add_argument("--model", required=True, type=Path, help="model or run directory")
    p.add_argument("--source", required=True, help="the source sentence")
    p.add_argument("--target", help="the target to teacher-force (default: the translation)")
    p.add_argument("--out", required=True, type=Path, help="directory to write")
    p.add_argument("--from", dest="from_word", metavar="WORD",
                   help="a source word or piece: draw every head of --layer from it")
    p.add_argument("--head", type=int, help="draw this head's (0-based) full attention in "
                                            "--layer as lines (head-L-H.png)")
    p.add_argument("--layer", type=int, help="the encoder layer of --from and --head, 0-based "
                                             "(default: the last)")
    p.add_argument("--format", choices=("png", "svg"), default="png",
                   help="the figures' format (default png)")
    p.add_argument("--words", action="store_true",
                   help="draw words, the pieces merged (a key word's weight is the sum of its "
                        "pieces', a query word's row the mean of theirs); attention.npz and "
                        "bertviz.json keep the pieces")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import torch  # here: `--help` needs no torch (tests/test_cli.py)

    from ..inference.attention_maps import KINDS, attention_maps
    from ..inference.translator import Translator
    from ..research.attention_view import (
        SentenceAttention,
        draw_from,
        draw_grid,
        draw_head,
        draw_html,
        save_bertviz,
        save_npz,
    )
    from ..storage.run_dir import resolve_model_dir

    translator = Translator.from_dir(resolve_model_dir(args.model))
    model, vocab = translator.model, translator.vocab
    n = model.cfg.n_encoder_layers
    layer = n - 1 if args.layer is None else args.layer
    if not 0 <= layer < n:
        raise ValueError(f"--layer {layer}: the encoder has layers 0 .. {n - 1}")
    if args.head is not None and not 0 <= args.head < model.cfg.n_heads:
        raise ValueError(f"--head {args.head}: the layers have heads 0 .. "
                         f"{model.cfg.n_heads - 1}")
    src_ids = translator.encode_source(args.source, 0)
    if len(src_ids) == 1:
        raise ValueError("--source is empty: give a sentence to translate")
    out_ids = vocab.encode_target(args.target) if args.target is not None else \
        list(translator.translate_nbest([args.source])[0][0].tokens)
    tgt_in = [model.cfg.bos_id, *out_ids]
    _, maps = attention_maps(model, torch.tensor([src_ids]), torch.tensor([tgt_in]))
    view = SentenceAttention.of(maps, [vocab.piece(i) for i in src_ids],
                                [vocab.piece(i, "target") for i in tgt_in])
    with atomic_dir(args.out) as tmp:  # the files appear together, once all are drawn
        written = [save_npz(view, tmp / "attention.npz"), save_bertviz(view, tmp / "bertviz.json")]
        if args.words:
            view = view.words({vocab.piece(i) for i in (model.cfg.bos_id, model.cfg.eos_id)})
        written += [draw_grid(view, kind, tmp / f"{kind}.{args.format}") for kind in KINDS]
        written.append(draw_html(view, tmp / "attention.html"))
        if args.from_word:
            query = source_index(view.source, args.from_word)
            written.append(draw_from(view, query, layer, tmp / f"from-{query}.{args.format}"))
        if args.head is not None:
            written.append(draw_head(view, layer, args.head,
                                     tmp / f"head-{layer}-{args.head}.{args.format}"))
    print(f"translation: {vocab.decode(out_ids)}")
    for path in written:
        print(args.out / path.name)
    return 0


def source_index(tokens: list[str], word: str) -> int:
    """The position of `word` among the source tokens (pieces, or words with --words; as it
    is or starting a word)."""
    for i, token in enumerate(tokens):
        if token in (word, "\u2581" + word):
            return i
    raise ValueError(f"--from {word!r} is not a source token; the tokens: {' '.join(tokens)}")
