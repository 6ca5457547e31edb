"""Text to batches (§5.1): strict reading, the joint SentencePiece vocabulary, preparing a
corpus into a memory-mapped directory, the dataset over it, token-budget batches, and the
known corpora (local directories or downloads)."""
