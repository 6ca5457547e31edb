"""Sentences in, sentences out: a model, its vocabulary and decoding settings in one object.

The model is anything that follows the decoding protocol (`search.DecodingModel`): a
Transformer, an Ensemble, or a wrapper of one (examples/knn_mt/ mixes a datastore into the
next-token distribution that way)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..config import DecodeConfig
from ..data.vocab import (
    MarianVocabulary,
    Vocabulary,
    load_model_vocabulary,
)
from ..hardware.cpu_speed import warn_if_bf16_is_slow
from ..model.attention import attention_kernels
from ..model.transformer import Transformer
from ..storage.model_dir import load_model
from ..storage.names import MARIAN_FILES, TARGET_VOCAB_FILE, VOCAB_FILE
from .alignment import AlignmentChoice, alignment_weights
from .attention_maps import recording
from .ensemble import Ensemble
from .precision import Bf16Choice, choose_bf16
from .quantize import quantize_int8
from .search import BeamSearch, DecodingModel, Hypothesis, LogitsProcessor, generate


class SourceTooLong(ValueError):
    """A sentence longer than the model takes; `truncated` is its ids cut to fit (EOS kept)."""

    def __init__(self, message: str, truncated: list[int]):
        super().__init__(message)
        self.truncated = truncated


@dataclass(frozen=True)
class Translation:
    text: str
    score: float  # log P / lp(|Y|), the beam search's ranking score
    log_prob: float
    tokens: tuple[int, ...] = ()  # the output's ids, without BOS and EOS
    # where asked (the server's "alignment"): (tokens, source tokens) rows, Translator.alignments
    alignment: torch.Tensor | None = dataclasses.field(default=None, compare=False)


class Translator:
    """Translate sentences with `model`: a Transformer, an Ensemble or any other
    `DecodingModel`. Sentences are decoded in batches of similar length and returned in input
    order."""

    def __init__(self, model: DecodingModel, vocab: Vocabulary | MarianVocabulary,
                 decode: DecodeConfig | None = None):
        if (len(vocab), vocab.target_size) != (model.cfg.vocab_size, model.cfg.tgt_vocab_size):
            raise ValueError(
                f"vocabulary {vocab.path or ''} has {len(vocab)} / {vocab.target_size} source / "
                f"target pieces, the model expects {model.cfg.vocab_size} / "
                f"{model.cfg.tgt_vocab_size}"
            )
        self.vocab = vocab
        self.decode_cfg = decode or DecodeConfig()
        if self.decode_cfg.int8:
            if isinstance(model, Ensemble):
                model = Ensemble([quantize_int8(m, self.decode_cfg.int8_scales)
                                  for m in model.members])
            elif isinstance(model, Transformer):
                model = quantize_int8(model, self.decode_cfg.int8_scales)
            else:
                raise ValueError(f"decode.int8 quantises a Transformer or an Ensemble, not a "
                                 f"{type(model).__name__}: quantise the model it wraps instead")
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self._bf16: Bf16Choice | None = None  # decode.bf16 auto's, measured when first asked
        self.logits_processor: LogitsProcessor | None = None  # parse trees --word-slots
        if self.decode_cfg.bf16 is True:
            warn_if_bf16_is_slow(self.device, setting="decode.bf16",
                                 instead="decode in float32 (without --bf16), with --bf16 auto "
                                         "or with --int8")
        if self.decode_cfg.kv_bf16:  # eq. (1) then multiplies bf16 keys and values
            warn_if_bf16_is_slow(self.device, setting="decode.kv_bf16",
                                 instead="keep keys and values in float32 (without --kv-bf16)")

    @classmethod
    def from_dir(cls, model_dir: str | Path, *, device: str = "cpu", **decode_overrides):
        """Load a model directory (weights, config, vocabulary); override decoding settings,
        e.g. `beam_size=5`."""
        return cls.from_dirs([model_dir], device=device, **decode_overrides)

    @classmethod
    def from_dirs(cls, model_dirs: Sequence[str | Path], *, device: str = "cpu",
                  **decode_overrides):
        """Several model directories with one vocabulary as an Ensemble (one directory: that
        model alone); decoding settings from the first, then the overrides."""
        dirs = [Path(d) for d in model_dirs]
        for other in dirs[1:]:
            for name in (VOCAB_FILE, *MARIAN_FILES, TARGET_VOCAB_FILE):
                mine, theirs = dirs[0] / name, other / name
                if mine.exists() != theirs.exists() or \
                        mine.exists() and mine.read_bytes() != theirs.read_bytes():
                    raise ValueError(f"{theirs} differs from {mine}: an ensemble's models "
                                     "must share one vocabulary")
        loaded = [load_model(d, device=device) for d in dirs]
        models = [model for model, _ in loaded]
        model = models[0] if len(models) == 1 else Ensemble(models)
        vocab = load_model_vocabulary(dirs[0])
        return cls(model, vocab, dataclasses.replace(loaded[0][1], **decode_overrides))

    def encode_source(self, sentence: str, index: int,
                      cfg: DecodeConfig | None = None) -> list[int]:
        """The ids of one sentence + EOS; a ValueError naming sentence `index` (from 0) where
        it is longer than the model's positions leave room for with `cfg`'s output offset
        (or, where cfg.max_length caps outputs within the positions, than the positions)."""
        cfg = cfg or self.decode_cfg
        ids = self.vocab.encode(sentence) + [self.model.cfg.eos_id]
        positions = self.model.cfg.max_positions
        if cfg.max_length and cfg.max_length <= positions:
            limit, why = positions, f"max_positions {positions}"
        else:
            limit = positions - cfg.max_length_offset
            why = f"max_positions {positions} - max_length_offset {cfg.max_length_offset}"
        if len(ids) > limit:
            raise SourceTooLong(f"sentence {index + 1} has {len(ids)} tokens; this model takes "
                                f"at most {limit} ({why})", ids[:limit - 1] + ids[-1:])
        return ids

    def translate_nbest(self, sentences: Sequence[str],
                        progress: Callable[[int], None] | None = None) -> list[list[Translation]]:
        """The n_best translations of each sentence, best first by the search's score.
        `progress` is called after each batch with the number of sentences translated so far."""
        sources = [self.encode_source(s, i) for i, s in enumerate(sentences)]
        return self.translate_ids(sources, self.decode_cfg, progress=progress)

    def translate_ids(self, sources: Sequence[list[int]], cfg: DecodeConfig, *,
                      progress: Callable[[int], None] | None = None) -> list[list[Translation]]:
        """`translate_nbest` of sentences encoded already (`encode_source`), with settings
        `cfg` (the server decodes each batch with its requests' settings). An empty or blank
        sentence (no pieces, EOS alone) is not decoded: its n-best list is empty, its text ""
        (`best_text`), as the server answers it."""
        order = sorted((i for i, ids in enumerate(sources) if not has_no_pieces(ids)),
                       key=lambda i: len(sources[i]))
        results: list[list[Translation]] = [[] for _ in sources]
        batches = [order[start : start + cfg.batch_size]
                   for start in range(0, len(order), cfg.batch_size)]
        done = len(sources) - len(order)
        decoded = self._decoded([[sources[i] for i in batch] for batch in batches], cfg)
        for batch, nbests in zip(batches, decoded, strict=True):
            for i, nbest in zip(batch, nbests, strict=True):
                results[i] = nbest
            done += len(batch)
            if progress is not None:
                progress(done)
        return results

    def _decoded(self, batches: list[list[list[int]]], cfg: DecodeConfig
                 ) -> Iterator[list[list[Translation]]]:
        """The n-best lists of each batch, in order: one batch after another, or with
        cfg.workers > 1 that many at once, each on its own thread with an equal share of
        torch's threads (the search releases the GIL in every tensor operation)."""
        if cfg.workers == 1 or len(batches) == 1:
            yield from (self._translate_batch(batch, cfg) for batch in batches)
            return
        threads = torch.get_num_threads()
        if cfg.bf16 == "auto":
            self.bf16_for(cfg, cfg.batch_size)  # measured once, before the workers start
        share = max(1, threads // cfg.workers)
        try:
            with ThreadPoolExecutor(cfg.workers, initializer=torch.set_num_threads,
                                    initargs=(share,)) as pool:
                yield from pool.map(lambda batch: self._translate_batch(batch, cfg), batches)
        finally:
            torch.set_num_threads(threads)  # a worker's count is the default of later threads

    def _translate_batch(self, sources: list[list[int]], cfg: DecodeConfig
                         ) -> list[list[Translation]]:
        """The n-best lists of one batch of similar length."""
        with self._precision(cfg, len(sources)):
            nbests = generate(self.model, self._padded(sources), cfg, self.logits_processor)
        return [[self._detokenize(h) for h in hyps] for hyps in nbests]

    def joins(self, cfg: DecodeConfig) -> bool:
        """Whether sentences can join a running search with settings `cfg` (`RunningSearch`):
        beam search of a Transformer or an Ensemble."""
        return cfg.strategy == "beam" and isinstance(self.model, Transformer | Ensemble)

    def _padded(self, sources: Sequence[list[int]]) -> torch.Tensor:
        """(B, S) the encoded sentences, padded, on the model's device."""
        src_BS = torch.full((len(sources), max(len(ids) for ids in sources)),
                            self.model.cfg.pad_id, dtype=torch.long)
        for row, ids in enumerate(sources):
            src_BS[row, : len(ids)] = torch.tensor(ids)
        return src_BS.to(self.device)

    def _precision(self, cfg: DecodeConfig, batch: int | None = None) -> torch.autocast:
        """bf16 autocast as cfg.bf16 says; with auto, as measured for `batch` sentences (None:
        cfg.batch_size, the server's choice for a whole running search)."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16,
                              enabled=self.bf16_for(cfg, batch or cfg.batch_size))

    def bf16_for(self, cfg: DecodeConfig, batch: int) -> bool:
        """Whether a batch of `batch` sentences decodes with bf16 autocast under `cfg`."""
        if cfg.bf16 != "auto":
            return cfg.bf16
        if self._bf16 is None or self._bf16.batch_size != cfg.batch_size:
            self._bf16 = choose_bf16(self.model, cfg, self.device)
        return self._bf16.for_batch(batch)

    def _detokenize(self, hyp: Hypothesis) -> Translation:
        return Translation(self.vocab.decode(hyp.tokens), hyp.score, hyp.log_prob,
                           tuple(hyp.tokens))

    def alignment_choice(self, choice: AlignmentChoice) -> AlignmentChoice:
        """`choice` with its layer filled in; a ValueError where this model cannot align or
        the layer or a head is not there."""
        if not isinstance(self.model, Transformer):
            raise ValueError("alignments come from one Transformer's attention, not an "
                             f"{type(self.model).__name__}")
        return choice.resolve(self.model.cfg.n_decoder_layers, self.model.cfg.n_heads)

    def alignments(self, sources: Sequence[list[int]], outputs: Sequence[Translation],
                   choice: AlignmentChoice | None = None) -> list[torch.Tensor]:
        """Each output's (output tokens, source tokens) alignment rows, EOS left out on both
        sides (inference/alignment.py), from its source (ids + EOS) and its tokens."""
        choice = self.alignment_choice(choice or AlignmentChoice())
        bos = self.model.cfg.bos_id
        found = []
        for src_ids, out in zip(sources, outputs, strict=True):  # one at a time: no padding
            src_BS = self._padded([src_ids])
            tgt_BT = torch.tensor([[bos, *out.tokens]], device=self.device)
            with torch.inference_mode(), recording(self.model, ("cross",)) as weights:
                self.model(src_BS, tgt_BT)  # only the cross-attention weights are recomputed
            found.append(alignment_weights(weights["cross"][choice.layer][0].cpu(),
                                           len(src_ids) - 1, len(out.tokens), choice))
        return found

    def translate(self, sentences: Sequence[str]) -> list[str]:
        """The best translation of each sentence ("" for an empty or blank one)."""
        return [best_text(nbest) for nbest in self.translate_nbest(sentences)]


def has_no_pieces(ids: Sequence[int]) -> bool:
    """Whether encoded sentence `ids` (`encode_source`) is EOS alone: an empty or blank
    sentence, translated as "" without decoding (by `translate_ids` and the server alike)."""
    return len(ids) == 1


def best_text(nbest: Sequence[Translation]) -> str:
    """The text of the best translation; "" for an empty n-best list (an empty or blank
    sentence, or one skipped as too long)."""
    return nbest[0].text if nbest else ""


class RunningSearch:
    """A beam search of `translator`'s model that encoded sentences (`encode_source`) join
    between steps: the server's continuous batching. A sentence's translation is the one
    `translate_ids` gives it (search.BeamSearch says why)."""

    def __init__(self, translator: Translator, cfg: DecodeConfig):
        if not translator.joins(cfg):
            raise ValueError("sentences join a beam search of a Transformer or an Ensemble only")
        self.translator, self.cfg = translator, cfg
        self.search = BeamSearch(translator.model, cfg)

    def __len__(self) -> int:
        return len(self.search)

    def add(self, sources: Sequence[list[int]], keys: list[Any]) -> None:
        with self._decoding():
            self.search.add(self.translator._padded(sources), keys)

    def drop(self, keys: set[Any]) -> None:
        """Sentences `keys` leave unfinished (BeamSearch.drop)."""
        with self._decoding():
            self.search.drop(keys)

    def step(self) -> list[tuple[Any, list[Translation]]]:
        """One token more for every sentence; (key, n-best) of those done."""
        with self._decoding():
            done = self.search.step()
        return [(key, [self.translator._detokenize(h) for h in hyps]) for key, hyps in done]

    def _decoding(self) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        for context in (torch.inference_mode(), attention_kernels(self.translator.device),
                        self.translator._precision(self.cfg)):
            stack.enter_context(context)
        return stack
