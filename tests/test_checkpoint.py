"""The checkpoint write protocol: manifest, atomic rename, crashes at each step, full disks."""

import errno
import json
import multiprocessing
import os

import pytest
import torch

from conftest import random_batch, tiny_model
from transformer_mt.storage.names import MANIFEST_FILE
from transformer_mt.storage.run_dir import checkpoint_dirs, latest_checkpoint
from transformer_mt.training import checkpoint as ck
from transformer_mt.training.checkpoint import (
    CheckpointError,
    clean_temporaries,
    load_checkpoint,
    save_checkpoint,
)


def trained(seed=0):
    model = tiny_model(seed=seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    src = random_batch(seed, 2, 5)
    model(src, torch.full((2, 3), 2)).sum().backward()
    optimizer.step()
    return model, optimizer


@pytest.fixture
def vocab_file(tmp_path):
    (tmp_path / "vocab").mkdir()
    path = tmp_path / "vocab" / "sentencepiece.model"
    path.write_bytes(b"not read by the checkpoint code")
    return path


def save(run_dir, model, optimizer, step, vocab_file, keep_last=5):
    return save_checkpoint(run_dir=run_dir, model=model, optimizer=optimizer,
                           state={"step": step, "epoch": 0}, config={"model": {}},
                           vocab_dir=vocab_file.parent, keep_last=keep_last)


def test_manifest_verifies_and_damage_falls_back(tmp_path, vocab_file):
    model, opt = trained()
    first = save(tmp_path, model, opt, 10, vocab_file)
    second = save(tmp_path, model, opt, 20, vocab_file)
    assert latest_checkpoint(tmp_path) == second
    manifest = (second / MANIFEST_FILE).read_text().splitlines()
    assert sorted(line.split("  ")[1] for line in manifest) == sorted(
        p.name for p in second.iterdir() if p.name != MANIFEST_FILE)
    weights = second / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # one flipped bit in the last tensor
    weights.write_bytes(bytes(data))
    assert latest_checkpoint(tmp_path) == first
    assert checkpoint_dirs(tmp_path) == [first]


def test_round_trip_restores_model_optimizer_and_rng(tmp_path, vocab_file):
    model, opt = trained()
    torch.manual_seed(123)
    path = save(tmp_path, model, opt, 7, vocab_file)
    expected_rng = torch.rand(3)
    fresh = tiny_model(seed=9)
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=1e-3)
    state = load_checkpoint(path, fresh, fresh_opt)
    assert state == {"step": 7, "epoch": 0}
    assert torch.equal(torch.rand(3), expected_rng)
    for p, q in zip(model.parameters(), fresh.parameters(), strict=True):
        assert torch.equal(p, q)
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(opt.state[p][key], fresh_opt.state[q][key])


CRASH_POINTS = {
    # the optimizer's file, this module's first save_file (the weights are written before it)
    "after the first tensor file": ("save_file", 1),
    "after all files": ("sha256_file", 1),
    "after the fsyncs": ("replace", 1),
    "after the rename": ("fsync_root", 1),
}


def crash_during_save(run_dir, vocab_file, point, model, opt):
    """In a forked child: save step 20 and die (os._exit, like kill -9) at `point`. The child
    runs no tensor math (OpenMP is not fork-safe): the model comes from the parent."""
    name, nth = CRASH_POINTS[point]
    calls = {"n": 0}

    def dying(real):
        def wrapper(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == nth:
                os._exit(9)
            return real(*args, **kwargs)
        return wrapper

    if name == "save_file":
        ck.save_file = dying(ck.save_file)
    elif name == "sha256_file":
        ck.sha256_file = dying(ck.sha256_file)
    elif name == "replace":
        ck.os.replace = dying(ck.os.replace)
    else:
        real_fsync = ck.fsync_path
        ck.fsync_path = lambda p: os._exit(9) if p.name == "checkpoints" else real_fsync(p)
    save(run_dir, model, opt, 20, vocab_file)
    os._exit(0)


@pytest.mark.parametrize("point", list(CRASH_POINTS))
def test_crash_at_each_step_of_the_protocol(tmp_path, vocab_file, point):
    model, opt = trained()
    before = save(tmp_path, model, opt, 10, vocab_file)
    child = multiprocessing.get_context("fork").Process(
        target=crash_during_save, args=(tmp_path, vocab_file, point, model, opt), daemon=True)
    child.start()
    child.join(60)
    if child.exitcode is None:
        child.kill()
    assert child.exitcode == 9
    clean_temporaries(tmp_path)
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".tmp")]
    latest = latest_checkpoint(tmp_path)
    if point == "after the rename":
        assert latest.name == "step_00000020"  # renamed complete: valid
    else:
        assert latest == before
    fresh = tiny_model(seed=5)
    assert load_checkpoint(latest, fresh, torch.optim.Adam(fresh.parameters()))["step"] in (10, 20)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_disk_full_or_io_error_keeps_the_previous_checkpoint(tmp_path, vocab_file, monkeypatch,
                                                             code):
    model, opt = trained()
    before = save(tmp_path, model, opt, 10, vocab_file)
    real = ck.save_file

    def failing(tensors, filename, metadata=None):
        if "optimizer" in filename:
            raise OSError(code, os.strerror(code), filename)
        return real(tensors, filename, metadata=metadata)

    monkeypatch.setattr(ck, "save_file", failing)
    with pytest.raises(CheckpointError, match=r"step_00000020: could not save checkpoint"):
        save(tmp_path, model, opt, 20, vocab_file)
    assert os.listdir(tmp_path / "checkpoints") == ["step_00000010"]
    assert latest_checkpoint(tmp_path) == before
    fresh = tiny_model(seed=5)
    assert load_checkpoint(before, fresh, torch.optim.Adam(fresh.parameters()))["step"] == 10


def test_keep_last_never_deletes_the_newest_valid(tmp_path, vocab_file):
    model, opt = trained()
    for step in (10, 20, 30, 40):
        save(tmp_path, model, opt, step, vocab_file, keep_last=2)
    assert [p.name for p in checkpoint_dirs(tmp_path)] == ["step_00000030", "step_00000040"]
    # a damaged directory with a higher step does not push the valid one out
    bogus = tmp_path / "checkpoints" / "step_00000090"
    bogus.mkdir()
    (bogus / "state.json").write_text(json.dumps({"step": 90}))
    newest = save(tmp_path, model, opt, 50, vocab_file, keep_last=1)
    assert newest.exists() and latest_checkpoint(tmp_path) == newest


def test_average_is_the_elementwise_mean_of_the_checkpoints(tmp_path, vocab_file):
    from transformer_mt import load_model
    from transformer_mt.storage.model_dir import save_model
    from transformer_mt.storage.names import CONFIG_FILE

    models = [tiny_model(seed=s) for s in (1, 2, 3)]
    with torch.no_grad():  # one hand-built member: its k-th parameter is all k
        for k, p in enumerate(models[0].parameters()):
            p.fill_(float(k))
    dirs = [save_model(m, tmp_path / f"step_{i}", vocab_path=vocab_file)
            for i, m in enumerate(models)]
    ck.average_checkpoints(dirs, tmp_path / "avg")
    averaged, _ = load_model(tmp_path / "avg")
    states = [dict(m.named_parameters()) for m in models]
    for name, p in averaged.named_parameters():
        mean = (states[0][name].double() + states[1][name].double() +
                states[2][name].double()) / 3
        assert torch.equal(p.detach(), mean.float()), name
        assert not torch.equal(p.detach(), states[2][name].detach())  # not just the last one
    # three-way tying holds in the average, and the record names what was averaged
    assert averaged.generator.weight is averaged.tgt_embed.tokens.weight
    assert json.loads((tmp_path / "avg" / CONFIG_FILE).read_text())["averaged_from"] == \
        ["step_0", "step_1", "step_2"]
