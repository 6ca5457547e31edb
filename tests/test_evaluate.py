import json
import subprocess
import sys

import pytest

from conftest import read_lines
from transformer_mt.data import DataError
from transformer_mt.evaluate import evaluate_files, moses_tokenize, split_compounds

HYPS = ["Ein Mann schläft auf einer Bank.", "Zwei Hunde spielen im Schnee.",
        "Eine Frau mit rotem Hut lacht.", "Kinder spielen Fußball."]
REFS = ["Ein Mann schläft auf der Bank.", "Zwei Hunde spielen im Schnee.",
        "Eine Frau mit einem roten Hut lacht.", "Die Kinder spielen Fußball im Park."]


def write(path, lines):
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return path


def test_evaluate_equals_sacrebleu_command_line(tmp_path):
    hyp, ref = write(tmp_path / "hyp", HYPS), write(tmp_path / "ref", REFS)
    ours = evaluate_files(hyp=hyp, ref=ref)
    cli = subprocess.run([sys.executable, "-m", "sacrebleu", str(ref), "-i", str(hyp), "-m",
                          "bleu", "chrf", "-b", "-w", "4"], capture_output=True, text=True,
                         check=True).stdout
    assert [round(ours.bleu, 4), round(ours.chrf, 4)] == json.loads(cli)  # "[0.0000,\n38.8889\n]"
    assert ours.bleu_signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")
    assert ours.chrf_signature.startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no")


def test_count_mismatch_is_an_error(tmp_path):
    hyp, ref = write(tmp_path / "hyp", HYPS[:3]), write(tmp_path / "ref", REFS)
    with pytest.raises(DataError, match=r"hyp has 3 lines but .*ref has 4"):
        evaluate_files(hyp=hyp, ref=ref)


def test_compound_splitting_like_tensor2tensor():
    assert split_compounds(["Die Ost-West-Verbindung , 2-3 Tage"]) == \
        ["Die Ost ##AT##-##AT## West ##AT##-##AT## Verbindung , 2 ##AT##-##AT## 3 Tage"]
    # one pass of perl's s{(\S)-(\S)}{...}g: matches do not overlap, as in get_ende_bleu.sh
    assert split_compounds(["a-b-c"]) == ["a ##AT##-##AT## b-c"]
    assert moses_tokenize(['Er sagte: "Hallo!"'], "de", lowercase=False) == \
        ["Er sagte : &quot; Hallo ! &quot;"]


def test_tokenized_bleu_reproduces_multi30k_tok_references(shared_data, tmp_path):
    raw = read_lines(shared_data / "multi30k/test_2016_flickr.de.gz", 1000)
    tok = read_lines(shared_data / "multi30k/tok/test_2016_flickr.lc.norm.tok.de.gz", 1000)
    ours = moses_tokenize(raw, "de", lowercase=True)
    assert sum(a == b for a, b in zip(ours, tok, strict=True)) >= 995
    hyp = write(tmp_path / "hyp", raw)
    scores = evaluate_files(hyp=hyp, ref=shared_data / "multi30k/test_2016_flickr.de.gz",
                            lang="de", lowercase=True,
                            tok_ref=shared_data / "multi30k/tok/test_2016_flickr.lc.norm.tok.de.gz")
    assert scores.bleu == pytest.approx(100.0)
    assert scores.tok_bleu > 99.5
    assert "lc:yes" in scores.tok_bleu_protocol and "compound-split:no" in scores.tok_bleu_protocol


def test_paper_protocol_defaults_to_compound_splitting(tmp_path):
    hyp = write(tmp_path / "hyp", ["Die Ost-West-Verbindung ist gut."])
    ref = write(tmp_path / "ref", ["Die Ost-West-Verbindung ist schlecht."])
    scores = evaluate_files(hyp=hyp, ref=ref, lang="de")
    assert "compound-split:yes" in scores.tok_bleu_protocol and "lc:no" in scores.tok_bleu_protocol
    assert 0 < scores.tok_bleu < 100
