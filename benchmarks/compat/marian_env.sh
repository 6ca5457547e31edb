#!/usr/bin/env bash
# Marian itself as a reference: a virtual environment beside the repository with pymarian
# 1.12.42 (a 600 MB wheel whose `pymarian` command is Marian's own train/decode program).
# Usage: benchmarks/compat/marian_env.sh [VENV_DIR]   (default .venv-marian)
set -euo pipefail
VENV=${1:-$(cd "$(dirname "$0")/../.." && pwd)/.venv-marian}
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q pymarian==1.12.42
"$VENV/bin/pymarian" --version
