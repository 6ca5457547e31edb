"""Collect preset_norms.sh's runs into a results folder: per run its config, metrics, logs and
scores (never weights); per seed post-norm's test translations against pre-norm's (paired
bootstrap); per run the averages of the cooldown's checkpoints against the last checkpoint on
the validation set (paired bootstrap); means and standard deviations over the seeds.

    python benchmarks/multi30k/preset_norms_report.py RUNS_DIR RESULT_DIR

RUNS_DIR: preset_norms.sh's OUT (postnorm-seedS/ and prenorm-seedS/, each with run/ and
finish.sh's files); seeds whose two runs are not both finished are left out, and said so.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
from pathlib import Path

import torch
from sacrebleu.metrics import BLEU

from transformer_mt.evaluation.bleu import paired_bootstrap, sacrebleu_scores
from transformer_mt.training.metrics import read_metrics

NORMS = ("postnorm", "prenorm")
MODELS = ("run", "averaged-5", "averaged-10")  # finish.sh's names: the last checkpoint first
KEPT = ("config.json", "metrics.jsonl")


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def finished(run: Path) -> bool:
    return (run / "test.sacrebleu.json").exists()


def averaging(run: Path) -> dict:
    """Validation sacreBLEU of the last checkpoint and of the averages, each average against
    the last checkpoint by paired bootstrap (finish.sh's decodes at the preset's alpha)."""
    alpha = (run / "alpha").read_text().strip()
    refs = lines(run / "data" / "valid.tgt.txt")
    hyps = {m: lines(next(run.glob(f"val.{m}.alpha{alpha}.??"))) for m in MODELS}
    out = {"alpha": float(alpha), "last": round(sacrebleu_scores(hyps["run"], refs)[0], 2)}
    for model in MODELS[1:]:
        c = paired_bootstrap(hyps[model], hyps["run"], refs, metric=BLEU(), name="sacreBLEU")
        out[model] = {"bleu": round(c.score, 2), "minus_last": round(c.score - c.baseline_score, 2),
                      "p_value": round(c.p_value, 4)}
    return out


def run_row(run: Path) -> dict:
    config = json.loads((run / "run" / "config.json").read_text())
    metrics = read_metrics(run / "run")
    valid = {r["step"]: round(r["bleu"], 2) for r in metrics if r["kind"] == "valid"}
    test = json.loads((run / "test.sacrebleu.json").read_text())
    tok = run / "test.tokbleu.json"
    machine = next((r for r in metrics if r["kind"] == "machine"), {})
    return {"run": run.name, "cpu": machine.get("cpu"), "bf16": machine.get("bf16"),
            "threads": machine.get("threads"), "norm_first": config["model"]["norm_first"],
            "qkv_init_gain": config["model"]["qkv_init_gain"], "seed": config["train"]["seed"],
            "steps": max(r["step"] for r in metrics),
            "valid_bleu_by_step": valid, "selected_on_val": (run / "selected").read_text().strip(),
            "test_sacrebleu": round(test["bleu"], 2), "test_chrf": round(test["chrf"], 2),
            "test_tok_lc": round(json.loads(tok.read_text())["tok_bleu"], 2) if tok.exists()
            else None,
            "valid_averaging": averaging(run)}


def summary(rows: list[dict], key: str) -> dict | None:
    values = [r[key] for r in rows if r[key] is not None]
    if not values:
        return None
    return {"n": len(values), "mean": round(statistics.mean(values), 2),
            "sd": round(statistics.stdev(values), 2) if len(values) > 1 else None,
            "values": values}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    seeds = sorted({int(p.name.split("seed")[1]) for p in args.runs.glob("*norm-seed*")})
    done = [s for s in seeds if all(finished(args.runs / f"{n}-seed{s}") for n in NORMS)]
    rows, paired = [], {}
    for seed in done:
        for norm in NORMS:
            run = args.runs / f"{norm}-seed{seed}"
            rows.append(run_row(run))
            kept = args.out / "runs" / run.name
            kept.mkdir(parents=True, exist_ok=True)
            for name in KEPT:
                shutil.copy(run / "run" / name, kept / name)
            for path in [run / "train.log", run / "finish.log", *run.glob("test.*"),
                         *run.glob("val.*.json"), run / "selected", run / "alpha"]:
                shutil.copy(path, kept / path.name)
        path = args.runs / f"paired-seed{seed}.json"
        if path.exists():
            shutil.copy(path, args.out / path.name)
            paired[seed] = json.loads(path.read_text())["against_baseline"]
    by_norm = {norm: [r for r in rows if r["run"].startswith(norm)] for norm in NORMS}
    result = {
        "seeds_finished": done, "seeds_unfinished": [s for s in seeds if s not in done],
        "software": {"torch": torch.__version__, "python": platform.python_version()},
        "runs": rows,
        "summary": {norm: {key: summary(by_norm[norm], key)
                           for key in ("test_tok_lc", "test_sacrebleu", "test_chrf")}
                    for norm in NORMS},
        "postnorm_vs_prenorm_on_test": paired,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    for r in rows:
        avg = r["valid_averaging"]
        print(f"{r['run']}: test tok. lc. {r['test_tok_lc']}, sacreBLEU {r['test_sacrebleu']} "
              f"({r['selected_on_val']}); val last {avg['last']}, avg 5 "
              f"{avg['averaged-5']['bleu']} (p {avg['averaged-5']['p_value']}), avg 10 "
              f"{avg['averaged-10']['bleu']} (p {avg['averaged-10']['p_value']})")
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
