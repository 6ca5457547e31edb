"""Trees as sequences for parsing (§6.3): preprocessing as parsers do it, Vinyals et al.'s
linearisation, restore() the inverse of linearise() on every tree of the Treebank sample, and
the repair of malformed predicted sequences."""

import pytest

from transformer_mt.research.evalb import score_sentence
from transformer_mt.research.trees import (
    PUNCTUATION_TAGS,
    TreeError,
    linearise,
    parse_tree,
    preprocess,
    restore,
)

RAW = ("( (S (NP-SBJ-1 (NNP Mr.) (NNP Vinken) ) (VP (VBZ is) (NP-PRD (NP (NN chairman) ) "
       "(PP (IN of) (NP (NNP Elsevier) (NNP N.V.) )))) (SBAR (-NONE- 0) (S (-NONE- *T*-2) )) "
       "(. .) ))")


def test_preprocessing_and_linearisation_of_a_treebank_tree():
    tree = preprocess(parse_tree(RAW))
    assert str(tree) == ("(S (NP (NNP Mr.) (NNP Vinken)) (VP (VBZ is) (NP (NP (NN chairman)) "
                         "(PP (IN of) (NP (NNP Elsevier) (NNP N.V.))))) (. .))")
    assert " ".join(linearise(tree)) == ("(S (NP NNP NNP )NP (VP VBZ (NP (NP NN )NP (PP IN "
                                         "(NP NNP NNP )NP )PP )NP )VP . )S"), "the paper's code's"
    assert " ".join(linearise(tree, slots="placeholder")) == (
        "(S (NP XX XX )NP (VP XX (NP (NP XX )NP (PP XX (NP XX XX )NP )PP )NP )VP XX )S")
    assert linearise(tree, slots="words")[1:4] == ["(NP", "Mr.", "Vinken"]
    assert preprocess(parse_tree("(X (-NONE- *))")) is None
    assert str(preprocess(parse_tree("(S (-LRB- -LRB-) (NP=2 (NN x)))"))) == \
        "(S (-LRB- -LRB-) (NP (NN x)))"
    for bad, message in (("(S (NP (NN a)", "too many opening"),
                         ("(S (NN a)))", "too many closing"), ("(S (NN a b))", "more than a word"),
                         ("(S (NN a)) (S (NN b))", "after the tree's end")):
        with pytest.raises(TreeError, match=message):
            parse_tree(bad)


def round_trip(tree, *, slots):
    restored = restore(linearise(tree, slots=slots), tree.words(), slots=slots)
    assert restored.repairs == []
    return restored.tree


WA = ("train", 453)  # the sample's one word with a letter tagged as punctuation: "(, Wa)"


def test_restore_inverts_linearise_on_every_tree_of_the_sample(shared_data):
    for split in ("train", "dev", "test"):
        lines = (shared_data / "ptb-sample" / f"{split}.trees").read_text().splitlines()
        for number, line in enumerate(lines, 1):
            tree = preprocess(parse_tree(line))
            if (split, number) == WA:  # the annotation error restore() mends
                mended = restore(linearise(tree, slots="tags"), tree.words())
                assert mended.repairs == ["punctuation tag: Wa tagged XX, not ,"]
            else:
                assert str(round_trip(tree, slots="tags")) == str(tree), (split, number)
            for slots in ("placeholder", "words"):
                untagged = round_trip(tree, slots=slots)
                assert untagged.words() == tree.words(), (split, number)
                assert untagged.tags() == [PUNCTUATION_TAGS.get(w, "XX") for w in tree.words()]


def test_restore_inverts_linearise_on_a_hand_built_tree():
    tree = preprocess(parse_tree(RAW))
    assert str(round_trip(tree, slots="tags")) == str(tree)
    assert round_trip(tree, slots="placeholder").tags()[-1] == ".", \
        "punctuation tagged from its word"


ROOTS = "several roots: put 2 top-level items under (S"


@pytest.mark.parametrize(("sequence", "repaired", "tree"), [
    ("(S (NP XX )NP (VP XX )VP", ["unclosed: closed 1 constituents"],
     "(S (NP (XX a)) (VP (XX b)))"),
    ("(S (NP XX )NP )S )S (VP XX )VP", ["unopened: dropped )S, nothing open", ROOTS],
     "(S (S (NP (XX a))) (VP (XX b)))"),
    ("(S (NP XX XX XX )NP )S", ["extra slot: dropped XX, the sentence has 2 words"],
     "(S (NP (XX a) (XX b)))"),
    ("(S (NP XX )NP )S", ["missing words: added 1", ROOTS], "(S (S (NP (XX a))) (XX b))"),
    ("(S (NP XX )VP XX )S", ["mislabelled: )VP closed (NP"], "(S (NP (XX a)) (XX b))"),
    ("", ["missing words: added 2", ROOTS], "(S (XX a) (XX b))"),
    ("(S (NP )NP (VP XX (PP )PP XX )VP )S", ["empty: dropped (NP", "empty: dropped (PP"],
     "(S (VP (XX a) (XX b)))"),
    ("(S (NP , )NP NN )S", ["punctuation tag: a tagged XX, not ,",
                             "punctuation tag: . tagged ., not NN"], "(S (NP (XX a)) (. .))"),
])
def test_malformed_sequences_restore_to_trees_with_the_sentences_words(sequence, repaired,
                                                                         tree):
    words = ["a", "."] if "NN" in sequence else ["a", "b"]
    restored = restore(sequence.split(), words)
    assert restored.repairs == repaired
    assert str(restored.tree) == tree
    assert restored.tree.words() == words
    assert restored.one_slot_per_word == ("extra slot" not in repaired[0]
                                          and "missing words" not in repaired[0])


def test_copied_words_are_slots_and_a_miscopied_one_is_replaced_and_counted():
    restored = restore("(S (NP a )NP (VP c . )VP )S".split(), ["a", "b", "."], slots="words")
    assert restored.repairs == ["miscopied: b for c"]
    assert str(restored.tree) == "(S (NP (XX a)) (VP (XX b) (. .)))"


def test_a_tree_nested_as_deep_as_a_long_output_prints_reads_and_scores():
    # what a model looping on "(NP" writes until the length limit: far deeper than Python's
    # recursion limit allows a recursive printer
    depth = 5000
    restored = restore(["(NP"] * depth + ["XX"], ["a", "b"])
    assert restored.repairs == ["missing words: added 1", f"unclosed: closed {depth} constituents"]
    text = str(restored.tree)
    assert text == "(NP " * depth + "(XX a) (XX b)" + ")" * depth
    assert str(parse_tree(text)) == text and parse_tree(text).words() == ["a", "b"]
    score = score_sentence("(S (NP (DT a) (NN b)))", text)
    # one of the 5,000 NP brackets over both words matches the gold's NP; S is missed
    assert (score.status, score.gold, score.test, score.matched) == (0, 2, depth, 1)
