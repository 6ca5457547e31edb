"""The matmul probe: a real measurement, GFLOP/s in the training log, and a warning only where
bf16 is slower."""

import json
import logging
import math

import pytest
import torch

from test_resume import config
from test_translator import make_translator
from transformer_mt import Translator
from transformer_mt.config import DecodeConfig
from transformer_mt.hardware import cpu_speed
from transformer_mt.training.loop import train
from transformer_mt.training.metrics import read_metrics


@pytest.fixture(autouse=True)
def fresh_warnings():
    cpu_speed._warn_once.cache_clear()


def test_the_probe_measures_once_per_process():
    cpu_speed.bf16_matmul_speedup.cache_clear()
    speedup = cpu_speed.bf16_matmul_speedup()
    assert math.isfinite(speedup) and speedup > 0
    assert cpu_speed.bf16_matmul_speedup() == speedup
    assert cpu_speed.bf16_matmul_speedup.cache_info().misses == 1


@pytest.mark.parametrize(("speedup", "warned"), [(0.6, True), (0.89, True), (0.9, False),
                                                 (4.0, False)])
def test_warns_only_below_the_threshold(monkeypatch, caplog, speedup, warned):
    monkeypatch.setattr(cpu_speed, "bf16_matmul_speedup", lambda: speedup)
    with caplog.at_level(logging.WARNING, logger="transformer_mt.hardware.cpu_speed"):
        cpu_speed.warn_if_bf16_is_slow(torch.device("cpu"), setting="train.bf16",
                                        instead="train in float32")
    messages = [r.getMessage() for r in caplog.records]
    assert bool(messages) == warned
    if warned:
        assert f"train.bf16: this CPU multiplies bfloat16 matrices at {speedup:.2f}x" in \
            messages[0] and messages[0].endswith("train in float32")


@pytest.mark.parametrize(("speedup", "pays"), [(0.6, False), (1.49, False), (1.5, True),
                                               (4.0, True)])
def test_bf16_pays_on_a_cpu_from_the_threshold(monkeypatch, speedup, pays):
    monkeypatch.setattr(cpu_speed, "bf16_matmul_speedup", lambda: speedup)
    assert cpu_speed.bf16_pays(torch.device("cpu")) is pays
    assert cpu_speed.bf16_pays(torch.device("meta")) is False


@pytest.mark.parametrize("speedup", [0.6, 2.2])
def test_training_with_bf16_auto_chooses_by_the_probe_and_resumes(
        prepared_corpus, tmp_path, monkeypatch, caplog, speedup):
    """The choice is logged and recorded in each start's machine record; the run's config keeps
    "auto", so that a resume (here on a "faster" machine) chooses again without a mismatch."""
    monkeypatch.setattr(cpu_speed, "bf16_matmul_speedup", lambda: speedup)
    run = tmp_path / "run"
    with caplog.at_level(logging.INFO):
        train(config(2, "train.bf16=auto"), data_dir=prepared_corpus, run_dir=run)
    monkeypatch.setattr(cpu_speed, "bf16_matmul_speedup", lambda: 4.0)
    train(config(4, "train.bf16=auto"), data_dir=prepared_corpus, run_dir=run)
    machine = [(r["step"], r["bf16"]) for r in read_metrics(run) if r["kind"] == "machine"]
    assert machine == [(0, speedup >= cpu_speed.AUTO), (2, True)]
    assert json.loads((run / "config.json").read_text())["train"]["bf16"] == "auto"
    messages = [r.getMessage() for r in caplog.records]
    assert f"train.bf16=auto: {'bf16 autocast' if speedup > 1 else 'float32'}" in messages
    assert not any("slows it down" in m for m in messages), "auto never warns"


def test_no_probe_off_the_cpu(monkeypatch):
    def probe():
        raise AssertionError("probed a GPU run")
    monkeypatch.setattr(cpu_speed, "bf16_matmul_speedup", probe)
    cpu_speed.warn_if_bf16_is_slow(torch.device("meta"), setting="train.bf16", instead="-")


@pytest.mark.parametrize("bf16", [True, False])
def test_training_and_translation_warn_when_bf16_is_slow(prepared_corpus, corpus_vocab,
                                                         tmp_path, monkeypatch, caplog, bf16):
    monkeypatch.setattr(cpu_speed, "bf16_matmul_speedup", lambda: 0.6)
    train(config(1, f"train.bf16={bf16}"), data_dir=prepared_corpus, run_dir=tmp_path / "run")
    for _ in range(2):
        Translator(make_translator(corpus_vocab).model, corpus_vocab,
                   DecodeConfig(bf16=bf16, kv_bf16=bf16))
    messages = [r.getMessage().split(":")[0] for r in caplog.records
                if r.name == "transformer_mt.hardware.cpu_speed"]
    assert messages == (["train.bf16", "decode.bf16", "decode.kv_bf16"] if bf16 else [])


def test_gflops_are_the_probes_operations_over_its_best_time(monkeypatch):
    # a clock that advances 10 ms per reading: every product "takes" 10 ms
    class Clock:
        now = 0.0

        @classmethod
        def perf_counter(cls):
            cls.now += 0.01
            return cls.now

    monkeypatch.setattr(cpu_speed, "time", Clock)
    rows, inner, cols = cpu_speed.PROBE_SHAPE
    expected = 2 * rows * inner * cols / 0.01 / 1e9
    assert cpu_speed.matmul_gflops(rounds=2) == {"float32": pytest.approx(expected),
                                                 "bfloat16": pytest.approx(expected)}


def test_training_records_the_machines_pace_at_each_start(prepared_corpus, tmp_path):
    run = tmp_path / "run"
    train(config(5), data_dir=prepared_corpus, run_dir=run)
    train(config(10), data_dir=prepared_corpus, run_dir=run)  # resumed at step 5
    machine = [r for r in read_metrics(run) if r["kind"] == "machine"]
    assert [(r["step"], r["threads"]) for r in machine] == [(0, 1), (5, 1)]  # train.threads=1
    assert all(r["cpu"] == cpu_speed.cpu_model() for r in machine)
    assert all(math.isfinite(r[key]) and r[key] > 0 for r in machine
               for key in ("float32_matmul_gflops", "bfloat16_matmul_gflops"))


def test_a_run_on_a_gpu_records_the_gpu_not_the_cpus_pace(tmp_path, monkeypatch):
    from transformer_mt.training import loop
    from transformer_mt.training.metrics import MetricsLog

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: f"GPU of {device}")
    monkeypatch.setattr(loop, "probed_gflops", lambda: pytest.fail("probed the CPU"))
    metrics = MetricsLog(tmp_path)
    loop.record_machine(metrics, 3000, torch.device("cuda:1"), bf16=True)
    metrics.close()
    machine = [r for r in read_metrics(tmp_path) if r["kind"] == "machine"]
    assert [{k: v for k, v in r.items() if k != "time"} for r in machine] == \
        [{"kind": "machine", "step": 3000, "gpu": "GPU of cuda:1", "bf16": True}]


@pytest.mark.parametrize(("flags", "units"), [("fpu avx512f avx512_bf16 amx_bf16",
                                                "amx_bf16 and avx512_bf16"),
                                               ("fpu avx2", "no bf16 instructions")])
def test_the_cpu_is_named_with_its_bf16_units(tmp_path, monkeypatch, flags, units):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: AMD EPYC\ncpu family\t: 25\nmodel\t\t: 17\n"
                       f"flags\t\t: {flags}\n\nprocessor\t: 1\nmodel name\t: other\n")
    monkeypatch.setattr(cpu_speed, "Path", lambda _: cpuinfo)
    assert cpu_speed.cpu_model() == f"AMD EPYC, family 25 model 17, {units}"
