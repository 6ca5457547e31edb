"""`transformer-mt table3`: every row's preset at the paper's sizes has Table 3's parameter
count; rows scale and select as documented; the driver writes the table, skips finished rows
and resumes a row killed with -9 to the numbers of an uninterrupted run; rows trained two at
once (--jobs 2) give the numbers of one at a time."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from transformer_mt.config import ConfigError, ModelConfig, config_to_dict, load_config
from transformer_mt.model.stats import model_stats
from transformer_mt.research.table3 import ORDER, Row, minutes_left, row_config, select_rows
from transformer_mt.training.schedule import noam_lr

# Table 3's words: "a shared source-target vocabulary of about 37000 tokens" (§5.1)
VOCAB = 37_000


def paper_sized(row: Row) -> ModelConfig:
    return ModelConfig(**(config_to_dict(load_config("base").model) | row.model
                          | {"vocab_size": VOCAB}))


def test_every_row_has_the_papers_parameter_count():
    rows = select_rows()
    assert [r.name for r in rows] == list(ORDER)
    exact = {r.name: model_stats(paper_sized(r)).parameters for r in rows}
    counts = {name: n / 1e6 for name, n in exact.items()}
    # The paper's column runs 1.95M above ours at d_model 512 (its vocabulary is only "about"
    # 37000): that offset, in proportion to d_model, and the column's rounding to 1M
    offset_per_dim = (65 - counts["base"]) / 512
    for row in rows:
        paper = row.paper["params"]
        if paper is None:  # a blank cell: rows (A), (D), (E) keep the base's sizes
            positions = 2 * 1024 * 512 if row.name == "E-learned" else 0  # two tables
            assert exact[row.name] == exact["base"] + positions, row.name
            continue
        if row.name == "big":  # no vocabulary size gives the paper's 213 and base's 65 both
            assert abs(counts["big"] - paper) / paper < 0.01, counts["big"]
            continue
        d_model = paper_sized(row).d_model
        assert abs(counts[row.name] + offset_per_dim * d_model - paper) <= 0.6, row.name


def test_rows_change_the_base_and_scale_its_sizes():
    base = load_config("base")
    h1 = row_config(Row.load("A-h1"), base, scale=8, steps=40, seed=3)
    assert (h1.model.n_heads, h1.model.d_k, h1.model.d_v, h1.model.d_model, h1.model.d_ff) == \
        (1, 64, 64, 64, 256)
    assert (h1.train.max_steps, h1.train.seed, h1.train.valid_every, h1.train.save_every) == \
        (40, 3, 40, 10)
    big = row_config(Row.load("big"), base, scale=8, steps=40, seed=1)
    assert (big.model.d_model, big.model.n_heads, big.model.dropout, big.train.max_steps) == \
        (128, 16, 0.3, 120)
    probe = row_config(Row.load("big"), base, scale=8, steps=40, seed=1, valid_every=15)
    assert (probe.train.valid_every, probe.train.max_steps) == (15, 120)  # and at the end
    ls = row_config(Row.load("D-ls0.2"), base, scale=8, steps=40, seed=1)
    assert ls.train.label_smoothing == 0.2 and ls.model == row_config(
        Row.load("base"), base, scale=8, steps=40, seed=1).model
    assert row_config(Row.load("E-learned"), base, scale=8, steps=1, seed=1).model.positional \
        == "learned"
    for name in ("base", "C-d256", "C-d1024", "big"):  # eq. (3) at the paper's d_model
        row, paper = Row.load(name), row_config(Row.load(name), base, scale=1, steps=1, seed=1)
        scaled = row_config(row, base, scale=8, steps=1, seed=1)
        assert paper.model.d_model == 8 * scaled.model.d_model
        assert noam_lr(300, d_model=scaled.model.d_model, warmup_steps=4000,
                       scale=scaled.train.lr_scale) == pytest.approx(
            noam_lr(300, d_model=paper.model.d_model, warmup_steps=4000,
                    scale=paper.train.lr_scale), rel=1e-12), name
    with pytest.raises(ConfigError, match="row A-h32: d_k 16 is not divisible by --scale 32"):
        row_config(Row.load("A-h32"), base, scale=32, steps=1, seed=1)


def test_row_selection():
    assert [r.name for r in select_rows("A,big")] == ["base", "A-h1", "A-h4", "A-h16",
                                                       "A-h32", "big"]
    assert [r.name for r in select_rows("(C),D-ls0.0")][:2] == ["base", "C-N2"]
    with pytest.raises(ConfigError, match="no row or group 'F'"):
        select_rows("F")


def test_the_time_left_is_the_pace_of_rows_trained_in_this_run_over_rows_not_recorded():
    recorded = {("base", 1), ("C-N8", 1)}  # C-N8 comes last: read back only when reached
    # base read back, A-h1 trained in 10 min; left: A-h4 and A-h16, not the recorded C-N8
    assert minutes_left(600, 5, {("base", 1), ("A-h1", 1)}, recorded) == 20
    assert minutes_left(600, 5, {("base", 1)}, recorded) == 0, "no pace from a row read back"
    assert minutes_left(600, 3, {("base", 1), ("A-h1", 1)}, recorded) == 0, "nothing left"


def table3(data: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "transformer_mt", "table3", "--data", str(data), "--out",
            str(out), "--scale", "16", "--steps", "24", "--train.max_tokens=600",
            "--train.warmup_steps=10", "--train.save_every=6", "--train.threads=1",
            "--train.log_every=6", "--decode.batch_size=200", "--decode.max_length_offset=8",
            *extra]


@pytest.mark.slow  # rows trained in subprocesses, one killed and resumed: ~1 min
def test_the_driver_writes_the_table_skips_finished_rows_and_resumes_a_killed_one(
        prepared_corpus, tmp_path):
    env = os.environ | {"PYTHONHASHSEED": "0"}
    straight = tmp_path / "straight"  # two rows at once, each in its own process
    first = subprocess.run(table3(prepared_corpus, straight, "--rows", "D-ls0.2", "--jobs", "2"),
                           check=True, env=env, capture_output=True, text=True)
    assert "(1 of 2 done)" in first.stderr and "min left" in first.stderr, first.stderr
    with open(straight / "table.csv", encoding="utf-8") as f:
        table = list(csv.reader(f))
    assert [r[0] for r in table] == ["row", "base", "D-ls0.2"]
    assert table[2][8] == "0.2" and table[1][2] == "32" and table[1][5] == "4"  # 512/16, 64/16
    assert table[0][-4:] == ["BLEU vs base (± 95 % interval)", "paper BLEU vs base", "verdict",
                             "ran on (seed: machine)"]
    assert table[0][11:13] == ["train PPL", "dev PPL"] and float(table[1][11]) > 1
    assert table[0][14] == "dev BLEU by seed" and table[2][14] == f"1: {table[2][13]}"
    assert table[1][-4:] == ["", "", "", "1: m1"]
    assert table[2][-3:] == ["-0.1", "noise not measured", "1: m1"]
    assert (straight / "table.png").stat().st_size > 10_000
    assert "| base | 6 | 32 | 128 | 8 | 4 | 4 |" in (straight / "table.md").read_text()
    before = (straight / "table.md").read_text()
    assert "recorded: seeds 1;" in before and "Machines: m1 = " in before
    report = subprocess.run(table3(prepared_corpus, straight, "--rows", "A-h1,D-ls0.2",
                                   "--seeds", "1", "2", "--report"),
                            env=env, capture_output=True, text=True)
    assert report.returncode == 0 and "table3 row" not in report.stderr, "nothing trained"
    assert not (straight / "runs" / "A-h1-seed1").exists()
    assert (straight / "table.md").read_text() == before, \
        "rows and seeds not run yet are left out, from the table and from its header"

    killed = tmp_path / "killed"  # the base row finished, then D-ls0.2 killed mid-run
    proc = subprocess.Popen(table3(prepared_corpus, killed, "--rows", "D-ls0.2"), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoints = killed / "runs" / "D-ls0.2-seed1" / "checkpoints"
    deadline = time.monotonic() + 300
    while not (checkpoints.exists() and any(checkpoints.glob("step_*"))):
        assert proc.poll() is None and time.monotonic() < deadline, "the row never saved"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "results" / "D-ls0.2-seed1.json").exists(), "killed before the end"
    base_result = (killed / "results" / "base-seed1.json").stat().st_mtime_ns
    done = subprocess.run(table3(prepared_corpus, killed, "--rows", "D-ls0.2"), check=True,
                          env=env, capture_output=True, text=True)
    assert "table3 row base seed 1 (1 of 2 done): dev ppl" in done.stderr
    recorded_line = next(line for line in done.stderr.splitlines() if "(1 of 2 done)" in line)
    assert "min left" not in recorded_line, "no pace from a row read back"
    assert (killed / "results" / "base-seed1.json").stat().st_mtime_ns == base_result
    assert "resuming from" in done.stderr, done.stderr
    vocab = json.loads((prepared_corpus / "meta.json").read_text())["vocab_size"]
    for name in ("base-seed1", "D-ls0.2-seed1"):
        ours = json.loads((killed / "results" / f"{name}.json").read_text())
        theirs = json.loads((straight / "results" / f"{name}.json").read_text())
        assert ours["model"]["vocab_size"] == vocab, "the model as trained, the data's vocab"
        assert {k: ours[k] for k in ("steps", "dev_ppl", "dev_bleu", "parameters")} == \
            {k: theirs[k] for k in ("steps", "dev_ppl", "dev_bleu", "parameters")}, name
    resumed = json.loads((killed / "results" / "D-ls0.2-seed1.json").read_text())["machines"]
    assert len(resumed) == 2 and resumed[0]["step"] == 0 < resumed[1]["step"], \
        "each stretch of a resumed row says where it ran"
    assert (killed / "table.md").read_text() == (straight / "table.md").read_text().replace(
        str(straight), str(killed))


T3_975 = 3.182446  # Student's t at 97.5 % with 3 degrees of freedom


def test_seed_noise_is_pooled_over_rows_and_scaled_to_the_change():
    from transformer_mt.research.table3 import SeedNoise, verdict

    # variances 2 (1 dof) and 4 (2 dof); a single seed adds nothing
    noise = SeedNoise.pooled({"base": [1.0, 3.0], "A-h1": [2.0, 4.0, 6.0], "A-h4": [5.0]})
    assert noise.sd == pytest.approx((10 / 3) ** 0.5) and noise.dof == 3 and not noise.own
    # Student's t at 97.5 %, from the tables: 3.182446 at 3 degrees of freedom, 12.7062 at 1
    assert noise.t == pytest.approx(T3_975, abs=1e-6)
    assert noise.of_change("A-h1", 3, 2) == pytest.approx(
        T3_975 * (10 / 3) ** 0.5 * (5 / 6) ** 0.5)
    assert SeedNoise.pooled({"base": [30.0, 30.1]}).t == pytest.approx(12.7062, abs=1e-4)
    assert SeedNoise.pooled({"base": [1.0], "A-h1": [2.0]}) is None
    assert verdict(-1.5, -0.9, noise=1.0) == "the paper's direction, outside the noise"
    assert verdict(+1.5, -0.9, noise=1.0) == "opposite to the paper, outside the noise"
    assert verdict(+0.5, -0.9, noise=1.0) == "within the noise"
    assert verdict(+0.5, 0.0, noise=1.0) == "as the paper: no change (within the noise)"
    assert verdict(-1.5, 0.0, noise=1.0) == "a change the paper did not see (outside the noise)"
    assert verdict(-0.5, -0.9, noise=None) == "noise not measured"


def test_a_row_whose_seeds_vary_far_more_keeps_its_own_noise_and_widens_no_other_row():
    from transformer_mt.research.table3 import SeedNoise

    # variances 0.02, 0.08, 0.02 (1 dof each) and C-N8's 24.5: against the pool of the rest
    # (0.04 on 3 dof) F = 612.5, p = 0.00014 < 0.05 / 4 rows, so it leaves the pool; then
    # A-h1's 0.08 against 0.02 on 2 dof: F = 4, p = 0.18, not below 0.05 / 3: the test stops
    seeds = {"base": [30.0, 30.2], "A-h1": [31.0, 31.4], "B-dk16": [29.0, 29.2],
             "C-N8": [20.0, 27.0]}
    noise = SeedNoise.pooled(seeds)
    assert noise.sd == pytest.approx(0.2) and noise.dof == 3
    assert noise.own == {"C-N8": (pytest.approx(24.5 ** 0.5), 1)}
    # every other row's interval is the pool's, as if C-N8 had not been run
    assert noise.of_change("A-h1", 2, 2) == pytest.approx(T3_975 * 0.2)
    # C-N8's is Welch's: variances of the means 12.25 and 0.02, Welch-Satterthwaite dof
    # 12.27^2 / (12.25^2 / 1 + 0.02^2 / 3) = 1.00327, where Student's t at 97.5 % is 12.6088
    assert noise.of_change("C-N8", 2, 2) == pytest.approx(12.6088 * 12.27 ** 0.5, rel=1e-4)
    assert "C-N8 4.95 (1 dof)" in noise.describe()
    # seeds that vary alike stay pooled
    alike = SeedNoise.pooled({"base": [30.0, 30.2], "A-h1": [31.0, 31.4], "B-dk16": [29.0, 29.3]})
    assert not alike.own and alike.dof == 3


ZEN3 = {"cpu": "Zen 3", "bf16": False}


def result(row: str, bleu: float, seed: int, *machines: dict) -> dict:
    """A row's recorded result as the driver writes it, the parts the table reads."""
    model = {"n_encoder_layers": 6, "d_model": 128, "d_ff": 512, "n_heads": 8, "d_k": None,
             "d_v": None, "dropout": 0.1}
    return {"row": row, "seed": seed, "dev_bleu": bleu, "dev_ppl": 10.0, "train_ppl": 8.0,
            "model": model, "label_smoothing": 0.1, "steps": 2000, "parameters": 1e6,
            "machines": [{"step": 0} | m for m in machines or (ZEN3,)]}


def test_the_table_prints_each_change_with_its_interval_and_where_each_seed_ran():
    from transformer_mt.research.table3 import change_cells, machines, select_rows, summarise

    rows = select_rows("A-h1,B-dk16")
    zen3, gpu = ZEN3, {"gpu": "H100", "bf16": True}
    results = [result("base", b, s) for s, b in ((1, 30.0), (2, 31.0), (3, 32.0))] + \
        [result("A-h1", 27.0, 1, gpu), result("A-h1", 28.0, 2, zen3, zen3, gpu)] + \
        [result("B-dk16", 31.5, 1)]
    assert machines(results) == {"Zen 3 in float32": "m1", "H100 in bf16": "m2"}
    lines, noise = summarise(rows, results)
    assert [line["ran_on"] for line in lines] == ["1: m1; 2: m1; 3: m1", "1: m2; 2: m1+m2",
                                                  "1: m1"]
    assert [line["bleu_by_seed"] for line in lines] == ["1: 30.00; 2: 31.00; 3: 32.00",
                                                        "1: 27.00; 2: 28.00", "1: 31.50"]
    # base: variance 1 (2 dof), A-h1: variance 0.5 (1 dof); B-dk16 one seed adds nothing
    assert noise.dof == 3 and noise.sd == pytest.approx((2.5 / 3) ** 0.5)
    change, within = lines[1]["bleu_change"]
    assert change == pytest.approx(-3.5)
    assert within == pytest.approx(T3_975 * (2.5 / 3) ** 0.5 * (1 / 2 + 1 / 3) ** 0.5)
    assert change_cells(lines[1]) == [f"-3.50 ± {within:.2f}", "-0.9",
                                      "the paper's direction, outside the noise"]
    assert change_cells(lines[2])[1:] == ["-0.7", "within the noise"]  # +0.5 against 3.35
    assert change_cells(lines[0]) == ["", "", ""]


def test_a_table_of_the_base_row_alone_has_no_change_to_plot(tmp_path):
    from transformer_mt.research.table3 import select_rows, summarise, write_table

    results = [result("base", 35.5, 3)]
    lines, noise = summarise(select_rows("base"), results)  # e.g. a third seed of base alone
    assert noise is None and len(lines) == 1
    assert write_table(lines, tmp_path, "header") == [tmp_path / "table.md",
                                                      tmp_path / "table.csv"]
    assert "| base |" in (tmp_path / "table.md").read_text()
    assert not (tmp_path / "table.png").exists()
    with_change, _ = summarise(select_rows("A-h1"), results + [results[0] | {"row": "A-h1"}])
    assert write_table(with_change, tmp_path, "header")[-1] == tmp_path / "table.png"
    write_table(lines, tmp_path, "header")  # a base-only table leaves no figure of another behind
    assert not (tmp_path / "table.png").exists()


def test_train_ppl_reads_the_training_batches_of_the_last_tenth():
    import math

    from transformer_mt.research.table3 import train_ppl

    metrics = [{"kind": "train", "step": s, "nll": 5.0 if s <= 900 else 2.0 + s / 1000}
               for s in range(50, 1001, 50)]
    metrics += [{"kind": "valid", "step": 1000, "nll": 0.1}, {"kind": "machine", "step": 0}]
    assert train_ppl(metrics, 1000) == pytest.approx(math.exp((2.95 + 3.0) / 2))


def test_curves_group_rows_as_the_table_with_base_in_every_group(tmp_path):
    from transformer_mt.research.table3 import plot_curves, row_curves

    def run(name: str, group: str, seed: int, valid: list[tuple[int, float]]) -> dict:
        run_dir = tmp_path / "runs" / f"{name}-seed{seed}"
        run_dir.mkdir(parents=True)
        records = [{"kind": "train", "step": 5, "loss": 9.0}]
        records += [{"kind": "valid", "step": s, "bleu": b, "ppl": 100 / b}
                    | ({"encoder_spread": b / 10} if name == "C-N2" else {})  # logged by some
                    for s, b in valid]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        return {"row": name, "group": group, "seed": seed}

    results = [run("base", "base", 1, [(10, 1.0), (20, 2.0)]),
               run("base", "base", 2, [(20, 2.5), (10, 1.5)]),  # out of order: sorted by step
               run("A-h1", "(A)", 1, [(10, 3.0), (20, 4.0), (20, 4.5)]),  # resumed: the last
               run("C-N2", "(C)", 1, [(10, 5.0), (20, 6.0)]),
               {"row": "C-N4", "group": "(C)", "seed": 1}]  # its run directory is gone
    curves = row_curves(results, tmp_path)
    assert list(curves) == ["(A)", "(C)"]
    assert list(curves["(A)"]) == ["base", "A-h1"] and list(curves["(C)"]) == ["base", "C-N2"]
    assert [[r["bleu"] for r in seed] for seed in curves["(A)"]["base"]] == [[1.0, 2.0],
                                                                             [1.5, 2.5]]
    assert [r["bleu"] for r in curves["(A)"]["A-h1"][0]] == [3.0, 4.5]
    assert plot_curves(curves, tmp_path / "curves.png", "t") == tmp_path / "curves.png"
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    one_point = {"(A)": {"base": [[{"step": 10, "bleu": 1.0, "ppl": 9.0}]]}}
    assert plot_curves(one_point, tmp_path / "none.png", "t") is None, "no curve to draw"
    assert not (tmp_path / "none.png").exists()
