"""kill -9 chaos: train a tiny model while killing it with SIGKILL at random moments, some of them
inside a checkpoint save, restarting until it is done; then compare with an uninterrupted run of
the same seed. Passes (exit 0) when the final weights and optimizer state are byte-identical,
every per-step loss is identical, and no checkpoint was ever unloadable.

    python scripts/chaos_kill9.py --data DATA_DIR --work DIR --kills 20 --json OUT.json

DATA_DIR is a prepared data directory (`transformer-mt prepare`). A kill "inside a save" waits
for the checkpoint's temporary directory to appear and kills at once; the report says for each
kill whether a temporary was left behind (proof that the save was cut short).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from transformer_mt.config import ModelConfig, config_from_dict
from transformer_mt.model.transformer import Transformer
from transformer_mt.storage.run_dir import TMP_PREFIX, checkpoint_dirs, step_dirs
from transformer_mt.training.checkpoint import load_checkpoint
from transformer_mt.training.metrics import read_metrics


def train_command(data: Path, run: Path, steps: int) -> list[str]:
    return [sys.executable, "-m", "transformer_mt", "train", "--config", "tiny",
            "--data", str(data), "--run-dir", str(run), f"--train.max_steps={steps}",
            "--train.max_tokens=800", "--train.warmup_steps=50", "--train.save_every=7",
            "--train.keep_last=3", "--train.log_every=1", "--train.valid_every=1000000",
            "--train.valid_bleu=false", "--train.threads=1", "--train.seed=7"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def unloadable(run: Path) -> list[str]:
    """Checkpoints under a final name that do not verify or do not load."""
    valid = checkpoint_dirs(run)  # verifies every manifest once
    bad = [p.name for p in step_dirs(run) if p not in valid]
    for path in valid:
        config = json.loads((path / "config.json").read_text())
        model = Transformer(config_from_dict(ModelConfig, config["model"], "model"))
        try:
            load_checkpoint(path, model, torch.optim.Adam(model.parameters()))
        except Exception as err:  # noqa: BLE001 - any failure counts as unloadable
            bad.append(f"{path.name}: {err}")
    return bad


def losses(run: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(run) if r["kind"] == "train"}


def final_hashes(run: Path) -> dict[str, str]:
    last = checkpoint_dirs(run)[-1]
    return {"checkpoint": last.name, "model": sha256(last / "model.safetensors"),
            "optimizer": sha256(last / "optimizer.safetensors")}


def last_step(run: Path) -> int:
    """The step of the last record in metrics.jsonl (0 if none)."""
    try:
        with (run / "metrics.jsonl").open("rb") as f:
            lines = f.read().splitlines()
        return json.loads(lines[-1])["step"] if lines else 0
    except (FileNotFoundError, ValueError, KeyError):  # absent, or a line being written
        return 0


def wait_for_step(proc: subprocess.Popen, run: Path, target: int) -> None:
    while proc.poll() is None and last_step(run) < target:
        time.sleep(0.002)


def wait_for_save(proc: subprocess.Popen, run: Path) -> bool:
    """Poll for a checkpoint temporary; True once one exists (the run is inside a save)."""
    root = run / "checkpoints"
    while proc.poll() is None:
        try:
            if any(name.startswith(TMP_PREFIX) for name in os.listdir(root)):
                return True
        except FileNotFoundError:
            pass
        time.sleep(0.0001)
    return False


def kill_schedule(steps: int, kills: int, rng: random.Random) -> list[int]:
    """Sorted target steps at least 10 apart (a kill inside a save lands up to save_every
    steps after its target, and stale log lines of the killed run must stay below the next)."""
    points = sorted(rng.sample(range(2, steps - 10 * kills), kills))
    return [p + 10 * i for i, p in enumerate(points)]


def chaos(data: Path, run: Path, *, steps: int, kills: int, rng: random.Random) -> list[dict]:
    """Kill at random steps, 40% of the times inside the next checkpoint save."""
    events = []
    for target in kill_schedule(steps, kills, rng):
        proc = subprocess.Popen(train_command(data, run, steps), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        wait_for_step(proc, run, target)
        in_save = rng.random() < 0.4
        if in_save:
            wait_for_save(proc, run)
        else:
            time.sleep(rng.uniform(0.0, 0.02))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if proc.returncode == 0:
            raise RuntimeError(f"the run finished before the kill aimed at step {target}")
        root = run / "checkpoints"
        leftover = root.is_dir() and any(p.name.startswith(TMP_PREFIX) for p in root.iterdir())
        events.append({"kill": len(events) + 1, "target_step": target,
                       "aimed_inside_save": in_save, "temporary_left": leftover,
                       "last_logged_step": last_step(run), "unloadable": unloadable(run)})
        print(json.dumps(events[-1]), flush=True)
    subprocess.run(train_command(data, run, steps), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return events


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a prepared data directory")
    parser.add_argument("--work", type=Path, required=True, help="scratch directory (emptied)")
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill schedule")
    parser.add_argument("--json", type=Path, help="write the report here")
    args = parser.parse_args(argv)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    started = time.time()
    reference, interrupted = args.work / "reference", args.work / "chaos"
    subprocess.run(train_command(args.data, reference, args.steps), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    events = chaos(args.data, interrupted, steps=args.steps, kills=args.kills,
                   rng=random.Random(args.seed))
    ref_losses, chaos_losses = losses(reference), losses(interrupted)
    report = {
        "steps": args.steps, "kills": len(events),
        "kills_inside_a_save": sum(e["temporary_left"] for e in events),
        "events": events,
        "reference": final_hashes(reference), "interrupted": final_hashes(interrupted),
        "losses_identical": ref_losses == chaos_losses and len(ref_losses) == args.steps,
        "unloadable_checkpoints": sum(len(e["unloadable"]) for e in events)
        + len(unloadable(interrupted)),
        "seconds": round(time.time() - started, 1),
    }
    report["final_state_identical"] = report["reference"] == report["interrupted"]
    report["passed"] = (report["final_state_identical"] and report["losses_identical"]
                        and report["unloadable_checkpoints"] == 0 and len(events) == args.kills)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
