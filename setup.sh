#!/usr/bin/env bash
# One-command setup: installs transformer-mt with its test tools (and faiss, for the kNN-MT
# example's tests, transformers and ctranslate2, for the interop tests) into the current Python.
# A CPU build of PyTorch is installed first when no torch is present, because an unpinned
# `torch` requirement makes pip download a multi-GB CUDA build. Override with TORCH_SPEC,
# e.g. TORCH_SPEC="torch==2.13.0" (the default) or TORCH_SPEC="" to skip.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC-torch==2.13.0}

if ! "$PYTHON" -c "import torch" 2>/dev/null && [ -n "$TORCH_SPEC" ]; then
  echo "setup: no torch found, installing $TORCH_SPEC"
  "$PYTHON" -m pip install --quiet "$TORCH_SPEC"
fi
# dev: the test tools; serve: the HTTP server; knn: faiss for examples/knn_mt; interop:
# Hugging Face transformers and CTranslate2, the references of the parity tests and the
# ctranslate2 engine (tests of all)
"$PYTHON" -m pip install --quiet -e ".[dev,serve,knn,interop]"
"$PYTHON" -c "import torch, transformer_mt; print(f'setup: transformer-mt {transformer_mt.__version__}, torch {torch.__version__}')"
