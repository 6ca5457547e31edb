"""Sentences in, sentences out: a model, its vocabulary and decoding settings in one object."""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .config import DecodeConfig
from .cpu_speed import warn_if_bf16_is_slow
from .data import sha256_file
from .decoding import Hypothesis, generate
from .ensemble import Ensemble
from .knn import Datastore, KnnModel
from .mbr import mbr_order
from .model import Transformer
from .model_io import VOCAB_FILE, WEIGHTS_FILE, load_model
from .vocab import Vocabulary


def quantize_int8(model: Transformer) -> Transformer:
    """An inference copy of `model` whose linear layers (the projections, the FFN and the
    pre-softmax linear) hold int8 weights and quantise their inputs per batch (PyTorch's dynamic
    quantisation, CPU only); embeddings, LayerNorm and attention stay float32."""
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("decode.int8 runs on the CPU only; use bf16 on a GPU")
    with warnings.catch_warnings():  # torch.ao.quantization announces its move to torchao
        warnings.simplefilter("ignore")
        from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear
        from torch.ao.quantization import quantize_dynamic

        quantized = quantize_dynamic(copy.deepcopy(model).eval(), {nn.Linear}, dtype=torch.qint8)
    for parent in list(quantized.modules()):
        for name, child in parent.named_children():
            if isinstance(child, DynamicQuantizedLinear):
                setattr(parent, name, Int8Linear(child))
    return quantized


class Int8Linear(nn.Module):
    """A linear layer of `quantize_dynamic` (int8 weights packed for fbgemm, each input quantised
    per call with reduce_range), calling its operator overload directly: torch.ao's module and
    the operator packet add ~13 us of Python a call, a third of each call when beam 4 decodes
    one sentence. Outputs are bitwise those of the torch.ao module."""

    def __init__(self, quantized: nn.Module):
        super().__init__()
        self.in_features, self.out_features = quantized.in_features, quantized.out_features
        self.packed = quantized._packed_params._packed_params  # weight and bias, prepacked

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic.default(x, self.packed, True)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, dtype=qint8"


@dataclass(frozen=True)
class Translation:
    text: str
    score: float  # log P / lp(|Y|), the beam search's ranking score
    log_prob: float


class Translator:
    """Translate sentences with `model` (or an Ensemble, or with a kNN-MT datastore built for
    the model). Sentences are decoded in batches of similar length and returned in input
    order."""

    def __init__(self, model: Transformer | Ensemble, vocab: Vocabulary,
                 decode: DecodeConfig | None = None, datastore: Datastore | None = None):
        if len(vocab) != model.cfg.vocab_size:
            raise ValueError(
                f"vocabulary {vocab.path or ''} has {len(vocab)} pieces, the model expects "
                f"{model.cfg.vocab_size}"
            )
        self.vocab = vocab
        self.decode_cfg = decode or DecodeConfig()
        if self.decode_cfg.int8:
            model = Ensemble([quantize_int8(m) for m in model.members]) \
                if isinstance(model, Ensemble) else quantize_int8(model)
        if datastore is not None:
            if isinstance(model, Ensemble):
                raise ValueError("a datastore belongs to one model, not an ensemble")
            model = KnnModel(model, datastore, self.decode_cfg)
        self.model = model.eval()
        if self.decode_cfg.bf16:
            warn_if_bf16_is_slow(next(model.parameters()).device, setting="decode.bf16",
                                 instead="decode in float32 (without --bf16) or with --int8")

    @classmethod
    def from_dir(cls, model_dir: str | Path, *, device: str = "cpu", **decode_overrides):
        """Load a model directory (weights, config, vocabulary); override decoding settings,
        e.g. `beam_size=5`."""
        return cls.from_dirs([model_dir], device=device, **decode_overrides)

    @classmethod
    def from_dirs(cls, model_dirs: Sequence[str | Path], *, device: str = "cpu",
                  datastore: str | Path | None = None, **decode_overrides):
        """Several model directories with one vocabulary as an Ensemble (one directory: that
        model alone, optionally with a datastore directory built for it); decoding settings
        from the first, then the overrides."""
        dirs = [Path(d) for d in model_dirs]
        for other in dirs[1:]:
            if (other / VOCAB_FILE).read_bytes() != (dirs[0] / VOCAB_FILE).read_bytes():
                raise ValueError(f"{other / VOCAB_FILE} differs from {dirs[0] / VOCAB_FILE}: "
                                 "an ensemble's models must share one vocabulary")
        loaded = [load_model(d, device=device) for d in dirs]
        models = [model for model, _ in loaded]
        model = models[0] if len(models) == 1 else Ensemble(models)
        vocab = Vocabulary.load(dirs[0] / VOCAB_FILE)
        store = None
        if datastore is not None:  # (with several models, __init__ refuses it)
            store = Datastore.load(datastore, model_sha256=sha256_file(dirs[0] / WEIGHTS_FILE),
                                   d_model=models[0].cfg.d_model)
        return cls(model, vocab, dataclasses.replace(loaded[0][1], **decode_overrides), store)

    def encode_source(self, sentence: str, index: int) -> list[int]:
        ids = self.vocab.encode(sentence) + [self.model.cfg.eos_id]
        limit = self.model.cfg.max_positions - self.decode_cfg.max_length_offset
        if len(ids) > limit:
            raise ValueError(
                f"sentence {index + 1} has {len(ids)} tokens; this model takes at most {limit} "
                f"(max_positions {self.model.cfg.max_positions} - max_length_offset "
                f"{self.decode_cfg.max_length_offset})"
            )
        return ids

    def translate_nbest(self, sentences: Sequence[str],
                        progress: Callable[[int], None] | None = None) -> list[list[Translation]]:
        """The n_best translations of each sentence, best first: by the beam's score, or with
        decode.mbr by expected utility among all beam_size finished hypotheses (mbr.py).
        `progress` is called after each batch with the number of sentences translated so far."""
        sources = [self.encode_source(s, i) for i, s in enumerate(sentences)]
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
        results: list[list[Translation]] = [[] for _ in sources]
        device = next(self.model.parameters()).device
        cfg = self.decode_cfg
        if cfg.mbr != "none":  # every finished hypothesis is a candidate
            cfg = dataclasses.replace(cfg, n_best=cfg.beam_size)
        size = cfg.batch_size
        for start in range(0, len(order), size):
            batch = order[start : start + size]
            src_BS = torch.full((len(batch), max(len(sources[i]) for i in batch)),
                                self.model.cfg.pad_id, dtype=torch.long)
            for row, i in enumerate(batch):
                src_BS[row, : len(sources[i])] = torch.tensor(sources[i])
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.bf16):
                nbests = generate(self.model, src_BS.to(device), cfg)
            for i, hyps in zip(batch, nbests, strict=True):
                results[i] = [self._detokenize(h) for h in hyps]
            if progress is not None:
                progress(start + len(batch))
        if cfg.mbr != "none":
            results = [self._mbr_ranked(nbest) for nbest in results]
        return results

    def _mbr_ranked(self, nbest: list[Translation]) -> list[Translation]:
        ranked = mbr_order([t.text for t in nbest], [t.score for t in nbest], self.decode_cfg.mbr)
        return [nbest[i] for i in ranked[: self.decode_cfg.n_best]]

    def _detokenize(self, hyp: Hypothesis) -> Translation:
        return Translation(self.vocab.decode(hyp.tokens), hyp.score, hyp.log_prob)

    def translate(self, sentences: Sequence[str]) -> list[str]:
        """The best translation of each sentence."""
        return [nbest[0].text for nbest in self.translate_nbest(sentences)]
