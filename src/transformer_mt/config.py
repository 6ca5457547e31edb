"""Typed configuration: one frozen dataclass per concern, defaults = the paper's base model.

`load_config(preset_or_yaml, overrides)` reads a preset name (`base`, `big`, `small`, `tiny`) or a
YAML file, then applies dotted overrides such as ``model.d_model=256``. Unknown keys and values of
the wrong type are errors that name the key. Options that were removed are listed in `RETIRED`:
a config saved before the removal (a model's or checkpoint's `config.json`) still loads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import logging
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

PRESETS_DIR = Path(__file__).parent / "configs"

log = logging.getLogger(__name__)

# Options this code no longer has: dotted key -> (the value that means what the code does now,
# or ANY where no value changes what the core does, and why it went). A saved config holding
# that value loads without the key (with a warning); any other value cannot be honoured: an
# error, as is the key in a config a user writes.
ANY = "any value"
_KNN_MOVED = ("moved out of the core to examples/knn_mt/ (its cli.py translate takes --knn-* "
              "options)")
RETIRED: dict[str, tuple[Any, str]] = {
    "decode.knn_eos": ("mix", "removed on 2026-11-28: kNN-MT mixes the end-of-sentence "
                              "probability like every other token's"),
    "decode.knn_k": (ANY, _KNN_MOVED),
    "decode.knn_temperature": (ANY, _KNN_MOVED),
    "decode.knn_lambda": (ANY, _KNN_MOVED),
    "decode.knn_probe": (ANY, _KNN_MOVED),
    "decode.mbr": ("none", "moved out of the core to examples/rerank/ (mbr.py reranks a "
                           "translate --n-best list)"),
    "serve.max_output_tokens": (ANY, "removed on 2026-12-05: decode.max_length is the output "
                                     "cap, and serve's default for it is 512"),
}


_NO_VALUE = object()


def option(default: Any, help: str, *, flag: str | None = None, resumable: bool = False,
           fine_tunable: bool = False, initialises: Any = _NO_VALUE,
           serve_default: Any = _NO_VALUE) -> Any:
    """A config field, declared once: its default, one line of help (`--help` shows it), the
    flag of a command that offers it as one when not `--field-name` (cli/options.py), and what
    the field is to a run: `resumable`, a train setting that may change when the run resumes;
    `fine_tunable`, a model setting `train --init-from` may change; `initialises`, a model
    setting that only initialises a fresh model, with the value a checkpoint written before the
    setting existed began with; `serve_default`, a decode setting's default under `serve`
    where it differs (`serve_defaults`)."""
    metadata = {"help": help, "flag": flag, "resumable": resumable,
                "fine_tunable": fine_tunable}
    if initialises is not _NO_VALUE:
        metadata["initialises"] = initialises
    if serve_default is not _NO_VALUE:
        metadata["serve_default"] = serve_default
    return field(default=default, metadata=metadata)


def serve_defaults(cls: type) -> dict[str, Any]:
    """The fields of `cls` whose default under `serve` differs (`option`'s serve_default), with
    that default."""
    return {f.name: f.metadata["serve_default"] for f in dataclasses.fields(cls)
            if "serve_default" in f.metadata}


def fields_where(cls: type, what: str) -> tuple[str, ...]:
    """The names of `cls`'s fields declared with `what` (`option`'s resumable, fine_tunable or
    initialises)."""
    return tuple(f.name for f in dataclasses.fields(cls)
                 if f.metadata.get(what, False) is not False)


class ConfigError(ValueError):
    """A configuration file or override is invalid; the message names the key or file."""


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Architecture (§3, Table 3). Defaults are the base model."""

    vocab_size: int = option(
        37_000, "shared source/target vocabulary size (§5.1); train sets it from the data")
    target_vocab_size: int = option(
        0, "not in the paper: the target side's own vocabulary size (Marian's separate "
           "vocabularies), vocab_size then being the source side's; 0: the shared one")
    d_model: int = option(512, "model width (§3.1)")
    n_heads: int = option(8, "attention heads h (§3.2.2)")
    d_k: int | None = option(None, "per-head query/key size; null: d_model / h (§3.2.2)")
    d_v: int | None = option(None, "per-head value size; null: d_model / h (§3.2.2)")
    d_ff: int = option(2048, "inner size of the feed-forward network (§3.3)")
    n_encoder_layers: int = option(6, "encoder layers N (§3.1)")
    n_decoder_layers: int = option(6, "decoder layers N (§3.1)")
    dropout: float = option(
        0.1, "P_drop: on sub-layer outputs and on embeddings + positions (§5.4)",
        fine_tunable=True)
    attention_dropout: float = option(
        0.0, "not in the paper: dropout on the attention weights", fine_tunable=True)
    activation_dropout: float = option(
        0.0, "not in the paper: dropout after the feed-forward activation", fine_tunable=True)
    source_word_dropout: float = option(
        0.0, "not in the paper: in training, each source token's embedding is zeroed with this "
             "probability, its position kept (word dropout, Sennrich & Zhang 2019, for small "
             "data)", fine_tunable=True)
    target_word_dropout: float = option(
        0.0, "not in the paper: the same for the decoder's input tokens (the shifted target)",
        fine_tunable=True)
    activation: Literal["relu", "gelu", "silu"] = option(
        "relu", "the feed-forward network's activation (§3.3 eq. (2): ReLU)")
    attention_bias: bool = option(
        False, "biases on W^Q, W^K, W^V, W^O (the paper's projections have none)")
    layer_norm_eps: float = option(
        1e-6, "LayerNorm's epsilon (tensor2tensor's; the paper states none)")
    qkv_init_gain: float = option(
        2**-0.5, "Glorot-uniform gain of W^Q, W^K, W^V. The paper states no initialisation; "
                 "its code (tensor2tensor v1.0, June 2017) projected q, k, v with one "
                 "unit-gain Glorot matrix of width 3 d_model: variance 1 / (2 d_model) each, "
                 "gain 1/sqrt(2) for separate projections (fairseq's, and PyTorch's fused "
                 "nn.MultiheadAttention's). Gain 1 stalls post-norm at small sizes "
                 "(docs/faithful.md)", initialises=1.0)
    cross_attention_init: Literal["as_self", "tensor2tensor_v1"] = option(
        "as_self", "the encoder-decoder attention's W^Q, W^K, W^V: as self-attention's "
                   "(as_self; fairseq), or as tensor2tensor v1.0: q alone at unit gain "
                   "(variance 1 / d_model), k and v from one unit-gain Glorot matrix "
                   "(variance 2 / (3 d_model)); docs/faithful.md says which trains",
        initialises="as_self")
    norm_first: bool = option(
        False, "false: post-norm LayerNorm(x + Sublayer(x)) as in the paper (§3.1); true: "
               "pre-norm, a departure, with a final LayerNorm on each stack")
    positional: Literal["sinusoidal", "learned"] = option(
        "sinusoidal", "positional encoding (§3.5); learned: Table 3 row (E)")
    sinusoid_layout: Literal["interleaved", "concat", "split"] = option(
        "interleaved", "where the sinusoids go: interleaved, sin on even and cos on odd "
                       "dimensions (§3.5); concat: all sines then all cosines "
                       "(tensor2tensor's get_timing_signal_1d); split: the paper's "
                       "frequencies, sines then cosines (Marian, Hugging Face Marian)")
    max_positions: int = option(1024, "size of the positional table")
    position_offset: int = option(
        0, "not in the paper: the sinusoids start at this position, not 0 (fairseq: "
           "padding_idx + 1)")
    scale_embeddings: bool = option(
        True, "multiply token embeddings by sqrt(d_model) (§3.4)")
    weight_tying: Literal["three_way", "decoder", "embeddings", "none"] = option(
        "three_way", "three_way: source embedding = target embedding = pre-softmax weights "
                     "(§3.4); decoder: only target embedding = pre-softmax; embeddings: only "
                     "source = target embedding (Marian untied); none: three matrices")
    output_bias: bool = option(
        False, "not in the paper: a bias on the pre-softmax linear (Marian's "
               "final_logits_bias)")
    pad_id: int = option(0, "the padding token's id")
    bos_id: int = option(2, "the id that starts the decoder's input")
    eos_id: int = option(3, "the end-of-sentence id")
    unk_id: int = option(1, "the unknown piece's id (decode.allow_unk)")

    def __post_init__(self):
        _check_positive(self, "vocab_size", "d_model", "n_heads", "d_ff", "max_positions")
        _check_positive(self, "n_encoder_layers", "n_decoder_layers", "qkv_init_gain")
        if self.d_k is None and self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        for name in ("d_k", "d_v"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"model.{name} must be positive, got {value}")
        for name in ("dropout", "attention_dropout", "activation_dropout",
                     "source_word_dropout", "target_word_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"model.{name} must be in [0, 1), got {getattr(self, name)}")
        if self.position_offset < 0 or self.position_offset and self.positional == "learned":
            raise ValueError(f"model.position_offset={self.position_offset}: a start (>= 0) "
                             "of the sinusoids; learned positions have none")
        if self.target_vocab_size < 0:
            raise ValueError(f"model.target_vocab_size must be >= 0, got {self.target_vocab_size}")
        if self.separate_vocabularies and self.weight_tying in ("three_way", "embeddings"):
            raise ValueError(f"model.weight_tying={self.weight_tying} ties the source and target "
                             "embeddings, which separate vocabularies (target_vocab_size) cannot")
        for name in ("pad_id", "bos_id", "eos_id", "unk_id"):
            if not 0 <= getattr(self, name) < min(self.vocab_size, self.tgt_vocab_size):
                raise ValueError(f"model.{name}={getattr(self, name)} is outside the vocabulary")
        _check_choice(self, "activation", "positional", "sinusoid_layout", "weight_tying")

    @property
    def tgt_vocab_size(self) -> int:
        """The target side's vocabulary size: the decoder's embeddings and the output layer."""
        return self.target_vocab_size or self.vocab_size

    @property
    def separate_vocabularies(self) -> bool:
        return self.tgt_vocab_size != self.vocab_size

    @property
    def head_dim_k(self) -> int:
        return self.d_k if self.d_k is not None else self.d_model // self.n_heads

    @property
    def head_dim_v(self) -> int:
        return self.d_v if self.d_v is not None else self.d_model // self.n_heads


@dataclass(frozen=True, kw_only=True)
class DecodeConfig:
    """Inference (§6.1): beam 4, length penalty alpha 0.6, output up to input length + 50."""

    # Each field is a command-line option of `translate` (cli/options.py); `flag` keeps a name
    # shorter than the field's.
    strategy: Literal["beam", "greedy", "sample"] = option("beam", "search strategy")
    beam_size: int = option(4, "beam size (§6.1: 4)")
    length_penalty: float = option(
        0.6, "length penalty alpha of GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha (§6.1: 0.6); 0: off",
        flag="--alpha")
    length_normalization: Literal["gnmt", "power"] = option(
        "gnmt", "how beam search ranks finished outputs: log P / lp(Y), gnmt: GNMT's "
        "((5 + |Y|) / 6)^alpha (§6.1), power: |Y|^alpha (Hugging Face, fairseq, Marian); |Y| "
        "counts EOS")
    beam_stop: Literal["n_finished", "bound", "shrink"] = option(
        "n_finished", "when a sentence's beam search ends: once beam_size hypotheses have "
        "finished (n_finished, as fairseq and Hugging Face's early_stopping=True), or only when "
        "no live hypothesis can still outscore them under the length penalty (bound, as "
        "tensor2tensor, the paper's code: longer outputs can win; slower), or as Marian's: "
        "each finished hypothesis takes its place from the beam, the rest search on until none "
        "is left (shrink)")
    max_length_offset: int = option(
        50, "an output has at most (source length + this) tokens, EOS included (§6.1: 50)")
    min_length: int = option(0, "not in the paper: no EOS before this many tokens; 0: off")
    allow_unk: bool = option(
        True, "not in the paper: false: the unknown piece (<unk>) is never written (Marian's "
              "default, its --allow-unk; CTranslate2's disable_unk)")
    max_length: int = option(0, "not in the paper: a cap on top of source length + offset; "
                                "0: off (serve: 512, so that no input makes the server write "
                                "a longer output)", serve_default=512)
    max_length_factor: float = option(
        0.0, "not in the paper, Marian's max-length-factor: at most this x the source's length "
        "(EOS counted), rounded up, pieces; an output that reaches this or any other cap then "
        "ends without EOS, scored without it, as Marian's do; 0: off")
    n_best: int = option(1, "hypotheses returned per sentence (<= beam size); translate prints "
                            "them as 'index<TAB>score<TAB>text'")
    batch_size: int = option(64, "sentences per decoding batch (sorted by length)")
    workers: int = option(
        1, "not in the paper: batches decoded at once, each on its own thread with an equal "
           "share of the CPU threads (Marian's --cpu-threads, CTranslate2's inter_threads): "
           "pays for a small model on several cores, whose products are too small to split "
           "(docs/performance.md)")
    temperature: float = option(1.0, "sampling only: softmax temperature")
    top_k: int = option(0, "sampling only: keep the k most likely tokens; 0: no limit")
    top_p: float = option(1.0, "sampling only: nucleus probability mass kept")
    seed: int = option(0, "sampling only: random seed")
    bf16: bool | Literal["auto"] = option(
        False, "not in the paper: bfloat16 autocast while decoding (faster on CPUs with bf16 "
        "units; docs/performance.md); auto: only where measured faster than float32 for the "
        "batch size at hand (inference/precision.py)")
    int8: bool = option(
        False, "not in the paper, CPU only: int8 linear layers with dynamically quantised "
        "activations (faster beam search); int8_scales says how inputs are quantised")
    int8_scales: Literal["batch", "row"] = option(
        "batch", "with int8: one input range per batch (fbgemm, fastest; a sentence's "
        "translation may change with the sentences batched with it) or per row (a sentence "
        "translates the same in any batch; serve's default: batching clients together changes "
        "no one's answer)", serve_default="row")
    kv_bf16: bool = option(
        False, "not in the paper: keep attention keys and values in bfloat16 (with int8 or in "
        "fp32): beam search moves half the bytes; pays only on a CPU with fast bf16 (AVX-512 "
        "BF16, AMX: a warning says where not)")

    def __post_init__(self):
        _check_positive(self, "beam_size", "n_best", "batch_size", "workers", "temperature")
        if self.bf16 and self.int8:
            raise ValueError("decode.bf16 and decode.int8 are exclusive: pick one")
        if self.n_best > self.beam_size and self.strategy == "beam":
            raise ValueError(f"decode.n_best={self.n_best} exceeds beam_size={self.beam_size}")
        if self.max_length_offset < 0:
            raise ValueError(f"decode.max_length_offset must be >= 0, got {self.max_length_offset}")
        if self.min_length < 0 or self.max_length < 0 or self.max_length_factor < 0:
            raise ValueError("decode.min_length, max_length and max_length_factor must be >= 0")
        if self.max_length and self.min_length > self.max_length:
            raise ValueError(f"decode.min_length={self.min_length} exceeds "
                             f"max_length={self.max_length}")
        if self.length_penalty < 0:
            raise ValueError(f"decode.length_penalty must be >= 0, got {self.length_penalty}")
        if self.top_k < 0 or not 0.0 < self.top_p <= 1.0:
            raise ValueError("decode.top_k must be >= 0 and decode.top_p in (0, 1]")
        _check_choice(self, "strategy", "beam_stop", "length_normalization")


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Preparing a parallel corpus (`transformer-mt prepare`) and reading it in batches."""

    # Each field is a command-line option of `prepare` (cli/options.py).
    vocab_size: int = option(8_000, "joint SentencePiece pieces (the paper: ~37,000 for WMT "
                                    "en-de)")
    vocab_model_type: Literal["bpe", "unigram"] = option("bpe", "§5.1: byte-pair encoding")
    character_coverage: float = option(1.0, "SentencePiece's character coverage")
    max_length: int = option(250, "training pairs with more subword tokens on a side are "
                                  "dropped (counted in report.json)")
    max_length_ratio: float = option(9.0, "... or whose longer side is this many times the "
                                          "shorter")
    skip_invalid_utf8: bool = option(False, "drop pairs with invalid UTF-8 (counted) instead "
                                            "of stopping at the first")
    vocab_sample: int = option(500_000, "the vocabulary is learnt from at most this many "
                                        "training pairs, a uniform sample of them (as "
                                        "SentencePiece's input_sentence_size)")
    whole_words: str = option("", "a file of words, one per line, that the vocabulary keeps "
                                  "as single pieces wherever they stand between spaces "
                                  "(SentencePiece's user_defined_symbols), e.g. a linearised "
                                  "tree's brackets and labels: `parse corpus` writes "
                                  "symbols.txt")

    def __post_init__(self):
        _check_positive(self, "vocab_size", "max_length", "max_length_ratio", "vocab_sample")
        _check_choice(self, "vocab_model_type")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Training (§5): Adam, warmup schedule, label smoothing, token-budget batches."""

    max_tokens: int = option(
        25_000, "tokens per batch and side, padding included (§5.1: about 25,000 + 25,000)")
    accumulate: int = option(
        1, "batches per update: the effective batch is accumulate x max_tokens")
    adam_beta1: float = option(0.9, "Adam's beta1 (§5.3)")
    adam_beta2: float = option(0.98, "Adam's beta2 (§5.3)")
    adam_eps: float = option(1e-9, "Adam's epsilon (§5.3)")
    warmup_steps: int = option(4_000, "steps of eq. (3)'s linear warmup (§5.3)")
    lr_scale: float = option(1.0, "not in the paper: multiplies eq. (3)")
    lr_cooldown_steps: int = option(
        0, "not in the paper: over the last this many of max_steps the rate falls linearly "
           "towards 0 (a cooldown, for a run on a fixed step budget); 0: eq. (3) to the end",
        resumable=True)
    lr_cooldown_minutes: float = option(
        0.0, "not in the paper: the same for a run on a wall-time budget (max_minutes): when "
             "this many minutes are left, the steps the run's mean pace fits into 97 % of them "
             "become the cooldown, re-planned at each save_every step from the pace since it "
             "began once a fifth of it has passed, and the run ends with its last step; 0: off",
        resumable=True)
    lr_cooldown_share: float = option(
        0.0, "not in the paper: the cooldown as a share of the budget (0.25: the last "
             "quarter), so that it scales with it: of max_minutes where that is set (as "
             "lr_cooldown_minutes), else of max_steps (as lr_cooldown_steps); 0: off. "
             "Exclusive with those two", resumable=True)
    label_smoothing: float = option(0.1, "label smoothing epsilon_ls (§5.4)")
    bpe_dropout: float = option(
        0.0, "not in the paper: BPE-dropout (Provilkov et al., 2020), the training text "
             "segmented anew each epoch with each merge skipped at this probability (0.1 in "
             "their paper); 0: off")
    rdrop_alpha: float = option(
        0.0, "not in the paper: R-Drop (Liang et al., 2021), each batch run twice under "
             "independent dropout, the loss adding alpha/2 (KL(P1||P2) + KL(P2||P1)) per "
             "target token of both passes (5 in their IWSLT14 recipe); a step costs about "
             "twice as much; 0: off")
    clip_norm: float = option(
        0.0, "gradient norm clipping; 0: none (the paper does not clip)")
    bf16: bool | Literal["auto"] = option(
        False, "not in the paper: bfloat16 autocast (CPU or GPU); auto: where it pays (a GPU "
               "that supports it, a CPU whose bf16 matrix products run >= 1.5x float32's)")
    fp16: bool = option(
        False, "not in the paper: float16 autocast with a dynamic loss scale (GPU)")
    compile: bool | Literal["cuda_graphs"] = option(
        False, "not in the paper: forward and backward compiled by torch.compile (Inductor, "
               "shapes symbolic, so that batches of any shape share one graph; the first "
               "steps take a minute or more); with shape_buckets a graph per shape; "
               "cuda_graphs: those graphs replayed as CUDA graphs (needs shape_buckets)",
        resumable=True)
    shape_buckets: int = option(
        0, "not in the paper: every batch padded to one of at most this many shapes "
           "(lengths at quantiles of the data, rows to max_tokens), so that compile makes a "
           "graph per shape; 0: batches as long as their longest sentence")
    device: str = option(
        "auto", "auto: cuda where available, else cpu; or cpu, cuda, cuda:1, ...", resumable=True)
    max_steps: int = option(100_000, "updates (§5.2: 100,000 for base); 0: no limit",
                            resumable=True)
    max_epochs: int = option(0, "passes over the data; 0: no limit", resumable=True)
    max_minutes: float = option(
        0.0, "wall time, after which the run stops with a checkpoint; 0: no limit", resumable=True)
    seed: int = option(1, "seeds the initialisation, dropout and batch order")
    log_every: int = option(50, "steps between log lines", resumable=True)
    valid_every: int = option(
        1_000, "steps between validations (loss, perplexity and BLEU)", resumable=True)
    valid_bleu: bool = option(
        True, "beam-search BLEU on the validation set at each validation", resumable=True)
    save_every: int = option(1_000, "steps between checkpoints", resumable=True)
    save_every_minutes: float = option(
        0.0, "minutes between checkpoints as well; 0: only by steps", resumable=True)
    keep_last: int = option(
        5, "checkpoints kept (§6.1 averages the last 5 for base, 20 for big)", resumable=True)
    cooldown_saves: int = option(
        0, "not in the paper: this many checkpoints spread evenly over the rate's cooldown "
           "(one each time another 1/cooldown_saves of its steps has passed, the last on its "
           "last step) in place of save_every's, so that `average --last N` (N <= "
           "cooldown_saves) averages the end of training; 0: one cadence throughout",
        resumable=True)
    patience: int = option(
        0, "stop after this many validations without a better score; 0: never", resumable=True)
    patience_cooldown: bool = option(
        False, "not in the paper: when patience runs out, start the rate's cooldown instead "
               "of stopping: it falls linearly over lr_cooldown_share / (1 - "
               "lr_cooldown_share) of the steps taken so far, and the run ends with it, so "
               "that runs end where their scores stop improving whatever the machine's speed",
        resumable=True)
    max_nonfinite: int = option(
        10, "a step whose loss or gradient is not finite skips its update; this many in a "
            "row stop the run (with a checkpoint of the last finite parameters)", resumable=True)
    threads: int = option(0, "torch intra-op threads; 0: torch's default", resumable=True)

    def __post_init__(self):
        _check_positive(self, "max_tokens", "accumulate", "warmup_steps", "lr_scale",
                        "log_every", "valid_every", "save_every", "keep_last", "max_nonfinite")
        if self.bf16 and self.fp16:
            raise ValueError("train.bf16 and train.fp16 are exclusive: pick one")
        if self.shape_buckets < 0:
            raise ValueError(f"train.shape_buckets must be >= 0, got {self.shape_buckets}")
        if self.compile == "cuda_graphs" and not self.shape_buckets:
            raise ValueError("train.compile=cuda_graphs replays a graph per batch shape: set "
                             "train.shape_buckets (e.g. 8) so that batches come in a few shapes")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"train.label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if not 0.0 <= self.bpe_dropout < 1.0:
            raise ValueError(f"train.bpe_dropout must be in [0, 1), got {self.bpe_dropout}")
        if self.rdrop_alpha < 0:
            raise ValueError(f"train.rdrop_alpha must be >= 0, got {self.rdrop_alpha}")
        if self.max_steps <= 0 and self.max_epochs <= 0 and self.max_minutes <= 0:
            raise ValueError("set train.max_steps, train.max_epochs or train.max_minutes")
        if self.lr_cooldown_steps and not 0 < self.lr_cooldown_steps <= self.max_steps:
            raise ValueError("train.lr_cooldown_steps must be in [0, train.max_steps] (the "
                             f"cooldown ends at max_steps), got {self.lr_cooldown_steps} with "
                             f"max_steps {self.max_steps}")
        if self.lr_cooldown_minutes and not 0 < self.lr_cooldown_minutes < self.max_minutes:
            raise ValueError("train.lr_cooldown_minutes must be in [0, train.max_minutes) (the "
                             "cooldown ends with the time budget), got "
                             f"{self.lr_cooldown_minutes} with max_minutes {self.max_minutes}")
        if self.lr_cooldown_share and not (0 < self.lr_cooldown_share < 1
                                           and (self.max_minutes > 0 or self.max_steps > 0)):
            raise ValueError("train.lr_cooldown_share is a share of train.max_minutes or "
                             f"train.max_steps, in [0, 1), got {self.lr_cooldown_share} with "
                             f"max_minutes {self.max_minutes}, max_steps {self.max_steps}")
        if not 0 <= self.cooldown_saves <= self.keep_last:
            raise ValueError(f"train.cooldown_saves must be in [0, train.keep_last] (the "
                             f"checkpoints the cooldown saves are all kept), got "
                             f"{self.cooldown_saves} with keep_last {self.keep_last}")
        if self.patience_cooldown and not (self.patience > 0 and self.lr_cooldown_share):
            raise ValueError("train.patience_cooldown starts a cooldown of "
                             "train.lr_cooldown_share of the run when train.patience runs "
                             f"out: set both (got patience {self.patience}, "
                             f"lr_cooldown_share {self.lr_cooldown_share})")
        if sum(bool(x) for x in (self.lr_cooldown_steps, self.lr_cooldown_minutes,
                                 self.lr_cooldown_share)) > 1:
            raise ValueError("train.lr_cooldown_steps, train.lr_cooldown_minutes and "
                             "train.lr_cooldown_share are exclusive: a cooldown ends either at "
                             "max_steps or with max_minutes, given in minutes or as a share")

    @property
    def cooldown_minutes(self) -> float:
        """The timed cooldown's length in minutes (lr_cooldown_minutes, or lr_cooldown_share
        of max_minutes); 0: none."""
        return self.lr_cooldown_minutes or self.lr_cooldown_share * self.max_minutes

    @property
    def cooldown_steps(self) -> int:
        """The cooldown's length in steps, ending at max_steps (lr_cooldown_steps, or
        lr_cooldown_share of max_steps where no max_minutes is set); 0: none."""
        if self.lr_cooldown_steps or self.max_minutes:
            return self.lr_cooldown_steps
        return max(1, round(self.lr_cooldown_share * self.max_steps)) \
            if self.lr_cooldown_share else 0


@dataclass(frozen=True, kw_only=True)
class ServeConfig:
    """`transformer-mt serve`: where it listens, how it batches across clients, and its limits.
    Each field is a command-line option of `serve`."""

    host: str = option("127.0.0.1", "address to listen on (127.0.0.1: this machine only)")
    port: int = option(8000, "port to listen on")
    max_batch_tokens: int = option(
        4096, "source tokens decoded together at most: sentences of concurrent requests share "
              "a batch up to this budget")
    max_wait_ms: float = option(
        0.0, "how long a batch waits for more sentences before it is decoded; at 0 a batch "
             "is what arrived while the previous one decoded")
    max_queue: int = option(1024, "sentences waiting at most; beyond, requests get 429")
    max_body_bytes: int = option(1 << 20, "request body size limit (413 beyond)")
    max_sentences: int = option(64, "sentences per request (413 beyond)")
    max_chars: int = option(2000, "characters per sentence (422 beyond)")
    max_beam: int = option(16, "largest beam_size a request may ask for (422 beyond)")
    max_offset: int = option(200, "largest max_length_offset a request may ask for (422 "
                                  "beyond)")
    max_request_work: int = option(
        1 << 17, "the work one request may ask for: the sum over its sentences of beam_size x "
                 "the sentence's output length cap (its tokens + max_length_offset, at most "
                 "decode.max_length); 413 beyond, so that one client cannot hold the search")
    queue_timeout_seconds: float = option(
        30.0, "a request whose sentences waited this long without all starting to decode gets "
              "503 with Retry-After, and its waiting sentences are dropped")
    read_timeout_seconds: float = option(
        10.0, "a request's head, and then its body, must each arrive within this many seconds "
              "(a body that does not: 408; a connection whose next request's head does not: "
              "closed); idle keep-alive connections close after 5 s")
    api_key: str = option("", "if set, requests need 'Authorization: Bearer KEY' (the "
                              "LibreTranslate endpoint also takes api_key); '' : no key")
    cors_origins: str = option("", "comma-separated origins allowed to call the API from a "
                                   "browser ('*': any); '': none")
    languages: str = option("", "SRC-TGT, e.g. en-de (SRC:TGT where a code has a dash: "
                                "pt-BR:de): the model's languages, where its directory does "
                                "not record them (prepare reads them from train.en/train.de, "
                                "or --src-lang/--tgt-lang); the LibreTranslate endpoint needs "
                                "them. '': the model's record")
    grace_seconds: float = option(
        30.0, "on SIGTERM or SIGINT: stop accepting, finish what is queued and running "
              "within this many seconds, then exit")

    @property
    def language_pair(self) -> tuple[str, str] | None:
        """serve.languages as (source, target); None where it is not set or not a pair."""
        parts = self.languages.split(":" if ":" in self.languages else "-")
        return (parts[0], parts[1]) if len(parts) == 2 and all(parts) else None

    def __post_init__(self):
        _check_positive(self, "port", "max_batch_tokens", "max_queue", "max_body_bytes",
                        "max_sentences", "max_chars", "max_beam")
        if self.languages and not self.language_pair:
            raise ValueError("serve.languages is SRC-TGT (e.g. en-de) or SRC:TGT (pt-BR:de), "
                             f"got {self.languages!r}")
        _check_positive(self, "max_request_work", "queue_timeout_seconds",
                        "read_timeout_seconds")
        if self.max_wait_ms < 0 or self.grace_seconds < 0 or self.max_offset < 0:
            raise ValueError("serve.max_wait_ms, serve.grace_seconds and serve.max_offset "
                             "must be >= 0")


@dataclass(frozen=True, kw_only=True)
class Config:
    """The root config; only entry points (cli, serve) see it whole."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)


def _check_positive(cfg, *names: str) -> None:
    for name in names:
        if getattr(cfg, name) <= 0:
            raise ValueError(f"{name} must be positive, got {getattr(cfg, name)}")


def _check_choice(cfg, *names: str) -> None:
    hints = typing.get_type_hints(type(cfg))
    for name in names:
        allowed = typing.get_args(hints[name])
        if getattr(cfg, name) not in allowed:
            raise ValueError(f"{name}={getattr(cfg, name)!r} is not one of {allowed}")


def config_to_dict(cfg) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def config_from_dict(cls, data: dict[str, Any], where: str = ""):
    """Build dataclass `cls` from nested plain data; unknown keys and wrong types are errors."""
    try:
        return cls(**checked_fields(cls, data, where))
    except ValueError as err:
        if isinstance(err, ConfigError):
            raise
        raise ConfigError(f"{where or 'config'}: {err}") from None


def checked_fields(cls, data: dict[str, Any], where: str = "") -> dict[str, Any]:
    """The fields of dataclass `cls` in `data`, typed (nested sections built): unknown and
    retired keys and values of the wrong type are errors naming the dotted key."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or cls.__name__}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else key
        if path in RETIRED:
            kept, why = RETIRED[path]
            still = "saved configs holding it still load" if kept == ANY else \
                f"saved configs holding {kept!r}, its behaviour now, still load"
            raise ConfigError(f"config key '{path}' was retired ({why}); {still}")
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise ConfigError(f"unknown config key '{path}' ({hint}known: "
                              f"{', '.join(sorted(fields))})")
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            kwargs[key] = config_from_dict(hint, value, path)
        else:
            kwargs[key] = _coerce(value, hint, path)
    return kwargs


def without_retired(saved: dict[str, Any], source: str) -> dict[str, Any]:
    """A saved config (nested sections, as `config_to_dict` wrote them; `source` names the file)
    without the `RETIRED` keys whose value is what the code does now, with one warning naming
    them. A retired key with another value stays, for the reader to refuse."""
    ignored: list[str] = []

    def strip(section: dict[str, Any], where: str) -> dict[str, Any]:
        out = {}
        for key, value in section.items():
            path = f"{where}.{key}" if where else key
            if path in RETIRED and RETIRED[path][0] in (ANY, value):
                ignored.append(path)
                continue
            out[key] = strip(value, path) if isinstance(value, dict) else value
        return out

    kept = strip(saved, "")
    if ignored:
        why = sorted({RETIRED[path][1] for path in ignored})
        log.warning("%s: ignoring the retired config key%s %s (%s)", source,
                    "s" if len(ignored) > 1 else "", ", ".join(f"'{p}'" for p in ignored),
                    "; ".join(why))
    return kept


def _coerce(value: Any, hint: Any, path: str) -> Any:
    origin = typing.get_origin(hint)
    if origin is Literal:
        if value not in typing.get_args(hint):
            raise ConfigError(f"'{path}' must be one of {typing.get_args(hint)}, got {value!r}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(hint):
            return None
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(members) == 1:
            return _coerce(value, members[0], path)
        for member in members:
            with contextlib.suppress(ConfigError):
                return _coerce(value, member, path)
        allowed = " or ".join(", ".join(map(repr, typing.get_args(m))) if
                              typing.get_origin(m) is Literal else m.__name__ for m in members)
        raise ConfigError(f"'{path}' must be {allowed}, got {value!r}")
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float, str, bool):
        if type(value) is not hint:
            raise ConfigError(f"'{path}' must be {hint.__name__}, got {value!r}")
        return value
    raise ConfigError(f"'{path}': unsupported type {hint}")


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


class _YamlLoader(yaml.SafeLoader):
    """PyYAML reads YAML 1.1, where `1e-9` (no dot) is a string; YAML 1.2, and anyone writing
    `adam_eps: 1e-9`, means a float."""


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def read_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_YamlLoader)


def load_config(preset_or_yaml: str | Path = "base", overrides: list[str] = ()) -> Config:
    """Read a preset name or YAML path, then apply `section.key=value` overrides (YAML values).
    An error names the file, or the overrides where the file alone is a valid config."""
    path, data = config_data(preset_or_yaml, overrides)
    try:
        return config_from_dict(Config, data)
    except ConfigError as err:
        if overrides and _is_valid(config_data(preset_or_yaml)[1]):
            raise ConfigError(f"the overrides {' '.join(f'--{o}' for o in overrides)} "
                              f"(on {path.name}): {err}") from None
        raise ConfigError(f"{path}: {err}") from None


def _is_valid(data: dict[str, Any]) -> bool:
    try:
        config_from_dict(Config, data)
    except ConfigError:
        return False
    return True


# what a run's config.json records beside the config it trained with (training/loop.py): read
# as a --config, a run's config.json is that config (`train --config runs/X/config.json`)
RUN_RECORD = ("data_dir", "languages")


def config_data(preset_or_yaml: str | Path = "base", overrides: list[str] = ()
                ) -> tuple[Path, dict[str, Any]]:
    """The file a preset name or YAML path (or a run's config.json) names, and its plain data
    with the overrides applied (not yet checked: `load_config`)."""
    path = Path(preset_or_yaml)
    if not path.suffix and not path.is_file():  # a folder named like a preset is no config
        path = PRESETS_DIR / f"{preset_or_yaml}.yaml"
        if not path.exists():
            raise ConfigError(
                f"unknown preset '{preset_or_yaml}' (presets: {', '.join(preset_names())})"
            )
    try:
        data = read_yaml(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"{path}: cannot read config: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    if path.suffix == ".json":  # a run's config.json, perhaps written by an older version
        data = without_retired({k: v for k, v in data.items() if k not in RUN_RECORD}, str(path))
    for override in overrides:
        key, sep, raw = override.lstrip("-").partition("=")
        if not sep or not key:
            raise ConfigError(f"override '{override}' is not of the form section.key=value")
        *parents, leaf = key.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override '{override}': '{part}' is not a section")
        node[leaf] = read_yaml(raw)
    return path, data
