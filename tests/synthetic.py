"""A small synthetic parallel corpus that the tests generate, so that a fresh clone without the
real data runs every end-to-end test.

"Source" sentences are 3-7 words of a 24-word language; each target sentence is the word-by-word
translation through a fixed dictionary into another 24-word language, in the same order, ending
in the same punctuation. A model learns the mapping in a few hundred CPU steps; the tests check
its translations against the dictionary. Deterministic: the same seed, the same files.
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path

SOURCE_WORDS = ("dog cat man woman child bird horse girl boy ball tree house red blue big small "
                "runs sits eats sees jumps sleeps plays walks").split()
TARGET_WORDS = ("hund katze mann frau kind vogel pferd mädchen junge ball baum haus rot blau "
                "groß klein läuft sitzt isst sieht springt schläft spielt geht").split()
DICTIONARY = dict(zip(SOURCE_WORDS, TARGET_WORDS, strict=True))
SPLITS = {"train": 600, "valid": 40, "test": 30}


def translate(sentence: str) -> str:
    """The reference translation of a synthetic source sentence."""
    *words, mark = sentence.split()
    return " ".join(DICTIONARY[w] for w in words) + " " + mark


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(SOURCE_WORDS, k=rng.randint(3, 7))) + " " + rng.choice(".!?")
            for _ in range(n)]


def write_corpus(root: Path, *, seed: int = 0) -> Path:
    """Plain-text {train,valid,test}.{en,de} files under `root` (as `multi30k_corpus` was)."""
    root.mkdir(parents=True, exist_ok=True)
    for k, (split, n) in enumerate(SPLITS.items()):
        src = sentences(n, seed * 100 + k)
        (root / f"{split}.en").write_text("\n".join(src) + "\n", encoding="utf-8")
        (root / f"{split}.de").write_text("\n".join(map(translate, src)) + "\n",
                                          encoding="utf-8")
    return root


def write_multi30k_layout(root: Path, *, seed: int = 0) -> Path:
    """The same corpus in Multi30k's layout (`multi30k/{train,val,test_2016_flickr}.{en,de}.gz`
    and the tokenized lowercased `multi30k/tok/*.lc.norm.tok.*.gz`, the same text: it is
    lowercase and space-separated already), for commands that read `--dataset multi30k
    --data-dir ROOT`."""
    names = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
    plain = write_corpus(root / "plain", seed=seed)
    out = root / "multi30k"
    (out / "tok").mkdir(parents=True, exist_ok=True)
    for split, name in names.items():
        for lang in ("en", "de"):
            text = gzip.compress((plain / f"{split}.{lang}").read_bytes(), mtime=0)
            (out / f"{name}.{lang}.gz").write_bytes(text)
            (out / "tok" / f"{name}.lc.norm.tok.{lang}.gz").write_bytes(text)
    return root
