"""§6.3's parsing as translation, searched: the constraints that keep a parsing model's output a
tree with one slot per source word, as a LogitsProcessor of the core's searches."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..data.vocab import WORD_BOUNDARY, Vocabulary
from .trees import is_bracket


@dataclass(frozen=True)
class TreeConstraints:
    """A LogitsProcessor of the search (inference/search.py), not in the paper, for parsing as
    translation. Word slots (is_slot_V): target tokens that each stand for one source word (the
    placeholder XX, or the POS tags), so that an output holds exactly as many of them as its
    source has words; once every word has its slot no more are allowed, and until then EOS is
    not. Balanced brackets (opens_V, closes_V): a closing bracket only inside an open
    constituent and never right after an opening one, EOS only once every constituent is
    closed, and with word slots no opening bracket once every word has its slot (no empty
    constituents). The output's length limit still ends an output whatever these say."""

    begins_word_V: Tensor  # (source vocabulary,) bool: the source tokens that begin a word
    is_slot_V: Tensor | None = None  # (target vocabulary,) bool: the slot tokens
    opens_V: Tensor | None = None  # (target vocabulary,) bool: "(NP", ...
    closes_V: Tensor | None = None  # (target vocabulary,) bool: ")NP", ...

    def start(self, src_BS: Tensor) -> Tensor:
        """(B,) the words of each source sentence: the state `apply` reads."""
        return self.begins_word_V.to(src_BS.device)[src_BS].sum(dim=1)

    def apply(self, logp_BV: Tensor, tokens_BT: Tensor, words_B: Tensor, eos: int,
              at_limit_B: Tensor) -> None:
        inf, device = float("-inf"), logp_BV.device
        all_placed_B = None
        if self.is_slot_V is not None:
            is_slot_V = self.is_slot_V.to(device)
            all_placed_B = is_slot_V[tokens_BT].sum(dim=1) >= words_B
            logp_BV.masked_fill_(is_slot_V & all_placed_B[:, None], inf)
            logp_BV[:, eos].masked_fill_(~all_placed_B & ~at_limit_B, inf)
        if self.opens_V is not None and self.closes_V is not None:
            opens_V, closes_V = self.opens_V.to(device), self.closes_V.to(device)
            depth_B = opens_V[tokens_BT].sum(dim=1) - closes_V[tokens_BT].sum(dim=1)
            no_close_B = (depth_B <= 0) | opens_V[tokens_BT[:, -1]]
            logp_BV.masked_fill_(closes_V & no_close_B[:, None], inf)
            logp_BV[:, eos].masked_fill_((depth_B > 0) & ~at_limit_B, inf)
            if all_placed_B is not None:  # a constituent opened now would stay empty
                logp_BV.masked_fill_(opens_V & all_placed_B[:, None], inf)


def tree_constraints(vocab: Vocabulary, *, slots: bool, balanced: bool) -> TreeConstraints:
    """The TreeConstraints of a parsing model's vocabulary: a piece that begins a word (the
    word boundary alone too: SentencePiece writes a rare word as "▁" and its letters) is a word
    of the source and, unless it opens or closes a constituent ("(NP", ")NP"), a slot of the
    target, as `restore` reads the output's tokens."""
    if not isinstance(vocab, Vocabulary):
        raise ValueError("parse trees --word-slots and --balanced need a SentencePiece "
                         "vocabulary of ours")
    specials = {vocab.sp.pad_id(), vocab.sp.unk_id(), vocab.sp.bos_id(), vocab.sp.eos_id()}
    texts = [None if i in specials else vocab.sp.id_to_piece(i) for i in range(len(vocab))]
    begins = [t is not None and t.startswith(WORD_BOUNDARY) for t in texts]
    brackets = [b and is_bracket(t[1:]) for b, t in zip(begins, texts, strict=True)]
    opens = [b and t[1] == "(" for b, t in zip(brackets, texts, strict=True)]
    closes = [b and t[1] == ")" for b, t in zip(brackets, texts, strict=True)]
    slot = [b and not k for b, k in zip(begins, brackets, strict=True)]
    return TreeConstraints(begins_word_V=torch.tensor(begins),
                           is_slot_V=torch.tensor(slot) if slots else None,
                           opens_V=torch.tensor(opens) if balanced else None,
                           closes_V=torch.tensor(closes) if balanced else None)
