"""The model of §3 (torch and the config only): attention (§3.2), the Transformer of Figure 1
in paper order (§3.1, §3.3-3.5), dropout, and parameter/FLOP counts."""

from .transformer import DecoderCache, Memory, Transformer

__all__ = ["DecoderCache", "Memory", "Transformer"]
