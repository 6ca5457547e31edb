import gzip
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_mt.config import DataConfig
from transformer_mt.data.batching import ShapeBuckets, token_batches
from transformer_mt.data.dataset import ParallelData
from transformer_mt.data.prepare import SplitFiles, prepare
from transformer_mt.data.text import DataError, read_parallel, split_lines

EN = ["A man sleeps.", "Two dogs play in the snow.", "A girl reads a book.",
      "People are walking down the street.", "A cat sits on a mat."] * 8
DE = ["Ein Mann schläft.", "Zwei Hunde spielen im Schnee.", "Ein Mädchen liest ein Buch.",
      "Leute gehen die Straße entlang.", "Eine Katze sitzt auf einer Matte."] * 8


def write(path, lines, *, newline="\n", bom=False, gz=False):
    data = ("\ufeff" if bom else "") + "".join(line + newline for line in lines)
    raw = data.encode("utf-8")
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def test_line_count_mismatch_names_both_files_and_counts(tmp_path):
    src = write(tmp_path / "a.en", EN)
    tgt = write(tmp_path / "a.de", DE[:-1])
    with pytest.raises(DataError, match=rf"{src} has 40 lines, {tgt} has 39"):
        read_parallel(src, tgt)


def test_invalid_utf8_names_file_and_line(tmp_path):
    src = write(tmp_path / "a.en", EN)
    tgt = tmp_path / "a.de"
    lines = [line.encode() for line in DE]
    lines[6] = b"Ein M\xe4dchen"  # latin-1, not UTF-8, on line 7
    tgt.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(DataError, match=rf"{tgt}:7: invalid UTF-8"):
        read_parallel(src, tgt)
    sources, targets, skipped = read_parallel(src, tgt, skip_invalid=True)
    assert skipped == 1 and len(sources) == len(targets) == 39
    assert EN[6] not in sources[6:7]  # the pair is gone from both sides, alignment kept
    assert all(DE.index(t) % 5 == EN.index(s) % 5 for s, t in zip(sources, targets, strict=True))


def test_split_lines_crlf_bom_and_final_newline():
    assert split_lines(b"\xef\xbb\xbfa\r\nb\r\n") == [b"a", b"b"]
    assert split_lines(b"a\nb") == [b"a", b"b"]
    assert split_lines(b"a\r\r\n") == [b"a\r"]  # only one trailing CR is removed
    assert split_lines(b"a\x0bb\x1cc\n") == [b"a\x0bb\x1cc"]  # no splitting on other breaks
    assert split_lines(b"") == [] and split_lines(b"\n") == [b""]


def prepared_arrays(out):
    return {p.name: np.load(p) for p in sorted(out.glob("*.npy"))}


def test_crlf_bom_and_gzip_give_the_same_prepared_data(tmp_path):
    cfg = DataConfig(vocab_size=120)
    lf = (write(tmp_path / "lf.en", EN), write(tmp_path / "lf.de", DE))
    crlf = (write(tmp_path / "crlf.en", EN, newline="\r\n", bom=True),
            write(tmp_path / "crlf.de.gz", DE, newline="\r\n", gz=True))
    for name, (s, t) in (("lf", lf), ("crlf", crlf)):
        prepare(train=SplitFiles("train", s, t), others=[], out_dir=tmp_path / f"out-{name}",
                cfg=cfg)
    a, b = prepared_arrays(tmp_path / "out-lf"), prepared_arrays(tmp_path / "out-crlf")
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert (tmp_path / "out-lf/train.tgt.txt").read_bytes() == \
        (tmp_path / "out-crlf/train.tgt.txt").read_bytes()


def test_drops_counted_by_reason_training_only(tmp_path):
    en, de = list(EN), list(DE)
    en[0], de[3], en[5] = "", "", "   "  # 3 empty pairs
    en[7] = " ".join(["word"] * 40)  # too long (max_length 30)
    de[9] = "Ja " * 20  # 20+ tokens against a few for "Yes": over ratio 3
    en[9] = "Yes"
    cfg = DataConfig(vocab_size=120, max_length=30, max_length_ratio=3.0)
    train = SplitFiles("train", write(tmp_path / "t.en", en), write(tmp_path / "t.de", de))
    valid = SplitFiles("valid", write(tmp_path / "v.en", en[:10]),
                       write(tmp_path / "v.de", de[:10]))
    report = prepare(train=train, others=[valid], out_dir=tmp_path / "out", cfg=cfg)
    assert report["splits"]["train"]["dropped"] == {"empty": 3, "too_long": 1, "length_ratio": 1}
    assert report["splits"]["train"]["kept"] == 35 and report["splits"]["train"]["read"] == 40
    assert report["splits"]["valid"]["kept"] == 10  # other splits are never filtered
    data = ParallelData(tmp_path / "out", "train")
    assert len(data) == 35
    kept_en = (tmp_path / "out/train.src.txt").read_text().splitlines()
    kept_de = (tmp_path / "out/train.tgt.txt").read_text().splitlines()
    assert len(kept_en) == len(kept_de) == 35
    assert all(EN.index(s) % 5 == DE.index(t) % 5 for s, t in zip(kept_en, kept_de, strict=True))


def test_prepared_data_round_trips_to_the_text(tmp_path):
    train = SplitFiles("train", write(tmp_path / "t.en", EN), write(tmp_path / "t.de", DE))
    prepare(train=train, others=[], out_dir=tmp_path / "out", cfg=DataConfig(vocab_size=120))
    from transformer_mt.data.prepare import load_vocab

    vocab, data = load_vocab(tmp_path / "out"), ParallelData(tmp_path / "out", "train")
    for i in (0, 13, 39):
        assert vocab.decode(data.ids("src", i).tolist()) == EN[i]
        assert vocab.decode(data.ids("tgt", i).tolist()) == DE[i]
    src, tgt_in, tgt_out = data.collate([0, 1])
    assert (tgt_in[:, 0] == 2).all() and tgt_out[0, len(data.ids("tgt", 0))] == 3
    assert src[0, len(data.ids("src", 0))] == 3


lengths = st.lists(st.integers(1, 60), min_size=1, max_size=300)


@settings(max_examples=60, deadline=None)
@given(src=lengths, data=st.data(), max_tokens=st.integers(60, 500), seed=st.integers(0, 99))
def test_token_batches_budget_coverage_and_determinism(src, data, max_tokens, seed):
    tgt = data.draw(st.lists(st.integers(1, 60), min_size=len(src), max_size=len(src)))
    src_l, tgt_l = np.array(src), np.array(tgt)
    batches = token_batches(src_l, tgt_l, max_tokens=max_tokens, seed=seed, epoch=3)
    for b in batches:  # padded size within budget on both sides
        assert len(b) * src_l[b].max() <= max_tokens and len(b) * tgt_l[b].max() <= max_tokens
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(src)))  # each once
    again = token_batches(src_l, tgt_l, max_tokens=max_tokens, seed=seed, epoch=3)
    assert all(np.array_equal(a, b) for a, b in zip(batches, again, strict=True))


def test_token_batches_shuffle_per_epoch_and_small_padding():
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(1, 40, 2000), rng.integers(1, 40, 2000)
    e0 = token_batches(src, tgt, max_tokens=400, seed=1, epoch=0)
    e1 = token_batches(src, tgt, max_tokens=400, seed=1, epoch=1)
    assert [b.tolist() for b in e0] != [b.tolist() for b in e1]
    padded = sum(len(b) * tgt[b].max() for b in e0)
    assert padded < 1.1 * tgt.sum()  # bucketing by length keeps padding small


@settings(max_examples=60, deadline=None)
@given(src=lengths, data=st.data(), max_tokens=st.integers(60, 500), seed=st.integers(0, 99),
       n=st.integers(1, 6), limit=st.integers(1, 70))
def test_shape_buckets_few_shapes_within_budget(src, data, max_tokens, seed, n, limit):
    """train.shape_buckets: every batch padded to a (rows, length) of at most n shapes, the
    length holding its longest side, rows x length within max_tokens (one sentence beyond
    when its bucket outgrows the budget alone), each sentence once; lengths are multiples of 8
    up to the positions' limit."""
    tgt = data.draw(st.lists(st.integers(1, 60), min_size=len(src), max_size=len(src)))
    src_l, tgt_l = np.array(src), np.array(tgt)
    buckets = ShapeBuckets.of(src_l, tgt_l, n=n, max_tokens=max_tokens, limit=limit)
    assert len(buckets.lengths) <= n and buckets.lengths[-1] >= max(src_l.max(), tgt_l.max())
    longest = set(np.maximum(src_l, tgt_l).tolist())
    for x in buckets.lengths.tolist():  # past the limit only a sentence's own length
        assert x % 8 == 0 and x <= limit or x == limit or x > limit and x in longest
    batches = token_batches(src_l, tgt_l, max_tokens=max_tokens, seed=seed, epoch=0,
                            buckets=buckets)
    shapes = set()
    for b in batches:
        rows, length = buckets.shape(int(max(src_l[b].max(), tgt_l[b].max())))
        assert length >= max(src_l[b].max(), tgt_l[b].max()) and len(b) <= rows
        assert rows * length <= max_tokens or rows == len(b) == 1
        shapes.add((rows, length))
    assert len(shapes) <= n
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(src)))


def test_a_bucketed_batch_is_the_batch_padded(tmp_path):
    """collate with buckets: the same sentences at the top left, padding (0) everywhere else,
    all-padding rows below; a batch too many for its bucket is refused."""
    train = SplitFiles("train", write(tmp_path / "t.en", EN), write(tmp_path / "t.de", DE))
    prepare(train=train, others=[], out_dir=tmp_path / "out", cfg=DataConfig(vocab_size=120))
    data = ParallelData(tmp_path / "out", "train")
    plain = data.collate([0, 1])
    buckets = ShapeBuckets(np.array([8, 64]), max_tokens=200)
    padded = data.collate([0, 1], buckets)
    for a, b in zip(plain, padded, strict=True):
        B, T = a.shape
        assert b.shape == (200 // 64, 64) and torch.equal(b[:B, :T], a)
        assert not b[B:].any() and not b[:, T:].any()
    with pytest.raises(ValueError, match="exceed max_tokens 200"):
        data.collate([0, 1, 2, 3], buckets)


def test_sentence_over_budget_is_an_error():
    with pytest.raises(DataError, match="does not fit in max_tokens=10"):
        token_batches(np.array([3, 11]), np.array([3, 3]), max_tokens=10, seed=0, epoch=0)


def test_bpe_dropout_resegments_the_same_text_reproducibly(tmp_path):
    train = SplitFiles("train", write(tmp_path / "t.en", EN), write(tmp_path / "t.de", DE))
    prepare(train=train, others=[], out_dir=tmp_path / "out", cfg=DataConfig(vocab_size=120))
    from transformer_mt.data.prepare import load_vocab

    vocab, data = load_vocab(tmp_path / "out"), ParallelData(tmp_path / "out", "train")
    plain = data.resegmented(vocab, dropout=0.0, seed=5)  # no dropout: the prepared pieces
    for side in ("src", "tgt"):
        assert np.array_equal(plain.tokens[side], data.tokens[side])
        assert np.array_equal(plain.offsets[side], data.offsets[side])
    a, b, c = (data.resegmented(vocab, dropout=0.3, seed=s) for s in (5, 5, 6))
    assert np.array_equal(a.tokens["src"], b.tokens["src"])
    assert np.array_equal(a.tokens["tgt"], b.tokens["tgt"])
    assert not np.array_equal(a.offsets["src"], c.offsets["src"])
    assert len(a) == len(data) and a.tgt_lengths.sum() > data.tgt_lengths.sum()
    for i in range(len(data)):  # other pieces, the same sentence, still in its pair
        assert vocab.decode(a.ids("src", i).tolist()) == EN[i]
        assert vocab.decode(a.ids("tgt", i).tolist()) == DE[i]


def test_bpe_dropout_refuses_text_that_no_longer_matches(tmp_path):
    train = SplitFiles("train", write(tmp_path / "t.en", EN), write(tmp_path / "t.de", DE))
    prepare(train=train, others=[], out_dir=tmp_path / "out", cfg=DataConfig(vocab_size=120))
    from transformer_mt.data.prepare import load_vocab

    write(tmp_path / "out/train.tgt.txt", DE[:-1])
    with pytest.raises(DataError, match=r"train\.tgt\.txt: 39 lines.* 40 pairs"):
        ParallelData(tmp_path / "out", "train").resegmented(
            load_vocab(tmp_path / "out"), dropout=0.1, seed=0)


def peak_rss_mib_of_prepare(root, n: int) -> float:
    """Peak resident memory (MiB) of `prepare` run in its own process on n synthetic pairs."""
    from synthetic import sentences, translate

    src = sentences(n, seed=n)
    write(root / "train.en", src)
    write(root / "train.de", [translate(s) for s in src])
    command = [sys.executable, "-m", "transformer_mt", "prepare", "--train-src",
               str(root / "train.en"), "--train-tgt", str(root / "train.de"), "--vocab-size",
               "60", "--data.vocab_sample=2000", "--out", str(root / "out")]
    probe = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
             "capture_output=True); print(resource.getrusage(resource.RUSAGE_CHILDREN)"
             ".ru_maxrss)")
    done = subprocess.run([sys.executable, "-c", probe, *command], check=True,
                          capture_output=True, text=True)
    assert np.load(root / "out" / "train.src.offsets.npy").shape == (n + 1,)
    return int(done.stdout) / 1024


def test_prepare_memory_does_not_grow_with_the_corpus(tmp_path):
    small, large = tmp_path / "small", tmp_path / "large"
    small.mkdir()
    large.mkdir()
    rss = {n: peak_rss_mib_of_prepare(root, n) for n, root in ((20_000, small), (400_000, large))}
    # 20x the pairs (about 10 MB of text more than 0.5 MB) cost less than 25 MiB more: the
    # lengths (8 bytes a pair) and the offsets (16) grow, nothing else
    assert rss[400_000] - rss[20_000] < 25, rss


def test_whole_words_file_is_checked_before_anything_is_written(tmp_path):
    train = SplitFiles("train", write(tmp_path / "t.en", EN), write(tmp_path / "t.de", DE))
    words = write(tmp_path / "words.txt", ["(NP", "two words"])
    with pytest.raises(DataError, match=rf"{words}:2: a whole word has no spaces"):
        prepare(train=train, others=[], out_dir=tmp_path / "out",
                cfg=DataConfig(vocab_size=120, whole_words=str(words)))
    with pytest.raises(DataError, match=r"data.whole_words: cannot read .*missing.txt"):
        prepare(train=train, others=[], out_dir=tmp_path / "out",
                cfg=DataConfig(vocab_size=120, whole_words=str(tmp_path / "missing.txt")))
    assert not (tmp_path / "out").exists()
