"""The parsing table's intervals (benchmarks/parsing/bootstrap.py): F1 is the strict summary's
of `parse score`, a perfect parse has no spread, and a paired difference of a worse file is
negative throughout its interval."""

import json
import random
import re
import subprocess
import sys

from conftest import REPO
from test_parsing import tree
from transformer_mt.research.evalb import score_files, summary

SCRIPT = REPO / "benchmarks" / "parsing" / "bootstrap.py"


def test_bootstrap_intervals_of_a_perfect_and_a_flattened_parse(tmp_path):
    rng = random.Random(0)
    gold_lines = [tree(rng)[2:-2] for _ in range(40)]  # without the unlabeled root
    gold = tmp_path / "gold"
    gold.write_text("\n".join(gold_lines) + "\n", encoding="utf-8")
    flat = tmp_path / "flat"  # every third parse: its words under one S, a word mismatch too
    lines = []
    for i, line in enumerate(gold_lines):
        if i % 3:
            lines.append(line)
        else:
            leaves = re.findall(r"\(\S+ [^()\s]+\)", line)  # "(DT the)", ...
            if i == 3:
                leaves = leaves[1:]  # EVALB leaves it out; the strict summary does not
            lines.append(f"(S {' '.join(leaves)})")
    flat.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "boot.json"
    subprocess.run([sys.executable, str(SCRIPT), "--gold", str(gold), "--test", str(gold),
                    str(flat), "--resamples", "200", "--json", str(out)], check=True,
                   env={"PYTHONPATH": str(REPO / "src")}, capture_output=True)
    perfect, worse = json.loads(out.read_text())
    assert perfect["f1"] == 100.0 and perfect["interval"] == [100.0, 100.0]
    strict = summary(score_files(gold, flat), strict=True)
    assert summary(score_files(gold, flat))["errors"] == 1
    assert abs(worse["f1"] - strict["f1"]) < 1e-9 and worse["f1"] < 100
    low, high = worse["interval"]
    assert low < worse["f1"] < high
    assert worse["minus_first"] == worse["f1"] - 100
    assert worse["minus_first_interval"][1] < 0
