"""Marian's own model directories in: what `marian` writes and OPUS-MT and Tatoeba-Challenge
release zips hold: `model.npz` (read with numpy, nothing pickled) with Marian's config embedded
as YAML (`special:model.yml`, NUL-padded), `decoder.yml` (the model, the vocabularies and the
decoding settings), and the vocabularies: SentencePiece models (`*.spm`, their ids the model's)
or Marian's YAML piece -> id maps (`*.vocab.yml`) beside `source.spm`/`target.spm`.

The model becomes ours as Marian computes it: tensor2tensor's sinusoids (`concat`, positions from
0), LayerNorm eps 1e-6, biased projections, an output bias, post- or pre-norm as its
`transformer-preprocess`/`postprocess` options say. Marian starts the decoder from a zero
embedding: the vocabulary gains a `<pad>` piece (id n) whose embedding is zero and from which
decoding starts (bos_id = pad_id, as Hugging Face's port does), and whose output bias is -1e4
so that the softmax is Marian's over its own n pieces. Its decoding settings come from
decoder.yml: |Y|^alpha length normalisation (`normalize`) and the length cap `max-length-factor`
x the source's length. Whatever cannot be mapped is refused, every setting named at once.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from ..config import DecodeConfig, ModelConfig
from ..data.vocab import load_processor
from ..storage.files import atomic_write_text
from ..storage.model_dir import ModelLoadError, model_from_weights, save_model
from ..storage.names import MARIAN_FILES, MARIAN_VOCAB_FILE
from . import ConversionError

EPS = 1e-6  # Marian's LayerNorm epsilon
PAD = "<pad>"
PAD_BIAS = -1e4  # exp(-1e4) is 0 in float32: the softmax over Marian's pieces alone
ACTIVATIONS = {"swish": "silu", "relu": "relu"}
NORM_FIRST = {("", "dan", ""): False, ("n", "da", "n"): True}  # (pre, post, post-top)
REQUIRED = {  # option: the value we can map (Marian's default where it has one)
    "type": "transformer", "transformer-decoder-autoreg": "self-attention",
    "transformer-ffn-depth": 2, "transformer-no-projection": False,
    "transformer-no-bias": False, "transformer-no-affine": False,
    "transformer-train-position-embeddings": False,
    "transformer-disable-position-embeddings": False, "transformer-alibi-shift": False,
    "transformer-tied-layers": [], "factors-dim-emb": 0, "lemma-dim-emb": 0,
    "right-left": False, "ulr": False,
}


def is_marian_directory(path: Path) -> bool:
    return path.is_dir() and any(_model_files(path))


def _model_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.npz") if not p.name.endswith(".optimizer.npz"))


def _yaml(path: Path, text: str | bytes | None = None) -> Any:
    try:
        return yaml.safe_load(path.read_bytes() if text is None else text)
    except OSError as err:
        raise ConversionError(f"{path}: cannot read: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ConversionError(f"{path}: not YAML ({err})") from None


def _in_directory(directory: Path, name: str) -> Path:
    """A file decoder.yml names: as given, else its name in `directory` (release zips)."""
    path = directory / name
    return path if path.exists() else directory / Path(name).name


def located(directory: Path) -> tuple[Path, list[Path], dict[str, Any]]:
    """The model file, the vocabularies and decoder.yml's settings of a Marian directory."""
    found = sorted(directory.glob("*decoder.yml"))
    if not found:
        raise ConversionError(f"{directory}: no decoder.yml (Marian's decoding config names the "
                              "model and its vocabularies)")
    settings = _yaml(found[0]) or {}
    models, vocabs = settings.get("models") or [], settings.get("vocabs") or []
    if len(models) != 1:
        raise ConversionError(f"{found[0]}: models lists {len(models)} files; one model (not an "
                              "ensemble) can be imported")
    if len(vocabs) != 2:
        raise ConversionError(f"{found[0]}: vocabs lists {len(vocabs)} files; expected the "
                              "source's and the target's")
    paths = [_in_directory(directory, name) for name in (models[0], *vocabs)]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise ConversionError(f"{found[0]}: missing {', '.join(missing)}")
    return paths[0], paths[1:], settings


def read_npz(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The tensors and the embedded config of a Marian model file."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (OSError, ValueError) as err:
        raise ConversionError(f"{path}: not a Marian model file ({err})") from None
    text = arrays.pop("special:model.yml", None)
    if text is None:
        raise ConversionError(f"{path}: no special:model.yml (Marian's embedded config)")
    config = _yaml(path, text.tobytes().rstrip(b"\0"))
    if not isinstance(config, dict):
        raise ConversionError(f"{path}: special:model.yml is not a mapping")
    return arrays, config


def model_config(config: dict[str, Any], path: Path) -> ModelConfig:
    """Our ModelConfig for Marian's (a vocabulary of dim-vocabs + <pad>)."""
    problems = [f"{key}={config[key]!r} (supported: {want!r})"
                for key, want in REQUIRED.items() if key in config and config[key] != want]
    layout = (config.get("transformer-preprocess", ""), config.get("transformer-postprocess",
              "dan"), config.get("transformer-postprocess-top", ""))
    if layout not in NORM_FIRST:
        problems.append("transformer-preprocess/postprocess/postprocess-top="
                        f"{'/'.join(map(repr, layout))} (supported: ''/'dan'/'' post-norm, "
                        "'n'/'da'/'n' pre-norm)")
    if config.get("transformer-postprocess-emb", "d") not in ("d", ""):
        problems.append(f"transformer-postprocess-emb={config['transformer-postprocess-emb']!r}"
                        " (supported: 'd'; no LayerNorm on the embeddings)")
    activation = config.get("transformer-ffn-activation", "swish")
    if activation not in ACTIVATIONS:
        problems.append(f"transformer-ffn-activation={activation!r} (supported: "
                        f"{', '.join(ACTIVATIONS)}; Marian's gelu is x sigmoid(1.702 x))")
    d_ff = config.get("transformer-dim-ffn", 2048)
    if config.get("transformer-decoder-dim-ffn", 0) not in (0, d_ff) or \
            config.get("transformer-decoder-ffn-depth", 0) not in (0, 2):
        problems.append("the decoder's FFN differs from the encoder's (one d_ff for both)")
    vocab_sizes = config.get("dim-vocabs", [])
    if len(vocab_sizes) != 2 or vocab_sizes[0] != vocab_sizes[1] or not (
            config.get("tied-embeddings-all") or config.get("tied-embeddings-src")):
        problems.append(f"dim-vocabs={vocab_sizes} without tied-embeddings-all or "
                        "tied-embeddings-src (one shared vocabulary is supported)")
    if problems:
        raise ConversionError(f"{path}: cannot convert: " + "; ".join(problems))
    n = vocab_sizes[0]
    return ModelConfig(
        vocab_size=n + 1, d_model=config["dim-emb"], n_heads=config["transformer-heads"],
        d_ff=d_ff, n_encoder_layers=config["enc-depth"], n_decoder_layers=config["dec-depth"],
        activation=ACTIVATIONS[activation], norm_first=NORM_FIRST[layout],
        attention_bias=True, layer_norm_eps=EPS, positional="sinusoidal",
        sinusoid_layout="concat", output_bias=True,  # -1e4 for <pad> at least
        weight_tying="three_way" if config.get("tied-embeddings-all") else "embeddings",
        dropout=0.1, pad_id=n, bos_id=n, eos_id=0, unk_id=1)


def _tensor(arrays: dict[str, np.ndarray], name: str, path: Path) -> np.ndarray:
    if name not in arrays:
        raise ConversionError(f"{path}: tensor {name} is missing")
    return arrays[name]


def model_state(cfg: ModelConfig, arrays: dict[str, np.ndarray], path: Path
                ) -> dict[str, torch.Tensor]:
    """Our state dict from Marian's tensors (its W are (in, out): ours are transposed)."""
    get = lambda name: torch.from_numpy(_tensor(arrays, name, path).astype(np.float32))  # noqa: E731
    pre = "_pre" if cfg.norm_first else ""
    state = {}

    def attention(ours: str, theirs: str) -> None:
        for p in "qkvo":
            state[f"{ours}.w_{p}.weight"] = get(f"{theirs}_W{p}").T
            state[f"{ours}.w_{p}.bias"] = get(f"{theirs}_b{p}").reshape(-1)

    def ffn_and_norms(ours: str, theirs: str, blocks: list[str]) -> None:
        for k in (1, 2):
            state[f"{ours}.ff.w_{k}.weight"] = get(f"{theirs}_ffn_W{k}").T
            state[f"{ours}.ff.w_{k}.bias"] = get(f"{theirs}_ffn_b{k}").reshape(-1)
        for k, block in enumerate(blocks, 1):
            state[f"{ours}.sublayer{k}.norm.weight"] = get(f"{block}_ln_scale{pre}").reshape(-1)
            state[f"{ours}.sublayer{k}.norm.bias"] = get(f"{block}_ln_bias{pre}").reshape(-1)

    for stack, n_layers in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        for i in range(n_layers):
            ours, theirs = f"{stack}.layers.{i}", f"{stack}_l{i + 1}"
            attention(f"{ours}.self_attn", f"{theirs}_self")
            blocks = [f"{theirs}_self_Wo"]
            if stack == "decoder":
                attention(f"{ours}.cross_attn", f"{theirs}_context")
                blocks.append(f"{theirs}_context_Wo")
            ffn_and_norms(ours, theirs, [*blocks, f"{theirs}_ffn_ffn"])
        if cfg.norm_first:
            state[f"{stack}.final_norm.weight"] = get(f"{stack}_top_ln_scale").reshape(-1)
            state[f"{stack}.final_norm.bias"] = get(f"{stack}_top_ln_bias").reshape(-1)
    zero_row = torch.zeros(1, cfg.d_model)
    state["src_embed.tokens.weight"] = torch.cat([get("Wemb"), zero_row])
    if cfg.weight_tying == "embeddings":  # the output layer's own matrix
        state["generator.weight"] = torch.cat([get("decoder_ff_logit_out_W").T, zero_row])
    bias = get("decoder_ff_logit_out_b").reshape(-1) if "decoder_ff_logit_out_b" in arrays \
        else torch.zeros(cfg.vocab_size - 1)  # output-omit-bias
    state["generator.bias"] = torch.cat([bias, torch.tensor([PAD_BIAS])])
    return state


def decode_config(settings: dict[str, Any], path: Path) -> DecodeConfig:
    """decoder.yml's beam, |Y|^alpha normalisation, length cap (a factor of the source's
    length, EOS counted) and allow-unk (Marian writes no <unk> unless told); a word penalty is
    refused."""
    if settings.get("word-penalty", 0):
        raise ConversionError(f"{path}: word-penalty={settings['word-penalty']} (not supported)")
    return DecodeConfig(beam_size=settings.get("beam-size", 12), length_normalization="power",
                        length_penalty=settings.get("normalize", 0.0), beam_stop="shrink",
                        max_length_factor=settings.get("max-length-factor", 3.0),
                        max_length=settings.get("max-length", 1000), max_length_offset=1000,
                        allow_unk=bool(settings.get("allow-unk", False)))


def pieces_of(path: Path, size: int) -> list[str]:
    """A vocabulary's pieces in id order: a SentencePiece model's, or a Marian YAML map's."""
    if path.suffix == ".spm" or not path.name.endswith((".yml", ".yaml")):
        processor = load_processor(path)
        pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    else:
        try:
            mapping = yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
        except (OSError, yaml.YAMLError) as err:
            raise ConversionError(f"{path}: not a Marian vocabulary ({err})") from None
        by_id = {int(i): piece for piece, i in mapping.items()}
        if sorted(by_id) != list(range(len(by_id))):
            raise ConversionError(f"{path}: ids are not 0 .. {len(by_id) - 1}, each once")
        pieces = [by_id[i] for i in range(len(by_id))]
    if len(pieces) != size or pieces[:2] != ["</s>", "<unk>"]:
        raise ConversionError(f"{path}: {len(pieces)} pieces beginning {pieces[:2]}; the model "
                              f"has dim-vocabs {size} beginning </s>, <unk>")
    return pieces


def segmenters(directory: Path, vocabs: list[Path]) -> list[Path]:
    """The SentencePiece models that cut each side's text: the vocabularies themselves, or
    source.spm and target.spm beside YAML vocabularies."""
    if all(p.suffix == ".spm" for p in vocabs):
        return vocabs
    found = [directory / name for name in MARIAN_FILES[:2]]
    missing = [str(p) for p in found if not p.exists()]
    if missing:
        raise ConversionError(f"{directory}: missing {', '.join(missing)} (the SentencePiece "
                              "models beside a YAML vocabulary)")
    return found


def import_marian_npz(src_dir: Path, out_dir: Path) -> Path:
    """Convert the Marian directory `src_dir` into a model directory `out_dir`."""
    model_file, vocabs, settings = located(src_dir)
    arrays, config = read_npz(model_file)
    cfg = model_config(config, model_file)
    pieces = [pieces_of(p, cfg.vocab_size - 1) for p in vocabs]
    if pieces[0] != pieces[1]:
        raise ConversionError(f"{vocabs[0]} and {vocabs[1]} differ (one shared vocabulary is "
                              "supported)")
    try:
        model = model_from_weights(cfg, model_state(cfg, arrays, model_file), model_file)
    except ModelLoadError as err:
        raise ConversionError(str(err)) from None
    out_dir.mkdir(parents=True, exist_ok=True)
    for segmenter, name in zip(segmenters(src_dir, vocabs), MARIAN_FILES[:2], strict=True):
        shutil.copyfile(segmenter, out_dir / name)
    piece_ids = {piece: i for i, piece in enumerate([*pieces[0], PAD])}
    atomic_write_text(out_dir / MARIAN_VOCAB_FILE,
                      json.dumps(piece_ids, ensure_ascii=False, indent=1) + "\n")
    return save_model(model, out_dir, decode=decode_config(settings, model_file))

