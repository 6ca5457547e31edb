"""The command line end to end on the synthetic corpus: prepare -> train -> checkpoint
-> resume -> average -> translate -> evaluate."""

import json
import sys

from transformer_mt.cli.main import main
from transformer_mt.storage.run_dir import checkpoint_dirs

TRAIN_ARGS = ["--config", "tiny", "--train.max_tokens=1500", "--train.warmup_steps=30",
              "--train.lr_scale=0.3", "--train.log_every=5", "--train.valid_every=20",
              "--train.save_every=10", "--train.keep_last=3", "--decode.max_length_offset=5",
              "--train.valid_bleu=false", "--model.dropout=0.0"]


def test_cli_end_to_end(corpus, tmp_path, capsys):
    corpus = corpus
    data, run = tmp_path / "data", tmp_path / "run"
    assert main(["prepare", "--train-src", str(corpus / "train.en"), "--train-tgt",
                 str(corpus / "train.de"), "--valid-src", str(corpus / "valid.en"),
                 "--valid-tgt", str(corpus / "valid.de"), "--vocab-size", "500", "--out",
                 str(data), "--src-lang", "en", "--tgt-lang", "de"]) == 0
    assert "train: 600 pairs kept of 600" in capsys.readouterr().out
    meta = json.loads((data / "meta.json").read_text())
    assert meta["splits"] == {"train": 600, "valid": 40} and len(meta["vocab_sha256"]) == 64

    assert main(["train", "--data", str(data), "--run-dir", str(run), *TRAIN_ARGS,
                 "--train.max_steps=30"]) == 0
    assert [p.name for p in checkpoint_dirs(run)] == \
        ["step_00000010", "step_00000020", "step_00000030"]
    # resume: the same command with a larger budget continues from step 30
    assert main(["train", "--data", str(data), "--run-dir", str(run), *TRAIN_ARGS,
                 "--train.max_steps=60"]) == 0
    assert [p.name for p in checkpoint_dirs(run)] == \
        ["step_00000040", "step_00000050", "step_00000060"]
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train_steps = [r["step"] for r in records if r["kind"] == "train"]
    assert train_steps == list(range(5, 65, 5))  # no step repeated or skipped across resume
    losses = [r["loss"] for r in records if r["kind"] == "train"]
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.5  # the loss falls
    if sys.platform == "linux":  # resident memory, read from /proc, beside the loss
        assert all(100 < r["rss_mib"] < 20_000 for r in records if r["kind"] == "train")
    valid = [r for r in records if r["kind"] == "valid"]
    # every 20 steps, and the last step of each run (30, then 60)
    assert [r["step"] for r in valid] == [20, 30, 40, 60] and valid[-1]["ppl"] < valid[0]["ppl"]
    assert (run / "curves.png").stat().st_size > 1000 and (run / "tensorboard").is_dir()
    assert json.loads((run / "config.json").read_text())["train"]["max_steps"] == 60

    assert main(["average", "--run-dir", str(run), "--last", "3", "--out",
                 str(tmp_path / "avg")]) == 0
    config = json.loads((tmp_path / "avg/config.json").read_text())
    assert config["averaged_from"] == ["step_00000040", "step_00000050", "step_00000060"]

    hyp = tmp_path / "hyp.de"
    for model in (tmp_path / "avg", run):  # a model directory, or a run (latest checkpoint)
        assert main(["translate", "--model", str(model), "--input", str(corpus / "test.en"),
                     "--output", str(hyp), "--beam-size", "2"]) == 0
        assert len(hyp.read_text(encoding="utf-8").splitlines()) == 30
    capsys.readouterr()
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(corpus / "test.de"), "--lang",
                 "de", "--json", str(tmp_path / "scores.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("sacreBLEU ") and "tokBLEU" in out and "nrefs:1" in out
    scores = json.loads((tmp_path / "scores.json").read_text())
    assert 0 <= scores["bleu"] <= 100 and scores["tok_bleu"] is not None


def test_resume_with_other_config_or_data_is_refused(corpus, tmp_path, capsys):
    corpus = corpus
    data, run = tmp_path / "data", tmp_path / "run"
    prepare = ["prepare", "--train-src", str(corpus / "train.en"), "--train-tgt",
               str(corpus / "train.de"), "--vocab-size", "300", "--out"]
    assert main([*prepare, str(data)]) == 0
    assert main(["train", "--data", str(data), "--run-dir", str(run), *TRAIN_ARGS,
                 "--train.max_steps=10"]) == 0
    capsys.readouterr()
    assert main(["train", "--data", str(data), "--run-dir", str(run), *TRAIN_ARGS,
                 "--train.max_steps=20", "--model.d_ff=128"]) == 2
    assert "model.d_ff (checkpoint: 256, now: 128)" in capsys.readouterr().err
    other = tmp_path / "other"
    (corpus / "train2.de").write_text((corpus / "train.de").read_text() + "Noch ein Satz.\n")
    (corpus / "train2.en").write_text((corpus / "train.en").read_text() + "One more.\n")
    assert main(["prepare", "--train-src", str(corpus / "train2.en"), "--train-tgt",
                 str(corpus / "train2.de"), "--vocab-size", "300", "--out", str(other)]) == 0
    capsys.readouterr()
    assert main(["train", "--data", str(other), "--run-dir", str(run), *TRAIN_ARGS,
                 "--train.max_steps=20"]) == 2
    err = capsys.readouterr().err
    assert "data_sha256.train (checkpoint: " in err
    # budgets may change, and --ignore-mismatch resumes anyway
    assert main(["train", "--data", str(other), "--run-dir", str(run), *TRAIN_ARGS,
                 "--train.max_steps=15", "--ignore-mismatch"]) == 0
    assert "trained to step 15" in capsys.readouterr().out


def test_train_unknown_override_names_the_key(tmp_path, capsys):
    assert main(["train", "--data", str(tmp_path), "--run-dir", str(tmp_path / "r"),
                 "--config", "tiny", "--train.max_stepz=3"]) == 2
    assert "unknown config key 'train.max_stepz'" in capsys.readouterr().err


def test_prepare_count_mismatch_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "a").write_text("x\ny\n")
    (tmp_path / "b").write_text("x\n")
    assert main(["prepare", "--train-src", str(tmp_path / "a"), "--train-tgt",
                 str(tmp_path / "b"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "has 2 lines" in err and "has 1" in err
    assert not (tmp_path / "out").exists()  # nothing written before the inputs are checked
