"""Scoring translations, saying which BLEU a number is.

- sacreBLEU and chrF on detokenised text, with their signatures: the number to report.
- Tokenized BLEU, the paper's protocol: Moses-tokenised hypotheses and references scored with
  multi-bleu.perl's arithmetic; for German, compound splitting ("a-b" -> "a ##AT##-##AT## b")
  as tensor2tensor's get_ende_bleu.sh did (§6.1 numbers). Lowercasing with Moses punctuation
  normalisation reproduces the Multi30k `tok/` references of the literature.
- Against a baseline translation of the same source: sacreBLEU's paired bootstrap resampling
  (Koehn, 2004) on each BLEU, with its 95 % confidence interval and p-value, so that a gain can
  be told from the luck of one test set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from ..data.text import DataError, read_text

COMPOUND = re.compile(r"(\S)-(\S)")
BOOTSTRAP_SAMPLES = 1000  # sacrebleu --paired-bs-n's default


@dataclass(frozen=True)
class Comparison:
    """One BLEU of a system and of a baseline over the same resamples of the test sentences.
    mean and ci: the resampled mean and the half-width of its 95 % interval; p_value: how often
    the resampled difference is as large as the real one by chance (sacrebleu --paired-bs)."""
    metric: str
    score: float
    mean: float
    ci: float
    baseline_score: float
    baseline_mean: float
    baseline_ci: float
    p_value: float
    signature: str

    def line(self) -> str:
        return (f"{self.metric:<9} {self.score:.2f} ({self.mean:.2f} ± {self.ci:.2f}) vs "
                f"baseline {self.baseline_score:.2f} ({self.baseline_mean:.2f} ± "
                f"{self.baseline_ci:.2f}): {self.score - self.baseline_score:+.2f}, "
                f"p = {self.p_value:.4f}  {self.signature}")


@dataclass(frozen=True)
class Scores:
    bleu: float
    bleu_signature: str
    chrf: float
    chrf_signature: str
    tok_bleu: float | None = None
    tok_bleu_protocol: str = ""
    against_baseline: tuple[Comparison, ...] = ()

    def lines(self) -> list[str]:
        out = [f"sacreBLEU {self.bleu:.2f}  {self.bleu_signature}",
               f"chrF      {self.chrf:.2f}  {self.chrf_signature}"]
        if self.tok_bleu is not None:
            out.append(f"tokBLEU   {self.tok_bleu:.2f}  {self.tok_bleu_protocol}")
        if self.against_baseline:
            out.append("paired bootstrap resampling, score (resampled mean ± 95 % interval):")
            out.extend(c.line() for c in self.against_baseline)
        return out


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


@dataclass(frozen=True)
class TokenizedProtocol:
    """Which tokenized BLEU: Moses tokenisation for `lang` (lowercased and punctuation-normalised
    first with `lowercase`), compound splitting, and whether the reference and the hypotheses
    are tokenised already. Tokenised hypotheses (of a model trained on tokenised text, such as
    Multi30k's tok/ files) are scored as they are, as multi-bleu.perl does, lowercased with
    `lowercase`: tokenising them again would escape their escapes (&apos; -> &amp; apos ;)."""
    lang: str
    lowercase: bool
    compound_split: bool
    refs_tokenized: bool = False
    hyps_tokenized: bool = False

    def hypotheses(self, lines: list[str]) -> list[str]:
        return self._tokenized(lines, already=self.hyps_tokenized)

    def references(self, lines: list[str]) -> list[str]:
        return self._tokenized(lines, already=self.refs_tokenized)

    def _tokenized(self, lines: list[str], *, already: bool) -> list[str]:
        if not already:
            lines = moses_tokenize(lines, self.lang, lowercase=self.lowercase)
        elif self.lowercase:
            lines = [line.lower() for line in lines]
        return split_compounds(lines) if self.compound_split else lines

    def __str__(self) -> str:
        return (f"moses-tok:{self.lang}|lc:{'yes' if self.lowercase else 'no'}|"
                f"compound-split:{'yes' if self.compound_split else 'no'}|"
                f"ref:{'pre-tokenized' if self.refs_tokenized else 'tokenized-here'}"
                + ("|hyp:pre-tokenized" if self.hyps_tokenized else ""))


def tokenized_bleu_metric() -> BLEU:
    """multi-bleu.perl's arithmetic: BLEU on already tokenised text, no further tokenisation."""
    return BLEU(tokenize="none", force=True)


def tokenized_bleu(hyps: list[str], refs: list[str], *, lang: str, lowercase: bool,
                   compound_split: bool, refs_tokenized: bool = False,
                   hyps_tokenized: bool = False) -> tuple[float, str]:
    """BLEU on Moses-tokenised text, and the protocol string that says which."""
    protocol = TokenizedProtocol(lang, lowercase, compound_split, refs_tokenized, hyps_tokenized)
    score = tokenized_bleu_metric().corpus_score(protocol.hypotheses(hyps),
                                                 [protocol.references(refs)]).score
    return score, str(protocol)


def paired_bootstrap(hyps: list[str], baseline: list[str], refs: list[str], *, metric: BLEU,
                     name: str, samples: int = BOOTSTRAP_SAMPLES) -> Comparison:
    """sacrebleu's paired bootstrap resampling test (--paired-bs) of hyps against baseline."""
    if samples < 1:
        raise ValueError(f"bootstrap samples must be at least 1, got {samples}")
    test = PairedTest([("baseline", baseline), ("system", hyps)], {name: metric}, [refs],
                      test_type="bs", n_samples=samples)
    signatures, results = test()
    (key,) = signatures
    base, system = results[key]
    # sacrebleu counts resampled differences strictly above the real one, plus one: identical
    # translations (every difference 0) would get p = 1 / (samples + 1), "significant"
    p_value = 1.0 if hyps == baseline else float(system.p_value)
    return Comparison(name, float(system.score), float(system.mean), float(system.ci),
                      float(base.score), float(base.mean), float(base.ci), p_value,
                      str(signatures[key]))


def evaluate_files(*, hyp: Path, ref: Path, lang: str | None = None, tok_ref: Path | None = None,
                   lowercase: bool = False, compound_split: bool | None = None,
                   hyp_tokenized: bool = False, baseline: Path | None = None,
                   bootstrap_samples: int = BOOTSTRAP_SAMPLES) -> Scores:
    """sacreBLEU and chrF of `hyp` against `ref`, and tokenized BLEU when `lang` is given
    (against `tok_ref` when given, an already tokenised reference such as Multi30k's tok/;
    with `hyp_tokenized` the hypotheses, and a baseline's, are tokenised like it already).
    With `baseline`, another translation of the same source: each BLEU of both by paired
    bootstrap resampling over `bootstrap_samples` resamples of the sentences."""
    if hyp_tokenized and (lang is None or tok_ref is None):
        raise ValueError("hypotheses tokenized already are scored against a reference tokenized "
                         "the same way: give the target language and the tokenized reference "
                         "(evaluate --lang, --tok-ref)")
    hyps, refs = read_text(hyp), read_text(ref)
    check_counts(hyps, refs, str(hyp), str(ref))
    base = None
    if baseline is not None:
        base = read_text(baseline)
        check_counts(base, refs, str(baseline), str(ref))
    bleu, bleu_sig, chrf, chrf_sig = sacrebleu_scores(hyps, refs)
    compared = []
    if base is not None:
        compared.append(paired_bootstrap(hyps, base, refs, metric=BLEU(), name="sacreBLEU",
                                         samples=bootstrap_samples))
    if lang is None:
        return Scores(bleu, bleu_sig, chrf, chrf_sig, against_baseline=tuple(compared))
    if compound_split is None:
        compound_split = lang == "de" and tok_ref is None
    tok_refs = refs
    if tok_ref is not None:
        tok_refs = read_text(tok_ref)
        check_counts(hyps, tok_refs, str(hyp), str(tok_ref))
    protocol = TokenizedProtocol(lang, lowercase, compound_split, tok_ref is not None,
                                 hyp_tokenized)
    tok_hyps, tok_refs = protocol.hypotheses(hyps), protocol.references(tok_refs)
    tok = tokenized_bleu_metric().corpus_score(tok_hyps, [tok_refs]).score
    if base is not None:
        compared.append(paired_bootstrap(tok_hyps, protocol.hypotheses(base), tok_refs,
                                         metric=tokenized_bleu_metric(), name="tokBLEU",
                                         samples=bootstrap_samples))
    return Scores(bleu, bleu_sig, chrf, chrf_sig, tok, str(protocol), tuple(compared))
