"""Word alignments from encoder-decoder attention.

Output token j's alignment row is the cross-attention of one decoder layer, its chosen heads
averaged, over the source tokens with EOS and padding left out (the row renormalised to sum to
1). The query is the decoder position that predicts token j (input position j, as fairseq and
Garg et al. 2019 read it) or the one token j is input to (position j + 1, "shift-att", Chen et
al. 2020). Hard alignments link each output token to its row's largest source token (fairseq's
`i-j` pairs); soft ones are the rows themselves. The default layer and query were chosen by
measurement (benchmarks/results/alignment-quality-multi30k).
"""

# T output tokens (EOS left out)  S source tokens (EOS left out)

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch itself only where weights are computed: translate --help needs none
    from torch import Tensor

QUERIES = ("predicting", "input")
# The default layer, counted from the top: 3 = index 1 of a 4-layer decoder, the layer that
# aligned best (AER 0.35 against 0.41 for the top two) in benchmarks/results/alignment-quality-
# multi30k; Garg et al. (2019) found the penultimate best in their 6-layer model.
DEFAULT_LAYER_FROM_TOP = 3


@dataclass(frozen=True)
class AlignmentChoice:
    """Which attention aligns: decoder `layer` (0-based; None: the default,
    DEFAULT_LAYER_FROM_TOP from the top), `heads` averaged (None: all), rows read at
    `query`."""

    layer: int | None = None
    heads: tuple[int, ...] | None = None
    query: str = "predicting"

    def resolve(self, n_layers: int, n_heads: int) -> AlignmentChoice:
        """This choice with its layer filled in; ValueError naming a layer or head not there."""
        layer = max(n_layers - DEFAULT_LAYER_FROM_TOP, 0) if self.layer is None else self.layer
        if not 0 <= layer < n_layers:
            raise ValueError(f"alignment layer {layer}: the decoder has layers 0 .. "
                             f"{n_layers - 1}")
        for h in self.heads or ():
            if not 0 <= h < n_heads:
                raise ValueError(f"alignment head {h}: the layers have heads 0 .. {n_heads - 1}")
        if self.query not in QUERIES:
            raise ValueError(f"alignment query {self.query!r}: one of {', '.join(QUERIES)}")
        return AlignmentChoice(layer, self.heads, self.query)


def alignment_weights(cross_HQS: Tensor, src_len: int, out_len: int, choice: AlignmentChoice
                      ) -> Tensor:
    """(T, S) alignment rows of one sentence from one layer's cross-attention (heads, decoder
    inputs BOS + output, source + EOS); `choice` resolved."""
    heads = list(choice.heads) if choice.heads else slice(None)
    start = 1 if choice.query == "input" else 0
    w_TS = cross_HQS[heads].float().mean(0)[start: start + out_len, :src_len]
    import torch

    return w_TS / w_TS.sum(-1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny)


def hard_alignment(weights_TS: Tensor) -> list[tuple[int, int]]:
    """(source i, output j) pairs: each output token with its largest source token."""
    if weights_TS.numel() == 0:
        return []
    return [(int(i), j) for j, i in enumerate(weights_TS.argmax(-1).tolist())]


def format_hard(pairs: list[tuple[int, int]]) -> str:
    """fairseq's hard alignment line: 'i-j i-j ...'."""
    return " ".join(f"{i}-{j}" for i, j in pairs)


def format_soft(weights_TS: Tensor) -> str:
    """fairseq's soft alignment line: each output token's row over the source tokens,
    comma-separated, the rows space-separated."""
    if weights_TS.numel() == 0:
        return ""
    return " ".join(",".join(f"{p:.6f}" for p in row) for row in weights_TS.tolist())


def word_index(pieces: list[str], specials: Collection[str] = ()) -> list[int]:
    """Each SentencePiece piece's word (0-based): a piece beginning with '▁' begins a word;
    each of `specials` (e.g. '<s>', '</s>') is a word of its own."""
    words, index, alone = -1, [], False
    for piece in pieces:
        if piece.startswith("\u2581") or words < 0 or alone or piece in specials:
            words += 1
        alone = piece in specials
        index.append(words)
    return index


def word_pairs(pairs: list[tuple[int, int]], source_pieces: list[str],
               target_pieces: list[str]) -> list[tuple[int, int]]:
    """Piece pairs as word pairs (a word pair is linked when any of its pieces are), sorted."""
    src, tgt = word_index(source_pieces), word_index(target_pieces)
    return sorted({(src[i], tgt[j]) for i, j in pairs})
