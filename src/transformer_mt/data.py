"""Parallel text in, batches out (§5.1): strict reading, cleaning with a drop report, a joint
SentencePiece vocabulary, a compact memory-mapped binary format, and token-budget batches.

A prepared data directory holds
  sentencepiece.model                   the joint vocabulary
  {split}.{src,tgt}.tokens.npy          all token ids of a split side, concatenated (uint16/int32)
  {split}.{src,tgt}.offsets.npy         int64, sentence i is tokens[offsets[i]:offsets[i+1]]
  {split}.{src,tgt}.txt                 the cleaned text (references for validation BLEU)
  meta.json                             languages, counts, sha256 of inputs and vocabulary
  report.json                           what was dropped from training data, by reason
Arrays are .npy read with allow_pickle=False and mmap_mode="r": nothing is unpickled.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .config import DataConfig, config_to_dict
from .vocab import BOS_ID, EOS_ID, PAD_ID, Vocabulary, train_vocabulary

log = logging.getLogger(__name__)

VOCAB_FILE = "sentencepiece.model"
SIDES = ("src", "tgt")


class DataError(ValueError):
    """Input text or a prepared directory is wrong; the message names the file and line."""


# --- reading text --------------------------------------------------------------------------

def read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
        return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        raise DataError(f"{path}: cannot read: {err}") from None


def split_lines(data: bytes) -> list[bytes]:
    """Lines split on "\\n" only; one trailing "\\r" per line and a leading BOM are removed.
    A final newline does not start another line."""
    data = data.removeprefix(b"\xef\xbb\xbf")
    if not data:
        return []
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return [line[:-1] if line.endswith(b"\r") else line for line in lines]


def read_parallel(src_path: Path, tgt_path: Path, *, skip_invalid: bool = False,
                  ) -> tuple[list[str], list[str], int]:
    """Read two aligned files as strict UTF-8. Returns (sources, targets, pairs skipped for
    invalid UTF-8). A line-count mismatch, or invalid UTF-8 unless skip_invalid, is a DataError
    naming the file(s), line and counts."""
    src_lines, tgt_lines = split_lines(read_bytes(src_path)), split_lines(read_bytes(tgt_path))
    if len(src_lines) != len(tgt_lines):
        raise DataError(
            f"line counts differ: {src_path} has {len(src_lines)} lines, "
            f"{tgt_path} has {len(tgt_lines)}"
        )
    sources, targets, skipped = [], [], 0
    for number, pair in enumerate(zip(src_lines, tgt_lines, strict=True), start=1):
        texts = []
        for path, line in zip((src_path, tgt_path), pair, strict=True):
            try:
                texts.append(line.decode("utf-8"))
            except UnicodeDecodeError as err:
                if not skip_invalid:
                    raise DataError(f"{path}:{number}: invalid UTF-8 ({err.reason} at byte "
                                    f"{err.start})") from None
        if len(texts) < 2:
            skipped += 1
            continue
        sources.append(texts[0])
        targets.append(texts[1])
    return sources, targets, skipped


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --- preparing -----------------------------------------------------------------------------

@dataclass(frozen=True)
class SplitFiles:
    name: str  # "train", "valid", "test", ...
    src: Path
    tgt: Path


def drop_reason(src_ids: list[int], tgt_ids: list[int], cfg: DataConfig) -> str | None:
    """Why a training pair is left out, or None to keep it."""
    if not src_ids or not tgt_ids:
        return "empty"
    if max(len(src_ids), len(tgt_ids)) > cfg.max_length:
        return "too_long"
    if max(len(src_ids), len(tgt_ids)) > cfg.max_length_ratio * min(len(src_ids), len(tgt_ids)):
        return "length_ratio"
    return None


def pack(ids: list[list[int]], vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Sentences of ids as one flat array (N tokens,) and offsets (N sentences + 1,)."""
    dtype = np.uint16 if vocab_size <= np.iinfo(np.uint16).max else np.int32
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.fromiter((t for x in ids for t in x), dtype=dtype, count=int(offsets[-1]))
    return flat, offsets


def write_side(out_dir: Path, split: str, side: str, ids: list[list[int]], vocab_size: int):
    flat, offsets = pack(ids, vocab_size)
    np.save(out_dir / f"{split}.{side}.tokens.npy", flat)
    np.save(out_dir / f"{split}.{side}.offsets.npy", offsets)


def prepare(*, train: SplitFiles, others: list[SplitFiles], out_dir: Path, cfg: DataConfig,
            src_lang: str = "src", tgt_lang: str = "tgt") -> dict:
    """Read, clean, learn the vocabulary on the training pairs, encode and write `out_dir`.
    Only training pairs are dropped (empty, too long, length ratio); other splits are kept
    whole so that scores stay comparable. Returns the report."""
    splits = [train, *others]
    texts = {}
    skipped_utf8 = {}
    for split in splits:  # every file is read and checked before any work is written
        src, tgt, skipped = read_parallel(split.src, split.tgt, skip_invalid=cfg.skip_invalid_utf8)
        texts[split.name] = (src, tgt)
        skipped_utf8[split.name] = skipped
    out_dir.mkdir(parents=True, exist_ok=True)
    train_src, train_tgt = texts[train.name]
    log.info("training a %d-piece %s vocabulary on %d pairs", cfg.vocab_size,
             cfg.vocab_model_type, len(train_src))
    nonempty = [t for t in train_src + train_tgt if t.strip()]
    vocab = train_vocabulary(nonempty, vocab_size=cfg.vocab_size, out_path=out_dir / VOCAB_FILE,
                             model_type=cfg.vocab_model_type,
                             character_coverage=cfg.character_coverage)
    report: dict = {"splits": {}}
    for split in splits:
        src, tgt = texts[split.name]
        src_ids, tgt_ids = vocab.sp.encode(src), vocab.sp.encode(tgt)
        drops: Counter = Counter()
        if split.name == train.name:
            keep = []
            for i, (s, t) in enumerate(zip(src_ids, tgt_ids, strict=True)):
                reason = drop_reason(s, t, cfg)
                if reason:
                    drops[reason] += 1
                else:
                    keep.append(i)
            src_ids, tgt_ids = [src_ids[i] for i in keep], [tgt_ids[i] for i in keep]
            src, tgt = [src[i] for i in keep], [tgt[i] for i in keep]
        if skipped_utf8[split.name]:
            drops["invalid_utf8"] = skipped_utf8[split.name]
        for side, ids, lines in (("src", src_ids, src), ("tgt", tgt_ids, tgt)):
            write_side(out_dir, split.name, side, ids, len(vocab))
            (out_dir / f"{split.name}.{side}.txt").write_text(
                "".join(line + "\n" for line in lines), encoding="utf-8")
        report["splits"][split.name] = {
            "read": len(src) + sum(drops.values()), "kept": len(src), "dropped": dict(drops),
            "src_tokens": sum(map(len, src_ids)), "tgt_tokens": sum(map(len, tgt_ids)),
        }
    meta = {
        "src_lang": src_lang, "tgt_lang": tgt_lang, "vocab_size": len(vocab),
        "vocab_sha256": sha256_file(out_dir / VOCAB_FILE), "data": config_to_dict(cfg),
        "inputs": {s.name: {"src": str(s.src), "src_sha256": sha256_file(s.src),
                            "tgt": str(s.tgt), "tgt_sha256": sha256_file(s.tgt)}
                   for s in splits},
        "splits": {name: r["kept"] for name, r in report["splits"].items()},
    }
    (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return report


# --- reading prepared data -----------------------------------------------------------------

class ParallelData:
    """One split of a prepared directory, memory-mapped. Item i: (source ids + EOS,
    BOS + target ids, target ids + EOS)."""

    def __init__(self, data_dir: Path, split: str):
        self.data_dir, self.split = Path(data_dir), split
        self.tokens, self.offsets = {}, {}
        self._texts: dict[str, list[str]] = {}  # see text()
        for side in SIDES:
            for kind, store in (("tokens", self.tokens), ("offsets", self.offsets)):
                path = self.data_dir / f"{split}.{side}.{kind}.npy"
                try:
                    store[side] = np.load(path, mmap_mode="r", allow_pickle=False)
                except (OSError, ValueError) as err:
                    raise DataError(f"{path}: cannot load prepared data: {err}") from None
        self._measure()

    def _measure(self) -> None:
        if len(self.offsets["src"]) != len(self.offsets["tgt"]):
            raise DataError(f"{self.data_dir}: {self.split} source and target counts differ")
        self.src_lengths = np.diff(self.offsets["src"]) + 1  # + EOS
        self.tgt_lengths = np.diff(self.offsets["tgt"]) + 1  # + BOS (input) / EOS (output)

    def __len__(self) -> int:
        return len(self.src_lengths)

    def ids(self, side: str, i: int) -> np.ndarray:
        return self.tokens[side][self.offsets[side][i] : self.offsets[side][i + 1]]

    def collate(self, indices) -> tuple:
        """Padded tensors for sentences `indices`: src (B, S), tgt_in (B, T), tgt_out (B, T)."""
        import torch

        B = len(indices)
        S = int(self.src_lengths[indices].max())
        T = int(self.tgt_lengths[indices].max())
        src = np.full((B, S), PAD_ID, dtype=np.int64)
        tgt_in = np.full((B, T), PAD_ID, dtype=np.int64)
        tgt_out = np.full((B, T), PAD_ID, dtype=np.int64)
        for row, i in enumerate(indices):
            s, t = self.ids("src", i), self.ids("tgt", i)
            src[row, : len(s)], src[row, len(s)] = s, EOS_ID
            tgt_in[row, 0], tgt_in[row, 1 : len(t) + 1] = BOS_ID, t
            tgt_out[row, : len(t)], tgt_out[row, len(t)] = t, EOS_ID
        return torch.from_numpy(src), torch.from_numpy(tgt_in), torch.from_numpy(tgt_out)

    def resegmented(self, vocab: Vocabulary, *, dropout: float, seed: int) -> ParallelData:
        """This split encoded again from its text with BPE-dropout (Provilkov et al., 2020): each
        merge is skipped with probability `dropout`, so a word is segmented differently from call
        to call (at 0.1 sentences get ~40% more pieces). Same seed, same segmentation."""
        import sentencepiece as spm

        copy = object.__new__(ParallelData)
        copy.data_dir, copy.split, copy.tokens, copy.offsets = self.data_dir, self.split, {}, {}
        copy._texts = self._texts  # the same sentences
        spm.set_random_generator_seed(seed)
        for side in SIDES:
            ids = vocab.sp.encode(self.text(side), enable_sampling=True, alpha=dropout,
                                  num_threads=1)  # one thread: the sampling follows the seed
            copy.tokens[side], copy.offsets[side] = pack(ids, len(vocab))
        copy._measure()
        return copy

    def text(self, side: str) -> list[str]:
        """The split's sentences on one side as prepared (read once, then kept)."""
        texts = self._texts
        if side not in texts:
            path = self.data_dir / f"{self.split}.{side}.txt"
            lines = [line.decode("utf-8") for line in split_lines(read_bytes(path))]
            if len(lines) != len(self):
                raise DataError(f"{path}: {len(lines)} lines, but the prepared {self.split} split "
                                f"has {len(self)} pairs")
            texts[side] = lines
        return texts[side]


def token_batches(src_lengths: np.ndarray, tgt_lengths: np.ndarray, *, max_tokens: int,
                  seed: int, epoch: int, shuffle: bool = True) -> list[np.ndarray]:
    """Sentence indices grouped into batches whose padded size B * max length stays within
    max_tokens on both sides. Sentences are sorted by length (ties broken at random) so padding
    stays small; the batch order is shuffled. Same (seed, epoch), same batches."""
    rng = np.random.default_rng([seed, epoch])
    n = len(src_lengths)
    order = rng.permutation(n) if shuffle else np.arange(n)
    order = order[np.lexsort((src_lengths[order], tgt_lengths[order]))]
    batches, start, longest_src, longest_tgt = [], 0, 0, 0
    for pos, i in enumerate(order):
        s, t = int(src_lengths[i]), int(tgt_lengths[i])
        if max(s, t) > max_tokens:
            raise DataError(f"sentence {i} ({s} source / {t} target tokens) does not fit in "
                            f"max_tokens={max_tokens}")
        longest_src, longest_tgt = max(longest_src, s), max(longest_tgt, t)
        if (pos + 1 - start) * max(longest_src, longest_tgt) > max_tokens:
            batches.append(order[start:pos])
            start, longest_src, longest_tgt = pos, s, t
    if start < n:
        batches.append(order[start:])
    if shuffle:
        rng.shuffle(batches)
    return batches


def load_vocab(data_dir: Path) -> Vocabulary:
    return Vocabulary.load(Path(data_dir) / VOCAB_FILE)


def load_meta(data_dir: Path) -> dict:
    path = Path(data_dir) / "meta.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise DataError(f"{path}: not a prepared data directory ({err})") from None
