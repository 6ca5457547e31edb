"""Word alignments from encoder-decoder attention: rows over the real source tokens (EOS and
padding never aligned), the heads and query position chosen, pieces merged into words, and
fairseq's H-/A- lines from `translate --print-alignment [hard|soft]`."""

import pytest
import torch

from transformer_mt.inference.alignment import (
    AlignmentChoice,
    alignment_weights,
    format_hard,
    format_soft,
    hard_alignment,
    word_index,
    word_pairs,
)


def cross_of(rows: list[list[float]], heads: int = 1) -> torch.Tensor:
    """(heads, queries, keys) with `rows` for head 0, uniform rows for the others."""
    w = torch.tensor(rows)
    return torch.stack([w] + [torch.full_like(w, 1 / w.shape[1])] * (heads - 1))


def test_rows_leave_eos_out_and_are_renormalised():
    # decoder inputs BOS, a, b (query rows), source x, y, EOS (key columns)
    cross = cross_of([[0.2, 0.2, 0.6], [0.1, 0.6, 0.3], [0.5, 0.1, 0.4]])
    w = alignment_weights(cross, 2, 2, AlignmentChoice(0))  # outputs a, b; source x, y
    assert torch.allclose(w, torch.tensor([[0.5, 0.5], [1 / 7, 6 / 7]]))
    assert hard_alignment(w)[1] == (1, 1), "EOS's 0.6 in row 0 never wins"
    shifted = alignment_weights(cross, 2, 2, AlignmentChoice(0, query="input"))
    assert torch.allclose(shifted, torch.tensor([[1 / 7, 6 / 7], [5 / 6, 1 / 6]]))
    assert hard_alignment(shifted) == [(1, 0), (0, 1)]


def test_the_chosen_heads_are_averaged():
    cross = cross_of([[0.9, 0.1], [0.1, 0.9]], heads=3)
    cross[2] = torch.tensor([[0.1, 0.9], [0.9, 0.1]])
    assert hard_alignment(alignment_weights(cross, 2, 2, AlignmentChoice(0, (0,)))) == \
        [(0, 0), (1, 1)]
    assert hard_alignment(alignment_weights(cross, 2, 2, AlignmentChoice(0, (2,)))) == \
        [(1, 0), (0, 1)]
    mean = alignment_weights(cross, 2, 2, AlignmentChoice(0, (0, 1, 2)))
    assert torch.allclose(mean, alignment_weights(cross, 2, 2, AlignmentChoice(0)))
    assert torch.allclose(mean, torch.full((2, 2), 0.5))


def test_choices_outside_the_model_are_refused():
    assert AlignmentChoice().resolve(6, 8).layer == 3  # DEFAULT_LAYER_FROM_TOP
    assert AlignmentChoice().resolve(2, 8).layer == 0
    assert AlignmentChoice(0).resolve(6, 8).layer == 0
    for bad, message in ((AlignmentChoice(6), "the decoder has layers 0 .. 5"),
                         (AlignmentChoice(1, (8,)), "the layers have heads 0 .. 7"),
                         (AlignmentChoice(1, query="next"), "one of predicting, input")):
        with pytest.raises(ValueError, match=message):
            bad.resolve(6, 8)


def test_pieces_merge_into_words():
    src = ["▁The", "▁sun", "flower", "s", "▁grow", "."]
    tgt = ["▁Sonnen", "blumen", "▁wachsen", "▁", "."]
    assert word_index(src) == [0, 1, 1, 1, 2, 2]
    assert word_index(tgt) == [0, 0, 1, 2, 2]
    pairs = [(1, 0), (2, 1), (4, 2), (5, 3), (5, 4)]
    assert word_pairs(pairs, src, tgt) == [(1, 0), (2, 1), (2, 2)]


def test_fairseq_line_formats():
    w = torch.tensor([[0.25, 0.75], [1.0, 0.0], [0.5, 0.5]])
    assert format_hard(hard_alignment(w)) == "1-0 0-1 0-2"
    assert format_soft(w) == "0.250000,0.750000 1.000000,0.000000 0.500000,0.500000"
    assert format_soft(torch.zeros(3, 0)) == "" and hard_alignment(torch.zeros(3, 0)) == []


def test_translate_prints_fairseq_alignment_lines(trained_model, tmp_path, capsys):
    from synthetic import sentences
    from transformer_mt import Translator
    from transformer_mt.cli.main import main

    texts = sentences(6, seed=41)  # a blank line has no H-/A- lines: test_cli's blank lines
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    translator = Translator.from_dir(trained_model)
    best = [n[0] for n in translator.translate_nbest(texts)]

    def lines(*options):
        assert main(["translate", "--model", str(trained_model), "--input",
                     str(tmp_path / "in.txt"), *options]) == 0
        found = capsys.readouterr().out.splitlines()
        assert len(found) == 2 * len(texts)
        for i, h in enumerate(found[::2]):
            tag, _score, text = h.split("\t")
            assert (tag, text) == (f"H-{i}", best[i].text)
        names, rows = zip(*(a.split("\t") for a in found[1::2]), strict=True)
        assert list(names) == [f"A-{i}" for i in range(len(texts))]
        return rows

    source_lens = [len(translator.vocab.encode(t)) for t in texts]
    # one pair per output token (EOS left out), source positions within the source (EOS and
    # padding never)
    for i, row in enumerate(lines("--print-alignment", "--alignment-layer", "1")):
        parsed = [tuple(map(int, p.split("-"))) for p in row.split()]
        assert [j for _, j in parsed] == list(range(len(best[i].tokens)))
        assert all(0 <= s < source_lens[i] for s, _ in parsed)
    for i, row in enumerate(lines("--print-alignment", "soft", "--alignment-heads", "0,3")):
        weights = [[float(p) for p in r.split(",")] for r in row.split()]
        assert len(weights) == len(best[i].tokens)
        assert all(len(r) == source_lens[i] and abs(sum(r) - 1) < 1e-5 for r in weights)
    for i, row in enumerate(lines("--print-alignment", "--alignment-words")):
        parsed = [tuple(map(int, p.split("-"))) for p in row.split()]
        assert parsed == sorted(set(parsed))
        assert all(s < len(texts[i].split()) and t < len(best[i].text.split())
                   for s, t in parsed)
        assert {t for _, t in parsed} == set(range(len(best[i].text.split()))), \
            "every output word aligned"
    for options, message in ((["--alignment-layer", "5"], "decoder has layers 0 .. 1"),
                             (["--alignment-heads", "4"], "heads 0 .. 3"),
                             (["soft", "--alignment-words"], "word alignments are hard")):
        assert main(["translate", "--model", str(trained_model), "--input",
                     str(tmp_path / "in.txt"), "--print-alignment", *options]) == 2
        assert message in capsys.readouterr().err
