"""Files on disk: atomic writes and hashes, model directories read and written safely
(safetensors and JSON, nothing pickled)."""
