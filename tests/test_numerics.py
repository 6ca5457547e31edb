"""Non-finite losses and gradients: the update is skipped (parameters and Adam moments stay),
the step and the first parameter with a non-finite gradient are logged and counted, and
train.max_nonfinite in a row stop the run with a valid checkpoint of the last finite parameters."""

import pytest
import torch

from transformer_mt.cli.main import main
from transformer_mt.config import load_config
from transformer_mt.model.transformer import Transformer
from transformer_mt.storage import names
from transformer_mt.storage.model_dir import read_weights
from transformer_mt.storage.run_dir import checkpoint_dirs, manifest_problem
from transformer_mt.training import loop as train_module
from transformer_mt.training.loop import TrainingDiverged, train
from transformer_mt.training.metrics import read_metrics
from transformer_mt.training.schedule import learning_rate

OVERRIDES = ["train.max_tokens=800", "train.warmup_steps=20", "train.log_every=1",
             "train.valid_every=1000000", "train.valid_bleu=false", "train.save_every=1",
             "train.keep_last=100", "train.threads=1", "train.max_nonfinite=3"]
POISONED = "decoder.layers.0.ff.w_1.weight"


def poison(monkeypatch, steps: set[int], *, where: str):
    """Make step s (s in steps) produce a NaN gradient in POISONED ("grad") or NaN logits
    ("loss")."""
    calls = {"n": 0}

    class Poisoned(Transformer):
        def __init__(self, cfg):
            super().__init__(cfg)
            param = dict(self.named_parameters())[POISONED]
            param.register_hook(
                lambda g: g * float("nan") if where == "grad" and calls["n"] in steps else g)

        def forward(self, src, tgt, **kwargs):
            calls["n"] += 1
            out = super().forward(src, tgt, **kwargs)  # states: the loss is NaN as well
            return out * float("nan") if where == "loss" and calls["n"] in steps else out

    monkeypatch.setattr(train_module, "Transformer", Poisoned)


def weights(run, step):
    return read_weights(run / "checkpoints" / f"step_{step:08d}" / names.WEIGHTS_FILE)


def moments(run, step):
    tensors = read_weights(run / "checkpoints" / f"step_{step:08d}" / names.OPTIMIZER_FILE)
    return {k: v for k, v in tensors.items() if not k.startswith("rng.")}


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_nonfinite_gradient_skips_the_update_and_is_logged(prepared_corpus, tmp_path,
                                                           monkeypatch):
    poison(monkeypatch, {3, 6}, where="grad")
    run = tmp_path / "run"
    state = train(load_config("tiny", [*OVERRIDES, "train.max_steps=8"]),
                  data_dir=prepared_corpus, run_dir=run)
    assert state.step == 8 and state.nonfinite_steps == 2
    for bad in (3, 6):  # nothing moved at the poisoned steps, everything at the others
        assert same(weights(run, bad - 1), weights(run, bad))
        assert same(moments(run, bad - 1), moments(run, bad))
        assert not same(weights(run, bad), weights(run, bad + 1))
    records = read_metrics(run)
    events = [r for r in records if r["kind"] == "nonfinite"]
    assert [(r["step"], r["gradient"]) for r in events] == [(3, POISONED), (6, POISONED)]
    counts = {r["step"]: r["nonfinite_steps"] for r in records if r["kind"] == "train"}
    assert counts[2] == 0 and counts[3] == 1 and counts[5] == 1 and counts[8] == 2
    assert all(r["loss"] == r["loss"] for r in records if r["kind"] == "train")  # no NaN


def test_consecutive_nonfinite_losses_stop_with_a_valid_checkpoint(prepared_corpus, tmp_path,
                                                                   monkeypatch):
    poison(monkeypatch, set(range(4, 100)), where="loss")
    run = tmp_path / "run"
    with pytest.raises(TrainingDiverged, match="3 steps in a row"):
        train(load_config("tiny", [*OVERRIDES, "train.max_steps=50"]),
              data_dir=prepared_corpus, run_dir=run)
    last = checkpoint_dirs(run)[-1]
    assert last.name == "step_00000006" and manifest_problem(last) is None
    assert same(weights(run, 3), weights(run, 6))  # the last finite parameters
    assert all(torch.isfinite(t).all() for t in weights(run, 6).values())


def test_cli_reports_a_diverged_run(prepared_corpus, tmp_path, monkeypatch, capsys):
    poison(monkeypatch, set(range(1, 100)), where="loss")
    args = ["train", "--config", "tiny", "--data", str(prepared_corpus), "--run-dir",
            str(tmp_path / "run"), *(f"--{o}" for o in OVERRIDES), "--train.max_steps=20"]
    assert main(args) == 3
    err = capsys.readouterr().err
    assert "3 steps in a row" in err and "step_00000003" in err


def test_patience_stops_after_validations_without_improvement(prepared_corpus, tmp_path,
                                                              monkeypatch):
    losses = iter([3.0, 2.5, 2.6, 2.7, 2.4, 2.3])
    monkeypatch.setattr(train_module, "validate",
                        lambda *a, **k: {"loss": next(losses), "nll": 0.0, "ppl": 1.0,
                                         "encoder_spread": 1.0})
    overrides = [*OVERRIDES, "train.valid_every=2", "train.patience=2", "train.max_steps=100"]
    state = train(load_config("tiny", overrides), data_dir=prepared_corpus,
                  run_dir=tmp_path / "run")
    assert (state.step, state.best_step, state.bad_validations) == (8, 4, 2)
    assert state.best_score == -2.5


def test_patience_can_start_the_cooldown_that_ends_the_run(prepared_corpus, tmp_path,
                                                           monkeypatch):
    # validations every 2 steps; the best at step 4, none better at 6 and 8: patience (2) is
    # out at step 8, and the rate cools down over 8 more steps (a share 0.5 of the run) instead
    # of the run stopping (nor does it wait for the time budget's cooldown, the last 500 of
    # 1,000 minutes); its two saves fall after each half of the cooldown, save_every's (3)
    # before it
    def validations(*losses):
        scores = iter(losses)
        monkeypatch.setattr(train_module, "validate",
                            lambda *a, **k: {"loss": next(scores), "nll": 0.0, "ppl": 1.0,
                                             "encoder_spread": 1.0})

    def config(steps):
        return load_config("tiny", [*OVERRIDES, "train.valid_every=2", "train.patience=2",
                                    f"train.max_steps={steps}", "train.max_minutes=1000",
                                    "train.patience_cooldown=true",
                                    "train.lr_cooldown_share=0.5", "train.cooldown_saves=2",
                                    "train.save_every=3"])

    validations(3.0, 2.5, 2.6, 2.7, 2.8, 2.9, 3.0, 3.1)
    cfg = config(100)
    state = train(cfg, data_dir=prepared_corpus, run_dir=tmp_path / "run")
    assert (state.step, state.best_step, state.cooldown) == (16, 4, [9, 16])
    assert [int(p.name.split("_")[1]) for p in checkpoint_dirs(tmp_path / "run")] == \
        [3, 6, 12, 16]
    rates = {row["step"]: row["lr"] for row in read_metrics(tmp_path / "run")
             if row["kind"] == "train"}
    for step in range(1, 17):
        of_eq3 = min(1.0, (16 - step + 1) / 8)
        assert rates[step] == pytest.approx(learning_rate(step, cfg.train, cfg.model.d_model)
                                            * of_eq3)
    # stopped inside the cooldown (on max_steps) and resumed: the plan comes from the
    # checkpoint, and the run ends on the same step with the same weights
    validations(3.0, 2.5, 2.6, 2.7, 2.8)
    train(config(10), data_dir=prepared_corpus, run_dir=tmp_path / "again")
    validations(2.9, 3.0, 3.1)
    resumed = train(cfg, data_dir=prepared_corpus, run_dir=tmp_path / "again")
    assert (resumed.step, resumed.cooldown) == (16, [9, 16])
    last = [checkpoint_dirs(run)[-1] / names.WEIGHTS_FILE for run in (tmp_path / "run",
                                                                   tmp_path / "again")]
    assert last[0].read_bytes() == last[1].read_bytes()
