"""The encoder's spread (training.validation.encoder_spread), the diagnostic of an encoder that
writes one vector for every word: hand-built states, padding ignored, a padded batch equal to
its sentences one at a time, and validation's record and warning."""

import json
import logging

import pytest
import torch

from conftest import random_batch, tiny_model
from transformer_mt.cli.main import main
from transformer_mt.model.transformer import Memory
from transformer_mt.training import loop as train_module
from transformer_mt.training.validation import COLLAPSED_SPREAD, encoder_spread


def test_spread_of_hand_built_states_ignores_padding():
    # sentence 1: dimension 0 is 1 then -1 (sd sqrt(2)), dimension 1 is 0: mean sd sqrt(2)/2
    # over a root mean square of sqrt(1/2); its third position is padding. Sentence 2 writes
    # one vector at every position.
    states = torch.tensor([[[1.0, 0.0], [-1.0, 0.0], [9.0, 9.0]],
                           [[2.0, 3.0], [2.0, 3.0], [2.0, 3.0]]])
    is_pad = torch.tensor([[False, False, True], [False, False, False]])
    assert encoder_spread(Memory(states, is_pad)).tolist() == pytest.approx([1.0, 0.0])


def test_a_padded_batch_has_the_spread_of_its_sentences_one_at_a_time():
    model = tiny_model()
    src = random_batch(0, 4, 9, lengths=[9, 5, 7, 2])
    with torch.inference_mode():
        batched = encoder_spread(model.encode(src))
        alone = torch.cat([encoder_spread(model.encode(row[row.ne(0)].unsqueeze(0)))
                           for row in src])
    assert torch.allclose(batched, alone, atol=1e-6)
    assert 0.3 < float(batched.mean()) < 1.5, "a fresh encoder keeps its words apart"


def test_validation_records_the_spread_and_warns_of_a_collapse(prepared_corpus, tmp_path,
                                                               caplog, monkeypatch):
    args = ["train", "--config", "tiny", "--data", str(prepared_corpus), "--train.max_steps=4",
            "--train.max_tokens=500", "--train.valid_every=2", "--train.valid_bleu=false",
            "--train.threads=1"]
    caplog.set_level(logging.INFO)
    assert main(args + ["--run-dir", str(tmp_path / "healthy")]) == 0
    valid = [json.loads(line) for line in (tmp_path / "healthy" / "metrics.jsonl").open()
             if '"valid"' in line]
    assert [v["step"] for v in valid] == [2, 4]
    assert all(COLLAPSED_SPREAD < v["encoder_spread"] < 1.5 for v in valid), valid
    assert "has collapsed" not in caplog.text
    real = train_module.validate
    monkeypatch.setattr(train_module, "validate", lambda *a, **k: real(*a, **k) | {
        "encoder_spread": 0.001})
    assert main(args + ["--run-dir", str(tmp_path / "collapsed")]) == 0
    assert "the encoder's output has collapsed (spread 0.001" in caplog.text
