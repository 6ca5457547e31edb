"""The bf16 probe: a real measurement, cached, and a warning only where bf16 is slower."""

import logging
import math

import pytest
import torch

from test_resume import config
from test_translator import make_translator
from transformer_mt import Translator, bf16_check
from transformer_mt.config import DecodeConfig
from transformer_mt.train import train


@pytest.fixture(autouse=True)
def fresh_warnings():
    bf16_check._warn_once.cache_clear()


def test_the_probe_measures_once_per_process():
    bf16_check.bf16_matmul_speedup.cache_clear()
    speedup = bf16_check.bf16_matmul_speedup()
    assert math.isfinite(speedup) and speedup > 0
    assert bf16_check.bf16_matmul_speedup() == speedup
    assert bf16_check.bf16_matmul_speedup.cache_info().misses == 1


@pytest.mark.parametrize(("speedup", "warned"), [(0.6, True), (0.89, True), (0.9, False),
                                                 (4.0, False)])
def test_warns_only_below_the_threshold(monkeypatch, caplog, speedup, warned):
    monkeypatch.setattr(bf16_check, "bf16_matmul_speedup", lambda: speedup)
    with caplog.at_level(logging.WARNING, logger="transformer_mt.bf16_check"):
        bf16_check.warn_if_bf16_is_slow(torch.device("cpu"), setting="train.bf16",
                                        instead="train in float32")
    messages = [r.getMessage() for r in caplog.records]
    assert bool(messages) == warned
    if warned:
        assert f"train.bf16: this CPU multiplies bfloat16 matrices at {speedup:.2f}x" in \
            messages[0] and messages[0].endswith("train in float32")


def test_no_probe_off_the_cpu(monkeypatch):
    def probe():
        raise AssertionError("probed a GPU run")
    monkeypatch.setattr(bf16_check, "bf16_matmul_speedup", probe)
    bf16_check.warn_if_bf16_is_slow(torch.device("meta"), setting="train.bf16", instead="-")


@pytest.mark.parametrize("bf16", [True, False])
def test_training_and_translation_warn_when_bf16_is_slow(prepared_multi30k, multi30k_vocab,
                                                         tmp_path, monkeypatch, caplog, bf16):
    monkeypatch.setattr(bf16_check, "bf16_matmul_speedup", lambda: 0.6)
    train(config(1, f"train.bf16={bf16}"), data_dir=prepared_multi30k, run_dir=tmp_path / "run")
    Translator(make_translator(multi30k_vocab).model, multi30k_vocab, DecodeConfig(bf16=bf16))
    Translator(make_translator(multi30k_vocab).model, multi30k_vocab, DecodeConfig(bf16=bf16))
    messages = [r.getMessage().split(":")[0] for r in caplog.records
                if r.name == "transformer_mt.bf16_check"]
    assert messages == (["train.bf16", "decode.bf16"] if bf16 else [])  # once each
