"""Exact resume: kill -9 chaos, complete state, every example once per epoch, determinism."""

import hashlib
import json
import subprocess
import sys

import pytest
import torch

from conftest import REPO, FakeClock
from transformer_mt.config import load_config
from transformer_mt.data.batching import token_batches
from transformer_mt.data.dataset import ParallelData
from transformer_mt.inference.translator import Translator
from transformer_mt.model.transformer import Transformer
from transformer_mt.storage import names
from transformer_mt.storage.model_dir import ModelLoadError
from transformer_mt.storage.run_dir import checkpoint_dirs, manifest_problem
from transformer_mt.training.checkpoint import load_checkpoint, save_checkpoint
from transformer_mt.training.loop import train
from transformer_mt.training.resume import STATE_KEYS, ResumeError, resume
from transformer_mt.training.schedule import learning_rate, plan_cooldown
from transformer_mt.training.state import TrainingState

OVERRIDES = ["train.max_tokens=800", "train.warmup_steps=20", "train.log_every=1",
             "train.valid_every=1000000", "train.valid_bleu=false", "train.save_every=5",
             "train.keep_last=50", "train.threads=1"]


def config(steps: int, *extra: str):
    return load_config("tiny", [*OVERRIDES, f"train.max_steps={steps}", *extra])


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow  # subprocesses killed and restarted: ~15-35 s
def test_kill9_chaos_resumes_byte_identically(prepared_corpus, tmp_path):
    """5 SIGKILLs at random steps, some inside a save: the same final bytes, the same losses,
    no unloadable checkpoint (scripts/chaos_kill9.py; its 20-kill run is in benchmarks/results)."""
    report_path = tmp_path / "report.json"
    subprocess.run([sys.executable, str(REPO / "scripts" / "chaos_kill9.py"), "--data",
                    str(prepared_corpus), "--work", str(tmp_path / "work"), "--kills", "5",
                    "--steps", "120", "--seed", "3", "--json", str(report_path)],
                   check=False, capture_output=True, timeout=600)
    report = json.loads(report_path.read_text())
    assert report["kills"] == 5
    assert report["kills_inside_a_save"] >= 1
    assert report["reference"] == report["interrupted"]
    assert report["losses_identical"] and report["unloadable_checkpoints"] == 0
    assert report["passed"]


@pytest.fixture(scope="module")
def short_run(prepared_corpus, tmp_path_factory):
    run = tmp_path_factory.mktemp("short") / "run"
    train(config(10, "model.dropout=0.1"), data_dir=prepared_corpus, run_dir=run)
    return run


def fresh_model_and_optimizer(path):
    cfg = json.loads((path / names.CONFIG_FILE).read_text())
    model = Transformer(load_config("tiny", [f"model.vocab_size={cfg['model']['vocab_size']}",
                                              "model.dropout=0.1"]).model)
    return model, torch.optim.Adam(model.parameters())


def test_save_load_save_is_identical(short_run, tmp_path):
    path = checkpoint_dirs(short_run)[-1]
    model, optimizer = fresh_model_and_optimizer(path)
    state = load_checkpoint(path, model, optimizer)
    config = json.loads((path / names.CONFIG_FILE).read_text())
    again = save_checkpoint(run_dir=tmp_path, model=model, optimizer=optimizer, state=state,
                            config=config, vocab_dir=path, keep_last=1)
    for name in (names.WEIGHTS_FILE, names.OPTIMIZER_FILE, names.STATE_FILE, names.CONFIG_FILE):
        assert sha256(again / name) == sha256(path / name), name


def rewrite_state(path, drop: str) -> None:
    """Remove one key from state.json and re-sign the manifest, as a buggy writer would."""
    state = json.loads((path / names.STATE_FILE).read_text())
    del state[drop]
    (path / names.STATE_FILE).write_text(json.dumps(state))
    listed = sorted(p.name for p in path.iterdir() if p.name != names.MANIFEST_FILE)
    (path / names.MANIFEST_FILE).write_text(
        "".join(f"{sha256(path / n)}  {n}\n" for n in listed))


@pytest.mark.parametrize("key", [*STATE_KEYS, "rng"])
def test_a_state_without_any_key_is_refused_naming_it(short_run, tmp_path, key):
    import shutil

    path = tmp_path / "step"
    shutil.copytree(checkpoint_dirs(short_run)[-1], path)
    rewrite_state(path, key)
    assert manifest_problem(path) is None
    model, optimizer = fresh_model_and_optimizer(path)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    fresh = TrainingState(
        fingerprint=json.loads((path / names.STATE_FILE).read_text()).get("fingerprint") or {})
    with pytest.raises((ResumeError, ModelLoadError), match=f"'?{key}'?"):
        resume(path, model, optimizer, scaler, fresh, ignore_mismatch=True)


class Recorder:
    """Wraps ParallelData.collate to record the sentence indices of every batch trained on."""

    def __init__(self, monkeypatch):
        self.batches: list[list[int]] = []
        original = ParallelData.collate
        recorder = self

        def collate(data, indices, buckets=None):
            if data.split == "train":
                recorder.batches.append(sorted(int(i) for i in indices))
            return original(data, indices, buckets)

        monkeypatch.setattr(ParallelData, "collate", collate)


def test_interrupted_runs_see_every_example_once_per_epoch(prepared_corpus, tmp_path,
                                                           monkeypatch):
    recorder = Recorder(monkeypatch)
    steps = 40  # over 2 epochs of 400 pairs in ~800-token batches
    train(config(steps), data_dir=prepared_corpus, run_dir=tmp_path / "straight")
    straight = recorder.batches[:]
    recorder.batches.clear()

    class Crash(Exception):
        pass

    original = ParallelData.collate
    calls = {"n": 0}

    def crashing(data, indices, buckets=None):  # dies after 13 and then 29 batches: mid-epoch,
        calls["n"] += 1  # unsaved work
        if calls["n"] in (14, 14 + 17):
            raise Crash
        return original(data, indices, buckets)

    monkeypatch.setattr(ParallelData, "collate", crashing)
    legs = []
    for _ in range(3):
        before = len(recorder.batches)
        try:
            train(config(steps), data_dir=prepared_corpus, run_dir=tmp_path / "cut")
        except Crash:
            pass
        legs.append(recorder.batches[before:])
    # each leg restarts from the last checkpoint (every 5 steps): replay from there
    sequence = legs[0][:10] + legs[1][:15] + legs[2]
    assert sequence == straight
    data = ParallelData(prepared_corpus, "train")
    n_sentences, start = len(data.src_lengths), 0
    for epoch in range(2):  # both epochs of the run (40 steps > 2 epochs)
        n_batches = len(token_batches(data.src_lengths, data.tgt_lengths, max_tokens=800,
                                      seed=1, epoch=epoch))
        seen = [i for batch in straight[start : start + n_batches] for i in batch]
        assert sorted(seen) == list(range(n_sentences)), f"epoch {epoch}"
        start += n_batches
    assert start <= steps


def test_bpe_dropout_run_resumes_byte_identically(prepared_corpus, tmp_path):
    """Each epoch's BPE-dropout segmentation follows (seed, epoch): a run stopped mid-epoch and
    resumed ends with the bytes of a straight run, and different from a run without dropout."""
    extra = ("train.bpe_dropout=0.1",)
    train(config(12, *extra), data_dir=prepared_corpus, run_dir=tmp_path / "straight")
    for steps in (7, 12):
        train(config(steps, *extra), data_dir=prepared_corpus, run_dir=tmp_path / "cut")
    train(config(12), data_dir=prepared_corpus, run_dir=tmp_path / "plain")
    weights = {run: sha256(checkpoint_dirs(tmp_path / run)[-1] / names.WEIGHTS_FILE)
               for run in ("straight", "cut", "plain")}
    assert weights["straight"] == weights["cut"] != weights["plain"]


def test_a_shape_bucketed_run_trains_in_few_shapes_and_resumes_byte_identically(
        prepared_corpus, tmp_path, monkeypatch):
    """train.shape_buckets=3: the training batches come in at most 3 shapes, and a run stopped
    and resumed ends with the bytes of a straight run."""
    shapes, original = set(), ParallelData.collate

    def collate(data, indices, buckets=None):
        tensors = original(data, indices, buckets)
        if data.split == "train":
            shapes.update(tuple(t.shape) for t in tensors)
        return tensors

    monkeypatch.setattr(ParallelData, "collate", collate)
    extra = ("train.shape_buckets=3",)
    train(config(12, *extra), data_dir=prepared_corpus, run_dir=tmp_path / "straight")
    assert 1 <= len(shapes) <= 3
    for steps in (7, 12):
        train(config(steps, *extra), data_dir=prepared_corpus, run_dir=tmp_path / "cut")
    assert sha256(checkpoint_dirs(tmp_path / "straight")[-1] / names.WEIGHTS_FILE) == \
        sha256(checkpoint_dirs(tmp_path / "cut")[-1] / names.WEIGHTS_FILE)


def test_same_seed_same_bytes_and_translations(prepared_corpus, tmp_path):
    runs = [tmp_path / "a", tmp_path / "b"]
    for run in runs:
        train(config(12, "model.dropout=0.1"), data_dir=prepared_corpus, run_dir=run)
    last = [checkpoint_dirs(run)[-1] for run in runs]
    assert sha256(last[0] / names.WEIGHTS_FILE) == sha256(last[1] / names.WEIGHTS_FILE)
    assert sha256(last[0] / names.OPTIMIZER_FILE) == sha256(last[1] / names.OPTIMIZER_FILE)
    sources = (prepared_corpus / "valid.src.txt").read_text().splitlines()[:10]
    outputs = [Translator.from_dir(p, max_length_offset=5).translate(sources) for p in last]
    assert outputs[0] == outputs[1]


def test_max_epochs_stops_at_the_epoch_boundary(prepared_corpus, tmp_path, monkeypatch):
    # two epochs exactly: not one batch of the third (a resumed run then starts it whole)
    recorder = Recorder(monkeypatch)
    state = train(config(0, "train.max_epochs=2"), data_dir=prepared_corpus,
                  run_dir=tmp_path / "run")
    data = ParallelData(prepared_corpus, "train")
    per_epoch = [len(token_batches(data.src_lengths, data.tgt_lengths, max_tokens=800, seed=1,
                                   epoch=epoch)) for epoch in range(2)]
    assert len(recorder.batches) == state.step == sum(per_epoch)
    assert (state.epoch, state.batch_in_epoch) == (2, 0)


def weights_sha256(run_dir) -> str:
    return sha256(checkpoint_dirs(run_dir)[-1] / names.WEIGHTS_FILE)


def test_a_timed_cooldown_ends_the_run_on_its_last_step_and_resumes_exactly(
        prepared_corpus, tmp_path, monkeypatch, caplog):
    # one (fake) minute of training; when half a minute is left the rate starts falling
    # linearly over the steps that the pace so far fits in, re-planned at every checkpoint step
    # (5) from the pace since then, and the run ends on the last one
    timed = ("train.max_minutes=1", "train.lr_cooldown_minutes=0.5")
    monkeypatch.setattr("transformer_mt.training.loop.time", FakeClock(0.25))
    cfg = config(100_000, *timed)
    state = train(cfg, data_dir=prepared_corpus, run_dir=tmp_path / "run")
    first, last = state.cooldown
    planned_at, seconds_then = state.cooldown_since
    assert 1 < planned_at < last == state.step and state.train_seconds <= 60
    # the first plan kept 3 % of the time left in reserve at the pace so far; the re-plans
    # spent most of it (each step here reads the fake clock as often as any other)
    first_plan = plan_cooldown(cfg.train,
                               TrainingState(step=planned_at, train_seconds=seconds_then))
    assert first_plan[0] == planned_at + 1 and first_plan[1] < last
    logged = {row["step"]: row["lr"] for row in map(json.loads,
              (tmp_path / "run" / "metrics.jsonl").read_text().splitlines())
              if row["kind"] == "train"}
    assert sorted(logged) == list(range(1, last + 1))
    of_eq3 = {step: lr / learning_rate(step, cfg.train, cfg.model.d_model)
              for step, lr in logged.items()}
    assert all(of_eq3[step] == pytest.approx(1.0) for step in range(1, planned_at + 2))
    falls = [of_eq3[step] - of_eq3[step + 1] for step in range(planned_at + 1, last)]
    assert min(falls) > 0 and max(falls) < 2 * min(falls)  # a line bent a little, no jump
    replanned_at = last - 1 - (last - 1) % 5  # the last checkpoint step before the end
    for step in range(replanned_at + 1, last + 1):  # the last line, to 1/(last - first + 1)
        assert logged[step] == pytest.approx(learning_rate(step, cfg.train, cfg.model.d_model,
                                                           (first, last)))
    # stopped one step after the last re-plan (on max_steps), then resumed: the re-planned
    # cooldown comes from the checkpoint, and the run ends with the same weights. (Resumed
    # before a re-plan, the time left would differ by the restart's clock readings, and the end
    # with it: a run on a time budget ends where its clock says.)
    assert planned_at < replanned_at < last - 1
    monkeypatch.setattr("transformer_mt.training.loop.time", FakeClock(0.25))
    stopped = train(config(replanned_at + 1, *timed), data_dir=prepared_corpus,
                    run_dir=tmp_path / "again")
    assert stopped.step == replanned_at + 1
    assert any("cooldown (to step" in r.getMessage() and "train.max_steps, " in r.getMessage()
               for r in caplog.records if r.levelname == "WARNING")  # not "ran slower"
    assert stopped.cooldown == [first, last]
    assert stopped.cooldown_since == [planned_at, seconds_then]
    monkeypatch.setattr("transformer_mt.training.loop.time", FakeClock(0.25))
    resumed = train(cfg, data_dir=prepared_corpus, run_dir=tmp_path / "again")
    assert resumed.step == last
    assert weights_sha256(tmp_path / "again") == weights_sha256(tmp_path / "run")


def test_the_last_step_is_validated_before_its_checkpoint_even_on_a_save_step(
        prepared_corpus, tmp_path):
    # step 10 is a save step (every 5), not a validation step (every 4): the run still ends
    # with the last step's scores, and its checkpoint's state has them; a resume of the
    # finished run validates nothing again
    def validated_steps():
        return [row["step"] for row in map(json.loads, (tmp_path / "run" / "metrics.jsonl")
                                           .read_text().splitlines()) if row["kind"] == "valid"]

    cfg = config(10, "train.valid_every=4")
    state = train(cfg, data_dir=prepared_corpus, run_dir=tmp_path / "run")
    assert validated_steps() == [4, 8, 10]
    saved = json.loads((checkpoint_dirs(tmp_path / "run")[-1] / names.STATE_FILE).read_text())
    assert saved["step"] == 10
    assert (saved["best_step"], saved["best_score"]) == (state.best_step, state.best_score)
    train(cfg, data_dir=prepared_corpus, run_dir=tmp_path / "run")
    assert validated_steps() == [4, 8, 10]


def test_a_max_epochs_stop_on_a_save_step_writes_its_checkpoint_once(
        prepared_corpus, tmp_path, monkeypatch):
    # the epoch's last step is validated before it is saved, so it is saved once: a second save
    # of the same step would replace a complete checkpoint, not atomically; a resume of the
    # finished run neither trains, validates nor saves
    import transformer_mt.training.loop as train_module

    epoch = train(config(0, "train.max_epochs=1"), data_dir=prepared_corpus,
                  run_dir=tmp_path / "probe").step
    saved_steps = []

    def counting_save(**kwargs):
        saved_steps.append(kwargs["state"]["step"])
        return save_checkpoint(**kwargs)

    monkeypatch.setattr(train_module, "save_checkpoint", counting_save)
    cfg = config(0, "train.max_epochs=1", f"train.save_every={epoch}")
    state = train(cfg, data_dir=prepared_corpus, run_dir=tmp_path / "run")
    assert state.step == epoch and saved_steps == [epoch]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text()
            .splitlines()]
    assert [row["step"] for row in rows if row["kind"] == "valid"] == [epoch]
    saved = json.loads((checkpoint_dirs(tmp_path / "run")[-1] / names.STATE_FILE).read_text())
    assert saved["best_step"] == epoch
    assert train(cfg, data_dir=prepared_corpus, run_dir=tmp_path / "run").step == epoch
    assert saved_steps == [epoch]


def test_a_run_stopped_before_its_cooldown_ends_says_so(prepared_corpus, tmp_path, caplog):
    # the cooldown counts to train.max_steps; a run that stops earlier (here on max_epochs, as
    # on max_minutes) never reaches its end, and the log says how to finish it
    state = train(config(1000, "train.max_epochs=1", "train.lr_cooldown_steps=100"),
                  data_dir=prepared_corpus, run_dir=tmp_path / "run")
    assert state.step < 1000
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(f"stopped at step {state.step} of train.max_steps=1000" in w
               and "cooldown" in w for w in warnings), warnings
    caplog.clear()
    train(config(state.step, f"train.lr_cooldown_steps={min(10, state.step)}"),
          data_dir=prepared_corpus,
          run_dir=tmp_path / "finished")
    assert not any("cooldown" in r.getMessage() for r in caplog.records)


# the prepared data's record, as far as a fingerprint reads it
META = {"vocab_sha256": "v", "inputs": {"train": {"src_sha256": "s", "tgt_sha256": "t"}}}


def test_a_checkpoint_older_than_an_option_resumes_while_the_option_stays_off():
    # a fingerprint written before train.rdrop_alpha existed: its default is how its code
    # behaved, so it matches; turned on, it is a difference
    from transformer_mt.training.resume import (
        brought_up_to_date,
        fingerprint,
        fingerprint_differences,
    )

    old = fingerprint(config(10), META)
    del old["train"]["rdrop_alpha"]
    assert fingerprint_differences(old, fingerprint(config(10), META)) == [
        "train.rdrop_alpha (checkpoint: None, now: 0.0)"]
    upgraded = brought_up_to_date(old, "state.json")
    assert fingerprint_differences(upgraded, fingerprint(config(20), META)) == []
    on = fingerprint(config(10, "train.rdrop_alpha=5"), META)
    assert fingerprint_differences(upgraded, on) == [
        "train.rdrop_alpha (checkpoint: 0.0, now: 5.0)"]
    saved_on = fingerprint(config(10, "train.rdrop_alpha=5"), META)
    saved_on = brought_up_to_date(saved_on, "state.json")
    assert saved_on["train"]["rdrop_alpha"] == 5.0  # the saved value wins


def test_a_run_begun_with_another_init_gain_resumes_exactly_and_keeps_its_record(
        prepared_corpus, tmp_path):
    # runs begun before the paper's code's gain 1/sqrt(2) became the default (gain 1; older
    # fingerprints lack the key) resume under it: the gain only initialises a fresh model
    from transformer_mt.training.resume import brought_up_to_date, fingerprint

    old = fingerprint(config(10), META)
    old["model"]["qkv_init_gain"] = 1.0  # as a checkpoint of the last release recorded it
    assert brought_up_to_date(old, "state.json") == fingerprint(config(10), META)
    run, straight = tmp_path / "run", tmp_path / "straight"
    train(config(5, "model.qkv_init_gain=1.0"), data_dir=prepared_corpus, run_dir=run)
    train(config(10), data_dir=prepared_corpus, run_dir=run)  # the default gain now
    train(config(10, "model.qkv_init_gain=1.0"), data_dir=prepared_corpus, run_dir=straight)
    assert weights_sha256(run) == weights_sha256(straight)
    for record in (run / "config.json", checkpoint_dirs(run)[-1] / "config.json"):
        assert json.loads(record.read_text())["model"]["qkv_init_gain"] == 1.0, record
    fresh = tmp_path / "fresh"  # a fresh run has the default
    train(config(5), data_dir=prepared_corpus, run_dir=fresh)
    assert json.loads((fresh / "config.json").read_text())["model"]["qkv_init_gain"] == 2**-0.5


def test_a_recipe_run_from_before_the_cooldown_share_resumes_under_it():
    # multi30k's runs saved lr_cooldown_minutes=20 of 88; the preset now says a share 0.2273
    from transformer_mt.config import load_config
    from transformer_mt.training.resume import (
        brought_up_to_date,
        fingerprint,
        fingerprint_differences,
    )

    old = fingerprint(load_config("multi30k", ["train.lr_cooldown_share=0",
                                               "train.lr_cooldown_minutes=20"]), META)
    old["train"].pop("lr_cooldown_share", None)
    now = fingerprint(load_config("multi30k"), META)
    assert fingerprint_differences(brought_up_to_date(old, "state.json"), now) == []
    assert load_config("multi30k").train.cooldown_minutes == pytest.approx(20, abs=0.01)


def test_a_checkpoint_with_a_retired_option_resumes_only_at_its_kept_value(monkeypatch):
    # an option removed after the checkpoint was written: its kept value is what the code does
    # now, so it is no difference; another value is one (a refusal unless --ignore-mismatch)
    from transformer_mt import config as config_module
    from transformer_mt.training.resume import (
        brought_up_to_date,
        fingerprint,
        fingerprint_differences,
    )

    monkeypatch.setitem(config_module.RETIRED, "train.old_trick", (False, "removed in a test"))
    now = fingerprint(config(10), META)
    old = fingerprint(config(10), META)
    old["train"]["old_trick"] = False
    assert fingerprint_differences(brought_up_to_date(old, "state.json"), now) == []
    old["train"]["old_trick"] = True
    assert fingerprint_differences(brought_up_to_date(old, "state.json"), now) == [
        "train.old_trick (checkpoint: True, now: None)"]


def test_where_and_how_steps_run_may_change_at_a_resume():
    # device, threads and train.compile change how a step is computed, not what it computes:
    # a run may resume on another device, or compiled
    from transformer_mt.training.resume import fingerprint, fingerprint_differences

    moved = config(10, "train.compile=true", "train.device=cuda", "train.threads=1")
    assert fingerprint_differences(fingerprint(config(10), META), fingerprint(moved, META)) == []
    assert fingerprint_differences(fingerprint(config(10), META),
                                   fingerprint(config(10, "train.seed=2"), META)) == [
        "train.seed (checkpoint: 1, now: 2)"]
