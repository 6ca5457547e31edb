"""The files of a model directory (and of a prepared data directory's vocabulary, and of a run's
checkpoints), named once, and which of them a directory's vocabulary is."""

import shutil
from pathlib import Path

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"  # the model and decoding configs (and, in a run, the whole config)
VOCAB_FILE = "sentencepiece.model"  # the joint vocabulary: prepare writes it, models carry it
# a vocabulary imported from Marian (Hugging Face's layout): the source and target SentencePiece
# models and the piece -> id map they share
MARIAN_VOCAB_FILE = "vocab.json"
MARIAN_FILES = ("source.spm", "target.spm", MARIAN_VOCAB_FILE)
TARGET_VOCAB_FILE = "target_vocab.json"  # Marian's separate target vocabulary, where there is one
# a prepared data directory (data/prepare.py): its record, what cleaning dropped, and per split
# (train, valid, test) and side (src, tgt) the text, token ids and sentence offsets
META_FILE = "meta.json"
REPORT_FILE = "report.json"


def split_file(split: str, side: str, kind: str) -> str:
    """A prepared split's file: kind "txt" (its text), "tokens.npy" or "offsets.npy"."""
    return f"{split}.{side}.{kind}"


# a checkpoint is a model directory with these beside (training/checkpoint.py)
OPTIMIZER_FILE = "optimizer.safetensors"  # Adam's moments and torch's random states
STATE_FILE = "state.json"  # the training state
MANIFEST_FILE = "MANIFEST.sha256"  # the sha256 of every other file


def vocabulary_files(directory: str | Path) -> tuple[str, ...]:
    """The names of a model or data directory's vocabulary files: Marian's three (four with a
    separate target vocabulary) where vocab.json is there, else our SentencePiece model."""
    directory = Path(directory)
    if not (directory / MARIAN_VOCAB_FILE).exists():
        return (VOCAB_FILE,)
    return MARIAN_FILES + ((TARGET_VOCAB_FILE,) if (directory / TARGET_VOCAB_FILE).exists()
                           else ())


def copy_vocabulary(src_dir: Path, dst_dir: Path) -> None:
    for name in vocabulary_files(src_dir):
        shutil.copyfile(Path(src_dir) / name, Path(dst_dir) / name)
