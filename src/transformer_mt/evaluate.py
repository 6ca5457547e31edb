"""Scoring translations, saying which BLEU a number is.

- sacreBLEU and chrF on detokenised text, with their signatures: the number to report.
- Tokenized BLEU, the paper's protocol: Moses-tokenised hypotheses and references scored with
  multi-bleu.perl's arithmetic; for German, compound splitting ("a-b" -> "a ##AT##-##AT## b")
  as tensor2tensor's get_ende_bleu.sh did (§6.1 numbers). Lowercasing with Moses punctuation
  normalisation reproduces the Multi30k `tok/` references of the literature.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF

from .data import DataError, read_bytes, split_lines

COMPOUND = re.compile(r"(\S)-(\S)")


@dataclass(frozen=True)
class Scores:
    bleu: float
    bleu_signature: str
    chrf: float
    chrf_signature: str
    tok_bleu: float | None = None
    tok_bleu_protocol: str = ""

    def lines(self) -> list[str]:
        out = [f"sacreBLEU {self.bleu:.2f}  {self.bleu_signature}",
               f"chrF      {self.chrf:.2f}  {self.chrf_signature}"]
        if self.tok_bleu is not None:
            out.append(f"tokBLEU   {self.tok_bleu:.2f}  {self.tok_bleu_protocol}")
        return out


def read_text(path: Path) -> list[str]:
    try:
        return [line.decode("utf-8") for line in split_lines(read_bytes(Path(path)))]
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: invalid UTF-8 ({err.reason})") from None


def check_counts(hyps: list[str], refs: list[str], hyp_name: str, ref_name: str) -> None:
    if len(hyps) != len(refs):
        raise DataError(f"{hyp_name} has {len(hyps)} lines but {ref_name} has {len(refs)}")


def sacrebleu_scores(hyps: list[str], refs: list[str]) -> tuple[float, str, float, str]:
    bleu, chrf = BLEU(), CHRF()
    b = bleu.corpus_score(hyps, [refs])
    c = chrf.corpus_score(hyps, [refs])
    return b.score, str(bleu.get_signature()), c.score, str(chrf.get_signature())


def moses_tokenize(lines: list[str], lang: str, *, lowercase: bool) -> list[str]:
    """Moses tokenizer.perl (default escaping); with lowercase, the Multi30k `tok/` pipeline:
    lowercase.perl | normalize-punctuation.perl | tokenizer.perl."""
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    tokenizer = MosesTokenizer(lang=lang)
    normalizer = MosesPunctNormalizer(lang=lang) if lowercase else None
    out = []
    for line in lines:
        if lowercase:
            line = normalizer.normalize(line.lower())
        out.append(tokenizer.tokenize(line, escape=True, return_str=True))
    return out


def split_compounds(lines: list[str]) -> list[str]:
    """tensor2tensor get_ende_bleu.sh: perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'."""
    return [COMPOUND.sub(r"\1 ##AT##-##AT## \2", line) for line in lines]


def tokenized_bleu(hyps: list[str], refs: list[str], *, lang: str, lowercase: bool,
                   compound_split: bool, refs_tokenized: bool = False) -> tuple[float, str]:
    """BLEU on Moses-tokenised text (multi-bleu.perl arithmetic: no further tokenisation)."""
    hyps = moses_tokenize(hyps, lang, lowercase=lowercase)
    if not refs_tokenized:
        refs = moses_tokenize(refs, lang, lowercase=lowercase)
    if compound_split:
        hyps, refs = split_compounds(hyps), split_compounds(refs)
    score = BLEU(tokenize="none", force=True).corpus_score(hyps, [refs]).score
    protocol = (f"moses-tok:{lang}|lc:{'yes' if lowercase else 'no'}|"
                f"compound-split:{'yes' if compound_split else 'no'}|"
                f"ref:{'pre-tokenized' if refs_tokenized else 'tokenized-here'}")
    return score, protocol


def evaluate_files(*, hyp: Path, ref: Path, lang: str | None = None, tok_ref: Path | None = None,
                   lowercase: bool = False, compound_split: bool | None = None) -> Scores:
    """sacreBLEU and chrF of `hyp` against `ref`, and tokenized BLEU when `lang` is given
    (against `tok_ref` when given, an already tokenised reference such as Multi30k's tok/)."""
    hyps, refs = read_text(hyp), read_text(ref)
    check_counts(hyps, refs, str(hyp), str(ref))
    bleu, bleu_sig, chrf, chrf_sig = sacrebleu_scores(hyps, refs)
    if lang is None:
        return Scores(bleu, bleu_sig, chrf, chrf_sig)
    if compound_split is None:
        compound_split = lang == "de" and tok_ref is None
    tok_refs = refs
    if tok_ref is not None:
        tok_refs = read_text(tok_ref)
        check_counts(hyps, tok_refs, str(hyp), str(tok_ref))
    tok, protocol = tokenized_bleu(hyps, tok_refs, lang=lang, lowercase=lowercase,
                                   compound_split=compound_split,
                                   refs_tokenized=tok_ref is not None)
    return Scores(bleu, bleu_sig, chrf, chrf_sig, tok, protocol)
