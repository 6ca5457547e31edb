"""The CUDA paths (run with `pytest -m gpu` on a machine with a GPU; skipped elsewhere):
the model, the searches and the label-smoothed loss agree with the CPU, and training runs in
bf16 and in fp16 with the loss scaler, checkpoints on the GPU and resumes."""

import json

import pytest
import torch
import torch.nn.functional as F

from conftest import random_batch, tiny_model
from transformer_mt import DecodeConfig, beam_search, greedy_search
from transformer_mt.config import load_config
from transformer_mt.storage.run_dir import checkpoint_dirs
from transformer_mt.training.loop import train
from transformer_mt.training.loss import label_smoothed_nll
from transformer_mt.training.metrics import read_metrics

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_forward_on_cuda_equals_cpu():
    model = tiny_model(seed=1)
    src, tgt = random_batch(0, 3, 9, pad_to=11), random_batch(1, 3, 7)
    expected = model(src, tgt)
    got = model.cuda()(src.cuda(), tgt.cuda()).cpu()
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_label_smoothed_loss_and_gradients_on_cuda_equal_pytorch(dtype):
    # on CUDA the loss takes all rows as one block; a vocabulary of 8,000 as in the Multi30k runs
    g = torch.Generator().manual_seed(0)
    x, weight = torch.randn(300, 64, generator=g).cuda(), torch.randn(8000, 64, generator=g).cuda()
    target = torch.randint(1, 8000, (300,), generator=g).cuda()
    target[:7] = 0
    ours = [t.clone().requires_grad_() for t in (x, weight)]
    ref = [t.clone().requires_grad_() for t in (x, weight)]
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        loss, nll, n = label_smoothed_nll(*ours, target, eps=0.1, pad_id=0)
        logits = (ref[0] @ ref[1].t()).float()
    (0.5 * loss).backward()
    expected = F.cross_entropy(logits, target, label_smoothing=0.1, ignore_index=0,
                               reduction="sum")
    (0.5 * expected).backward()
    tol = {"rtol": 1e-5, "atol": 1e-3} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    assert n == 293 and ours[0].grad[:7].eq(0).all()
    torch.testing.assert_close(loss, expected, **tol)
    torch.testing.assert_close(nll, F.cross_entropy(logits, target, ignore_index=0,
                                                    reduction="sum"), **tol)
    for got, want in zip(ours, ref, strict=True):
        torch.testing.assert_close(got.grad, want.grad, **tol)


@pytest.mark.parametrize("search", [greedy_search, beam_search])
def test_search_on_cuda_equals_cpu(search):
    model = tiny_model(seed=2)
    src = random_batch(3, 4, 8, lengths=[8, 5, 7, 3])
    cfg = DecodeConfig(beam_size=3, max_length_offset=6)
    cpu = search(model, src, cfg)
    gpu = search(model.cuda(), src.cuda(), cfg)
    for a, b in zip(cpu, gpu, strict=True):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


OVERRIDES = ["train.max_tokens=800", "train.warmup_steps=10", "train.lr_scale=0.5",
             "train.log_every=5", "train.valid_every=20", "train.valid_bleu=true",
             "train.save_every=10", "train.device=cuda", "decode.max_length_offset=5"]


@pytest.mark.parametrize("precision", ["train.bf16=true", "train.fp16=true", "train.bf16=false",
                                       "train.bf16=true,train.compile=true",
                                       "train.bf16=true,train.compile=cuda_graphs,"
                                       "train.shape_buckets=4"])
def test_training_on_cuda_learns_checkpoints_and_resumes(prepared_corpus, tmp_path, precision):
    run = tmp_path / "run"
    options = precision.split(",")
    train(load_config("tiny", [*OVERRIDES, *options, "train.max_steps=20"]),
          data_dir=prepared_corpus, run_dir=run)
    state = train(load_config("tiny", [*OVERRIDES, *options, "train.max_steps=40"]),
                  data_dir=prepared_corpus, run_dir=run)
    assert state.step == 40 and state.nonfinite_steps < 5
    losses = [r["loss"] for r in read_metrics(run) if r["kind"] == "train"]
    assert [r["step"] for r in read_metrics(run) if r["kind"] == "train"] == list(range(5, 45, 5))
    assert losses[-1] < losses[0] - 0.5
    saved = json.loads((checkpoint_dirs(run)[-1] / "state.json").read_text())
    if precision == "train.fp16=true":
        assert saved["grad_scaler"]["scale"] > 0
    else:
        assert saved["grad_scaler"] == {}
    valid = [r for r in read_metrics(run) if r["kind"] == "valid"]
    assert [r["step"] for r in valid] == [20, 40] and valid[-1]["loss"] < valid[0]["loss"]
