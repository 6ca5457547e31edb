import json
import subprocess
import sys

import pytest

from conftest import read_lines
from transformer_mt.cli.main import main
from transformer_mt.data.text import DataError
from transformer_mt.evaluation.bleu import (
    TokenizedProtocol,
    evaluate_files,
    moses_tokenize,
    split_compounds,
)

HYPS = ["Ein Mann schläft auf einer Bank.", "Zwei Hunde spielen im Schnee.",
        "Eine Frau mit rotem Hut lacht.", "Kinder spielen Fußball."]
REFS = ["Ein Mann schläft auf der Bank.", "Zwei Hunde spielen im Schnee.",
        "Eine Frau mit einem roten Hut lacht.", "Die Kinder spielen Fußball im Park."]


def write(path, lines):
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return path


def sacrebleu_paired_bs(ref, baseline, hyp, *options):
    """`sacrebleu REF -i BASELINE HYP --paired-bs -f json`: the system's (score, mean, ci, p)."""
    out = subprocess.run([sys.executable, "-m", "sacrebleu", str(ref), "-i", str(baseline),
                          str(hyp), "-m", "bleu", "--paired-bs", "-f", "json", *options],
                         capture_output=True, text=True, check=True).stdout
    system = json.loads(out)[1]["BLEU"]
    return [system[k] for k in ("score", "mean", "ci", "p_value")]


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


def test_tokenized_hypotheses_are_scored_as_they_are(shared_data, tmp_path):
    """A model trained on tok/*.lc.norm.tok writes tokenized, escaped text: scoring it as it is
    (multi-bleu.perl) gives the reference itself 100, where tokenizing it again escapes the 7
    lines with &apos; or &quot; a second time."""
    tok_ref = shared_data / "multi30k/tok/test_2016_flickr.lc.norm.tok.de.gz"
    refs = read_lines(tok_ref, 1000)
    hyps = refs[:-1] + [refs[-1].upper()]  # lowercased with --lowercase, not tokenized again
    hyp, tok_hyp = write(tmp_path / "hyp", hyps), write(tmp_path / "hyp.tok", refs)
    args = ["evaluate", "--hyp", str(hyp), "--ref", str(tok_ref), "--lang", "de", "--tok-ref",
            str(tok_ref), "--lowercase"]
    assert main([*args, "--hyp-tokenized", "--json", str(tmp_path / "as_is.json")]) == 0
    assert main([*args, "--json", str(tmp_path / "again.json")]) == 0
    as_is = json.loads((tmp_path / "as_is.json").read_text())
    again = json.loads((tmp_path / "again.json").read_text())
    assert as_is["tok_bleu"] == pytest.approx(100.0)
    assert as_is["tok_bleu_protocol"].endswith("|ref:pre-tokenized|hyp:pre-tokenized")
    assert sum("&" in line for line in refs) == 7 and 98 < again["tok_bleu"] < 100
    # the same number as sacrebleu's command line on the files as they are
    cli = subprocess.run([sys.executable, "-m", "sacrebleu", str(tok_ref), "-i", str(tok_hyp),
                          "-m", "bleu", "-b", "--tokenize", "none", "--force"],
                         capture_output=True, text=True, check=True).stdout
    assert as_is["tok_bleu"] == pytest.approx(float(cli))
    with pytest.raises(ValueError, match="--tok-ref"):
        evaluate_files(hyp=hyp, ref=tok_ref, lang="de", hyp_tokenized=True)


def test_paper_protocol_defaults_to_compound_splitting(tmp_path):
    hyp = write(tmp_path / "hyp", ["Die Ost-West-Verbindung ist gut."])
    ref = write(tmp_path / "ref", ["Die Ost-West-Verbindung ist schlecht."])
    scores = evaluate_files(hyp=hyp, ref=ref, lang="de")
    assert "compound-split:yes" in scores.tok_bleu_protocol and "lc:no" in scores.tok_bleu_protocol
    assert 0 < scores.tok_bleu < 100


def drop_words(lines, every):
    """Each line without every `every`-th word: a worse translation of the same source."""
    return [" ".join(w for i, w in enumerate(line.split(), 1) if i % every) for line in lines]


def test_paired_bootstrap_equals_sacrebleu_command_line(shared_data, tmp_path, monkeypatch):
    monkeypatch.delenv("SACREBLEU_SEED", raising=False)  # both sides: sacrebleu's seed 12345
    refs = read_lines(shared_data / "multi30k/val.de.gz", 300)
    ref = write(tmp_path / "ref", refs)
    hyp_lines, baseline_lines = drop_words(refs, 4), drop_words(refs, 3)
    hyp = write(tmp_path / "hyp", hyp_lines)
    baseline = write(tmp_path / "base", baseline_lines)
    json_out = tmp_path / "scores.json"
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--baseline", str(baseline),
                 "--lang", "de", "--bootstrap-samples", "200", "--json", str(json_out)]) == 0
    sacre, tok = json.loads(json_out.read_text())["against_baseline"]
    assert sacre["metric"] == "sacreBLEU" and "bs:200|seed:12345|" in sacre["signature"]
    assert [sacre[k] for k in ("score", "mean", "ci", "p_value")] == pytest.approx(
        sacrebleu_paired_bs(ref, baseline, hyp, "--paired-bs-n", "200"))
    # tokBLEU: the same test on the Moses-tokenised, compound-split files, not tokenised again
    protocol = TokenizedProtocol("de", lowercase=False, compound_split=True)
    tok_files = [write(tmp_path / f"{f.name}.tok", protocol.hypotheses(lines))
                 for f, lines in ((ref, refs), (baseline, baseline_lines), (hyp, hyp_lines))]
    assert tok["metric"] == "tokBLEU"
    assert [tok[k] for k in ("score", "mean", "ci", "p_value")] == pytest.approx(
        sacrebleu_paired_bs(*tok_files, "--paired-bs-n", "200", "--tokenize", "none", "--force"))


def test_paired_bootstrap_tells_a_real_gain_from_one_sentence(shared_data, tmp_path):
    refs = read_lines(shared_data / "multi30k/val.de.gz", 300)
    ref = write(tmp_path / "ref", refs)
    good = drop_words(refs, 5)
    hyp = write(tmp_path / "hyp", good)
    worse = write(tmp_path / "worse", drop_words(refs, 2))
    one_changed = write(tmp_path / "one", good[:-1] + [drop_words(good[-1:], 2)[0]])
    (real,) = evaluate_files(hyp=hyp, ref=ref, baseline=worse).against_baseline
    assert real.score > real.baseline_score + 10 and real.p_value < 0.01
    assert abs(real.mean - real.score) < real.ci
    (luck,) = evaluate_files(hyp=hyp, ref=ref, baseline=one_changed).against_baseline
    assert 0 < luck.score - luck.baseline_score < 0.5 and luck.p_value > 0.05
    assert luck.ci > luck.score - luck.baseline_score  # the difference is inside the spread
    (same,) = evaluate_files(hyp=hyp, ref=ref, baseline=hyp).against_baseline
    assert same.score == same.baseline_score and same.p_value == 1.0


def test_baseline_count_mismatch_is_an_error(tmp_path):
    hyp, ref = write(tmp_path / "hyp", HYPS), write(tmp_path / "ref", REFS)
    base = write(tmp_path / "base", HYPS[:2])
    with pytest.raises(DataError, match=r"base has 2 lines but .*ref has 4"):
        evaluate_files(hyp=hyp, ref=ref, baseline=base)
