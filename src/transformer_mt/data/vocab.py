"""The shared source/target subword vocabulary (§5.1): a SentencePiece model.

Ids are fixed so that models and vocabularies agree: pad 0, unk 1, bos 2, eos 3. Models
imported from Marian (OPUS-MT) keep theirs: `MarianVocabulary`.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm

from ..storage.names import MARIAN_FILES, MARIAN_VOCAB_FILE, TARGET_VOCAB_FILE, VOCAB_FILE

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
WORD_BOUNDARY = "\u2581"  # SentencePiece's mark of a space before a piece


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
        return cls(load_processor(path), path)

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    @property
    def target_size(self) -> int:
        return len(self)  # one vocabulary for both sides

    def piece(self, i: int, side: str = "source") -> str:
        """The piece of id `i` (either side: one vocabulary)."""
        return self.sp.id_to_piece(i)

    def encode(self, text: str) -> list[int]:
        """Subword ids of `text`, without BOS/EOS."""
        return self.sp.encode(text)

    def decode(self, ids: Iterable[int]) -> str:
        return self.sp.decode(list(ids))

    def encode_target(self, text: str) -> list[int]:
        """Ids of a target-side sentence (a training reference): one vocabulary for both."""
        return self.sp.encode(text)


def train_vocabulary(texts: Iterable[str], *, vocab_size: int, out_path: str | Path,
                     model_type: str = "bpe", character_coverage: float = 1.0,
                     whole_words: Sequence[str] = ()) -> Vocabulary:
    """Train a joint SentencePiece model on `texts` (source and target sentences together) and
    write it to `out_path`. BPE as in the paper (§5.1: byte-pair encoding). `whole_words`: words
    that stay one piece each where they stand as a word (a user-defined symbol with the word
    boundary, so that "(NP" costs one piece, not a boundary and the symbol)."""
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=buffer, vocab_size=vocab_size,
        model_type=model_type, character_coverage=character_coverage,
        pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
        hard_vocab_limit=False, minloglevel=2,
        user_defined_symbols=[WORD_BOUNDARY + word for word in whole_words],
    )
    out_path = Path(out_path)
    out_path.write_bytes(buffer.getvalue())
    return Vocabulary.load(out_path)


class MarianVocabulary:
    """Marian's (OPUS-MT's) vocabulary, as Hugging Face's MarianTokenizer reads it: a
    SentencePiece model for each side whose pieces map to the model's ids through vocab.json
    (a piece missing from it is <unk>); a leading `>>xx<<` target-language token is one
    piece; EOS is "</s>", padding "<pad>". Decoding drops the special pieces. With separate
    vocabularies (target_vocab.json, MarianTokenizer's separate_vocabs) the target side's pieces
    have ids of their own; the special pieces have the same ids on both sides."""

    SPECIALS = ("</s>", "<unk>", "<pad>")

    def __init__(self, source: spm.SentencePieceProcessor, target: spm.SentencePieceProcessor,
                 piece_ids: dict[str, int], path: Path | None = None,
                 target_piece_ids: dict[str, int] | None = None):
        self.source, self.target, self.piece_ids, self.path = source, target, piece_ids, path
        self.separate = target_piece_ids is not None  # its own target_vocab.json
        self.target_piece_ids = target_piece_ids or piece_ids
        self.pieces = {i: piece for piece, i in self.target_piece_ids.items()}  # target side
        self.source_pieces = {i: piece for piece, i in piece_ids.items()}
        for ids, name in ((piece_ids, MARIAN_VOCAB_FILE),
                          (self.target_piece_ids, TARGET_VOCAB_FILE)):
            missing = [p for p in self.SPECIALS if p not in ids]
            if missing:
                raise VocabularyError(f"{path.parent / name if path else name}: no "
                                      f"{', '.join(missing)} piece")
        self.eos_id, self.unk_id, self.pad_id = (piece_ids[p] for p in self.SPECIALS)
        if any(self.target_piece_ids[p] != piece_ids[p] for p in self.SPECIALS):
            raise VocabularyError(f"{TARGET_VOCAB_FILE}: the ids of {', '.join(self.SPECIALS)} "
                                  "differ from vocab.json's")
        self.special_ids = {i for piece, i in self.target_piece_ids.items()
                            if piece in self.SPECIALS or _is_language_code(piece)}

    @classmethod
    def load(cls, model_dir: str | Path) -> MarianVocabulary:
        """From a directory holding source.spm, target.spm and vocab.json."""
        model_dir = Path(model_dir)
        source, target = (load_processor(model_dir / name) for name in MARIAN_FILES[:2])
        path, target_path = model_dir / MARIAN_VOCAB_FILE, model_dir / TARGET_VOCAB_FILE
        target_ids = _read_piece_ids(target_path) if target_path.exists() else None
        return cls(source, target, _read_piece_ids(path), path, target_ids)

    def __len__(self) -> int:
        """The source side's size (the encoder's embeddings)."""
        return len(self.piece_ids)

    @property
    def target_size(self) -> int:
        """The target side's size (the decoder's embeddings and the output layer)."""
        return len(self.target_piece_ids)

    def piece(self, i: int, side: str = "source") -> str:
        """The piece of id `i` on `side` ("source" or "target")."""
        return (self.pieces if side == "target" else self.source_pieces)[i]

    def encode(self, text: str) -> list[int]:
        """Model ids of `text` (source side), without EOS."""
        code = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            code, text = [text[: end + 2]], text[end + 2 :]
        pieces = code + self.source.encode(text, out_type=str)
        return [self.piece_ids.get(piece, self.unk_id) for piece in pieces]

    def encode_target(self, text: str) -> list[int]:
        """Model ids of a target-side sentence (a training reference), by target.spm, as
        MarianTokenizer's text_target; without EOS."""
        pieces = self.target.encode(text, out_type=str)
        return [self.target_piece_ids.get(piece, self.unk_id) for piece in pieces]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of target-side ids; special pieces (EOS, <unk>, <pad>, language codes)
        dropped."""
        pieces = [self.pieces[i] for i in ids if i not in self.special_ids and i in self.pieces]
        return self.target.decode_pieces(pieces).replace("\u2581", " ").strip()


def _read_piece_ids(path: Path) -> dict[str, int]:
    """A vocab.json: piece -> id, the ids 0 .. n-1 each once."""
    try:
        piece_ids = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise VocabularyError(f"{path}: cannot read vocabulary: {err.strerror}") from None
    except ValueError as err:
        raise VocabularyError(f"{path}: not JSON ({err})") from None
    if not isinstance(piece_ids, dict) or not all(
            isinstance(k, str) and isinstance(v, int) for k, v in piece_ids.items()):
        raise VocabularyError(f"{path}: expected a JSON object of piece -> id")
    ids = sorted(piece_ids.values())
    if ids != list(range(len(ids))):
        raise VocabularyError(f"{path}: ids are not 0 .. {len(ids) - 1}, each once")
    return piece_ids


def _is_language_code(piece: str) -> bool:
    return piece.startswith(">>") and piece.endswith("<<")


def load_processor(path: Path) -> spm.SentencePieceProcessor:
    """The SentencePiece model in `path`; a VocabularyError naming it if unreadable."""
    try:
        model_proto = path.read_bytes()
    except OSError as err:
        raise VocabularyError(f"{path}: cannot read vocabulary: {err.strerror}") from None
    processor = spm.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(model_proto)
    except (RuntimeError, OSError) as err:
        raise VocabularyError(f"{path}: not a SentencePiece model ({err})") from None
    return processor




def load_model_vocabulary(model_dir: str | Path) -> Vocabulary | MarianVocabulary:
    """A model directory's vocabulary: Marian's three files where vocab.json is there, else
    the SentencePiece model."""
    model_dir = Path(model_dir)
    if (model_dir / MARIAN_VOCAB_FILE).exists():
        return MarianVocabulary.load(model_dir)
    return Vocabulary.load(model_dir / VOCAB_FILE)
