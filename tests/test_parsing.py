"""`transformer-mt parse` end to end on 70 generated trees: Treebank-style trees to training
pairs, prepare, a few training steps with the parsing preset, sentences to trees (every tree
with the sentence's words, repaired where needed), and EVALB's scores of them; reversed input
written and read last word first; the reading parser's recipe, which trains and parses with
the checkpoint that parses dev best (benchmarks/parsing/recipe.sh, select_checkpoint.sh)."""

import json
import os
import random
import subprocess

import pytest
import torch

from conftest import REPO
from transformer_mt.cli.main import main
from transformer_mt.data.vocab import Vocabulary, train_vocabulary
from transformer_mt.research.tree_search import tree_constraints
from transformer_mt.research.trees import parse_tree

NOUNS, VERBS, DETS = ["dog", "cat", "girl", "ball", "park"], ["sees", "runs", "likes"], \
    ["a", "the"]


def tree(rng: random.Random) -> str:
    def np() -> str:
        return f"(NP-SBJ (DT {rng.choice(DETS)}) (NN {rng.choice(NOUNS)}))"

    vp = f"(VP (VBZ {rng.choice(VERBS)})" + (f" {np()}" if rng.random() < 0.6 else "") + ")"
    trace = " (SBAR (-NONE- 0) (S (-NONE- *T*-1)))" if rng.random() < 0.2 else ""
    return f"( (S {np()} {vp}{trace} (. .)) )"


def test_parse_corpus_train_trees_and_score_through_the_cli(tmp_path, capsys):
    rng = random.Random(0)
    trees = tmp_path / "treebank"
    trees.mkdir()
    for split, n in (("train", 50), ("dev", 10), ("test", 10)):
        (trees / f"{split}.trees").write_text("\n".join(tree(rng) for _ in range(n)) + "\n")
    corpus, data, run = tmp_path / "corpus", tmp_path / "data", tmp_path / "run"
    assert main(["parse", "corpus", "--trees-dir", str(trees), "--out", str(corpus)]) == 0
    words = (corpus / "test.words").read_text().splitlines()
    targets = (corpus / "train.tree").read_text().splitlines()
    assert len(words) == 10 and targets[0].startswith("(S (NP DT NN )NP (VP VBZ"), \
        "the POS tags as slots by default"
    assert "-NONE-" not in (corpus / "test.gold").read_text()
    symbols = (corpus / "symbols.txt").read_text().split()
    assert {"(S", ")NP", "DT", "NN"} <= set(symbols) and "dog" not in symbols
    assert main(["prepare", "--train-src", str(corpus / "train.words"), "--train-tgt",
                 str(corpus / "train.tree"), "--valid-src", str(corpus / "valid.words"),
                 "--valid-tgt", str(corpus / "valid.tree"), "--vocab-size", "60",
                 "--whole-words", str(corpus / "symbols.txt"), "--out", str(data)]) == 0
    vocab = Vocabulary.load(data / "sentencepiece.model")
    assert all(len(vocab.encode(t)) == len(t.split()) for t in targets), \
        "each bracket, label and tag is one piece"
    assert main(["train", "--config", "parsing-cpu", "--data", str(data), "--run-dir", str(run),
                 "--model.d_model=32", "--model.d_ff=64", "--model.n_heads=2",
                 "--train.max_steps=30", "--train.max_tokens=800", "--train.warmup_steps=10",
                 "--train.valid_bleu=false", "--train.threads=2"]) == 0
    out = tmp_path / "parsed.trees"
    assert main(["parse", "trees", "--model", str(run), "--input", str(corpus / "test.words"),
                 "--output", str(out), "--beam-size", "4", "--max-length-offset", "40"]) == 0
    parsed = out.read_text().splitlines()
    assert [parse_tree(p).words() for p in parsed] == [w.split() for w in words], \
        "every tree has its sentence's words, however malformed the output"
    capsys.readouterr()
    # never more word slots than words (fewer only where the length limit ends an output)
    assert main(["parse", "trees", "--model", str(run), "--input", str(corpus / "test.words"),
                 "--output", str(tmp_path / "slots.trees"), "--beam-size", "4",
                 "--max-length-offset", "40", "--word-slots"]) == 0
    assert "extra slot" not in capsys.readouterr().err
    # nothing closed that is not open, nothing empty (constituents left open only where the
    # length limit ends an output)
    assert main(["parse", "trees", "--model", str(run), "--input", str(corpus / "test.words"),
                 "--output", str(tmp_path / "balanced.trees"), "--beam-size", "4",
                 "--max-length-offset", "40", "--word-slots", "--balanced"]) == 0
    err = capsys.readouterr().err
    assert "extra slot" not in err and "unopened" not in err and "empty" not in err, err
    scores = tmp_path / "scores.json"
    assert main(["parse", "score", "--gold", str(corpus / "test.gold"), "--test", str(out),
                 "--json", str(scores)]) == 0
    found = json.loads(scores.read_text())
    assert found["all"]["sentences"] == 10 and found["all"]["errors"] == 0
    assert 0.0 <= found["strict"]["f1"] == found["all"]["f1"] <= 100.0


def test_a_malformed_tree_is_named_by_file_and_line(tmp_path, capsys):
    trees = tmp_path / "treebank"
    trees.mkdir()
    good = "( (S (NP (NN dog)) (VP (VBZ runs))) )"
    for split in ("train", "test"):
        (trees / f"{split}.trees").write_text(good + "\n")
    (trees / "dev.trees").write_text(f"{good}\n( (S (NP (NN dog)) (VP (VBZ runs)) )\n")
    assert main(["parse", "corpus", "--trees-dir", str(trees), "--out",
                 str(tmp_path / "out")]) == 2
    assert "dev.trees:2: unbalanced: too many opening brackets" in capsys.readouterr().err
    assert not (tmp_path / "out" / "train.words").exists(), "nothing half-written"


def test_reversed_input_is_written_and_read_last_word_first(tmp_path, monkeypatch):
    rng = random.Random(1)
    trees = tmp_path / "treebank"
    trees.mkdir()
    for split in ("train", "dev", "test"):
        (trees / f"{split}.trees").write_text("\n".join(tree(rng) for _ in range(5)) + "\n")
    plain, reverse = tmp_path / "plain", tmp_path / "reverse"
    assert main(["parse", "corpus", "--trees-dir", str(trees), "--out", str(plain)]) == 0
    assert main(["parse", "corpus", "--trees-dir", str(trees), "--out", str(reverse),
                 "--reverse"]) == 0
    for name in ("test.words", "test.tree", "test.gold"):
        assert (reverse / name).read_text() == (plain / name).read_text()
    words = (plain / "test.words").read_text().splitlines()
    assert (reverse / "test.reversed").read_text().splitlines() == \
        [" ".join(w.split()[::-1]) for w in words]
    assert not (plain / "test.reversed").exists()

    seen = []

    class Recorder:  # the model's side of `parse trees`: what it is given to read
        def translate(self, sentences):
            seen.extend(sentences)
            return ["(S " + " ".join("XX" for _ in s.split()) + " )S" for s in sentences]

    monkeypatch.setattr("transformer_mt.cli.parse.open_translator",
                        lambda args, overrides: (Recorder(), None))
    out = tmp_path / "parsed.trees"
    assert main(["parse", "trees", "--model", str(tmp_path), "--input",
                 str(plain / "test.words"), "--output", str(out), "--reverse"]) == 0
    assert seen == (reverse / "test.reversed").read_text().splitlines()
    assert [parse_tree(t).words() for t in out.read_text().splitlines()] == \
        [w.split() for w in words], "trees keep the words in reading order"


def test_words_as_slots_are_written_without_symbols_and_read_back_as_slots(tmp_path,
                                                                            monkeypatch, capsys):
    rng = random.Random(2)
    trees = tmp_path / "treebank"
    trees.mkdir()
    for split in ("train", "dev", "test"):
        (trees / f"{split}.trees").write_text("\n".join(tree(rng) for _ in range(5)) + "\n")
    corpus = tmp_path / "corpus"
    assert main(["parse", "corpus", "--trees-dir", str(trees), "--out", str(corpus),
                 "--slots", "words"]) == 0
    words = (corpus / "test.words").read_text().splitlines()
    targets = (corpus / "test.tree").read_text().splitlines()
    assert [[t for t in target.split() if t[0] not in "()"] for target in targets] == \
        [w.split() for w in words], "each word slot is its word"
    symbols = set((corpus / "symbols.txt").read_text().split())
    assert {"(S", ")NP"} <= symbols and not symbols & set(" ".join(words).split()) and \
        "XX" not in symbols

    class Copier:  # a model that copies the tree it was trained on, one word wrong
        def translate(self, sentences):
            return [t.replace("dog", "cat", 1) if "dog" in t else t for t in targets]

    monkeypatch.setattr("transformer_mt.cli.parse.open_translator",
                        lambda args, overrides: (Copier(), None))
    out = tmp_path / "parsed.trees"
    capsys.readouterr()
    assert main(["parse", "trees", "--model", str(tmp_path), "--input",
                 str(corpus / "test.words"), "--output", str(out), "--slots", "words"]) == 0
    miscopied = sum("dog" in t for t in targets)
    assert miscopied, "the test corpus has a dog to miscopy"
    assert f"{miscopied} needed repair (miscopied {miscopied}); {len(targets)} had one word " \
        "slot per word" in capsys.readouterr().err
    assert out.read_text() == (corpus / "test.gold").read_text().replace("(NN ", "(XX ") \
        .replace("(DT ", "(XX ").replace("(VBZ ", "(XX "), "the gold tree, tags as XX"


def test_word_slots_count_every_source_word_rare_ones_too(tmp_path):
    # a rare word is encoded as the word boundary alone and its letters ("▁", "X", "q", ...):
    # it is a word like any other, for the count of the source's words and of the slots
    lines = [f"the {n} dog sees a cat" for n in NOUNS] * 20 + ["(S (NP XX XX )NP )S"] * 20
    vocab = train_vocabulary(lines, vocab_size=60, out_path=tmp_path / "sp.model",
                             whole_words=["(S", ")S", "(NP", ")NP", "XX"])
    constraints = tree_constraints(vocab, slots=True, balanced=True)
    for sentence in ("the dog sees a cat", "Xqzt sees 34.5% Q", "the Zyx dog"):
        pieces = vocab.sp.encode(sentence, out_type=str)
        assert constraints.start(torch.tensor([vocab.encode(sentence)])).tolist() == \
            [len(sentence.split())], pieces
    assert "\u2581" in vocab.sp.encode("Xqzt", out_type=str), "the case is exercised"
    slot = constraints.is_slot_V
    for text in ("XX", "Qx"):  # the placeholder and a written-out word are slots, brackets not
        assert slot[vocab.encode(text)[0]]
    assert not slot[vocab.encode("(NP")].any() and not slot[vocab.encode(")S")].any()


@pytest.mark.slow  # the recipe's dozen CLI runs: ~1 min
def test_the_recipe_trains_a_reader_and_parses_with_the_checkpoint_best_on_dev(tmp_path):
    # benchmarks/parsing/recipe.sh from treebank files to test parses, shrunk to 40 steps of a
    # small model: the words as slots, pre-norm, and the checkpoint with the best dev F1
    rng = random.Random(3)
    trees, out = tmp_path / "data" / "ptb-sample", tmp_path / "out"
    trees.mkdir(parents=True)
    for split, n in (("train", 40), ("dev", 6), ("test", 6)):
        (trees / f"{split}.trees").write_text("\n".join(tree(rng) for _ in range(n)) + "\n")
    small = ("--model.d_model=32 --model.d_ff=64 --model.n_heads=2 --train.max_steps=40 "
             "--train.max_tokens=800 --train.warmup_steps=10 --train.save_every=20 "
             "--train.threads=1 --decode.beam_size=2 --decode.max_length_offset=20")
    done = subprocess.run(["bash", str(REPO / "benchmarks" / "parsing" / "recipe.sh"), str(out)],
                          capture_output=True, text=True,
                          env={**os.environ, "TRANSFORMER_MT_DATA": str(tmp_path / "data"),
                               "TRAIN_ARGS": small, "SELECT_FROM": "0"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    config = json.loads((out / "run" / "config.json").read_text())
    assert config["model"]["norm_first"] and config["train"]["lr_cooldown_share"] == 0.25
    assert "(NP the " in (out / "corpus" / "train.tree").read_text(), "the words are the slots"
    selected = json.loads((out / "balanced.selected.json").read_text())
    # 20 and 40, and the cooldown's (the last quarter of the steps) 5 checkpoints
    steps = {"step_00000020", "step_00000032", "step_00000034", "step_00000036",
             "step_00000038", "step_00000040"}
    assert set(selected["dev"]) == steps
    for step, scores in selected["dev"].items():
        assert scores == json.loads((out / f"valid.balanced.{step}.scores.json").read_text())
    assert selected["selected"] == max(selected["dev"],
                                       key=lambda s: selected["dev"][s]["strict"]["f1"])
    for search in ("balanced", "plain"):  # the chosen checkpoint parses test; and with the paper's
        test = json.loads((out / f"test.{search}.scores.json").read_text())
        assert test["all"]["sentences"] == 6
        assert len((out / f"test.{search}.parsed").read_text().splitlines()) == 6
    assert f"{selected['selected']}  dev F1" in done.stdout and "<- selected" in done.stdout
    # FROM_STEP leaves the earlier checkpoints out of the choice (nothing is parsed again)
    done = subprocess.run(["bash", str(REPO / "benchmarks" / "parsing" / "select_checkpoint.sh"),
                           str(out), "balanced", "--word-slots", "--balanced"],
                          capture_output=True, text=True,
                          env={**os.environ, "FROM_STEP": "40", "SLOTS": "words"})
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "balanced.selected.json").read_text())["selected"] == "step_00000040"
    assert "step_00000020" not in done.stderr
    assert "trees to" in done.stdout and "valid.balanced" not in done.stdout, "dev not parsed again"
