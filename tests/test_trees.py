"""Trees as sequences for parsing (§6.3): preprocessing as parsers do it, Vinyals et al.'s
linearisation, restore() the inverse of linearise() on every tree of the Treebank sample, and
the repair of malformed predicted sequences."""

import pytest

from transformer_mt.data.trees import (
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
    assert " ".join(linearise(tree)) == ("(S (NP XX XX )NP (VP XX (NP (NP XX )NP (PP XX "
                                         "(NP XX XX )NP )PP )NP )VP XX )S")
    assert linearise(tree, tags=True)[1:4] == ["(NP", "NNP", "NNP"]
    assert preprocess(parse_tree("(X (-NONE- *))")) is None
    assert str(preprocess(parse_tree("(S (-LRB- -LRB-) (NP=2 (NN x)))"))) == \
        "(S (-LRB- -LRB-) (NP (NN x)))"
    for bad, message in (("(S (NP (NN a)", "too many opening"),
                         ("(S (NN a)))", "too many closing"), ("(S (NN a b))", "more than a word"),
                         ("(S (NN a)) (S (NN b))", "after the tree's end")):
        with pytest.raises(TreeError, match=message):
            parse_tree(bad)


def round_trip(tree, *, tags):
    restored = restore(linearise(tree, tags=tags), tree.words())
    assert restored.repairs == []
    return restored.tree


def test_restore_inverts_linearise_on_every_tree_of_the_sample(shared_data):
    for split in ("train", "dev", "test"):
        lines = (shared_data / "ptb-sample" / f"{split}.trees").read_text().splitlines()
        for number, line in enumerate(lines, 1):
            tree = preprocess(parse_tree(line))
            assert str(round_trip(tree, tags=True)) == str(tree), (split, number)
            placeholder = round_trip(tree, tags=False)
            assert placeholder.words() == tree.words() and \
                set(placeholder.tags()) == {"XX"}, (split, number)


def test_restore_inverts_linearise_on_a_hand_built_tree():
    tree = preprocess(parse_tree(RAW))
    assert str(round_trip(tree, tags=True)) == str(tree)


@pytest.mark.parametrize(("sequence", "repaired", "tree"), [
    ("(S (NP XX )NP (VP XX )VP", ["closed 1 open constituents"],
     "(S (NP (XX a)) (VP (XX b)))"),
    ("(S (NP XX )NP )S )S (VP XX )VP", ["dropped )S: nothing open", "put 2 top-level items "
                                        "under (S"], "(S (S (NP (XX a))) (VP (XX b)))"),
    ("(S (NP XX XX XX )NP )S", ["dropped word slot XX: the sentence has 2 words"],
     "(S (NP (XX a) (XX b)))"),
    ("(S (NP XX )NP )S", ["added 1 missing words", "put 2 top-level items under (S"],
     "(S (S (NP (XX a))) (XX b))"),
    ("(S (NP XX )VP XX )S", [")VP closed (NP"], "(S (NP (XX a)) (XX b))"),
    ("", ["added 2 missing words", "put 2 top-level items under (S"], "(S (XX a) (XX b))"),
])
def test_malformed_sequences_restore_to_trees_with_the_sentences_words(sequence, repaired,
                                                                         tree):
    restored = restore(sequence.split(), ["a", "b"])
    assert restored.repairs == repaired
    assert str(restored.tree) == tree
    assert restored.tree.words() == ["a", "b"]
