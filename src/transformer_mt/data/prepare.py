"""Preparing a parallel corpus (§5.1): cleaning with a drop report, a joint SentencePiece
vocabulary and a compact memory-mapped binary format.

A prepared data directory holds
  sentencepiece.model                   the joint vocabulary (or, prepared with a model's
                                        vocabulary, its files: Marian's source.spm, target.spm,
                                        vocab.json)
  {split}.{src,tgt}.tokens.npy          all token ids of a split side, concatenated (uint16/int32)
  {split}.{src,tgt}.offsets.npy         int64, sentence i is tokens[offsets[i]:offsets[i+1]]
  {split}.{src,tgt}.txt                 the cleaned text (references for validation BLEU)
  meta.json                             languages, counts, sha256 of inputs and vocabulary,
                                        the special ids (pad, bos, eos)
  report.json                           what was dropped from training data, by reason
Arrays are .npy read with allow_pickle=False and mmap_mode="r": nothing is unpickled.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import shutil
import tempfile
from array import array
from collections import Counter
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path

import numpy as np

from ..config import DataConfig, config_to_dict
from ..storage.files import sha256_file
from ..storage.names import (
    META_FILE,
    REPORT_FILE,
    VOCAB_FILE,
    copy_vocabulary,
    split_file,
    vocabulary_files,
)
from .text import DataError, iter_parallel
from .vocab import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    MarianVocabulary,
    Vocabulary,
    load_model_vocabulary,
    train_vocabulary,
)

log = logging.getLogger(__name__)

SIDES = ("src", "tgt")


@dataclass(frozen=True)
class SplitFiles:
    name: str  # "train", "valid", "test", ...
    src: Path
    tgt: Path


def drop_reason(src_ids: list[int], tgt_ids: list[int], cfg: DataConfig) -> str | None:
    """Why a training pair is left out, or None to keep it."""
    if not src_ids or not tgt_ids:
        return "empty"
    if max(len(src_ids), len(tgt_ids)) > cfg.max_length:
        return "too_long"
    if max(len(src_ids), len(tgt_ids)) > cfg.max_length_ratio * min(len(src_ids), len(tgt_ids)):
        return "length_ratio"
    return None


def pack(ids: list[list[int]], vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Sentences of ids as one flat array (N tokens,) and offsets (N sentences + 1,)."""
    dtype = np.uint16 if vocab_size <= np.iinfo(np.uint16).max else np.int32
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.fromiter((t for x in ids for t in x), dtype=dtype, count=int(offsets[-1]))
    return flat, offsets


def write_side(out_dir: Path, split: str, side: str, ids: list[list[int]], vocab_size: int):
    flat, offsets = pack(ids, vocab_size)
    np.save(out_dir / split_file(split, side, "tokens.npy"), flat)
    np.save(out_dir / split_file(split, side, "offsets.npy"), offsets)


def read_whole_words(path: Path) -> list[str]:
    """data.whole_words' file: one word per line (blank lines skipped), none with a space."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"data.whole_words: cannot read {path}: {err}") from None
    for number, line in enumerate(lines, 1):
        if line.strip() != line or " " in line:
            raise DataError(f"{path}:{number}: a whole word has no spaces, got {line!r}")
    return list(dict.fromkeys(line for line in lines if line))


def language_of(path: Path) -> str | None:
    """The language code a file's name ends in (train.en, train.de.gz, news.pt-BR): a valid
    BCP 47 tag whose language is a two-letter ISO 639-1 code, as written; None for a name that
    ends otherwise (train.src, corpus.txt: three-letter codes are left out, since file
    suffixes such as src and txt are also ISO 639-3 codes)."""
    import langcodes  # here, not at the top: 90 ms that only this function needs

    stem, dot, suffix = path.name.removesuffix(".gz").rpartition(".")
    tag = suffix.replace("_", "-")
    if not (stem and dot) or len(tag.split("-")[0]) != 2 or not langcodes.tag_is_valid(tag):
        return None
    return suffix


def prepare(*, train: SplitFiles, others: list[SplitFiles], out_dir: Path, cfg: DataConfig,
            src_lang: str | None = None, tgt_lang: str | None = None,
            vocabulary: tuple[Path, dict[str, int]] | None = None) -> dict:
    """Read, clean, learn the vocabulary on the training pairs, encode and write `out_dir`.
    Only training pairs are dropped (empty, too long, length ratio); other splits are kept
    whole so that scores stay comparable. `vocabulary`: (a model directory, its special ids
    {"pad", "bos", "eos"}) whose vocabulary is used instead of learning one (to fine-tune that
    model). `src_lang` and `tgt_lang`: language codes for the record (None: not known). The
    files are streamed twice (checked and sampled, then encoded in chunks), so
    memory does not grow with the corpus. Returns the report."""
    splits = [train, *others]
    # every file is read and checked before any work is written
    whole_words = read_whole_words(Path(cfg.whole_words)) if cfg.whole_words else []
    sample = check_and_sample(train, cfg.vocab_sample, skip_invalid=cfg.skip_invalid_utf8)
    for split in others:
        check_and_sample(split, 0, skip_invalid=cfg.skip_invalid_utf8)
    out_dir.mkdir(parents=True, exist_ok=True)
    specials = {"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID}
    if vocabulary is not None:
        model_dir, specials = vocabulary
        vocab = load_model_vocabulary(model_dir)
        copy_vocabulary(model_dir, out_dir)
        log.info("encoding with the vocabulary of %s (%d pieces)", model_dir, len(vocab))
    else:
        log.info("training a %d-piece %s vocabulary on %d pairs", cfg.vocab_size,
                 cfg.vocab_model_type, len(sample))
        texts = [t for t in [s for s, _ in sample] + [t for _, t in sample] if t.strip()]
        vocab = train_vocabulary(texts, vocab_size=cfg.vocab_size,
                                 out_path=out_dir / VOCAB_FILE, model_type=cfg.vocab_model_type,
                                 character_coverage=cfg.character_coverage,
                                 whole_words=whole_words)
    del sample
    report: dict = {"splits": {split.name: encode_split(split, vocab, cfg, out_dir,
                                                       drop=split is train)
                               for split in splits}}
    meta = {
        "src_lang": src_lang, "tgt_lang": tgt_lang, "vocab_size": len(vocab),
        "vocab_sha256": vocabulary_sha256(out_dir), "special_ids": specials,
        "vocabulary_from": str(vocabulary[0]) if vocabulary else None,
        "data": config_to_dict(cfg),
        "inputs": {s.name: {"src": str(s.src), "src_sha256": sha256_file(s.src),
                            "tgt": str(s.tgt), "tgt_sha256": sha256_file(s.tgt)}
                   for s in splits},
        "splits": {name: r["kept"] for name, r in report["splits"].items()},
    }
    (out_dir / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (out_dir / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return report


def check_and_sample(split: SplitFiles, size: int, *, skip_invalid: bool
                     ) -> list[tuple[str, str]]:
    """Read a split through once, checking it (`iter_parallel`'s errors), and return a uniform
    sample of at most `size` of its pairs in file order (all of them when there are fewer):
    reservoir sampling, seeded, so that a corpus gives the same sample every time."""
    rng, sample, seen = random.Random(0), [], 0
    keep: list[int] = []
    for pair in iter_parallel(split.src, split.tgt, skip_invalid=skip_invalid):
        if pair is None:
            continue
        if seen < size:
            sample.append(pair)
            keep.append(seen)
        elif (j := rng.randrange(seen + 1)) < size:
            sample[j], keep[j] = pair, seen
        seen += 1
    order = sorted(range(len(sample)), key=keep.__getitem__)
    return [sample[i] for i in order]


def encode_split(split: SplitFiles, vocab, cfg: DataConfig, out_dir: Path, *, drop: bool,
                 chunk: int = 10_000) -> dict:
    """Encode one split `chunk` pairs at a time into out_dir's token, offset and text files
    (dropping training pairs as `drop_reason` says, with drop); its line of the report."""
    drops: Counter = Counter()
    width = max(len(vocab), vocab.target_size)
    dtype = np.uint16 if width <= np.iinfo(np.uint16).max else np.int32
    lengths = {"src": array("i"), "tgt": array("i")}  # 4 bytes a sentence
    pairs = iter_parallel(split.src, split.tgt, skip_invalid=cfg.skip_invalid_utf8)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp, \
            open(Path(tmp) / "src", "wb") as src_raw, open(Path(tmp) / "tgt", "wb") as tgt_raw, \
            open(out_dir / split_file(split.name, "src", "txt"), "w",
                 encoding="utf-8") as src_txt, \
            open(out_dir / split_file(split.name, "tgt", "txt"), "w",
                 encoding="utf-8") as tgt_txt:
        for number, block in enumerate(iter(lambda: list(islice(pairs, chunk)), []), 1):
            found = [pair for pair in block if pair is not None]
            drops["invalid_utf8"] += len(block) - len(found)
            src, tgt = [s for s, _ in found], [t for _, t in found]
            src_ids, tgt_ids = encode_pairs(vocab, src, tgt)
            kept = {"src": [], "tgt": []}  # this chunk's token ids, written at once
            for i, (s, t) in enumerate(zip(src_ids, tgt_ids, strict=True)):
                reason = drop_reason(s, t, cfg) if drop else None
                if reason:
                    drops[reason] += 1
                    continue
                for side, ids, txt, text in (("src", s, src_txt, src[i]),
                                             ("tgt", t, tgt_txt, tgt[i])):
                    kept[side].append(ids)
                    lengths[side].append(len(ids))
                    txt.write(text + "\n")
            for side, raw in (("src", src_raw), ("tgt", tgt_raw)):
                raw.write(np.fromiter(chain.from_iterable(kept[side]), dtype=dtype).tobytes())
            if drop and number % 50 == 0:  # every 50 chunks (500,000 pairs)
                log.info("%s: %s pairs read and encoded", split.name, f"{number * chunk:,}")
        src_raw.close()
        tgt_raw.close()
        for side in SIDES:
            write_tokens(out_dir, split.name, side, Path(tmp) / side, lengths[side], dtype)
    drops = Counter({k: v for k, v in drops.items() if v})
    kept = len(lengths["src"])
    return {"read": kept + sum(drops.values()), "kept": kept, "dropped": dict(drops),
            "src_tokens": sum(lengths["src"]), "tgt_tokens": sum(lengths["tgt"])}


def write_tokens(out_dir: Path, split: str, side: str, raw: Path, lengths: array,
                 dtype) -> None:
    """{split}.{side}.tokens.npy from the raw token file (a .npy header, then its bytes copied
    a megabyte at a time) and {split}.{side}.offsets.npy from the lengths."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(np.frombuffer(lengths, dtype=np.int32), out=offsets[1:])
    np.save(out_dir / split_file(split, side, "offsets.npy"), offsets)
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
              "shape": (int(offsets[-1]),)}
    with open(out_dir / split_file(split, side, "tokens.npy"), "wb") as out, open(raw, "rb") as f:
        np.lib.format.write_array_header_1_0(out, header)
        shutil.copyfileobj(f, out, 1 << 20)


def encode_pairs(vocab: Vocabulary | MarianVocabulary, src: list[str], tgt: list[str]
                 ) -> tuple[list[list[int]], list[list[int]]]:
    """Source and target ids (target by the target side's model, where there are two)."""
    if isinstance(vocab, Vocabulary):
        return vocab.sp.encode(src), vocab.sp.encode(tgt)
    return [vocab.encode(s) for s in src], [vocab.encode_target(t) for t in tgt]


def vocabulary_sha256(directory: Path) -> str:
    """sha256 of a directory's vocabulary: of sentencepiece.model, or of Marian's three
    files' digests."""
    names = vocabulary_files(directory)
    if len(names) == 1:
        return sha256_file(Path(directory) / names[0])
    digests = "".join(sha256_file(Path(directory) / n) for n in names)
    return hashlib.sha256(digests.encode()).hexdigest()


def load_vocab(data_dir: Path) -> Vocabulary | MarianVocabulary:
    return load_model_vocabulary(data_dir)


def load_meta(data_dir: Path) -> dict:
    path = Path(data_dir) / META_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise DataError(f"{path}: not a prepared data directory ({err})") from None
