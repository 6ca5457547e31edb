"""`transformer-mt table3`: the paper's Table 3 (variations on the Transformer), every row
trained and scored, with the table and its plot."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..config import ConfigError, load_config, preset_names
from ..research.table3 import (
    ORDER,
    OWN_NOISE_ALPHA,
    change_cells,
    machines,
    plot_curves,
    recorded,
    row_curves,
    run_table,
    select_rows,
    summarise,
    write_table,
)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "table3", help="reproduce the paper's Table 3: every model variation, trained and scored",
        description="Train each row of Table 3 (configs/table3/: the base model, (A) heads, "
                    "(B) d_k, (C) size, (D) dropout and label smoothing, (E) learned "
                    "positions, big) for the same --steps on one prepared data directory, "
                    "score its last checkpoint on the validation split (perplexity per subword, "
                    "beam-search BLEU as §6.1; no averaging) and write table.md, table.csv and "
                    "table.png to --out, the paper's numbers beside ours (and curves.png, "
                    "each row's validations against step, with --valid-every). Sizes are the "
                    "paper's divided by --scale (d_model, d_ff, d_k, d_v). Re-running skips "
                    "finished rows and resumes a killed one exactly. Any config key can be "
                    "set for every row with --section.key=value, e.g. --train.max_tokens=4096.")
    p.add_argument("--data", required=True, type=Path, help="prepared data directory")
    p.add_argument("--out", required=True, type=Path, help="where runs, results and the "
                                                          "table are written")
    p.add_argument("--rows", help="groups or rows, comma-separated, e.g. A,C or A-h1,big "
                                  f"(default: all; the base row always runs). Rows: "
                                  f"{', '.join(ORDER)}")
    p.add_argument("--seeds", type=int, nargs="+", default=[1], help="training seeds "
                                                                     "(default: 1)")
    p.add_argument("--steps", type=int, default=100_000,
                   help="training steps of every row, big 3x (default: the paper's 100000)")
    p.add_argument("--scale", type=int, default=1,
                   help="divide d_model, d_ff, d_k and d_v by this (default 1: the paper's "
                        "sizes; 4 or 8 on a CPU)")
    p.add_argument("--valid-every", type=int, default=0, metavar="N",
                   help="also score every row on the validation split every N steps: the "
                        "curve a protocol probe reads (default: only at the end)")
    p.add_argument("--config", default="base",
                   help=f"the base configuration: preset ({', '.join(preset_names())}) or YAML "
                        "(default: base); rows change its model and training keys")
    p.add_argument("--jobs", type=int, default=1,
                   help="rows trained at once, each in its own process with its share of the "
                        "CPU threads (default 1; on a CPU, 2 single-thread jobs train small "
                        "rows faster than 1 job of 2 threads)")
    p.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: the config's, auto)")
    p.add_argument("--report", action="store_true",
                   help="train nothing: write the table of the rows recorded so far (e.g. "
                        "while a run goes on)")
    p.set_defaults(run=run, overrides=[])


def run(args: argparse.Namespace) -> int:
    overrides = list(args.overrides) + ([f"train.device={args.device}"] if args.device else [])
    if args.jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {args.jobs}")
    if args.valid_every < 0:
        raise ConfigError(f"--valid-every must be 0 (the end only) or more, got "
                          f"{args.valid_every}")
    base = load_config(args.config, overrides)
    rows = select_rows(args.rows)
    if args.report:
        results = recorded(rows, args.out, args.seeds)
    else:
        results = run_table(rows, base, data_dir=args.data, out_dir=args.out,
                            scale=args.scale, steps=args.steps, seeds=args.seeds,
                            jobs=args.jobs, valid_every=args.valid_every)
    lines, noise = summarise(rows, results)
    recorded_seeds = sorted({r["seed"] for r in results})
    pooled = ("not measured yet (no row has two seeds)" if noise is None else
              noise.describe())
    header = (f"Table 3 reproduced on {args.data}: the paper's sizes divided by {args.scale} "
              f"(d_model, d_ff, d_k, d_v; N and h as the paper), {args.steps} steps for every "
              f"row (big {3 * args.steps}), the last checkpoint, dev perplexity per subword and "
              f"beam-search BLEU; mean ± sd over each row's seeds ('seeds': how many; recorded: "
              f"seeds {' '.join(map(str, recorded_seeds))}; 'dev BLEU by seed': each seed's); "
              "train PPL: the training batches of the last tenth of the steps (dropout on). The "
              "paper's columns are its newstest2013 numbers at full size. 'BLEU vs base': the "
              "change of the mean against the base row's, ± half its 95 % interval, "
              "t s sqrt(1/n + 1/n_base), with s the sd between seeds pooled over the rows "
              "with several seeds and t Student's 97.5 % quantile at its degrees of freedom "
              f"(a row whose seeds vary more than the pool's, by an F test at "
              f"{OWN_NOISE_ALPHA:.0%} over the rows, keeps its own sd, and its interval is "
              "Welch's): "
              f"{pooled}; 'verdict': that change against the paper's. "
              "Machines: " + "; ".join(f"{key} = {where}" for where, key in
                                       machines(results).items()) + ". "
              "Overrides: " + (" ".join(args.overrides) or "none") + ".")
    print(f"seed noise: {pooled}")
    for line in lines[1:]:
        print(f"{line['row']}: {' | '.join(change_cells(line))}")
    for path in write_table(lines, args.out, header):
        print(path)
    curves = plot_curves(row_curves(results, args.out), args.out / "curves.png",
                         "Table 3: each row's validation against step (black: the base row)")
    if curves:
        print(curves)
    return 0
