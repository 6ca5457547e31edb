"""The command line (`transformer-mt`, `python -m transformer_mt`)."""

from .main import build_parser, main

__all__ = ["build_parser", "main"]
