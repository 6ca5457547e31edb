"""The shared source/target subword vocabulary (§5.1): a SentencePiece model.

Ids are fixed so that models and vocabularies agree: pad 0, unk 1, bos 2, eos 3.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


class VocabularyError(ValueError):
    """A vocabulary file is missing or unreadable; the message names the file."""


class Vocabulary:
    """Text <-> ids with a SentencePiece model."""

    def __init__(self, processor: spm.SentencePieceProcessor, path: Path | None = None):
        self.sp = processor
        self.path = path
        specials = (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
        if specials != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise VocabularyError(
                f"{path or 'vocabulary'}: special ids (pad, unk, bos, eos) are {specials}, "
                f"expected {(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}"
            )

    @classmethod
    def load(cls, path: str | Path) -> Vocabulary:
        path = Path(path)
        try:
            model_proto = path.read_bytes()
        except OSError as err:
            raise VocabularyError(f"{path}: cannot read vocabulary: {err.strerror}") from None
        processor = spm.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(model_proto)
        except (RuntimeError, OSError) as err:
            raise VocabularyError(f"{path}: not a SentencePiece model ({err})") from None
        return cls(processor, path)

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        """Subword ids of `text`, without BOS/EOS."""
        return self.sp.encode(text)

    def decode(self, ids: Iterable[int]) -> str:
        return self.sp.decode(list(ids))


def train_vocabulary(texts: Iterable[str], *, vocab_size: int, out_path: str | Path,
                     model_type: str = "bpe", character_coverage: float = 1.0) -> Vocabulary:
    """Train a joint SentencePiece model on `texts` (source and target sentences together) and
    write it to `out_path`. BPE as in the paper (§5.1: byte-pair encoding)."""
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=buffer, vocab_size=vocab_size,
        model_type=model_type, character_coverage=character_coverage,
        pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
        hard_vocab_limit=False, minloglevel=2,
    )
    out_path = Path(out_path)
    out_path.write_bytes(buffer.getvalue())
    return Vocabulary.load(out_path)
