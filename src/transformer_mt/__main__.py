"""`python -m transformer_mt ...` (and `torchrun -m transformer_mt train ...`) = `transformer-mt`."""

import sys

from .cli import main

sys.exit(main())
