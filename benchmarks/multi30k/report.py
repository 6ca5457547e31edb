"""Collect a finished run of benchmarks/multi30k/run.sh into benchmarks/results/<name>/:
config, run log (and knn.sh's log), metrics, scores and a results.json with the figures. Never
the weights.

    python benchmarks/multi30k/report.py runs/multi30k-en-de
"""

import json
import platform
import re
import shutil
import sys
from pathlib import Path

import torch

from transformer_mt.config import DecodeConfig


def run_commit(log: Path) -> str:
    """The commit run.sh recorded on its first line ("... commit abc1234")."""
    match = re.search(r"commit (\w+)", log.read_text().splitlines()[0])
    return match.group(1) if match else "unknown"


def median(values) -> float:
    """The middle value (the upper one of an even count)."""
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def selected_setting(path: Path, cast, field: str):
    """The decoding setting finish.sh chose on val and wrote to `path`; DecodeConfig's default
    for runs finished before it chose that setting."""
    return cast(path.read_text().strip()) if path.exists() else getattr(DecodeConfig(), field)


def datastore_entries(store: Path) -> int:
    """How many target positions a kNN-MT datastore holds (its values' length; the index,
    hundreds of MB, stays unread)."""
    from safetensors import safe_open

    VALUES_FILE = "values.safetensors"  # examples/knn_mt/knn.py writes it

    with safe_open(str(store / VALUES_FILE), framework="pt") as f:
        return f.get_slice("values").get_shape()[0]


def main(out: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    dest = repo / "benchmarks" / "results" / out.name
    dest.mkdir(parents=True, exist_ok=True)
    run = out / "run"
    config = json.loads((run / "config.json").read_text())
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [m for m in metrics if m["kind"] == "train"]
    valid = [m for m in metrics if m["kind"] == "valid"]
    machine = [m for m in metrics if m["kind"] == "machine"]  # train's record at each start
    last_checkpoint = sorted((run / "checkpoints").iterdir())[-1]
    state = json.loads((last_checkpoint / "state.json").read_text())
    selected = (out / "selected").read_text().strip()
    # finish.sh's test set (Multi30k's test_2016_flickr for runs finished before it said)
    test_set = (out / "test_set").read_text().strip() if (out / "test_set").exists() \
        else "test_2016_flickr"
    tokbleu = json.loads((out / "test.tokbleu.json").read_text()) \
        if (out / "test.tokbleu.json").exists() else None
    # finish.sh LC_TOK=1: a model of the tok/*.lc.norm.tok files writes tokenized lowercase text
    tokenized = tokbleu is not None and "hyp:pre-tokenized" in tokbleu["tok_bleu_protocol"]
    tokens_per_s = median(m["tokens_per_s"] for m in train)
    probe_gflops = [m["bfloat16_matmul_gflops" if m.get("bf16", config["train"]["bf16"])
                      else "float32_matmul_gflops"] for m in machine]
    results = {
        "task": out.name,
        "languages": config["languages"],
        "commit": run_commit(out / "run.log"),
        "machine": {"cpu": (machine[0].get("cpu") if machine else None) or platform.machine(),
                    "threads": torch.get_num_threads(), "torch": torch.__version__,
                    "python": platform.python_version(),
                    # train's matmul probe at each (re)start: the machine's pace that day
                    "float32_matmul_gflops": [m["float32_matmul_gflops"] for m in machine],
                    "bfloat16_matmul_gflops": [m["bfloat16_matmul_gflops"] for m in machine],
                    # bf16 autocast at each start (train.bf16=auto decides per start)
                    "bf16": [m.get("bf16", config["train"]["bf16"]) for m in machine]},
        "model": config["model"],
        "train": {"steps": state["step"], "epochs": state["epoch"],
                  "target_tokens": state["tokens"],
                  "train_wall_minutes": round(state["train_seconds"] / 60, 1),
                  "median_tokens_per_s": tokens_per_s,
                  # per GFLOP/s of train's matmul probe in the dtype it trained in: runs on
                  # other machines or days compared at equal compute
                  "tokens_per_s_per_matmul_gflops": round(
                      tokens_per_s / median(probe_gflops), 2)
                  if probe_gflops else None,
                  "final_train_loss": train[-1]["loss"]},
        "valid_curve": [{k: m[k] for k in ("step", "loss", "ppl", "bleu") if k in m}
                        for m in valid],
        "selected_on_val": selected,
        "alpha_selected_on_val": selected_setting(out / "alpha", float, "length_penalty"),
        "beam_selected_on_val": selected_setting(out / "beam", int, "beam_size"),
        "mbr_selected_on_val": selected_setting(out / "mbr", str, "mbr"),
        "val": {path.name.removeprefix("val.").removesuffix(".json"): json.loads(path.read_text())
                for path in sorted(out.glob("val.*.json"))},
        test_set: {
            "hypotheses": "lowercased and tokenized, as the tok/ files it trained on" if tokenized
            else "cased, detokenised",
            # of tokenized hypotheses: against the tokenized reference, not a cased sacreBLEU
            "sacrebleu": json.loads((out / "test.sacrebleu.json").read_text()),
            "tokenized_lowercased": tokbleu,
        },
    }
    knn = out / "knn"
    if (knn / "test.sacrebleu.json").exists():  # knn.sh ran
        k, temperature, lam = (knn / "selected").read_text().split()
        results["knn"] = {
            "datastore_entries": datastore_entries(knn / "datastore"),
            "datastore_seconds": float((knn / "datastore_seconds").read_text()),
            "selected_on_val": {"k": int(k), "temperature": float(temperature),
                                "lambda": float(lam)},
            "val": {path.name.removeprefix("val.").removesuffix(".json"):
                    json.loads(path.read_text()) for path in sorted(knn.glob("val.*.json"))},
            "test_2016_flickr": {
                "sacrebleu": json.loads((knn / "test.sacrebleu.json").read_text()),
                "tokenized_lowercased": json.loads((knn / "test.tokbleu.json").read_text())
                if (knn / "test.tokbleu.json").exists() else None,
            },
        }
    (dest / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    shutil.copyfile(run / "config.json", dest / "config.json")
    shutil.copyfile(run / "metrics.jsonl", dest / "metrics.jsonl")
    shutil.copyfile(out / "run.log", dest / "run.log")
    shutil.copyfile(out / "data" / "report.json", dest / "data_report.json")
    if (run / "curves.png").exists():
        shutil.copyfile(run / "curves.png", dest / "curves.png")
    tgt = config["languages"][1]
    name = f"{test_set}.{'lc.norm.tok.' if tokenized else ''}hyp.{tgt}"
    shutil.copyfile(out / f"test.hyp.{tgt}", dest / name)
    if "knn" in results:
        shutil.copyfile(knn / f"test.hyp.{tgt}", dest / name.replace("hyp.", "knn.hyp."))
        if (out / "knn.log").exists():
            shutil.copyfile(out / "knn.log", dest / "knn.log")
    print(json.dumps({k: results[k] for k in (test_set, "knn") if k in results},
                     indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
