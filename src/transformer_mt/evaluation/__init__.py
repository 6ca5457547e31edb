"""Scores of translations: sacreBLEU, chrF, tokenized BLEU as the literature computes it, and
paired bootstrap significance."""
