"""The EVALB-compatible scorer: EVALB's own sample (sample.gld, sample.tst, sample.prm) scored
to every figure of its sample.rsl, COLLINS.prm semantics on hand-built trees, and the strict
summary that counts the sentences EVALB leaves out."""

from pathlib import Path

import pytest

from transformer_mt.research.evalb import (
    EVALB_NAMES,
    BracketError,
    EvalbParams,
    evalb_params,
    read_bracketing,
    score_files,
    score_sentence,
    summary,
)

SAMPLE = Path(__file__).parent / "data" / "evalb"


def rsl() -> tuple[list[list[str]], dict[str, dict[str, str]]]:
    """sample.rsl's per-sentence rows and its two summaries."""
    lines = (SAMPLE / "sample.rsl").read_text(encoding="utf-8").splitlines()
    rows = [line.split() for line in lines[3:27]]
    sections: dict[str, dict[str, str]] = {}
    current = None
    for line in lines:
        if line.startswith("-- "):
            current = sections.setdefault(line.strip("- "), {})
        elif current is not None and "=" in line:
            key, value = line.split("=")
            current[key.strip()] = value.strip()
    return rows, sections


def test_evalbs_own_sample_scores_as_its_sample_rsl():
    params = EvalbParams.read(SAMPLE / "sample.prm")
    scores = score_files(SAMPLE / "sample.gld", SAMPLE / "sample.tst", params)
    rows, sections = rsl()
    for row, s in zip(rows, scores, strict=True):
        recall = 100.0 * s.matched / s.gold if s.gold and s.status == 0 else 0.0
        precision = 100.0 * s.matched / s.test if s.test and s.status == 0 else 0.0
        shown = [s.length, s.status, f"{recall:.2f}", f"{precision:.2f}"]
        counts = [s.matched, s.gold, s.test, s.crossing] if s.status == 0 else [0] * 4
        words = s.words if s.status == 0 else s.length  # EVALB prints gold words on errors
        assert [int(row[1]), int(row[2]), row[3], row[4]] == shown, row
        assert [int(x) for x in row[5:9]] == counts, row
        if s.status == 0:
            assert [int(row[9]), int(row[10])] == [words, s.correct_tags], row
    # sample.rsl predates EVALB's F-measure line
    names = {text: key for text, key in EVALB_NAMES.items() if text != "Bracketing FMeasure"}
    for section, cutoff in (("All", None), ("len<=40", params.cutoff_len)):
        ours = summary(scores, cutoff=cutoff)
        for text, key in names.items():
            value = ours[key]
            shown = str(value) if isinstance(value, int) else f"{value:.2f}"
            assert shown == sections[section][text], (section, text)


def test_collins_semantics_on_hand_built_trees():
    gold = "(TOP (S (NP-SBJ (DT The) (NN cat)) (VP (VBD sat) (PRT (RP down)) " \
           "(SBAR (-NONE- 0) (S (-NONE- *T*-1)))) (. .)))"
    tree = read_bracketing(gold, EvalbParams())
    assert tree.words == ["The", "cat", "sat", "down"], "punctuation and traces dropped"
    assert tree.length == 5, "the cutoff length leaves out traces only"
    assert sorted(tree.brackets(EvalbParams())) == [("NP", 0, 2), ("PRT", 3, 4), ("S", 0, 4),
                                                    ("VP", 2, 4)]
    test = "(S (NP (DT The) (NN cat)) (VP (VBD sat) (ADVP (RB down))) (. .))"
    s = score_sentence(gold, test)
    assert (s.status, s.matched, s.gold, s.test, s.correct_tags) == (0, 4, 4, 4, 3), \
        "ADVP = PRT; RB is not RP"
    unlabeled = EvalbParams(labeled=False)
    assert score_sentence("(S (A (X a) (X b)) (X c))", "(S (B (X a) (X b)) (X c))",
                          unlabeled).matched == 2
    crossing = score_sentence("(S (A (X a) (X b)) (X c))", "(S (X a) (B (X b) (X c)))")
    assert (crossing.matched, crossing.crossing) == (1, 1)


def test_mismatches_are_counted_and_scored_by_the_strict_summary():
    gold = "(S (NP (DT a) (NN dog)) (VP (VBZ runs)))"
    scores = [score_sentence(gold, gold), score_sentence(gold, "(S (NP (DT a) (NN cat)))"),
              score_sentence(gold, ""), score_sentence(gold, "(S (NP (DT a) (NN dog)")]
    assert [s.status for s in scores] == [0, 1, 2, 1]
    assert "words mismatch" in scores[1].problem or "length" in scores[1].problem
    assert "unbalanced" in scores[3].problem
    evalb = summary(scores)
    assert (evalb["valid"], evalb["errors"], evalb["skipped"], evalb["f1"]) == (1, 2, 1, 100.0)
    strict = summary(scores, strict=True)
    assert strict["recall"] == pytest.approx(100 * 3 / 12), "every gold bracket counts"
    assert strict["precision"] == pytest.approx(100 * 3 / (3 + 2)), "the cat tree's two"
    assert strict["complete_match"] == 25.0
    with pytest.raises(BracketError, match="unbalanced"):
        read_bracketing("(S (X a)", EvalbParams())
    # as EVALB reads them: "(X )" is a pre-terminal with an empty word, "(X)" an empty bracket
    assert read_bracketing("(S (NP ) (X a))", EvalbParams()).words == ["", "a"]
    assert read_bracketing("(S (NP) (X a))", EvalbParams()).words == ["a"]


def test_parameter_files_refuse_unknown_keys(tmp_path):
    (tmp_path / "x.prm").write_text("DELETE_LABEL TOP\nQUOTE_LABLE POS\n", encoding="utf-8")
    with pytest.raises(ValueError, match="x.prm:2: QUOTE_LABLE is not supported"):
        EvalbParams.read(tmp_path / "x.prm")


def test_the_built_in_parameters_are_evalbs_files():
    assert evalb_params("collins") == EvalbParams.read(SAMPLE / "COLLINS.prm") == EvalbParams()
    assert evalb_params("nk") == EvalbParams.read(SAMPLE / "nk.prm")
    assert evalb_params(str(SAMPLE / "nk.prm")) == evalb_params("nk")


def test_quote_labels_put_back_a_quote_deleted_on_one_side_only():
    nk = evalb_params("nk")
    gold = "(S (NP (NNS dogs) ('' ')) (VP (VBP run)))"
    test = "(S (NP (NNS dogs) (POS ')) (VP (VBP run)))"
    collins = score_sentence(gold, test)
    assert (collins.status, collins.problem) == (1, "length mismatch (2|3)")
    s = score_sentence(gold, test, nk)
    assert (s.status, s.matched, s.gold, s.words, s.correct_tags) == (0, 3, 3, 3, 2)
