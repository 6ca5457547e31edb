"""One recipe over several seeds: the spread of its test scores, what kNN-MT adds, and whether
the score follows the steps a run got in its wall time. Reads the results.json that report.py
wrote for each run; prints a table and the statistics the README quotes, and writes them as JSON.

    python benchmarks/multi30k/seeds.py benchmarks/results/multi30k-en-de-best-recipe-seed1 \
        benchmarks/results/multi30k-en-de-best-recipe-seed{2,3,4,5,6,7,8} [--json OUT.json]

Scores are test_2016_flickr, tokenized lowercased BLEU (the Multi30k literature's protocol) and
sacreBLEU; the kNN-MT figures only for the runs where knn.sh ran.
"""

import argparse
import json
import statistics
from pathlib import Path


def seed_row(results_dir: Path) -> dict:
    """The figures of one run: machine, precision, steps, speed, test scores with and without
    kNN-MT."""
    results = json.loads((results_dir / "results.json").read_text())
    config = json.loads((results_dir / "config.json").read_text())
    test = results["test_2016_flickr"]
    knn = results.get("knn", {}).get("test_2016_flickr")
    return {"run": results_dir.name, "cpu": results["machine"]["cpu"],
            "bf16": bf16_training(results["machine"], config["train"]["bf16"]),
            "steps": results["train"]["steps"],
            "tokens_per_s": round(results["train"]["median_tokens_per_s"]),
            "test_sacrebleu": round(test["sacrebleu"]["bleu"], 2),
            "test_tok_lc": round(test["tokenized_lowercased"]["tok_bleu"], 2),
            "knn_test_sacrebleu": round(knn["sacrebleu"]["bleu"], 2) if knn else None,
            "knn_test_tok_lc": round(knn["tokenized_lowercased"]["tok_bleu"], 2) if knn else None}


def bf16_training(machine: dict, setting) -> bool:
    """Whether the run trained in bf16: what `train.bf16: auto` resolved to where report.py
    recorded it, else the setting itself (runs collected before it recorded the machine)."""
    return any(machine["bf16"]) if machine.get("bf16") else setting is True


def spread(values: list[float]) -> dict:
    """Mean, sample standard deviation (with two or more values), minimum and maximum."""
    return {"n": len(values), "mean": round(statistics.mean(values), 2),
            "sd": round(statistics.stdev(values), 2) if len(values) > 1 else None,
            "min": min(values), "max": max(values)}


def against_steps(rows: list[dict], score: str) -> dict | None:
    """Pearson r of `score` with the steps, and the least-squares slope in BLEU per 1,000 steps
    (with three or more runs)."""
    pairs = [(row["steps"], row[score]) for row in rows if row[score] is not None]
    if len(pairs) < 3:
        return None
    steps, scores = zip(*pairs, strict=True)
    fit = statistics.linear_regression(steps, scores)
    return {"n": len(pairs), "pearson_r": round(statistics.correlation(steps, scores), 2),
            "bleu_per_1000_steps": round(1000 * fit.slope, 3)}


def summary(rows: list[dict]) -> dict:
    """The spread of the test scores, kNN-MT's gains, and the scores against the steps (all runs,
    the bf16 runs alone, the kNN-MT runs)."""
    with_knn = [row for row in rows if row["knn_test_tok_lc"] is not None]
    knn_scores = [row["knn_test_tok_lc"] for row in with_knn]
    knn_gains = [round(row["knn_test_tok_lc"] - row["test_tok_lc"], 2) for row in with_knn]
    bf16 = [row for row in rows if row["bf16"]]
    return {
        "test_tok_lc": spread([row["test_tok_lc"] for row in rows]),
        "test_sacrebleu": spread([row["test_sacrebleu"] for row in rows]),
        "knn_test_tok_lc": spread(knn_scores) if with_knn else None,
        "knn_gain_tok_lc": spread(knn_gains) if with_knn else None,
        "steps_vs_test_tok_lc": against_steps(rows, "test_tok_lc"),
        "steps_vs_test_tok_lc_bf16_runs": against_steps(bf16, "test_tok_lc"),
        "steps_vs_knn_test_tok_lc": against_steps(with_knn, "knn_test_tok_lc"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="results directories (report.py's)")
    parser.add_argument("--json", type=Path, help="write rows and summary here")
    args = parser.parse_args()
    missing = [str(run) for run in args.runs if not (run / "results.json").exists()]
    if missing:
        parser.error(f"no results.json in {', '.join(missing)}")
    rows = [seed_row(run) for run in args.runs]
    print("| run | cpu, bf16 | steps | tok/s | test sacreBLEU | test tok. lc. | kNN-MT sacreBLEU "
          "| kNN-MT tok. lc. |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        knn = [row["knn_test_sacrebleu"], row["knn_test_tok_lc"]]
        print(f"| {row['run']} | {row['cpu']}, {'bf16' if row['bf16'] else 'fp32'} | "
              f"{row['steps']:,} | {row['tokens_per_s']:,} | {row['test_sacrebleu']} | "
              f"{row['test_tok_lc']} | " + " | ".join("—" if v is None else str(v) for v in knn)
              + " |")
    stats = summary(rows)
    print(json.dumps(stats, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"runs": rows, "summary": stats}, indent=1) + "\n")


if __name__ == "__main__":
    main()
