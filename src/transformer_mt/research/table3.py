"""The paper's Table 3 (variations on the Transformer) in one run.

Each row of configs/table3/ is a change of the base model, written at the paper's sizes with the
row as Table 3 prints it. Every row trains the same number of steps on the same prepared data
(the big row three times as many, as the paper's 300K against 100K) and is scored as the paper
scores it: the last checkpoint (no averaging), perplexity per subword of the development set
and the BLEU of its beam search (§6.1). The sizes are divided by a scale factor K so that a CPU
can run the table: d_model, d_ff, d_k and d_v / K; N, h, dropout and label smoothing as the
row says. Finished rows are skipped on a re-run; a killed row resumes exactly where its last
checkpoint left it (training/resume.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import multiprocessing
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Set
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import PRESETS_DIR, Config, ConfigError, config_from_dict, config_to_dict, read_yaml
from ..data.prepare import load_vocab
from ..storage.files import atomic_write
from ..training.metrics import read_metrics, validations

log = logging.getLogger(__name__)

ROWS_DIR = PRESETS_DIR / "table3"
ORDER = ("base", "A-h1", "A-h4", "A-h16", "A-h32", "B-dk16", "B-dk32", "C-N2", "C-N4", "C-N8",
         "C-d256", "C-d1024", "C-ff1024", "C-ff4096", "D-drop0.0", "D-drop0.2", "D-ls0.0",
         "D-ls0.2", "E-learned", "big")
SCALED = ("d_model", "d_ff", "d_k", "d_v")


@dataclass(frozen=True)
class Row:
    """One row of Table 3: its changes of the base model at the paper's sizes, and the
    paper's numbers (`paper`: N, d_model, d_ff, h, d_k, d_v, P_drop, eps_ls, steps, ppl,
    bleu, params, as printed; None where the paper leaves the cell blank)."""

    name: str
    group: str  # "base", "(A)" ... "(E)", "big"
    paper: dict[str, Any]
    model: dict[str, Any]
    train: dict[str, Any]
    steps_factor: int = 1

    @classmethod
    def load(cls, name: str) -> Row:
        path = ROWS_DIR / f"{name}.yaml"
        data = read_yaml(path.read_text(encoding="utf-8"))
        unknown = set(data) - {"group", "paper", "model", "train", "steps_factor"}
        if unknown:
            raise ConfigError(f"{path}: unknown keys {sorted(unknown)}")
        return cls(name, data["group"], data["paper"], data.get("model") or {},
                   data.get("train") or {}, data.get("steps_factor", 1))


def select_rows(spec: str | None = None) -> list[Row]:
    """The rows `spec` names: groups ("A,C"), row names ("A-h1,big") or None for all; the base
    row always first (every effect is measured against it)."""
    if spec is None:
        return [Row.load(name) for name in ORDER]
    wanted = [s.strip() for s in spec.split(",") if s.strip()]
    chosen = ["base"]
    for item in wanted:
        names = [n for n in ORDER if n == item or n.split("-")[0] == item.strip("()")]
        if not names:
            raise ConfigError(f"--rows: no row or group {item!r} (groups A-E, rows: "
                              f"{', '.join(ORDER)})")
        chosen += [n for n in names if n not in chosen]
    return [Row.load(name) for name in chosen]


def row_config(row: Row, base: Config, *, scale: int, steps: int, seed: int,
               valid_every: int = 0) -> Config:
    """`base` changed as `row` says, its sizes divided by `scale`, trained `steps` (times the
    row's factor) with `seed`, validated at the end (and every `valid_every` steps, for a
    protocol probe's curve), saved at least every quarter of its steps (a killed row loses
    little), keeping its last checkpoint only. The learning rate is
    eq. (3)'s at the row's paper-size d_model (lr_scale / sqrt(scale)): a scaled row follows
    the schedule its full-size row had, and rows of different d_model keep the paper's
    ratio."""
    model = config_to_dict(base.model) | row.model
    for key in SCALED:
        if model[key] is not None:
            if model[key] % scale:
                raise ConfigError(f"table3 row {row.name}: {key} {model[key]} is not divisible "
                                  f"by --scale {scale}")
            model[key] //= scale
    max_steps = steps * row.steps_factor
    train_cfg = config_to_dict(base.train) | row.train | {
        "lr_scale": base.train.lr_scale / math.sqrt(scale),
        "max_steps": max_steps, "max_epochs": 0, "max_minutes": 0.0, "seed": seed,
        "valid_every": valid_every or max_steps,
        "save_every": min(base.train.save_every, max(1, max_steps // 4)),
        "keep_last": 1, "patience": 0}
    data = config_to_dict(base) | {"model": model, "train": train_cfg}
    return config_from_dict(Config, data, f"table3 row {row.name}")


def run_row(row: Row, cfg: Config, data_dir: Path, out_dir: Path, seed: int) -> dict:
    """Train one row with one seed (or resume it), score it, and record the result in
    out_dir/results/ROW-seedS.json; a row already recorded is read back, not trained again."""
    result_path = out_dir / "results" / f"{row.name}-seed{seed}.json"
    if result_path.exists():
        return json.loads(result_path.read_text(encoding="utf-8"))
    # here, not at the top: `transformer-mt table3 --help` reads ORDER without torch
    from ..model.stats import model_stats
    from ..training.loop import train

    run_dir = out_dir / "runs" / f"{row.name}-seed{seed}"
    start = time.monotonic()
    state = train(cfg, data_dir=data_dir, run_dir=run_dir)
    metrics = read_metrics(run_dir)
    final = [r for r in metrics if r["kind"] == "valid" and r["step"] == state.step][-1]
    model = dataclasses.replace(cfg.model, vocab_size=len(load_vocab(data_dir)))  # as trained
    result = {"row": row.name, "group": row.group, "seed": seed, "steps": state.step,
              "dev_ppl": final["ppl"], "dev_bleu": final["bleu"],
              "train_ppl": train_ppl(metrics, state.step),
              "parameters": model_stats(model).parameters,
              "model": config_to_dict(model), "label_smoothing": cfg.train.label_smoothing,
              "seconds_this_session": time.monotonic() - start,
              # where each stretch of it ran (a resumed row may span CPUs and precisions)
              "machines": [{key: r[key] for key in ("step", "cpu", "gpu", "bf16") if key in r}
                           for r in metrics if r["kind"] == "machine"]}
    result_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(result_path, lambda p: p.write_text(json.dumps(result, indent=1) + "\n",
                                                     encoding="utf-8"))
    return result


def train_ppl(metrics: list[dict], step: int) -> float:
    """Perplexity per subword on the training batches of the last tenth of the steps (dropout
    on, no label smoothing): beside dev PPL, how far a row fits its training data beyond what
    it generalises."""
    nll = [r["nll"] for r in metrics if r["kind"] == "train" and r["step"] > step - step / 10]
    return math.exp(statistics.mean(nll))


def recorded(rows: list[Row], out_dir: Path, seeds: list[int]) -> list[dict]:
    """The results already recorded under out_dir for these rows and seeds (a table of the
    run so far)."""
    paths = [out_dir / "results" / f"{row.name}-seed{seed}.json" for row in rows for seed in seeds]
    return [json.loads(p.read_text(encoding="utf-8")) for p in paths if p.exists()]


def minutes_left(elapsed_s: float, tasks: int, done: Set, recorded_before: Set) -> float:
    """The minutes the tasks not done yet take at the pace of those trained in this run (rows
    recorded before it, read back at once or still to be read, neither set the pace nor wait);
    0 where nothing has trained yet or nothing is left."""
    trained, to_go = len(done - recorded_before), tasks - len(done | recorded_before)
    return elapsed_s / trained * to_go / 60 if trained and to_go else 0.0


def run_table(rows: list[Row], base: Config, *, data_dir: Path, out_dir: Path, scale: int,
              steps: int, seeds: list[int], jobs: int = 1, valid_every: int = 0) -> list[dict]:
    """Every row with every seed, `jobs` at a time (each in its own process with its share of
    the CPU's threads unless the config sets train.threads), logging progress; their results
    in table order."""
    if jobs > 1 and not base.train.threads:
        threads = max(1, (os.cpu_count() or 1) // jobs)
        base = dataclasses.replace(base, train=dataclasses.replace(base.train, threads=threads))
    tasks = [(row, row_config(row, base, scale=scale, steps=steps, seed=seed,
                              valid_every=valid_every), seed)
             for row in rows for seed in seeds]
    results: dict[tuple[str, int], dict] = {}
    # rows recorded before this run are read back at once: the time left is the pace of the others
    recorded_before = {(r["row"], r["seed"]) for r in recorded(rows, out_dir, seeds)}
    start = time.monotonic()

    def finished(row: Row, seed: int, result: dict) -> None:
        results[row.name, seed] = result
        minutes = minutes_left(time.monotonic() - start, len(tasks), results.keys(),
                               recorded_before)
        left = f"; about {minutes:.0f} min left" if minutes else ""
        log.info("table3 row %s seed %d (%d of %d done): dev ppl %.2f, BLEU %.2f%s", row.name,
                 seed, len(results), len(tasks), result["dev_ppl"], result["dev_bleu"], left)

    if jobs == 1:
        for row, cfg, seed in tasks:
            log.info("table3 row %s seed %d", row.name, seed)
            finished(row, seed, run_row(row, cfg, data_dir, out_dir, seed))
    else:
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked threads
        with ProcessPoolExecutor(jobs, mp_context=context, initializer=_log_to_stderr) as pool:
            futures = {pool.submit(run_row, row, cfg, data_dir, out_dir, seed): (row, seed)
                       for row, cfg, seed in tasks}
            for future in as_completed(futures):
                finished(*futures[future], future.result())
    return [results[row.name, seed] for row, _, seed in tasks]


def _log_to_stderr() -> None:
    """A worker's logging, as the command's own (cli/main.py)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")


# the chance that the homogeneity test below leaves a row out of the pool although its seeds
# vary as the others' do, shared over the rows tested (Bonferroni)
OWN_NOISE_ALPHA = 0.05


@dataclass(frozen=True)
class SeedNoise:
    """The sd of dev BLEU between seeds, pooled over the rows run with several seeds
    (sqrt(sum (n_i - 1) s_i^2 / sum (n_i - 1))), and its degrees of freedom; `own`: the rows
    whose seeds vary more than the others' (an F test of the row's variance against the
    pool of the rest, at OWN_NOISE_ALPHA over the rows tested: Cochran's test for the largest
    variance, in its F form, repeated while it rejects), with their own sd and dof. A row
    that trains unstably (an encoder that leaves its collapse at a different step each seed)
    would otherwise widen every other row's interval."""

    sd: float
    dof: int
    own: dict[str, tuple[float, int]] = field(default_factory=dict)

    @classmethod
    def pooled(cls, groups: dict[str, list[float]]) -> SeedNoise | None:
        """None where no row has two seeds: the noise is not measured."""
        from scipy.stats import f

        groups = {name: g for name, g in groups.items() if len(g) > 1}
        if not groups:
            return None
        own = {}
        while len(groups) > 2:  # the rest must still be a pool of several rows
            variance, widest = max((statistics.variance(g), name) for name, g in groups.items())
            sd, dof = _pool([g for name, g in groups.items() if name != widest])
            n = len(groups[widest])
            ratio = variance / sd ** 2 if sd else math.inf
            if f.sf(ratio, n - 1, dof) >= OWN_NOISE_ALPHA / len(groups):
                break
            own[widest] = (statistics.stdev(groups.pop(widest)), n - 1)
        return cls(*_pool(list(groups.values())), own)

    @property
    def t(self) -> float:
        """Student's t at 97.5 % for the pooled sd's degrees of freedom (12.71 at 1, 2.09 at
        20): with a sd measured on few seeds the interval widens as it should."""
        return _t975(self.dof)

    def of_change(self, row: str, n: int, n_base: int) -> float:
        """Half the 95 % interval of the difference of `row`'s mean over n seeds and base's
        over n_base: t s sqrt(1/n + 1/n_base) with the pooled s, or Welch's interval where
        either row has its own sd (its dof from Welch-Satterthwaite)."""
        if row not in self.own and "base" not in self.own:
            return self.t * self.sd * math.sqrt(1 / n + 1 / n_base)
        (s_row, dof_row), (s_base, dof_base) = (
            self.own.get(name, (self.sd, self.dof)) for name in (row, "base"))
        a, b = s_row ** 2 / n, s_base ** 2 / n_base
        return _t975((a + b) ** 2 / (a ** 2 / dof_row + b ** 2 / dof_base)) * math.sqrt(a + b)

    def describe(self) -> str:
        """The pooled sd, its dof and t, and the rows left out of the pool with their own."""
        text = f"s = {self.sd:.2f} BLEU over {self.dof} degrees of freedom, t = {self.t:.2f}"
        if self.own:
            text += "; rows with their own sd: " + ", ".join(
                f"{name} {sd:.2f} ({dof} dof)" for name, (sd, dof) in self.own.items())
        return text


def _pool(groups: list[list[float]]) -> tuple[float, int]:
    dof = sum(len(g) - 1 for g in groups)
    return math.sqrt(sum((len(g) - 1) * statistics.variance(g) for g in groups) / dof), dof


def _t975(dof: float) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, dof))


def machines(results: list[dict]) -> dict[str, str]:
    """Each machine and precision a stretch of a recorded row ran on (the GPU's or CPU's
    name, bf16 or float32) -> its short name in the table, m1, m2, ... in order of first
    appearance."""
    names: dict[str, str] = {}
    for r in results:
        for where in map(stretch_machine, r["machines"]):
            names.setdefault(where, f"m{len(names) + 1}")
    return names


def stretch_machine(stretch: dict) -> str:
    return f"{stretch.get('gpu') or stretch['cpu']} in {'bf16' if stretch['bf16'] else 'float32'}"


def ran_on(found: list[dict], names: dict[str, str]) -> str:
    """Where each seed of a row ran, as 'seed: m1' ('m1+m2' for a row resumed elsewhere)."""
    return "; ".join(f"{r['seed']}: " + "+".join(dict.fromkeys(
        names[stretch_machine(m)] for m in r["machines"])) for r in found)


def summarise(rows: list[Row], results: list[dict]) -> tuple[list[dict], SeedNoise | None]:
    """One line per row (rows[0] the base row): mean and sd over seeds, where each seed ran,
    the paper's numbers, and for every other row its BLEU change against base with its
    95 % interval, the paper's change and the verdict; with the pooled seed noise the
    intervals come from."""
    by_row = {row.name: [r for r in results if r["row"] == row.name] for row in rows}
    names = machines(results)
    if not by_row["base"]:
        raise ConfigError("table3: the base row has no result yet; every row is compared "
                          "with it")
    rows = [row for row in rows if by_row[row.name]]  # rows not run yet are left out
    base_bleu = [r["dev_bleu"] for r in by_row["base"]]
    noise = SeedNoise.pooled({row.name: [r["dev_bleu"] for r in by_row[row.name]]
                              for row in rows})
    lines = []
    for row in rows:
        found = by_row[row.name]
        ppl, bleu = [r["dev_ppl"] for r in found], [r["dev_bleu"] for r in found]
        line = {"row": row.name, "group": row.group, "seeds": len(found),
                "model": found[0]["model"], "label_smoothing": found[0]["label_smoothing"],
                "steps": found[0]["steps"], "parameters": found[0]["parameters"],
                "dev_ppl": _mean_sd(ppl), "dev_bleu": _mean_sd(bleu), "paper": row.paper,
                "bleu_by_seed": "; ".join(f"{r['seed']}: {r['dev_bleu']:.2f}" for r in found),
                "train_ppl": _mean_sd([r["train_ppl"] for r in found]),
                "ran_on": ran_on(found, names)}
        if row.name != "base":
            change = statistics.mean(bleu) - statistics.mean(base_bleu)
            within = None if noise is None else noise.of_change(row.name, len(bleu),
                                                                len(base_bleu))
            paper = row.paper["bleu"] - rows[0].paper["bleu"]
            line |= {"bleu_change": [change, within], "paper_bleu_change": paper,
                     "verdict": verdict(change, paper, within)}
        lines.append(line)
    return lines, noise


def verdict(ours: float, paper: float, noise: float | None) -> str:
    """A BLEU change against base read against the paper's: the same direction or the
    opposite outside the seed noise (`noise`: half the change's 95 % interval), or within
    it; a change the paper did not see (0) is 'as the paper' within the noise."""
    if noise is None:
        return "noise not measured"
    if abs(ours) <= noise:
        return "as the paper: no change (within the noise)" if paper == 0 else \
            "within the noise"
    if paper == 0:
        return "a change the paper did not see (outside the noise)"
    if (ours > 0) == (paper > 0):
        return "the paper's direction, outside the noise"
    return "opposite to the paper, outside the noise"


def _mean_sd(values: list[float]) -> list[float | None]:
    return [statistics.mean(values), statistics.stdev(values) if len(values) > 1 else None]


COLUMNS = ("row", "N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop", "eps_ls", "steps",
           "seeds", "train PPL", "dev PPL", "dev BLEU", "dev BLEU by seed", "params x10^6",
           "paper PPL", "paper BLEU", "paper params x10^6", "BLEU vs base (± 95 % interval)",
           "paper BLEU vs base", "verdict", "ran on (seed: machine)")


def table_cells(line: dict) -> list[str]:
    """One summary line as the table's cells, in COLUMNS' order."""
    m, paper = line["model"], line["paper"]

    def stat(pair: list) -> str:
        mean, sd = pair
        return f"{mean:.2f}" if sd is None else f"{mean:.2f} ± {sd:.2f}"

    def cell(value) -> str:
        return "" if value is None else str(value)

    return [line["row"], str(m["n_encoder_layers"]), str(m["d_model"]), str(m["d_ff"]),
            str(m["n_heads"]), str(m["d_k"] or m["d_model"] // m["n_heads"]),
            str(m["d_v"] or m["d_model"] // m["n_heads"]), str(m["dropout"]),
            str(line["label_smoothing"]), str(line["steps"]), str(line["seeds"]),
            stat(line["train_ppl"]), stat(line["dev_ppl"]),
            stat(line["dev_bleu"]), line["bleu_by_seed"], f"{line['parameters'] / 1e6:.1f}",
            cell(paper["ppl"]), cell(paper["bleu"]), cell(paper["params"]), *change_cells(line),
            line["ran_on"]]


def change_cells(line: dict) -> list[str]:
    """The BLEU change against base with its interval, the paper's, the verdict ('' for
    base)."""
    if "bleu_change" not in line:
        return ["", "", ""]
    change, within = line["bleu_change"]
    ours = f"{change:+.2f}" if within is None else f"{change:+.2f} ± {within:.2f}"
    return [ours, f"{line['paper_bleu_change']:+.1f}", line["verdict"]]


def write_table(lines: list[dict], out_dir: Path, header: str) -> list[Path]:
    """table.md (with `header`), table.csv and, where a row but base is recorded, table.png
    under out_dir (where none is, a table.png drawn before is removed: it is not this table's)."""
    import csv
    import io

    rows = [table_cells(line) for line in lines]
    md = [header, "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    md += ["| " + " | ".join(r) + " |" for r in rows]
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows([COLUMNS, *rows])
    paths = [out_dir / "table.md", out_dir / "table.csv"]
    for path, content in zip(paths, ("\n".join(md) + "\n", text.getvalue()), strict=True):
        atomic_write(path, lambda p, c=content: p.write_text(c, encoding="utf-8"))
    figure = plot_table(lines, out_dir / "table.png")
    if figure is None:
        (out_dir / "table.png").unlink(missing_ok=True)
    return [*paths, figure] if figure else paths


def plot_table(lines: list[dict], path: Path) -> Path | None:
    """Each row's change of dev PPL and BLEU against the base row (error bars: the PPL's sd
    over seeds; the BLEU change's 95 % interval), the paper's change marked beside it. None
    where no row but base is recorded: there is no change to draw."""
    base, others = lines[0], lines[1:]
    if not others:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(max(6.0, 0.5 * len(others) + 2), 6), sharex=True)
    for ax, key, paper_key, label in ((axes[0], "dev_ppl", "ppl", "dev PPL"),
                                      (axes[1], "dev_bleu", "bleu", "dev BLEU")):
        x = range(len(others))
        ours = [line[key][0] - base[key][0] for line in others]
        bars = [(line["bleu_change"][1] if key == "dev_bleu" else line[key][1]) or 0.0
                for line in others]
        paper = [line["paper"][paper_key] - base["paper"][paper_key] for line in others]
        ax.errorbar(x, ours, yerr=bars, fmt="o", capsize=3, label="this run")
        ax.plot(x, paper, "x", color="C3", label="the paper (Table 3)")
        # the axis spans the points, not a row's interval of its own noise over few seeds
        # (tens of BLEU): such a bar runs off the axis with its width written beside it
        low, high = min(ours + paper), max(ours + paper)
        pad = max(2 * statistics.median(bars), 0.1 * (high - low)) or 1.0
        low, high = low - pad, high + pad
        ax.set_ylim(low, high)
        for xi, (y, bar) in enumerate(zip(ours, bars, strict=True)):
            if y - bar < low or y + bar > high:
                ax.annotate(f"±{bar:.1f}", (xi, y), xytext=(4, 2), textcoords="offset points",
                            fontsize=7)
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.set_ylabel(f"{label} - base")
        ax.legend(fontsize=8)
    axes[1].set_xticks(range(len(others)), [line["row"] for line in others], rotation=60,
                       fontsize=8)
    fig.suptitle("Table 3: change against the base row")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


Curves = dict[str, dict[str, list[list[dict]]]]  # panel -> line -> each seed's validations


def row_curves(results: list[dict], out_dir: Path) -> Curves:
    """Each recorded row's validation records by seed, in step order (the curve of
    --valid-every), grouped as Table 3 groups its rows, the base row's in every group; read from
    out_dir/runs/ROW-seedS/metrics.jsonl (runs whose directory is gone are left out)."""
    runs: dict[str, list[list[dict]]] = defaultdict(list)
    groups: dict[str, list[str]] = defaultdict(list)
    for r in results:
        run_dir = out_dir / "runs" / f"{r['row']}-seed{r['seed']}"
        if not (run_dir / "metrics.jsonl").exists():
            continue
        runs[r["row"]].append(validations(run_dir))
        if r["row"] != "base" and r["row"] not in groups[r["group"]]:
            groups[r["group"]].append(r["row"])
    return {group: {name: runs[name] for name in ["base", *names] if runs[name]}
            for group, names in groups.items()}


# what curves.png draws of each validation, top to bottom: key, axis label, scale
CURVE_PANELS = (("bleu", "dev BLEU", "linear"), ("ppl", "dev PPL per subword", "log"),
                ("encoder_spread", "encoder spread\n(0: one vector for all words)", "linear"))


def plot_curves(curves: Curves, path: Path, title: str) -> Path | None:
    """Dev BLEU, dev perplexity per subword and the encoder's spread (where the runs logged
    it) against step, a column of panels per group on its own steps (big runs longer), each
    seed a line, a line's seeds one colour, the base row black: whether a row's validation has
    flattened, where rows part from base, and whether an encoder has collapsed. None where no
    run was validated more than once."""
    every_run = [seed for lines in curves.values() for line in lines.values() for seed in line]
    if not any(len(seed) > 1 for seed in every_run):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [p for p in CURVE_PANELS if any(p[0] in r for seed in every_run for r in seed)]
    fig, axes = plt.subplots(len(panels), len(curves), sharex="col", sharey="row",
                             figsize=(3.2 * len(curves) + 1, 3 * len(panels)), squeeze=False)
    for column, (group, lines) in enumerate(curves.items()):
        for i, (name, seeds) in enumerate(lines.items()):
            style = {"color": "black" if name == "base" else f"C{i}", "marker": ".",
                     "linewidth": 1, "alpha": 0.8}
            for k, seed in enumerate(seeds):
                for ax, (key, _, _) in zip(axes[:, column], panels, strict=True):
                    points = [(r["step"], r[key]) for r in seed if key in r]
                    if points:
                        ax.plot(*zip(*points, strict=True), label=name if k == 0 else None,
                                **style)
        axes[0, column].set_title(group)
        axes[0, column].legend(fontsize=7)
        axes[-1, column].set_xlabel("step")
    for ax, (_, label, scale) in zip(axes[:, 0], panels, strict=True):
        ax.set_ylabel(label)
        ax.set_yscale(scale)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
