"""Hugging Face Marian (OPUS-MT) models in: a `MarianMTModel` directory (config.json,
model.safetensors or pytorch_model.bin, source.spm, target.spm, vocab.json) becomes a
transformer-mt model directory that decodes as `MarianMTModel.generate` does.

What Marian does differently from the paper becomes explicit config: positions `split` (the
paper's frequencies, sines then cosines), its activation (swish = silu), `output_bias`
(final_logits_bias), LayerNorm eps 1e-5, biased attention projections, decoding that starts from
the padding token (bos_id = pad_id; padding is never generated), `power` length normalisation
with Hugging Face's length_penalty, and its vocabulary (`data.vocab.MarianVocabulary`). What
cannot be mapped is refused, every such setting listed at once; nothing is approximated.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import torch

from ..config import DecodeConfig, ModelConfig
from ..data.vocab import MARIAN_FILES, MarianVocabulary
from ..model.transformer import Transformer, sinusoidal_positions
from ..storage.model_dir import (
    ModelLoadError,
    assign_weights,
    read_foreign_weights,
    save_model,
)

ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu"}
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


class ConversionError(ValueError):
    """A model cannot be converted; the message names the file and every field at fault."""


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ConversionError(f"{path}: cannot read: {err.strerror}") from None
    except ValueError as err:
        raise ConversionError(f"{path}: not JSON ({err})") from None


def marian_model_config(hf: dict[str, Any], path: Path) -> ModelConfig:
    """Our ModelConfig for a Marian config.json; every setting that cannot be mapped is
    listed in one ConversionError."""
    problems = []

    def same(a: str, b: str) -> None:
        if hf.get(a) != hf.get(b):
            problems.append(f"{a}={hf.get(a)} differs from {b}={hf.get(b)} (one value for both "
                            "stacks is supported)")

    same("encoder_attention_heads", "decoder_attention_heads")
    same("encoder_ffn_dim", "decoder_ffn_dim")
    if hf.get("model_type", "marian") != "marian":
        problems.append(f"model_type={hf.get('model_type')!r} (expected 'marian')")
    if hf.get("activation_function") not in ACTIVATIONS:
        problems.append(f"activation_function={hf.get('activation_function')!r} (supported: "
                        f"{', '.join(ACTIVATIONS)})")
    if not hf.get("share_encoder_decoder_embeddings", True) or \
            hf.get("decoder_vocab_size", hf.get("vocab_size")) != hf.get("vocab_size"):
        problems.append("separate source and target vocabularies "
                        "(share_encoder_decoder_embeddings false or decoder_vocab_size != "
                        "vocab_size): one shared vocabulary is supported")
    for key, supported in (("normalize_before", False), ("normalize_embedding", False),
                           ("add_final_layer_norm", False), ("static_position_embeddings", True)):
        if key in hf and hf[key] != supported:
            problems.append(f"{key}={hf[key]} (supported: {supported})")
    if problems:
        raise ConversionError(f"{path}: cannot convert: " + "; ".join(problems))
    pad = hf["pad_token_id"]
    return ModelConfig(
        vocab_size=hf["vocab_size"], d_model=hf["d_model"], n_heads=hf["encoder_attention_heads"],
        d_ff=hf["encoder_ffn_dim"], n_encoder_layers=hf["encoder_layers"],
        n_decoder_layers=hf["decoder_layers"], dropout=hf.get("dropout", 0.1),
        attention_dropout=hf.get("attention_dropout", 0.0),
        activation_dropout=hf.get("activation_dropout", 0.0),
        activation=ACTIVATIONS[hf["activation_function"]], attention_bias=True,
        layer_norm_eps=1e-5, positional="sinusoidal", sinusoid_layout="split",
        max_positions=hf.get("max_position_embeddings", 512),
        scale_embeddings=hf.get("scale_embedding", True),
        output_bias=True,  # weight_tying: import_marian reads it from the weights
        pad_id=pad, bos_id=hf.get("decoder_start_token_id", pad), eos_id=hf["eos_token_id"])


def marian_decode_config(hf: dict[str, Any], cfg: ModelConfig) -> DecodeConfig:
    """Marian's generation settings: its beam, Hugging Face's length_penalty as |Y|^alpha, and
    its length rule: no more than max_length - 1 tokens (its max_length counts the start
    token), whatever the source's length; beams stop as early_stopping=True's do."""
    max_length = min(hf.get("max_length") or cfg.max_positions, cfg.max_positions + 1) - 1
    return DecodeConfig(beam_size=hf.get("num_beams", 4), length_normalization="power",
                        length_penalty=hf.get("length_penalty", 1.0), beam_stop="n_finished",
                        max_length=max_length, max_length_offset=cfg.max_positions)


def _layer_names(stack: str, i: int, decoder: bool) -> dict[str, str]:
    """Marian's tensor names (without .weight/.bias) of one layer -> ours."""
    ours, theirs = f"{stack}.layers.{i}", f"model.{stack}.layers.{i}"
    names = {f"{theirs}.self_attn.{p}_proj": f"{ours}.self_attn.w_{q}"
             for p, q in (("q", "q"), ("k", "k"), ("v", "v"), ("out", "o"))}
    names[f"{theirs}.self_attn_layer_norm"] = f"{ours}.sublayer1.norm"
    names[f"{theirs}.fc1"], names[f"{theirs}.fc2"] = f"{ours}.ff.w_1", f"{ours}.ff.w_2"
    if decoder:
        names.update({f"{theirs}.encoder_attn.{p}_proj": f"{ours}.cross_attn.w_{q}"
                      for p, q in (("q", "q"), ("k", "k"), ("v", "v"), ("out", "o"))})
        names[f"{theirs}.encoder_attn_layer_norm"] = f"{ours}.sublayer2.norm"
    names[f"{theirs}.final_layer_norm"] = f"{ours}.sublayer{3 if decoder else 2}.norm"
    return names


def embeddings(theirs: dict[str, torch.Tensor], path: Path) -> tuple[torch.Tensor, ...]:
    """The source and target embeddings and the output weights: model.shared where a stack's
    own copy is not in the file (tied tensors are saved once), lm_head tied to the target's."""
    shared = theirs.get("model.shared.weight")
    source = theirs.get("model.encoder.embed_tokens.weight", shared)
    target = theirs.get("model.decoder.embed_tokens.weight", shared)
    if source is None or target is None:
        raise ConversionError(f"{path}: tensor model.shared.weight is missing")
    return source, target, theirs.get("lm_head.weight", target)


def weight_tying(theirs: dict[str, torch.Tensor], path: Path) -> str:
    """Which of our tyings the file's embeddings and output weights are (by their values)."""
    source, target, output = embeddings(theirs, path)
    same_embeddings, output_is_target = torch.equal(source, target), torch.equal(output, target)
    if same_embeddings:
        return "three_way" if output_is_target else "embeddings"
    return "decoder" if output_is_target else "none"


def marian_state(cfg: ModelConfig, theirs: dict[str, torch.Tensor],
                 path: Path) -> dict[str, torch.Tensor]:
    """Our state dict from Marian's tensors. Their position tables, where the file has them,
    must equal the `split` sinusoids."""
    names: dict[str, str] = {}
    for i in range(cfg.n_encoder_layers):
        names.update(_layer_names("encoder", i, decoder=False))
    for i in range(cfg.n_decoder_layers):
        names.update(_layer_names("decoder", i, decoder=True))
    state = {}
    for their_name, our_name in names.items():
        for kind in ("weight", "bias"):
            key = f"{their_name}.{kind}"
            if key not in theirs:
                raise ConversionError(f"{path}: tensor {key} is missing")
            state[f"{our_name}.{kind}"] = theirs[key]
    state["src_embed.tokens.weight"], target, output = embeddings(theirs, path)
    if cfg.weight_tying in ("decoder", "none"):
        state["tgt_embed.tokens.weight"] = target
    if cfg.weight_tying in ("embeddings", "none"):
        state["generator.weight"] = output
    bias = theirs.get("final_logits_bias", torch.zeros(1, cfg.vocab_size))
    state["generator.bias"] = bias.reshape(-1)
    table = sinusoidal_positions(cfg.max_positions, cfg.d_model, "split")
    for stack in ("encoder", "decoder"):
        key = f"model.{stack}.embed_positions.weight"
        if key in theirs and not torch.allclose(theirs[key].float(), table, atol=1e-5):
            raise ConversionError(f"{path}: {key} is not Marian's sinusoid table (trained "
                                  "positions are not supported)")
    return {k: v.float().contiguous() for k, v in state.items()}


def import_marian(src_dir: str | Path, out_dir: str | Path) -> Path:
    """Convert the Hugging Face Marian directory `src_dir` into a model directory `out_dir`."""
    src_dir, out_dir = Path(src_dir), Path(out_dir)
    if not src_dir.is_dir():
        raise ConversionError(f"{src_dir}: not a directory")
    missing = [name for name in ("config.json", *MARIAN_FILES) if not (src_dir / name).exists()]
    weights = next((src_dir / n for n in WEIGHT_FILES if (src_dir / n).exists()), None)
    if weights is None:
        missing.append(" or ".join(WEIGHT_FILES))
    if missing:
        raise ConversionError(f"{src_dir}: missing {', '.join(missing)}")
    hf = _read_json(src_dir / "config.json")
    if (src_dir / "generation_config.json").exists():  # newer exports keep decoding there
        hf = {**hf, **_read_json(src_dir / "generation_config.json")}
    cfg = marian_model_config(hf, src_dir / "config.json")
    vocab = MarianVocabulary.load(src_dir)
    if len(vocab) != cfg.vocab_size:
        raise ConversionError(f"{src_dir / 'vocab.json'}: {len(vocab)} pieces, but config.json "
                              f"has vocab_size {cfg.vocab_size}")
    if (vocab.pad_id, vocab.eos_id) != (cfg.pad_id, cfg.eos_id):
        raise ConversionError(f"{src_dir / 'vocab.json'}: <pad> {vocab.pad_id} and </s> "
                              f"{vocab.eos_id}, config.json: pad_token_id {cfg.pad_id}, "
                              f"eos_token_id {cfg.eos_id}")
    try:
        theirs = read_foreign_weights(weights)
    except ModelLoadError as err:
        raise ConversionError(str(err)) from None
    cfg = dataclasses.replace(cfg, weight_tying=weight_tying(theirs, weights))
    model = Transformer(cfg)
    try:
        assign_weights(model, marian_state(cfg, theirs, weights), weights)
    except ModelLoadError as err:
        raise ConversionError(str(err)) from None
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in MARIAN_FILES:
        shutil.copyfile(src_dir / name, out_dir / name)
    return save_model(model, out_dir, decode=marian_decode_config(hf, cfg))
