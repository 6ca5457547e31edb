"""Fine-tuning an imported model: `prepare --vocabulary MODEL_DIR` encodes new data with the
model's vocabulary and special ids, `train --init-from MODEL_DIR` starts from its weights and
config; the first loss is the model's (not a random initialisation's) and it falls. An
OPUS-MT-layout model (pad last, decoding from pad, EOS 0, two SentencePiece models, an output
bias) trains and its checkpoints translate."""

import json

import pytest
import torch

from synthetic import write_corpus
from transformer_mt import Translator
from transformer_mt.cli.main import main
from transformer_mt.data.dataset import ParallelData
from transformer_mt.storage.model_dir import load_model
from transformer_mt.training.metrics import read_metrics
from transformer_mt.training.validation import validate

STEPS = ["--train.max_steps=20", "--train.warmup_steps=200", "--train.log_every=1",
         "--train.valid_every=1000000", "--train.valid_bleu=false", "--train.save_every=20",
         "--train.max_tokens=1000", "--train.threads=2", "--train.max_minutes=0",
         "--train.lr_cooldown_minutes=0"]


def prepare_with(model_dir, corpus, out) -> None:
    assert main(["prepare", "--train-src", str(corpus / "train.en"), "--train-tgt",
                 str(corpus / "train.de"), "--valid-src", str(corpus / "valid.en"),
                 "--valid-tgt", str(corpus / "valid.de"), "--vocabulary", str(model_dir),
                 "--out", str(out)]) == 0


def losses(run) -> list[float]:
    return [r["loss"] for r in read_metrics(run) if r.get("kind") == "train"]


def test_init_from_starts_at_the_models_loss_and_it_falls(trained_model, tmp_path):
    corpus = write_corpus(tmp_path / "new", seed=5)  # new sentences of the same task
    prepare_with(trained_model, corpus, tmp_path / "data")
    meta = json.loads((tmp_path / "data" / "meta.json").read_text())
    assert meta["special_ids"] == {"pad": 0, "bos": 2, "eos": 3}
    assert main(["train", "--config", "tiny", "--data", str(tmp_path / "data"), "--run-dir",
                 str(tmp_path / "tuned"), "--init-from", str(trained_model),
                 "--model.dropout=0", *STEPS]) == 0
    assert main(["train", "--config", "tiny", "--data", str(tmp_path / "data"), "--run-dir",
                 str(tmp_path / "fresh"), "--model.layer_norm_eps=1e-5", "--model.dropout=0",
                 *STEPS, "--train.max_steps=1"]) == 0
    tuned, fresh = losses(tmp_path / "tuned"), losses(tmp_path / "fresh")
    assert len(tuned) == 20 and len(fresh) == 1
    assert tuned[0] < fresh[0] - 2.0, "the first step is the trained model's loss"
    data = ParallelData(tmp_path / "data", "train")
    before, after = (validate(load_model(d)[0], data, max_tokens=1000, eps=0.1)["loss"]
                     for d in (trained_model, tmp_path / "tuned" / "checkpoints" /
                               "step_00000020"))
    assert after < before - 0.05, "and it falls on the new data"
    config = json.loads((tmp_path / "tuned" / "config.json").read_text())
    assert config["init_from"] == str(trained_model)
    assert config["model"] == json.loads((trained_model / "config.json").read_text())["model"] \
        | {"dropout": 0.0}


def test_an_opus_mt_layout_model_fine_tunes_and_translates(tmp_path, corpus):
    pytest.importorskip("transformers", reason="the interop extra")
    import test_interop_marian as marian

    spm_root = tmp_path / "spm"
    spm_root.mkdir()
    files = marian.spm_files.__wrapped__(type("Factory", (), {"mktemp": lambda _, n: spm_root})())
    hf_dir, _ = marian.marian_dir(files, tmp_path)
    model_dir = marian.import_marian(hf_dir, tmp_path / "opus")
    prepare_with(model_dir, corpus, tmp_path / "data")
    pad, eos = files[1] - 1, 0
    batch = ParallelData(tmp_path / "data", "train").collate([0, 1, 2])
    assert batch[0][0].tolist()[-1] in (eos, pad) and batch[1][:, 0].eq(pad).all()
    run = tmp_path / "tuned"
    assert main(["train", "--config", "tiny", "--data", str(tmp_path / "data"), "--run-dir",
                 str(run), "--init-from", str(model_dir), *STEPS[1:],
                 "--train.max_steps=4", "--train.save_every=4"]) == 0
    checkpoint = run / "checkpoints" / "step_00000004"
    assert (checkpoint / "vocab.json").exists() and (checkpoint / "target.spm").exists()
    before = Translator.from_dir(model_dir).model.generator.bias
    after = Translator.from_dir(checkpoint).model.generator.bias
    assert not torch.equal(before, after), "the output bias trains"
    assert all(isinstance(t, str) for t in Translator.from_dir(checkpoint).translate(
        ["a dog runs ."]))


def test_init_from_refuses_other_data_and_architecture_changes(trained_model, tmp_path,
                                                               prepared_corpus, corpus, capsys):
    other = tmp_path / "other"
    assert main(["prepare", "--train-src", str(corpus / "train.en"), "--train-tgt",
                 str(corpus / "train.de"), "--vocab-size", "200", "--out", str(other)]) == 0
    capsys.readouterr()
    assert main(["train", "--config", "tiny", "--data", str(other), "--run-dir",
                 str(tmp_path / "r"), "--init-from", str(trained_model), *STEPS]) == 2
    assert f"prepare the data with --vocabulary {trained_model}" in capsys.readouterr().err
    assert main(["train", "--config", "tiny", "--data", str(prepared_corpus), "--run-dir",
                 str(tmp_path / "r2"), "--init-from", str(trained_model),
                 "--model.d_model=128", *STEPS]) == 2
    assert "model.d_model is the model's own" in capsys.readouterr().err
