import json
import logging
import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FakeClock
from transformer_mt.cli.main import main
from transformer_mt.config import TrainConfig, load_config
from transformer_mt.training.loss import label_smoothed_nll
from transformer_mt.training.schedule import (
    cooldown_save_due,
    cooldown_steps,
    learning_rate,
    noam_lr,
    patience_cooldown,
    plan_cooldown,
    replan_cooldown,
)
from transformer_mt.training.state import TrainingState
from transformer_mt.training.step import make_optimizer


def test_noam_schedule_values():
    # §5.3: d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
    assert noam_lr(1, d_model=512, warmup_steps=4000) == pytest.approx(512**-0.5 * 4000**-1.5)
    peak = noam_lr(4000, d_model=512, warmup_steps=4000)
    assert peak == pytest.approx(512**-0.5 * 4000**-0.5) == pytest.approx(6.9877e-4, rel=1e-4)
    assert noam_lr(16000, d_model=512, warmup_steps=4000) == pytest.approx(peak / 2)
    assert noam_lr(100, d_model=256, warmup_steps=4000, scale=2.0) == \
        pytest.approx(2 * 256**-0.5 * 100 * 4000**-1.5)


def test_cooldown_falls_linearly_to_the_last_step_and_is_off_by_default():
    tcfg = TrainConfig(max_steps=1000, warmup_steps=100, lr_scale=2.0, lr_cooldown_steps=200)
    cooldown = cooldown_steps(tcfg, TrainingState())
    assert cooldown == (801, 1000)
    assert cooldown_steps(TrainConfig(max_steps=1000), TrainingState()) is None
    def noam(s):
        return noam_lr(s, d_model=128, warmup_steps=100, scale=2.0)
    for step in (1, 100, 500, 800):  # eq. (3) untouched before the cooldown
        assert learning_rate(step, tcfg, 128, cooldown) == noam(step)
        assert learning_rate(step, tcfg, 128) == noam(step)
    assert learning_rate(801, tcfg, 128, cooldown) == pytest.approx(noam(801) * 200 / 200)
    assert learning_rate(900, tcfg, 128, cooldown) == pytest.approx(noam(900) * 101 / 200)
    assert learning_rate(1000, tcfg, 128, cooldown) == pytest.approx(noam(1000) / 200)
    rates = [learning_rate(s, tcfg, 128, cooldown) for s in range(801, 1001)]
    assert all(b < a for a, b in zip(rates, rates[1:], strict=False)) and rates[-1] > 0
    for bad in ({"lr_cooldown_steps": 1001}, {"lr_cooldown_steps": -1},
                {"lr_cooldown_steps": 10, "max_steps": 0, "max_minutes": 5.0}):
        with pytest.raises(ValueError, match="lr_cooldown_steps"):
            TrainConfig(**({"max_steps": 1000} | bad))


def test_cooldown_saves_spread_evenly_over_the_cooldown():
    # the last 200 of 1,000 steps cool down; 4 saves: after each quarter of them, whatever
    # save_every says, which keeps its cadence before the cooldown (None: not for this rule)
    tcfg = TrainConfig(max_steps=1000, lr_cooldown_steps=200, cooldown_saves=4, save_every=30)
    assert [s for s in range(1, 1001) if cooldown_save_due(tcfg, TrainingState(step=s))] == \
        [850, 900, 950, 1000]
    assert all(cooldown_save_due(tcfg, TrainingState(step=s)) is None for s in (1, 600, 800))
    # a timed cooldown re-planned mid-way (its line's first step is fractional): the saves
    # follow the plan of the moment, the last on its last step
    saves = [s for s in range(701, 1301)
             if cooldown_save_due(tcfg, TrainingState(step=s, cooldown=[700.5, 1300]))]
    assert saves == [850, 1000, 1150, 1300]
    assert cooldown_save_due(TrainConfig(max_steps=1000, lr_cooldown_steps=200),
                             TrainingState(step=900)) is None
    with pytest.raises(ValueError, match="cooldown_saves"):
        TrainConfig(cooldown_saves=6, keep_last=5)


def test_patience_cooldown_is_its_share_of_the_run_from_where_patience_ran_out():
    tcfg = TrainConfig(max_steps=100_000, patience=3, patience_cooldown=True,
                       lr_cooldown_share=0.2)
    # a cooldown of 20 % of the run: a quarter of the 4,000 steps before it
    assert patience_cooldown(tcfg, TrainingState(step=4000)) == [4001, 5000]
    # it replaces the step budget's own cooldown (the last 20,000 steps) until that begins
    assert cooldown_steps(tcfg, TrainingState()) == (80001, 100_000)
    assert cooldown_steps(tcfg, TrainingState(cooldown=[4001, 5000])) == (4001, 5000)
    assert patience_cooldown(tcfg, TrainingState(step=80_000)) is None
    assert patience_cooldown(tcfg, TrainingState(step=4500, cooldown=[4001, 5000])) is None
    with pytest.raises(ValueError, match="patience_cooldown"):
        TrainConfig(patience=3, patience_cooldown=True)
    with pytest.raises(ValueError, match="patience_cooldown"):
        TrainConfig(lr_cooldown_share=0.2, patience_cooldown=True)


def test_timed_cooldown_is_planned_from_the_pace_when_its_minutes_are_left():
    tcfg = TrainConfig(max_minutes=90.0, lr_cooldown_minutes=20.0)
    def state(step, minutes, cooldown=None):
        return TrainingState(step=step, train_seconds=60.0 * minutes, cooldown=cooldown)
    assert plan_cooldown(tcfg, state(6000, 69.9)) is None  # 20.1 minutes left
    # 0.7 s a step so far; 20 minutes left, 97 % of them: 1,662 steps (1662.9 rounded down)
    assert plan_cooldown(tcfg, state(6000, 70.0)) == [6001, 6000 + 1662]
    assert plan_cooldown(tcfg, state(6000, 89.9)) == [6001, 6006]  # 6.5 steps at 0.9 s
    assert plan_cooldown(tcfg, state(6000, 90.0)) == [6001, 6001]  # at least one step
    assert plan_cooldown(tcfg, state(6100, 71.0, cooldown=[6001, 7662])) is None  # once
    assert cooldown_steps(tcfg, state(6100, 71.0, cooldown=[6001, 7662])) == (6001, 7662)
    assert cooldown_steps(tcfg, TrainingState(step=10)) is None  # none planned
    assert plan_cooldown(TrainConfig(max_minutes=90.0), state(6000, 89.0)) is None
    for bad in ({"lr_cooldown_minutes": 90.0}, {"lr_cooldown_minutes": -1.0},
                {"lr_cooldown_minutes": 5.0, "max_minutes": 0.0},
                {"lr_cooldown_minutes": 5.0, "lr_cooldown_steps": 10}):
        with pytest.raises(ValueError, match="lr_cooldown_minutes"):
            TrainConfig(**({"max_minutes": 90.0} | bad))


def test_a_cooldown_share_scales_with_the_budget():
    # the presets give their cooldown as a share, so that any --train.max_minutes works
    for minutes in (88, 12, 0.5):
        tcfg = load_config("multi30k", [f"train.max_minutes={minutes}"]).train
        assert tcfg.cooldown_minutes == pytest.approx(0.2273 * minutes)
    # a share plans as the same minutes do: 18 of 90 minutes
    share = TrainConfig(max_minutes=90.0, lr_cooldown_share=0.2)
    minutes = TrainConfig(max_minutes=90.0, lr_cooldown_minutes=18.0)
    for step, done in ((6000, 71.9), (6000, 72.0), (6000, 80.0)):
        state = TrainingState(step=step, train_seconds=60.0 * done)
        assert plan_cooldown(share, state) == plan_cooldown(minutes, state)
    assert plan_cooldown(share, TrainingState(step=6000, train_seconds=60.0 * 72.0)) is not None
    # on a step budget alone (--train.max_minutes=0 --train.max_steps=N), of the steps
    steps = TrainConfig(max_steps=20_000, lr_cooldown_share=0.2)
    assert steps.cooldown_steps == 4000
    assert cooldown_steps(steps, TrainingState()) == (16_001, 20_000)
    assert share.cooldown_steps == 0 and minutes.cooldown_steps == 0
    for bad in ({"lr_cooldown_share": 1.0}, {"lr_cooldown_share": -0.1},
                {"lr_cooldown_share": 0.2, "max_minutes": 0.0, "max_steps": 0, "max_epochs": 3},
                {"lr_cooldown_share": 0.2, "lr_cooldown_minutes": 5.0},
                {"lr_cooldown_share": 0.2, "lr_cooldown_steps": 5}):
        with pytest.raises(ValueError, match="lr_cooldown_share"):
            TrainConfig(**({"max_minutes": 90.0} | bad))


def test_the_quickstart_trains_on_a_short_budget_and_average_warns_of_spread(
        prepared_corpus, tmp_path, caplog, monkeypatch):
    # the README's train command with --train.max_minutes=12, shortened to 15 seconds on the
    # synthetic corpus: the preset's cooldown (22.7 % of the budget) is planned and run. The
    # clock advances 0.05 s a reading, so that the pace, and the cooldown's plan, do not depend
    # on how loaded the machine is.
    monkeypatch.setattr("transformer_mt.training.loop.time", FakeClock(0.05))
    run = tmp_path / "run"
    caplog.set_level(logging.INFO)
    assert main(["train", "--config", "multi30k", "--data", str(prepared_corpus), "--run-dir",
                 str(run), "--train.max_minutes=0.25", "--train.max_tokens=256",
                 "--train.save_every=5", "--train.valid_every=100000", "--train.bf16=false",
                 "--train.warmup_steps=20"]) == 0
    state = json.loads(sorted((run / "checkpoints").iterdir())[-1].joinpath("state.json")
                       .read_text())
    first, last = state["cooldown"]
    assert first > 1 and state["step"] == last, state
    assert "the learning rate falls linearly over steps" in caplog.text
    assert main(["average", "--run-dir", str(run), "--last", "5", "--out",
                 str(tmp_path / "model")]) == 0
    assert main(["translate", "--model", str(tmp_path / "model"), "--input",
                 str(prepared_corpus / "valid.src.txt"), "--output", str(tmp_path / "out")]) == 0


def test_average_names_the_steps_when_they_span_much_of_the_run(trained_model, tmp_path,
                                                                 caplog):
    import shutil

    from transformer_mt.storage.files import sha256_file
    from transformer_mt.storage.names import MANIFEST_FILE

    run = tmp_path / "run"
    for step in (100, 200, 300, 400, 500):  # copies of one checkpoint, as steps of a run
        path = run / "checkpoints" / f"step_{step:08d}"
        shutil.copytree(trained_model, path)
        state = json.loads((path / "state.json").read_text()) | {"step": step}
        (path / "state.json").write_text(json.dumps(state))
        names = sorted(p.name for p in path.iterdir() if p.name != MANIFEST_FILE)
        (path / MANIFEST_FILE).write_text(
            "".join(f"{sha256_file(path / n)}  {n}\n" for n in names))
    caplog.set_level(logging.WARNING)
    assert main(["average", "--run-dir", str(run), "--out", str(tmp_path / "a")]) == 0
    assert "the 5 checkpoints averaged span steps 100, 200, 300, 400, 500" in caplog.text
    caplog.clear()  # 400 and 500: within the last fifth
    assert main(["average", "--run-dir", str(run), "--last", "2", "--out",
                 str(tmp_path / "b")]) == 0
    assert "span steps" not in caplog.text


def test_a_timed_cooldown_is_replanned_from_the_pace_since_it_began():
    tcfg = TrainConfig(max_minutes=90.0, lr_cooldown_minutes=20.0)
    # planned at step 6000 after 70 minutes (0.7 s a step): steps 6001-7662
    state = TrainingState(step=6500, cooldown=[6001, 7662], cooldown_since=[6000, 4200.0])
    # the machine got faster: 500 steps in 4 minutes (0.48 s) leave 16 minutes, 97 % of them
    # 1,940 steps (1940.0 rounded down): the cooldown ends at 8,440 instead of 7,662
    first, last = replan_cooldown(tcfg, replace(state, train_seconds=4440.0))
    assert last == 6500 + 1940
    # the rate falls on from its value at step 6501 (1162 / 1662 of eq. (3)) to the new end
    rate = 1162 / 1662
    assert (last - 6501 + 1) / (last - first + 1) == pytest.approx(rate)
    assert 1 / (last - first + 1) == pytest.approx(rate / 1940)  # at the last step
    # slower (0.9 s a step): it ends sooner, at a step the time left still fits
    first, last = replan_cooldown(tcfg, replace(state, train_seconds=4650.0))
    assert last == 6500 + int(0.97 * 750 / 0.9)
    assert (last - 6500) / (last - first + 1) == pytest.approx(rate)
    # nothing to re-plan: not planned, planned by an older version, over, at its first step,
    # or a cooldown by steps
    for other in ({"cooldown": None}, {"cooldown_since": None}, {"step": 7662},
                  {"step": 6000}):
        assert replan_cooldown(tcfg, replace(state, train_seconds=4440.0, **other)) is None
    # nor before a fifth of the cooldown's 20 minutes has passed: 20 steps that took a
    # validation's 6 s more than the others do not tell the pace
    assert replan_cooldown(tcfg, replace(state, step=6020, train_seconds=4220.0)) is None
    assert replan_cooldown(tcfg, replace(state, train_seconds=4200.0 + 239)) is None
    by_steps = TrainConfig(max_steps=8000, lr_cooldown_steps=1000)
    assert replan_cooldown(by_steps, replace(state, train_seconds=4440.0)) is None


@settings(max_examples=40, deadline=None)
@given(warmup=st.integers(1, 10_000), step=st.integers(1, 200_000))
def test_noam_rises_linearly_then_decays(warmup, step):
    lr = noam_lr(step, d_model=512, warmup_steps=warmup)
    assert lr <= noam_lr(warmup, d_model=512, warmup_steps=warmup) + 1e-15
    if step < warmup:
        assert lr == pytest.approx(noam_lr(1, d_model=512, warmup_steps=warmup) * step)


@settings(max_examples=50, deadline=None)
@given(eps=st.floats(0.0, 0.3), seed=st.integers(0, 2**16))
def test_label_smoothing_matches_pytorch(eps, seed):
    g = torch.Generator().manual_seed(seed)
    logits, target = torch.randn(8, 11, generator=g), torch.randint(0, 11, (8,), generator=g)
    target[0] = 0  # at least one padding position, ignored
    loss, nll, n = label_smoothed_nll(logits, torch.eye(11), target, eps=eps, pad_id=0)
    ref = F.cross_entropy(logits, target, label_smoothing=eps, ignore_index=0, reduction="sum")
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(nll, F.cross_entropy(logits, target, ignore_index=0,
                                                    reduction="sum"))
    assert n == int(target.ne(0).sum())


def test_label_smoothing_is_exact_where_the_target_probability_underflows():
    # targets 150 nats below the most probable token (probability ~1e-65, 0 in fp32) still get
    # their exact loss and gradient
    logits = torch.tensor([[0.0, 150.0, -3.0, 1.0], [-150.0, 0.0, 0.0, 0.0],
                           [2.0, 2.0, 2.0, 2.0], [0.0, -150.0, 150.0, 0.0]])
    target = torch.tensor([0, 1, 3, 1])
    for eps in (0.0, 0.1):
        ours, ref = logits.clone().requires_grad_(), logits.clone().requires_grad_()
        loss, nll, _ = label_smoothed_nll(ours, torch.eye(4), target, eps=eps, pad_id=-1)
        expected = F.cross_entropy(ref, target, label_smoothing=eps, reduction="sum")
        loss.backward()
        expected.backward()
        torch.testing.assert_close(loss, expected)
        torch.testing.assert_close(nll, F.cross_entropy(logits, target, reduction="sum"))
        torch.testing.assert_close(ours.grad, ref.grad)


def projection_against_autograd(x, weight, target, *, eps, bf16=False, scale=2.5,
                                ref_dtype=torch.float32):
    """Our loss and gradients of (x, W) against autograd through x W^T and F.cross_entropy."""
    ours = [t.clone().requires_grad_() for t in (x, weight)]
    ref = [t.to(ref_dtype).requires_grad_() for t in (x, weight)]
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss, _, _ = label_smoothed_nll(*ours, target, eps=eps, pad_id=0)
        logits = ref[0] @ ref[1].t()
    logits = logits.to(torch.promote_types(ref_dtype, torch.float32))
    expected = F.cross_entropy(logits, target, label_smoothing=eps, ignore_index=0,
                               reduction="sum")
    (scale * loss).backward()
    (scale * expected).backward()
    return loss, expected, [t.grad for t in ours], [t.grad for t in ref]


@settings(max_examples=30, deadline=None)
@given(eps=st.floats(0.0, 0.3), seed=st.integers(0, 2**16), bf16=st.booleans())
def test_label_smoothing_gradients_match_autograd_of_pytorch(eps, seed, bf16):
    # the hand-written gradients of states and pre-softmax weight, padding included, in fp32
    # and under bf16 autocast (the matmuls in bf16 on both sides)
    g = torch.Generator().manual_seed(seed)
    x, weight = torch.randn(16, 12, generator=g), torch.randn(37, 12, generator=g)
    target = torch.randint(0, 37, (16,), generator=g)
    target[:3] = 0
    loss, expected, ours, ref = projection_against_autograd(x, weight, target, eps=eps, bf16=bf16)
    assert ours[0][:3].eq(0).all()  # padding positions get no gradient
    assert [t.dtype for t in ours] == [torch.float32, torch.float32]
    tol = {"atol": 0.1, "rtol": 2e-2} if bf16 else {}  # bf16 rounds g and the matmuls
    torch.testing.assert_close(loss, expected, **tol)
    for got, want in zip(ours, ref, strict=True):
        torch.testing.assert_close(got, want, **tol)


def test_label_smoothing_over_several_row_blocks_equals_pytorch():
    # a vocabulary of 2^21 + 1 makes blocks of two rows on CPU in fp32: 8 rows, 4 blocks. Sums
    # over 2M logits cancel: fp32 autograd itself is 0.007 off float64 in grad x, so float64 is
    # the reference and the tolerance ~1 % of the largest gradient
    g = torch.Generator().manual_seed(0)
    x, weight = torch.randn(8, 4, generator=g), torch.randn(2**21 + 1, 4, generator=g)
    target = torch.randint(1, 2**21 + 1, (8,), generator=g)
    target[4] = 0
    loss, expected, ours, ref = projection_against_autograd(x, weight, target, eps=0.1,
                                                           ref_dtype=torch.float64)
    torch.testing.assert_close(loss.double(), expected, rtol=1e-5, atol=0)
    assert ours[0][4].eq(0).all()
    for got, want in zip(ours, ref, strict=True):
        torch.testing.assert_close(got.double(), want, atol=3e-2, rtol=1e-3)


def test_training_step_gradients_equal_the_unfused_model_and_loss():
    # forward_backward (states, then the fused pre-softmax linear and loss) against the model's
    # logits and F.cross_entropy through autograd: every parameter's gradient, tied weights too
    from conftest import random_batch, tiny_model
    from transformer_mt.training.step import forward_backward

    src = random_batch(0, 3, 6, lengths=[6, 4, 5])
    tgt_out = random_batch(1, 3, 7, lengths=[7, 3, 5])
    tgt_in = torch.cat([torch.full((3, 1), 2), tgt_out[:, :-1]], dim=1)
    ours, ref = tiny_model(), tiny_model()
    n_target = int(tgt_out.ne(0).sum())
    forward_backward(ours, [(src, tgt_in, tgt_out)], scale=1 / n_target, eps=0.1, pad_id=0)
    logits = ref(src, tgt_in)
    (F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), label_smoothing=0.1,
                     ignore_index=0, reduction="sum") / n_target).backward()
    for (name, p), q in zip(ours.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-4, msg=name)


def rdrop_reference(logits_NV, target_N, *, eps, alpha, pad_id=0):
    """R-Drop written with PyTorch's losses: label-smoothed cross-entropy of both passes (the
    second N/2 rows) plus alpha/2 (KL(P1 || P2) + KL(P2 || P1)) per non-pad pair of rows."""
    first, second = logits_NV.log_softmax(-1).chunk(2)
    keep = target_N.chunk(2)[0].ne(pad_id)
    kl = F.kl_div(second, first, log_target=True, reduction="none").sum(-1) \
        + F.kl_div(first, second, log_target=True, reduction="none").sum(-1)
    return F.cross_entropy(logits_NV, target_N, label_smoothing=eps, ignore_index=pad_id,
                           reduction="sum") + alpha / 2 * kl[keep].sum()


@settings(max_examples=30, deadline=None)
@given(eps=st.floats(0.0, 0.3), alpha=st.floats(0.1, 10.0), seed=st.integers(0, 2**16))
def test_rdrop_loss_and_gradients_match_autograd_of_pytorch(eps, alpha, seed):
    # two passes of 8 rows, the second after the first, padding in the same places
    g = torch.Generator().manual_seed(seed)
    x, weight = torch.randn(16, 12, generator=g), torch.randn(37, 12, generator=g)
    target = torch.randint(1, 37, (8,), generator=g).repeat(2)
    target[[0, 8]] = 0
    ours = [t.clone().requires_grad_() for t in (x, weight)]
    ref = [t.double().requires_grad_() for t in (x, weight)]  # fp32 sums cancel: float64
    loss, nll, n = label_smoothed_nll(*ours, target, eps=eps, pad_id=0, rdrop=alpha)
    expected = rdrop_reference(ref[0] @ ref[1].t(), target, eps=eps, alpha=alpha)
    (2.5 * loss).backward()
    (2.5 * expected).backward()
    torch.testing.assert_close(loss.double(), expected, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(nll, F.cross_entropy(x @ weight.t(), target, ignore_index=0,
                                                    reduction="sum"))
    assert n == 14
    assert ours[0].grad[[0, 8]].eq(0).all()
    for got, want in zip((t.grad for t in ours), (t.grad for t in ref), strict=True):
        torch.testing.assert_close(got.double(), want, rtol=1e-5,
                                   atol=1e-6 * float(want.abs().max()))


def test_rdrop_pairs_the_rows_of_both_passes_across_row_blocks():
    # a vocabulary of 2^21 + 1 makes blocks of one row pair on CPU in fp32: 4 pairs, 4 blocks;
    # float64 reference as in the label-smoothing test above
    g = torch.Generator().manual_seed(1)
    x, weight = torch.randn(8, 4, generator=g), torch.randn(2**21 + 1, 4, generator=g)
    target = torch.randint(1, 2**21 + 1, (4,), generator=g).repeat(2)
    ours = [t.clone().requires_grad_() for t in (x, weight)]
    ref = [t.double().requires_grad_() for t in (x, weight)]
    loss, _, _ = label_smoothed_nll(*ours, target, eps=0.1, pad_id=0, rdrop=5.0)
    expected = rdrop_reference(ref[0] @ ref[1].t(), target, eps=0.1, alpha=5.0)
    loss.backward()
    expected.backward()
    # the KL sums 2M fp32 terms: 1e-5 off float64 (a wrong pairing would be far off)
    torch.testing.assert_close(loss.double(), expected, rtol=1e-4, atol=0)
    for got, want in zip((t.grad for t in ours), (t.grad for t in ref), strict=True):
        torch.testing.assert_close(got.double(), want, atol=3e-2, rtol=1e-3)


def test_rdrop_training_step_runs_each_batch_twice_under_independent_dropout():
    # forward_backward with rdrop against the model run by hand on the doubled batch with the
    # same dropout draws: the gradients of every parameter and the per-pass loss agree, and
    # without dropout the KL term vanishes, leaving the plain step's gradients
    from conftest import random_batch, tiny_model
    from transformer_mt.training.step import forward_backward

    src = random_batch(0, 3, 6, lengths=[6, 4, 5])
    tgt_out = random_batch(1, 3, 7, lengths=[7, 3, 5])
    tgt_in = torch.cat([torch.full((3, 1), 2), tgt_out[:, :-1]], dim=1)
    n_target = int(tgt_out.ne(0).sum())
    ours, ref = tiny_model(dropout=0.3).train(), tiny_model(dropout=0.3).train()
    torch.manual_seed(7)
    loss, nll = forward_backward(ours, [(src, tgt_in, tgt_out)], scale=1 / n_target, eps=0.1,
                                 pad_id=0, rdrop=5.0)
    torch.manual_seed(7)
    logits = ref(src.repeat(2, 1), tgt_in.repeat(2, 1))
    expected = rdrop_reference(logits.flatten(0, 1), tgt_out.repeat(2, 1).flatten(), eps=0.1,
                               alpha=5.0)
    (expected / (2 * n_target)).backward()
    assert loss == pytest.approx(float(expected) / 2, rel=1e-5)
    first, second = logits.detach().chunk(2)
    assert not torch.allclose(first, second)  # the two passes drew different dropout masks
    for (name, p), q in zip(ours.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-4, msg=name)

    plain, rdrop = tiny_model(), tiny_model()
    forward_backward(plain, [(src, tgt_in, tgt_out)], scale=1 / n_target, eps=0.1, pad_id=0)
    forward_backward(rdrop, [(src, tgt_in, tgt_out)], scale=1 / n_target, eps=0.1, pad_id=0,
                     rdrop=5.0)
    for (name, p), q in zip(plain.named_parameters(), rdrop.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-4, msg=name)


def test_label_smoothing_minimum_is_the_smoothed_distribution():
    # the loss is smallest when the model predicts 1 - eps + eps/V on the target
    V, eps = 5, 0.1
    probs = torch.full((1, V), eps / V)
    probs[0, 2] += 1 - eps
    best, _, _ = label_smoothed_nll(probs.log(), torch.eye(V), torch.tensor([2]), eps=eps,
                                    pad_id=0)
    sharper = torch.tensor([[1e-4, 1e-4, 1 - 4e-4, 1e-4, 1e-4]]).log()
    worse, _, _ = label_smoothed_nll(sharper, torch.eye(V), torch.tensor([2]), eps=eps,
                                     pad_id=0)
    assert best < worse
    entropy = -(probs * probs.log()).sum()
    assert float(best) == pytest.approx(float(entropy), abs=1e-5)
    assert math.isfinite(float(worse))


def test_gradient_accumulation_equals_one_large_batch():
    from conftest import random_batch, tiny_model
    from transformer_mt.training.step import forward_backward

    def batch(seed, lengths):
        src = random_batch(seed, len(lengths), max(lengths), lengths=lengths)
        tgt_out = random_batch(seed + 1, len(lengths), max(lengths), lengths=lengths)
        tgt_in = torch.cat([torch.full((len(lengths), 1), 2), tgt_out[:, :-1]], dim=1)
        tgt_in[tgt_in.eq(3)] = 0  # EOS only in the output
        return src, tgt_in, tgt_out

    a, b = batch(0, [5, 3]), batch(10, [7, 6, 2])
    n_target = int(a[2].ne(0).sum() + b[2].ne(0).sum())
    split_model, whole_model = tiny_model(), tiny_model()
    loss_split, _ = forward_backward(split_model, [a, b], scale=1 / n_target, eps=0.1,
                                     pad_id=0)
    width = 7
    pad = lambda t: F.pad(t, (0, width - t.size(1)))
    whole = tuple(torch.cat([pad(x), pad(y)]) for x, y in zip(a, b, strict=True))
    loss_whole, _ = forward_backward(whole_model, [whole], scale=1 / n_target, eps=0.1,
                                     pad_id=0)
    assert loss_split == pytest.approx(loss_whole, rel=1e-5)
    for (name, p), q in zip(split_model.named_parameters(), whole_model.parameters(),
                            strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-4, msg=name)


def test_optimizer_is_the_papers_adam_written_out():
    """make_optimizer (fused Adam, beta1 0.9, beta2 0.98, eps 1e-9) moves parameters as §5.3's
    Adam written out: m, v, bias corrections, lr * m_hat / (sqrt(v_hat) + eps)."""
    torch.manual_seed(0)
    param = torch.nn.Parameter(torch.randn(7, 5))
    module = torch.nn.Module()
    module.weight = param
    optimizer = make_optimizer(module, TrainConfig())
    assert optimizer.defaults["fused"] and optimizer.defaults["betas"] == (0.9, 0.98)
    expected, m, v = param.detach().clone(), torch.zeros(7, 5), torch.zeros(7, 5)
    for step in range(1, 6):
        grad = torch.randn(7, 5)
        lr = 1e-3 * step
        for group in optimizer.param_groups:
            group["lr"] = lr
        param.grad = grad.clone()
        optimizer.step()
        m = 0.9 * m + 0.1 * grad
        v = 0.98 * v + 0.02 * grad * grad
        m_hat, v_hat = m / (1 - 0.9**step), v / (1 - 0.98**step)
        expected -= lr * m_hat / (v_hat.sqrt() + 1e-9)
        torch.testing.assert_close(param.detach(), expected, atol=1e-6, rtol=1e-5)


# the CPU always; a GPU where there is one (marked gpu)
CPU_AND_CUDA = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA")])]


@pytest.mark.parametrize("device", CPU_AND_CUDA)
def test_compiled_training_step_equals_eager_across_batch_shapes_without_recompiling(device):
    # train.compile: the compiled forward and backward give the eager model's loss and gradients
    # on batches of three different shapes (no dropout), and the later shapes reuse the first
    # compiled graph (symbolic shapes): token-budget batches would otherwise recompile at every
    # step
    from torch._dynamo.utils import counters

    from conftest import random_batch, tiny_model
    from transformer_mt.training.step import compiled, forward_backward

    torch._dynamo.reset()
    counters.clear()
    eager, model = tiny_model().to(device).train(), tiny_model().to(device).train()
    net = compiled(model)
    for seed, (B, S, T) in enumerate([(3, 6, 7), (5, 9, 4), (2, 11, 12)]):
        src = random_batch(seed, B, S, lengths=[S] + [max(1, S - 2)] * (B - 1))
        tgt_out = random_batch(seed + 10, B, T, lengths=[max(1, T - 3)] * (B - 1) + [T])
        tgt_in = torch.cat([torch.full((B, 1), 2), tgt_out[:, :-1]], dim=1)
        n_target = int(tgt_out.ne(0).sum())
        batch = tuple(t.to(device) for t in (src, tgt_in, tgt_out))
        results = [forward_backward(m, [batch], scale=1 / n_target, eps=0.1,
                                    pad_id=0) for m in (eager, net)]
        assert results[1] == pytest.approx(results[0], rel=1e-5)
        for (name, p), q in zip(eager.named_parameters(), model.parameters(), strict=True):
            torch.testing.assert_close(q.grad, p.grad, atol=1e-6, rtol=1e-4, msg=name)
            p.grad = q.grad = None
    assert counters["stats"]["unique_graphs"] == 1
    # with dropout too the model compiles whole: our dropout's own mask would break the graph
    dropped = tiny_model(dropout=0.3).to(device).train()
    assert torch._dynamo.explain(dropped)(*batch[:2], project=False).graph_break_count == 0


def _padded(batch: tuple, rows: int, length: int) -> tuple:
    """A batch (src, tgt_in, tgt_out) padded with 0 to (rows, length), as collate pads it to a
    shape bucket."""
    return tuple(F.pad(t, (0, length - t.size(1), 0, rows - t.size(0))) for t in batch)


def _bucket_batches(seed: int) -> list[tuple]:
    """Two batches of sentences (B, S, T) = (3, 6, 7), (2, 11, 12)."""
    from conftest import random_batch

    batches = []
    for i, (B, S, T) in enumerate([(3, 6, 7), (2, 11, 12)]):
        src = random_batch(seed + i, B, S, lengths=[S] + [max(1, S - 2)] * (B - 1))
        tgt_out = random_batch(seed + i + 10, B, T, lengths=[max(1, T - 3)] * (B - 1) + [T])
        batches.append((src, torch.cat([torch.full((B, 1), 2), tgt_out[:, :-1]], dim=1),
                        tgt_out))
    return batches


def test_a_batch_padded_to_its_shape_bucket_trains_as_the_batch():
    # train.shape_buckets: padding a batch's lengths and rows (all-padding rows) changes
    # neither its loss nor any gradient
    from conftest import tiny_model
    from transformer_mt.training.step import forward_backward

    model = tiny_model().train()  # no dropout: both passes compute the same function
    for batch in _bucket_batches(0):
        n_target = int(batch[2].ne(0).sum())
        results = []
        for b in (batch, _padded(batch, 6, 16)):
            loss = forward_backward(model, [b], scale=1 / n_target, eps=0.1, pad_id=0)
            results.append((loss, {n: p.grad for n, p in model.named_parameters()}))
            model.zero_grad(set_to_none=True)
        (loss, grads), (padded_loss, padded_grads) = results
        assert padded_loss == pytest.approx(loss, rel=1e-6)
        for name, grad in grads.items():
            # float32 sums in another order (other shapes pick other kernels): differences
            # of a few eps times the tensor's scale (<= 1.4e-6 of its largest entry on a Xeon
            # with AMX); a padding leak would be of the order of the gradient itself
            scale = float(grad.abs().max())
            torch.testing.assert_close(padded_grads[name], grad, atol=1e-5 * scale, rtol=1e-5,
                                       msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("device", CPU_AND_CUDA)
def test_compiled_step_with_shape_buckets_makes_a_graph_per_shape(device):
    # train.compile=cuda_graphs with train.shape_buckets: static graphs, one per bucket shape and
    # none more when shapes come back; each step's loss and gradients are the eager model's. On
    # a CPU the graphs run without CUDA graphs (torch.compile's "reduce-overhead" skips them);
    # on a GPU they are replayed as CUDA graphs.
    from torch._dynamo.utils import counters

    from conftest import tiny_model
    from transformer_mt.training.step import compiled, forward_backward

    torch._dynamo.reset()
    counters.clear()
    eager, model = tiny_model().to(device).train(), tiny_model().to(device).train()
    net = compiled(model, shapes=2, cuda_graphs=True)
    shapes = [(6, 8), (4, 16)]
    for step in range(4):
        batch = _bucket_batches(step)[step % 2]
        batch = tuple(t.to(device) for t in _padded(batch, *shapes[step % 2]))
        n_target = int(batch[2].ne(0).sum())
        results = [forward_backward(m, [batch], scale=1 / n_target, eps=0.1, pad_id=0)
                   for m in (eager, net)]
        assert results[1] == pytest.approx(results[0], rel=1e-5)
        for (name, p), q in zip(eager.named_parameters(), model.parameters(), strict=True):
            torch.testing.assert_close(q.grad, p.grad, atol=1e-6, rtol=1e-4, msg=name)
            p.grad = q.grad = None
    assert counters["stats"]["unique_graphs"] == 2


@settings(max_examples=15, deadline=None)
@given(eps=st.floats(0.0, 0.3), seed=st.integers(0, 2**16))
def test_the_output_bias_is_in_the_loss_and_gets_its_gradient(eps, seed):
    # models with an output bias (Marian's final_logits_bias) train through the fused loss
    g = torch.Generator().manual_seed(seed)
    x, weight, bias = (torch.randn(*s, generator=g) for s in ((24, 8), (13, 8), (13,)))
    target = torch.randint(0, 13, (24,), generator=g)
    ours = [t.clone().requires_grad_() for t in (x, weight, bias)]
    ref = [t.clone().requires_grad_() for t in (x, weight, bias)]
    loss, _, _ = label_smoothed_nll(ours[0], ours[1], target, eps=eps, pad_id=0,
                                    bias_V=ours[2])
    logp = torch.log_softmax(ref[0] @ ref[1].t() + ref[2], dim=-1)
    expected = F.cross_entropy(logp, target, label_smoothing=eps, ignore_index=0,
                               reduction="sum")
    (1.5 * loss).backward()
    (1.5 * expected).backward()
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-4)
    for mine, theirs in zip(ours, ref, strict=True):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-4, atol=1e-5)
    assert ours[2].grad.abs().sum() > 0
