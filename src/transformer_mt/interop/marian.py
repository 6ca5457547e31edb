"""Hugging Face Marian (OPUS-MT) models in and out.

In: a `MarianMTModel` directory (config.json, model.safetensors or pytorch_model.bin,
source.spm, target.spm, vocab.json) becomes a transformer-mt model directory that decodes as
`MarianMTModel.generate` does. Out: a model directory becomes one that `MarianMTModel` and
`MarianTokenizer` load with no custom code and that computes the same logits; the paper's
interleaved sinusoids become Marian's split ones by permuting the model dimensions
(`layout.py`, exact). What Marian cannot carry is refused: pre-norm, learned or tensor2tensor
positions, LayerNorm eps other than its fixed 1e-5, per-head sizes other than d_model / h. The
export keeps our config in config.json's `transformer_mt` section, so importing it back gives
the model we started from, tensor for tensor.

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
from safetensors.torch import save_file

from ..config import (
    ConfigError,
    DecodeConfig,
    ModelConfig,
    config_from_dict,
    config_to_dict,
)
from ..data.vocab import (
    MarianVocabulary,
    Vocabulary,
    load_model_vocabulary,
)
from ..model.transformer import sinusoidal_positions
from ..storage.files import atomic_write
from ..storage.model_dir import (
    ModelLoadError,
    load_model,
    model_from_weights,
    read_foreign_weights,
    save_model,
)
from ..storage.names import MARIAN_FILES, MARIAN_VOCAB_FILE, TARGET_VOCAB_FILE, copy_vocabulary
from . import ConversionError
from .layout import layer_names, relayout_sinusoids
from .marian_npz import import_marian_npz, is_marian_directory

ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu"}
HF_ACTIVATIONS = {"silu": "swish", "relu": "relu", "gelu": "gelu"}
# Hugging Face's file names (the first two happen to be ours too)
HF_CONFIG_FILE = "config.json"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
GENERATION_FILE = "generation_config.json"
TOKENIZER_FILE = "tokenizer_config.json"
MARIAN_EPS = 1e-5  # Hugging Face Marian's nn.LayerNorm default; its config has no eps
OURS = "transformer_mt"  # config.json section an export keeps our config in


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
    separate = hf.get("decoder_vocab_size") not in (None, hf.get("vocab_size"))
    if separate and not hf.get("separate_vocabs"):
        problems.append(f"decoder_vocab_size={hf.get('decoder_vocab_size')} differs from "
                        f"vocab_size={hf.get('vocab_size')} without separate_vocabs "
                        "(tokenizer_config.json) and its target_vocab.json")
    for key, supported in (("normalize_before", False), ("normalize_embedding", False),
                           ("add_final_layer_norm", False), ("static_position_embeddings", True)):
        if key in hf and hf[key] != supported:
            problems.append(f"{key}={hf[key]} (supported: {supported})")
    if problems:
        raise ConversionError(f"{path}: cannot convert: " + "; ".join(problems))
    pad = hf["pad_token_id"]
    return ModelConfig(
        vocab_size=hf["vocab_size"], d_model=hf["d_model"], n_heads=hf["encoder_attention_heads"],
        target_vocab_size=(hf.get("decoder_vocab_size") or 0) if separate else 0,
        d_ff=hf["encoder_ffn_dim"], n_encoder_layers=hf["encoder_layers"],
        n_decoder_layers=hf["decoder_layers"], dropout=hf.get("dropout", 0.1),
        attention_dropout=hf.get("attention_dropout", 0.0),
        activation_dropout=hf.get("activation_dropout", 0.0),
        activation=ACTIVATIONS[hf["activation_function"]], attention_bias=True,
        layer_norm_eps=1e-5, positional="sinusoidal", sinusoid_layout="split",
        max_positions=hf.get("max_position_embeddings", 512),
        scale_embeddings=hf.get("scale_embedding", True),
        output_bias=True,  # weight_tying: import_marian reads it from the weights
        weight_tying="decoder" if separate else "three_way",
        pad_id=pad, bos_id=hf.get("decoder_start_token_id", pad), eos_id=hf["eos_token_id"])


def marian_decode_config(hf: dict[str, Any], cfg: ModelConfig) -> DecodeConfig:
    """Marian's generation settings: its beam, Hugging Face's length_penalty as |Y|^alpha, and
    its length rule: no more than max_length - 1 tokens (its max_length counts the start
    token), whatever the source's length; beams stop as early_stopping=True's do."""
    max_length = min(hf.get("max_length") or cfg.max_positions, cfg.max_positions + 1) - 1
    return DecodeConfig(beam_size=hf.get("num_beams", 4), length_normalization="power",
                        length_penalty=hf.get("length_penalty", 1.0), beam_stop="n_finished",
                        max_length=max_length, max_length_offset=cfg.max_positions)


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
    state = {}
    for their_name, our_name in layer_names(cfg, "model.").items():
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
    bias = theirs.get("final_logits_bias", torch.zeros(1, cfg.tgt_vocab_size))
    state["generator.bias"] = bias.reshape(-1)
    table = sinusoidal_positions(cfg.max_positions, cfg.d_model, "split")
    for stack in ("encoder", "decoder"):
        key = f"model.{stack}.embed_positions.weight"
        if key in theirs and not torch.allclose(theirs[key].float(), table, atol=1e-5):
            raise ConversionError(f"{path}: {key} is not Marian's sinusoid table (trained "
                                  "positions are not supported)")
    return {k: v.float().contiguous() for k, v in state.items()}


def _restored(cfg: ModelConfig, state: dict[str, torch.Tensor], section: dict[str, Any],
              path: Path) -> tuple[ModelConfig, dict[str, torch.Tensor], DecodeConfig]:
    """The model an export started from, given its `transformer_mt` section: our sinusoid
    layout back, and the zero biases Marian needed dropped again."""
    try:
        ours = config_from_dict(ModelConfig, section.get("model", {}), f"{OURS}.model")
        decode = config_from_dict(DecodeConfig, section.get("decode", {}), f"{OURS}.decode")
    except ConfigError as err:
        raise ConversionError(f"{path}: {err}") from None
    disagree = [f"{name}: {getattr(ours, name)} vs {getattr(cfg, name)}"
                for name in ("vocab_size", "target_vocab_size", "d_model", "n_heads", "d_ff",
                             "n_encoder_layers", "n_decoder_layers", "activation", "max_positions",
                             "scale_embeddings", "weight_tying", "pad_id", "bos_id", "eos_id")
                if getattr(ours, name) != getattr(cfg, name)]
    if disagree:
        raise ConversionError(f"{path}: the {OURS} section disagrees with the Marian fields "
                              f"(edited after the export?): {'; '.join(disagree)}")
    state = relayout_sinusoids(state, cfg.d_model, "split", ours.sinusoid_layout)
    dropped = [name for name in state if
               (not ours.attention_bias and "attn.w_" in name and name.endswith(".bias")) or
               (not ours.output_bias and name == "generator.bias")]
    for name in dropped:
        if state[name].any():
            raise ConversionError(f"{path}: {OURS}.model has no {name} but the weights' is "
                                  "not zero")
        del state[name]
    return ours, state, decode


def import_marian(src_dir: str | Path, out_dir: str | Path) -> Path:
    """Convert the Hugging Face Marian directory `src_dir`, or Marian's own (model.npz and
    decoder.yml: `marian_npz`), into a model directory `out_dir`."""
    src_dir, out_dir = Path(src_dir), Path(out_dir)
    if not src_dir.is_dir():
        raise ConversionError(f"{src_dir}: not a directory")
    if not (src_dir / HF_CONFIG_FILE).exists() and is_marian_directory(src_dir):
        return import_marian_npz(src_dir, out_dir)
    missing = [name for name in (HF_CONFIG_FILE, *MARIAN_FILES) if not (src_dir / name).exists()]
    weights = next((src_dir / n for n in WEIGHT_FILES if (src_dir / n).exists()), None)
    if weights is None:
        missing.append(" or ".join(WEIGHT_FILES))
    if missing:
        raise ConversionError(f"{src_dir}: missing {', '.join(missing)}")
    hf = _read_json(src_dir / HF_CONFIG_FILE)
    for extra in (GENERATION_FILE, TOKENIZER_FILE):  # decoding, vocabularies
        if (src_dir / extra).exists():
            hf = {**hf, **_read_json(src_dir / extra)}
    cfg = marian_model_config(hf, src_dir / HF_CONFIG_FILE)
    vocab = MarianVocabulary.load(src_dir)
    if len(vocab) != cfg.vocab_size:
        raise ConversionError(f"{src_dir / MARIAN_VOCAB_FILE}: {len(vocab)} pieces, but "
                              f"config.json has vocab_size {cfg.vocab_size}")
    if vocab.target_size != cfg.tgt_vocab_size:
        raise ConversionError(f"{src_dir / TARGET_VOCAB_FILE}: {vocab.target_size} pieces, but "
                              f"config.json has decoder_vocab_size {cfg.tgt_vocab_size}")
    if (vocab.pad_id, vocab.eos_id) != (cfg.pad_id, cfg.eos_id):
        raise ConversionError(f"{src_dir / MARIAN_VOCAB_FILE}: <pad> {vocab.pad_id} and </s> "
                              f"{vocab.eos_id}, config.json: pad_token_id {cfg.pad_id}, "
                              f"eos_token_id {cfg.eos_id}")
    try:
        theirs = read_foreign_weights(weights)
    except ModelLoadError as err:
        raise ConversionError(str(err)) from None
    cfg = dataclasses.replace(cfg, weight_tying=weight_tying(theirs, weights),
                              unk_id=vocab.unk_id)
    state, decode = marian_state(cfg, theirs, weights), marian_decode_config(hf, cfg)
    if isinstance(hf.get(OURS), dict):
        cfg, state, decode = _restored(cfg, state, hf[OURS], src_dir / HF_CONFIG_FILE)
    try:
        model = model_from_weights(cfg, state, weights)
    except ModelLoadError as err:
        raise ConversionError(str(err)) from None
    out_dir.mkdir(parents=True, exist_ok=True)
    copy_vocabulary(src_dir, out_dir)
    return save_model(model, out_dir, decode=decode)


def marian_refusals(cfg: ModelConfig) -> list[str]:
    """What of `cfg` a Hugging Face Marian model cannot carry (empty: it exports exactly)."""
    problems = []
    if cfg.norm_first:
        problems.append("norm_first=True (pre-norm): Marian is post-norm")
    if cfg.positional != "sinusoidal":
        problems.append(f"positional={cfg.positional}: Marian's positions are fixed sinusoids")
    elif cfg.sinusoid_layout == "concat":
        problems.append("sinusoid_layout=concat: tensor2tensor's frequencies are not Marian's")
    if cfg.position_offset:
        problems.append(f"position_offset={cfg.position_offset}: Marian's positions start at 0")
    if cfg.layer_norm_eps != MARIAN_EPS:
        problems.append(f"layer_norm_eps={cfg.layer_norm_eps}: Marian's LayerNorm eps is "
                        f"{MARIAN_EPS} and not configurable (train with "
                        f"model.layer_norm_eps={MARIAN_EPS}, or export to ctranslate2, which "
                        "carries any eps)")
    for name in ("d_k", "d_v"):
        if getattr(cfg, name) not in (None, cfg.d_model // cfg.n_heads):
            problems.append(f"{name}={getattr(cfg, name)}: Marian's heads are d_model / h")
    return problems


def _marian_config(cfg: ModelConfig, decode: DecodeConfig) -> tuple[dict, dict]:
    """config.json and generation_config.json of the export. Decoding: our beam and alpha;
    Hugging Face's length penalty is |Y|^alpha (our `power`; the paper's GNMT penalty has no
    equivalent there), its max_length counts the start token, and EOS is forced at the last
    position allowed as ours is. Our config is kept whole in
    the `transformer_mt` section."""
    tied = cfg.weight_tying in ("three_way", "decoder")
    shared = cfg.weight_tying in ("three_way", "embeddings")
    max_length = min(decode.max_length or cfg.max_positions, cfg.max_positions - 1) + 1
    config = {
        "architectures": ["MarianMTModel"], "model_type": "marian", "is_encoder_decoder": True,
        "vocab_size": cfg.vocab_size, "decoder_vocab_size": cfg.tgt_vocab_size,
        "d_model": cfg.d_model, "encoder_layers": cfg.n_encoder_layers,
        "decoder_layers": cfg.n_decoder_layers, "encoder_attention_heads": cfg.n_heads,
        "decoder_attention_heads": cfg.n_heads, "encoder_ffn_dim": cfg.d_ff,
        "decoder_ffn_dim": cfg.d_ff, "activation_function": HF_ACTIVATIONS[cfg.activation],
        "max_position_embeddings": cfg.max_positions, "scale_embedding": cfg.scale_embeddings,
        "share_encoder_decoder_embeddings": shared, "tie_word_embeddings": tied,
        "dropout": cfg.dropout, "attention_dropout": cfg.attention_dropout,
        "activation_dropout": cfg.activation_dropout, "pad_token_id": cfg.pad_id,
        "eos_token_id": cfg.eos_id, "decoder_start_token_id": cfg.bos_id, "dtype": "float32",
        OURS: {"model": config_to_dict(cfg), "decode": config_to_dict(decode)},
    }
    generation = {
        "decoder_start_token_id": cfg.bos_id, "eos_token_id": cfg.eos_id,
        "pad_token_id": cfg.pad_id, "bad_words_ids": [[cfg.pad_id]],
        "forced_eos_token_id": cfg.eos_id,  # as our search: EOS is the last token allowed
        "num_beams": decode.beam_size if decode.strategy == "beam" else 1,
        "length_penalty": decode.length_penalty, "early_stopping": True,
        "max_length": max_length,
    }
    return config, generation


def _marian_tensors(cfg: ModelConfig, ours: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Marian's tensors from our state dict (every alias present) of a split-layout model;
    zeros where we have no bias."""
    theirs = {}
    for their_name, our_name in layer_names(cfg, "model.").items():
        weight = ours[f"{our_name}.weight"]
        theirs[f"{their_name}.weight"] = weight
        theirs[f"{their_name}.bias"] = ours.get(f"{our_name}.bias",
                                                weight.new_zeros(weight.shape[0]))
    source, target = ours["src_embed.tokens.weight"], ours["tgt_embed.tokens.weight"]
    theirs["model.encoder.embed_tokens.weight"], theirs["model.decoder.embed_tokens.weight"] = \
        source, target
    if cfg.weight_tying in ("three_way", "embeddings"):
        theirs["model.shared.weight"] = source
    theirs["lm_head.weight"] = ours["generator.weight"]
    bias = ours.get("generator.bias", source.new_zeros(cfg.tgt_vocab_size))
    theirs["final_logits_bias"] = bias.reshape(1, -1)
    return {k: v.detach().float().clone().contiguous() for k, v in theirs.items()}


def _write_marian_vocabulary(vocab: Vocabulary | MarianVocabulary, model_dir: Path,
                             out_dir: Path, max_positions: int) -> None:
    """source.spm, target.spm, vocab.json: copied from an imported Marian model; for ours,
    our SentencePiece model on both sides and its pieces in id order."""
    if isinstance(vocab, MarianVocabulary):
        copy_vocabulary(model_dir, out_dir)
    else:
        for name in MARIAN_FILES[:2]:
            shutil.copyfile(vocab.path, out_dir / name)
        pieces = {vocab.sp.id_to_piece(i): i for i in range(len(vocab))}
        (out_dir / MARIAN_VOCAB_FILE).write_text(json.dumps(pieces, ensure_ascii=False),
                                               encoding="utf-8")
    (out_dir / TOKENIZER_FILE).write_text(json.dumps(
        {"tokenizer_class": "MarianTokenizer",
         "separate_vocabs": isinstance(vocab, MarianVocabulary) and vocab.separate,
         "model_max_length": max_positions}) + "\n", encoding="utf-8")


def export_marian(model_dir: str | Path, out_dir: str | Path) -> Path:
    """Write the model directory `model_dir` as a Hugging Face Marian directory `out_dir`;
    a ConversionError listing every setting Marian cannot carry, before anything is written."""
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    try:
        model, decode = load_model(model_dir)
    except ModelLoadError as err:
        raise ConversionError(str(err)) from None
    cfg = model.cfg
    problems = marian_refusals(cfg)
    if problems:
        raise ConversionError(f"{model_dir}: cannot export to Marian: " + "; ".join(problems))
    vocab = load_model_vocabulary(model_dir)
    state = relayout_sinusoids(model.state_dict(), cfg.d_model, cfg.sinusoid_layout, "split")
    theirs = _marian_tensors(cfg, state)
    config, generation = _marian_config(cfg, decode)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(out_dir / WEIGHT_FILES[0],
                 lambda p: save_file(theirs, str(p), metadata={"format": "pt"}))
    for name, data in ((HF_CONFIG_FILE, config), (GENERATION_FILE, generation)):
        (out_dir / name).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    _write_marian_vocabulary(vocab, model_dir, out_dir, cfg.max_positions)
    return out_dir
