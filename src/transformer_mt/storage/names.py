"""The files of a model directory (and of a prepared data directory's vocabulary), named once."""

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"  # the model and decoding configs (and, in a run, the whole config)
VOCAB_FILE = "sentencepiece.model"  # the joint vocabulary: prepare writes it, models carry it
# a vocabulary imported from Marian (Hugging Face's layout): the source and target SentencePiece
# models and the piece -> id map they share
MARIAN_FILES = ("source.spm", "target.spm", "vocab.json")
TARGET_VOCAB_FILE = "target_vocab.json"  # Marian's separate target vocabulary, where there is one
