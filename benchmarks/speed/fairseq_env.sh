#!/usr/bin/env bash
# fairseq as a speed peer: a virtual environment beside the repository that sees this Python's
# packages (torch, transformer-mt) and adds fairseq 0.12.2, its last release. run.sh runs the
# "fairseq ..." specs with its Python. fairseq 0.12.2 predates Python 3.11: engines.py's
# import_fairseq() makes its config dataclasses importable there.
# Usage: benchmarks/speed/fairseq_env.sh [VENV_DIR]   (default .venv-fairseq)
set -euo pipefail
VENV=${1:-$(cd "$(dirname "$0")/../.." && pwd)/.venv-fairseq}
python3 -m venv --system-site-packages "$VENV"
"$VENV/bin/pip" install -q fairseq==0.12.2
"$VENV/bin/python" -c "import sys; sys.path.insert(0, '$(cd "$(dirname "$0")" && pwd)'); \
from engines import import_fairseq; print('fairseq', import_fairseq().__version__)"
