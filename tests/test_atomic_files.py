"""Outputs that are never half-written (storage/files.py): a failure anywhere leaves the file
or directory as it was, success replaces it whole; links and devices are written through."""

import json
import os

import pytest

from transformer_mt.cli.main import main
from transformer_mt.storage.files import atomic_dir, atomic_output, atomic_write_text


class Boom(Exception):
    pass


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_a_failed_stream_leaves_the_file_and_no_temporary(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("old\n")
    with pytest.raises(Boom), atomic_output(out) as f:
        f.write("new, half")
        f.flush()
        raise Boom
    assert out.read_text() == "old\n" and leftovers(tmp_path) == []
    with atomic_output(out) as f:
        f.write("new\n")
        assert out.read_text() == "old\n"  # not before the block ends
    assert out.read_text() == "new\n" and leftovers(tmp_path) == []


def test_a_link_is_followed_and_a_device_written_directly(tmp_path):
    target, link = tmp_path / "target.txt", tmp_path / "link.txt"
    target.write_text("old\n")
    link.symlink_to(target)
    atomic_write_text(link, "new\n")
    assert link.is_symlink() and target.read_text() == "new\n"
    with atomic_output(os.devnull) as f:  # /dev/null stays a device
        f.write("nothing\n")
    assert os.path.exists(os.devnull) and not os.path.isfile(os.devnull)


def test_a_failed_directory_write_leaves_the_directory(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "config.json").write_text("old")
    (out / "mine.txt").write_text("the user's")
    with pytest.raises(Boom), atomic_dir(out) as tmp:
        (tmp / "config.json").write_text("new")
        raise Boom
    assert (out / "config.json").read_text() == "old" and leftovers(tmp_path) == []
    with atomic_dir(out) as tmp:
        (tmp / "config.json").write_text("new")
        (tmp / "weights").write_text("w")
    assert {p.name: p.read_text() for p in out.iterdir()} == {
        "config.json": "new", "weights": "w", "mine.txt": "the user's"}
    assert leftovers(tmp_path) == []
    with pytest.raises(NotADirectoryError), atomic_dir(out / "mine.txt"):
        pass


def test_evaluate_and_parse_reports_are_whole_or_untouched(tmp_path, capsys):
    hyp, ref, report = tmp_path / "hyp.txt", tmp_path / "ref.txt", tmp_path / "scores.json"
    hyp.write_text("a dog runs .\n")
    ref.write_text("a dog runs .\nsecond line\n")  # one line more: an error
    report.write_text("{}\n")
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--lang", "en", "--json",
                 str(report)]) == 2
    assert report.read_text() == "{}\n" and leftovers(tmp_path) == []
    ref.write_text("a dog runs .\n")
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--lang", "en", "--json",
                 str(report)]) == 0
    assert json.loads(report.read_text())["bleu"] == pytest.approx(100)
    gold, test = tmp_path / "gold.trees", tmp_path / "missing.trees"
    gold.write_text("(S (NP (DT a) (NN dog)) (VP (VBZ runs)))\n")
    assert main(["parse", "score", "--gold", str(gold), "--test", str(test), "--json",
                 str(report)]) == 2
    assert json.loads(report.read_text())["bleu"] == pytest.approx(100)
    assert leftovers(tmp_path) == []
