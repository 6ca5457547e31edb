"""`python -m transformer_mt.cli ...`: the command line."""

import sys

from .main import main

sys.exit(main())
