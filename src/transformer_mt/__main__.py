"""`python -m transformer_mt ...` (and `torchrun -m transformer_mt train ...`): the CLI."""

import sys

from .cli.main import main

sys.exit(main())
