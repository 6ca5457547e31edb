"""One split of a prepared data directory, memory-mapped, as padded (source, target) tensors."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..storage.names import META_FILE, split_file
from .batching import ShapeBuckets
from .prepare import SIDES, load_meta, pack
from .text import DataError, read_bytes, split_lines
from .vocab import BOS_ID, EOS_ID, PAD_ID, Vocabulary


class ParallelData:
    """One split of a prepared directory, memory-mapped. Item i: (source ids + EOS,
    BOS + target ids, target ids + EOS)."""

    def __init__(self, data_dir: Path, split: str):
        self.data_dir, self.split = Path(data_dir), split
        self.tokens, self.offsets = {}, {}
        self._texts: dict[str, list[str]] = {}  # see text()
        meta = load_meta(data_dir) if (self.data_dir / META_FILE).exists() else {}
        specials = meta.get("special_ids") or {}  # data prepared before they were recorded
        self.pad_id, self.bos_id, self.eos_id = (specials.get(k, default) for k, default in
                                                 (("pad", PAD_ID), ("bos", BOS_ID),
                                                  ("eos", EOS_ID)))
        for side in SIDES:
            for kind, store in (("tokens", self.tokens), ("offsets", self.offsets)):
                path = self.data_dir / split_file(split, side, f"{kind}.npy")
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

    def collate(self, indices, buckets: ShapeBuckets | None = None) -> tuple:
        """Padded tensors for sentences `indices`: src (B, S), tgt_in (B, T), tgt_out (B, T).
        With `buckets`, both sides padded to the batch's bucket length and the rows to its row
        count (all-padding rows after the sentences)."""
        import torch

        B = len(indices)
        S = int(self.src_lengths[indices].max())
        T = int(self.tgt_lengths[indices].max())
        if buckets is not None:
            rows, S = buckets.shape(max(S, T))
            if rows < B:
                raise ValueError(f"{B} sentences of up to {S} tokens exceed max_tokens "
                                 f"{buckets.max_tokens}: batch them with the same buckets")
            B, T = rows, S
        pad, bos, eos = self.pad_id, self.bos_id, self.eos_id
        src = np.full((B, S), pad, dtype=np.int64)
        tgt_in = np.full((B, T), pad, dtype=np.int64)
        tgt_out = np.full((B, T), pad, dtype=np.int64)
        for row, i in enumerate(indices):
            s, t = self.ids("src", i), self.ids("tgt", i)
            src[row, : len(s)], src[row, len(s)] = s, eos
            tgt_in[row, 0], tgt_in[row, 1 : len(t) + 1] = bos, t
            tgt_out[row, : len(t)], tgt_out[row, len(t)] = t, eos
        return torch.from_numpy(src), torch.from_numpy(tgt_in), torch.from_numpy(tgt_out)

    def resegmented(self, vocab: Vocabulary, *, dropout: float, seed: int) -> ParallelData:
        """This split encoded again from its text with BPE-dropout (Provilkov et al., 2020): each
        merge is skipped with probability `dropout`, so a word is segmented differently from call
        to call (at 0.1 sentences get ~40% more pieces). Same seed, same segmentation."""
        import sentencepiece as spm

        copy = object.__new__(ParallelData)
        copy.data_dir, copy.split, copy.tokens, copy.offsets = self.data_dir, self.split, {}, {}
        copy.pad_id, copy.bos_id, copy.eos_id = self.pad_id, self.bos_id, self.eos_id
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
            path = self.data_dir / split_file(self.split, side, "txt")
            lines = [line.decode("utf-8") for line in split_lines(read_bytes(path))]
            if len(lines) != len(self):
                raise DataError(f"{path}: {len(lines)} lines, but the prepared {self.split} split "
                                f"has {len(self)} pairs")
            texts[side] = lines
        return texts[side]

