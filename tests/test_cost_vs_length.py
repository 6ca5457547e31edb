"""The cost-versus-length benchmark (benchmarks/speed/cost_vs_length.py, the paper's Table 1
measured): its FLOP model and fit find the crossovers they should, and its driver writes the
table, the plot and one measured cell per engine, task and length. No timing is asserted."""

import importlib.util
import json
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks" / "speed"))  # it imports engines.py beside it
spec = importlib.util.spec_from_file_location("cost_vs_length",
                                              REPO / "benchmarks/speed/cost_vs_length.py")
cvl = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cvl)


def test_the_flop_model_matches_a_hand_count_of_the_base_shape():
    cfg = cvl.shape_config("base", 1024)
    summary = cvl.summarise([], cfg, 4096)["flop_model"]
    # per query token, per key: QK^T and weights @ V over 8 heads x 64 = 512 dims, 2 FLOPs a
    # multiply-add; 6 encoder self-attentions, 6 decoder self- and 6 cross-attentions
    assert summary["per_length_flops_B"] == 2 * (512 + 512) * (6 + 2 * 6)
    projections = 2 * 512 * 512 * 4  # Q, K, V, output
    ffn = 2 * 2 * 512 * 2048
    per_token = 6 * (projections + ffn) + 6 * (2 * projections + ffn) + 2 * 512 * 8000
    assert summary["per_token_flops_A"] == per_token
    assert summary["attention_dominates_from_length"] == pytest.approx(per_token / 36864)


def test_the_fit_finds_where_the_length_term_overtakes_the_constant_one():
    cells = [{"engine": "transformer-mt", "task": "train", "length": n,
              "median_s": 0.5 + 0.001 * n} for n in (8, 64, 512)]
    cells += [{"engine": "transformer-mt", "task": "decode", "length": 8, "median_s": 9.0}]
    got = cvl.summarise(cells, cvl.shape_config("tiny", 512), 4096)["transformer-mt"]
    assert got["attention_dominates_from_length"] == pytest.approx(500)
    assert got["step_s_at_length_0"] == pytest.approx(0.5)
    assert "hf-marian" not in cvl.summarise(cells, cvl.shape_config("tiny", 512), 4096)


@pytest.mark.slow  # a process a cell: ~25 s
def test_the_driver_measures_every_cell_in_its_own_process(tmp_path):
    result = cvl.main(["--out", str(tmp_path), "--shape", "tiny", "--lengths", "8", "32",
                       "--tokens", "64", "--engines", "ours", "--repeats", "1"])
    cells = {(c["task"], c["length"]): c for c in result["cells"]}
    assert set(cells) == {("train", 8), ("train", 32), ("decode", 8), ("decode", 32)}
    assert cells["train", 8]["sentences"] == 8 and cells["train", 32]["sentences"] == 2
    assert cells["decode", 32]["sentences"] == 1
    for c in cells.values():
        assert c["engine"] == "transformer-mt" and len(c["seconds"]) == 1
        assert c["peak_rss_mib"] >= c["rss_after_build_mib"] > 0
    assert json.loads((tmp_path / "results.json").read_text())["cells"] == result["cells"]
    table = (tmp_path / "table.md").read_text().splitlines()
    assert table[0].startswith("| length | sentences/step | train step s: transformer-mt")
    assert [row.split(" | ")[0] for row in table[2:]] == ["| 8", "| 32"]
    assert (tmp_path / "cost-vs-length.png").stat().st_size > 10_000
