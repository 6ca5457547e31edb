"""fairseq transformer checkpoints in.

A checkpoint (`checkpoint_best.pt`, ...) holds the model's settings (`args`, an
argparse.Namespace, or `cfg["model"]`) and its state dict; its dictionary (`dict.SRC.txt`,
`dict.TGT.txt`: `piece count` lines after the specials <s> 0, <pad> 1, </s> 2, <unk> 3; two
different ones are separate source and target vocabularies) and the SentencePiece model it was
made with lie beside it. The checkpoint is read with
torch's weights_only unpickler with argparse.Namespace the one class allowed
(`storage.model_dir.load_torch_file`): a checkpoint holding any other global is refused,
naming it, and nothing in it runs.

What fairseq does differently becomes config: positions are the tensor2tensor `concat`
sinusoids starting at padding_idx + 1 (`position_offset`), learned positions drop those first
rows, LayerNorm eps 1e-5, biased projections, the decoder starts from </s> (bos_id = eos_id),
and decoding is fairseq's defaults: beam 5, log P / |Y|^1, at least one token before EOS, at
most 200 tokens + EOS.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import torch

from ..config import DecodeConfig, ModelConfig
from ..data.vocab import MarianVocabulary
from ..storage.model_dir import ModelLoadError, load_torch_file, model_from_weights, save_model
from ..storage.names import MARIAN_FILES, MARIAN_VOCAB_FILE, TARGET_VOCAB_FILE
from . import ConversionError
from .layout import layer_names

SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq's Dictionary: ids 0 .. 3
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "silu", "silu": "silu"}


def read_dictionary(path: Path) -> list[str]:
    """The pieces of a fairseq dict.txt in id order, the four specials first."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ConversionError(f"{path}: cannot read the dictionary: {err}") from None
    pieces = list(SPECIALS)
    for n, line in enumerate(lines, 1):
        fields = line.rstrip().rsplit(" ", 1)
        if line.rstrip().endswith(" #fairseq:overwrite"):
            fields = line.rstrip().removesuffix(" #fairseq:overwrite").rsplit(" ", 1)
        if len(fields) != 2 or not fields[1].lstrip("-").isdigit():
            raise ConversionError(f"{path}: line {n}: expected 'piece count', got {line!r}")
        if fields[0] in pieces:
            raise ConversionError(f"{path}: line {n}: piece {fields[0]!r} listed twice")
        pieces.append(fields[0])
    return pieces


def _settings(checkpoint: dict[str, Any], path: Path) -> dict[str, Any]:
    """The model's settings: `args` (fairseq < 0.10) or `cfg["model"]` (a Namespace or dict)."""
    found = checkpoint.get("args")
    if found is None and isinstance(checkpoint.get("cfg"), dict):
        found = checkpoint["cfg"].get("model")
    if isinstance(found, argparse.Namespace):
        return vars(found)
    if isinstance(found, dict):
        return found
    raise ConversionError(f"{path}: no model settings (neither 'args' nor 'cfg.model')")


def fairseq_model_config(args: dict[str, Any], vocab_size: int, target_vocab_size: int,
                         path: Path) -> ModelConfig:
    """Our ModelConfig for fairseq's settings and dictionary sizes; every setting that cannot
    be mapped is listed."""
    problems = []
    if args.get("share_all_embeddings") and vocab_size != target_vocab_size:
        problems.append(f"share_all_embeddings with dictionaries of {vocab_size} and "
                        f"{target_vocab_size} pieces")
    for stack in ("attention_heads", "ffn_embed_dim", "embed_dim", "normalize_before",
                  "learned_pos"):
        enc, dec = f"encoder_{stack}", f"decoder_{stack}"
        if args.get(enc, False) != args.get(dec, False):
            problems.append(f"{enc}={args.get(enc)} differs from {dec}={args.get(dec)}")
    activation = args.get("activation_fn", "relu")
    if activation not in ACTIVATIONS:
        problems.append(f"activation_fn={activation!r} (supported: {', '.join(ACTIVATIONS)})")
    for key in ("layernorm_embedding", "no_token_positional_embeddings", "cross_self_attention",
                "adaptive_softmax_cutoff", "quant_noise_pq", "encoder_layerdrop",
                "decoder_layerdrop", "adaptive_input", "tie_adaptive_weights"):
        if args.get(key):
            problems.append(f"{key}={args[key]} (not supported)")
    for key in ("encoder_embed_dim", "encoder_layers", "decoder_layers",
                "encoder_attention_heads", "encoder_ffn_embed_dim"):
        if not isinstance(args.get(key), int):
            problems.append(f"{key} is missing")
    if problems:
        raise ConversionError(f"{path}: cannot convert: " + "; ".join(problems))
    learned = bool(args.get("encoder_learned_pos"))
    tying = "three_way" if args.get("share_all_embeddings") else \
        "decoder" if args.get("share_decoder_input_output_embed") else "none"
    return ModelConfig(
        vocab_size=vocab_size, d_model=args["encoder_embed_dim"],
        target_vocab_size=target_vocab_size if target_vocab_size != vocab_size else 0,
        n_heads=args["encoder_attention_heads"], d_ff=args["encoder_ffn_embed_dim"],
        n_encoder_layers=args["encoder_layers"], n_decoder_layers=args["decoder_layers"],
        dropout=args.get("dropout", 0.1), attention_dropout=args.get("attention_dropout", 0.0),
        activation_dropout=args.get("activation_dropout", args.get("relu_dropout", 0.0)) or 0.0,
        activation=ACTIVATIONS[activation], attention_bias=True, layer_norm_eps=1e-5,
        norm_first=bool(args.get("encoder_normalize_before")),
        positional="learned" if learned else "sinusoidal", sinusoid_layout="concat",
        position_offset=0 if learned else SPECIALS.index("<pad>") + 1,
        max_positions=min(args.get("max_source_positions", 1024),
                          args.get("max_target_positions", 1024)),
        scale_embeddings=not args.get("no_scale_embedding", False), weight_tying=tying,
        pad_id=1, bos_id=2, eos_id=2, unk_id=SPECIALS.index("<unk>"))


def fairseq_state(cfg: ModelConfig, theirs: dict[str, torch.Tensor],
                  path: Path) -> dict[str, torch.Tensor]:
    """Our state dict from fairseq's."""
    state = {}
    for their_name, our_name in layer_names(cfg).items():
        for kind in ("weight", "bias"):
            key = f"{their_name}.{kind}"
            if key not in theirs:
                raise ConversionError(f"{path}: tensor {key} is missing")
            state[f"{our_name}.{kind}"] = theirs[key]
    names = {"src_embed.tokens.weight": "encoder.embed_tokens.weight",
             "tgt_embed.tokens.weight": "decoder.embed_tokens.weight",
             "generator.weight": "decoder.output_projection.weight"}
    if cfg.norm_first:
        names |= {f"{s}.final_norm.{k}": f"{s}.layer_norm.{k}"
                  for s in ("encoder", "decoder") for k in ("weight", "bias")}
    if cfg.positional == "learned":  # fairseq's first padding_idx + 1 rows are never used
        names |= {f"{s[:3]}_embed.learned_positions.weight": f"{d}.embed_positions.weight"
                  for s, d in (("src", "encoder"), ("tgt", "decoder"))}
    for ours, key in names.items():
        if key not in theirs:
            if key == "decoder.output_projection.weight" and cfg.weight_tying != "none":
                continue  # older fairseq: tied, not saved
            raise ConversionError(f"{path}: tensor {key} is missing")
        tensor = theirs[key]
        state[ours] = tensor[2:] if "learned_positions" in ours else tensor
    if cfg.weight_tying == "three_way":
        del state["tgt_embed.tokens.weight"]
    if cfg.weight_tying != "none":
        state.pop("generator.weight", None)
    return {k: v.float().contiguous() for k, v in state.items()}


def _beside(checkpoint: Path, pattern: str, what: str) -> list[Path]:
    found = sorted(checkpoint.parent.glob(pattern))
    if not found:
        raise ConversionError(f"{checkpoint.parent}: no {pattern} ({what}) beside "
                              f"{checkpoint.name}")
    return found


def _dictionaries(checkpoint: Path, args: dict[str, Any], found: list[Path]
                  ) -> list[tuple[Path, list[str]]]:
    """(path, pieces) of the source and the target dictionary among the dict.*.txt `found`
    beside the checkpoint: dict.{source_lang}.txt and dict.{target_lang}.txt where the settings
    name the languages, else the one (or several equal) there."""
    langs = [checkpoint.parent / f"dict.{args.get(k)}.txt" for k in ("source_lang", "target_lang")]
    if all(path.exists() for path in langs):
        return [(path, read_dictionary(path)) for path in langs]
    first = read_dictionary(found[0])
    if all(read_dictionary(f) == first for f in found[1:]):
        return [(found[0], first)] * 2
    raise ConversionError(f"{checkpoint.parent}: {', '.join(f.name for f in found)} differ and "
                          f"the checkpoint names no source_lang/target_lang to tell them apart")


def _padded(pieces: list[str], rows: int, path: Path, tensor: str) -> list[str]:
    """The dictionary as the embedding has it: fairseq pads it to a multiple of 8."""
    if not 0 <= rows - len(pieces) < 8:
        raise ConversionError(f"{path}: {len(pieces)} pieces with the specials, but {tensor} "
                              f"has {rows} rows")
    return pieces + [f"madeupword{i:04d}" for i in range(rows - len(pieces))]


def import_fairseq(checkpoint: str | Path, out_dir: str | Path) -> Path:
    """Convert the fairseq checkpoint `checkpoint` (dict.*.txt and a SentencePiece *.model
    beside it) into a model directory `out_dir`."""
    checkpoint, out_dir = Path(checkpoint), Path(out_dir)
    if not checkpoint.is_file():
        raise ConversionError(f"{checkpoint}: not a file")
    dictionaries = _beside(checkpoint, "dict.*.txt", "fairseq's dictionary")
    sentencepiece = _beside(checkpoint, "*.model", "the SentencePiece model of the pieces")
    if len(sentencepiece) > 1:
        raise ConversionError(f"{checkpoint.parent}: several *.model files: "
                              f"{', '.join(p.name for p in sentencepiece)}")
    try:
        loaded = load_torch_file(checkpoint, allowed_globals=(argparse.Namespace,))
    except ModelLoadError as err:
        raise ConversionError(str(err)) from None
    if not isinstance(loaded, dict) or not isinstance(loaded.get("model"), dict):
        raise ConversionError(f"{checkpoint}: not a fairseq checkpoint (no 'model' state dict)")
    args, state = _settings(loaded, checkpoint), loaded["model"]
    sides = []
    for (path, pieces), tensor in zip(_dictionaries(checkpoint, args, dictionaries),
                                      ("encoder.embed_tokens.weight",
                                       "decoder.embed_tokens.weight"), strict=True):
        rows = state[tensor].shape[0] if tensor in state else len(pieces)
        sides.append(_padded(pieces, rows, path, tensor))
    source, target = sides
    cfg = fairseq_model_config(args, len(source), len(target), checkpoint)
    try:
        model = model_from_weights(cfg, fairseq_state(cfg, state, checkpoint), checkpoint)
    except ModelLoadError as err:
        raise ConversionError(str(err)) from None
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in MARIAN_FILES[:2]:
        shutil.copyfile(sentencepiece[0], out_dir / name)
    maps = [(MARIAN_VOCAB_FILE, source)] + ([(TARGET_VOCAB_FILE, target)] if target != source
                                          else [])
    for name, pieces in maps:
        (out_dir / name).write_text(json.dumps({p: i for i, p in enumerate(pieces)},
                                               ensure_ascii=False), encoding="utf-8")
    MarianVocabulary.load(out_dir)  # the pieces and specials as our tokenisation reads them
    # fairseq's SequenceGenerator: min_len 1 (EOS not first), at most max_len_b 200 + EOS
    decode = DecodeConfig(beam_size=5, length_normalization="power", length_penalty=1.0,
                          beam_stop="n_finished", min_length=2, max_length=201,
                          max_length_offset=cfg.max_positions)
    return save_model(model, out_dir, decode=decode)
