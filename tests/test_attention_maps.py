"""Attention weights captured by hooks: the weights each module applied (its output is W^O of
weights @ values), rows summing to 1, masked keys 0, decoder self-attention 0 above the
diagonal, and no output bit changed by capturing."""

import json
import re

import numpy as np
import pytest
import torch

from conftest import random_batch, tiny_model
from transformer_mt.inference.attention_maps import attention_maps
from transformer_mt.model.attention import MultiHeadAttention


@pytest.mark.parametrize("norm_first", [False, True])
def test_captured_weights_are_the_ones_applied_and_change_nothing(norm_first):
    model = tiny_model(2, norm_first=norm_first)
    src = random_batch(1, 3, 0, lengths=[7, 4, 6])
    tgt = random_batch(2, 3, 0, lengths=[5, 6, 3])
    tgt[:, 0] = model.cfg.bos_id
    with torch.no_grad():
        plain = model(src, tgt)
    calls = []  # every module's inputs and output, recorded independently
    handles = [m.register_forward_hook(lambda m, a, out: calls.append((m, a, out)))
               for m in model.modules() if isinstance(m, MultiHeadAttention)]
    try:
        logits, maps = attention_maps(model, src, tgt)
    finally:
        for h in handles:
            h.remove()
    assert torch.equal(logits, plain), "capturing changes no output bit"
    N, B, H = model.cfg.n_encoder_layers, 3, model.cfg.n_heads
    assert maps.encoder.shape == (N, B, H, 7, 7) and maps.decoder.shape == (N, B, H, 6, 6)
    assert maps.cross.shape == (N, B, H, 6, 7)
    weights = {"encoder": list(maps.encoder), "decoder": list(maps.decoder),
               "cross": list(maps.cross)}
    order = {"encoder": 0, "decoder": 0, "cross": 0}
    kinds = {id(layer.self_attn): "encoder" for layer in model.encoder.layers}
    kinds |= {id(layer.self_attn): "decoder" for layer in model.decoder.layers}
    kinds |= {id(layer.cross_attn): "cross" for layer in model.decoder.layers}
    for module, (x, kv, *_mask_and_queries), out in calls:
        kind = kinds[id(module)]
        w_BHTL = weights[kind][order[kind]]
        order[kind] += 1
        mixed = (w_BHTL @ kv[1]).transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)
        torch.testing.assert_close(module.w_o(mixed), out, atol=1e-5, rtol=1e-5)
    src_pad, tgt_pad = src.eq(0), tgt.eq(0)
    for kind, key_pad in (("encoder", src_pad), ("decoder", tgt_pad), ("cross", src_pad)):
        w = getattr(maps, kind)
        torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))
        assert w.masked_select(key_pad[None, :, None, None, :].expand_as(w)).eq(0).all()
    assert torch.triu(maps.decoder, diagonal=1).eq(0).all(), "no weight on later positions"


def test_the_attention_command_writes_weights_and_figures(trained_model, tmp_path, capsys):
    import matplotlib.image
    import numpy as np

    from transformer_mt.cli.main import main

    out = tmp_path / "view"
    assert main(["attention", "--model", str(trained_model), "--source", "a big dog runs .",
                 "--out", str(out), "--from", "dog", "--layer", "1", "--head", "2"]) == 0
    printed = capsys.readouterr().out
    with np.load(out / "attention.npz", allow_pickle=False) as data:
        source, target = list(data["source"]), list(data["target"])
        assert data["encoder"].shape == (2, 4, len(source), len(source))
        assert data["cross"].shape == (2, 4, len(target), len(source))
        assert np.allclose(data["decoder"].sum(-1), 1.0, atol=1e-5)
    assert "▁dog" in source and source[-1] == "</s>" and target[0] == "<s>"
    for name in ("encoder.png", "decoder.png", "cross.png", f"from-{source.index('▁dog')}.png",
                 "head-1-2.png"):
        assert matplotlib.image.imread(out / name).shape[0] > 100, name
        assert str(out / name) in printed
    # bertviz's head-view params: what its own checks require of each entry
    bertviz = json.loads((out / "bertviz.json").read_text(encoding="utf-8"))
    assert [a["name"] for a in bertviz["attention"]] == ["Encoder", "Decoder", "Cross"]
    with np.load(out / "attention.npz", allow_pickle=False) as data:
        for entry, kind in zip(bertviz["attention"], ("encoder", "decoder", "cross"),
                               strict=True):
            attn = np.array(entry["attn"])
            assert np.allclose(attn, data[kind], atol=1e-6)
            assert attn.shape[2:] == (len(entry["left_text"]), len(entry["right_text"]))
        assert bertviz["attention"][2]["left_text"] == list(data["target"])
        assert bertviz["attention"][2]["right_text"] == list(data["source"])
    assert bertviz["include_layers"] == [0, 1] and bertviz["default_filter"] == "0"
    assert main(["attention", "--model", str(trained_model), "--source", "a big dog runs .",
                 "--out", str(tmp_path / "words"), "--words", "--from", "dog", "--format",
                 "svg"]) == 0
    page = (tmp_path / "words" / "attention.html").read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="data">(.*?)</script>', page, re.S).group(1))
    assert data["axes"]["encoder"][0] == ["a", "big", "dog", "runs", ".", "</s>"]
    for name in ("encoder", "decoder", "cross", "from-2"):
        svg = (tmp_path / "words" / f"{name}.svg").read_text(encoding="utf-8")
        assert svg.lstrip().startswith("<?xml") and "<svg" in svg, name
    assert main(["attention", "--model", str(trained_model), "--source", "a dog", "--out",
                 str(out), "--head", "4"]) == 2
    assert "--head 4: the layers have heads 0 .. 3" in capsys.readouterr().err
    assert main(["attention", "--model", str(trained_model), "--source", "a dog", "--out",
                 str(out), "--from", "cat"]) == 2
    assert "--from 'cat' is not a source token" in capsys.readouterr().err


def test_words_merge_pieces_keeping_rows_distributions():
    from transformer_mt.research.attention_view import SentenceAttention

    source = ["▁sun", "flower", "▁grow", "</s>"]
    target = ["<s>", "▁Sonnen", "blume", "n"]
    rng = np.random.default_rng(0)

    def rows(*shape):
        w = rng.random(shape)
        return w / w.sum(-1, keepdims=True)

    decoder = np.tril(rows(1, 2, 4, 4))
    decoder /= decoder.sum(-1, keepdims=True)
    view = SentenceAttention({"encoder": rows(1, 2, 4, 4), "decoder": decoder,
                              "cross": rows(1, 2, 4, 4)}, source, target)
    words = view.words({"<s>", "</s>"})
    assert (words.source, words.target) == (["sunflower", "grow", "</s>"], ["<s>", "Sonnenblumen"])
    e = view.maps["encoder"][0, 1]
    # query word 0 = mean of pieces 0, 1; key word 0 = sum of pieces 0, 1
    assert np.isclose(words.maps["encoder"][0, 1, 0, 0], e[:2, :2].sum() / 2)
    assert np.isclose(words.maps["encoder"][0, 1, 2, 1], e[3, 2])
    assert np.isclose(words.maps["cross"][0, 0, 1, 2], view.maps["cross"][0, 0, 1:, 3].mean())
    for kind, w in words.maps.items():
        assert np.allclose(w.sum(-1), 1.0), kind
    assert np.triu(words.maps["decoder"], 1).max() == 0, "still causal"


def test_the_attention_page_opens_from_disk_and_its_selectors_redraw(trained_model, tmp_path):
    import re
    import shutil

    pytest.importorskip("selenium.webdriver")
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_path):
        pytest.skip("needs chromium and chromium-driver (apt)")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from test_web_page import browser
    from transformer_mt.cli.main import main

    out = tmp_path / "view"
    assert main(["attention", "--model", str(trained_model), "--source", "a big dog runs .",
                 "--out", str(out)]) == 0
    page = (out / "attention.html").read_text(encoding="utf-8")
    assert not re.search(r"(src|href)\s*=|<link|@import|fetch\(", page), "nothing fetched"
    driver = browser(tmp_path / "chromium")
    try:
        driver.get((out / "attention.html").as_uri())
        title = driver.find_element(By.ID, "title")
        assert title.text == "encoder attention, layer 1 of 2 (index 0), head 1"

        def cells():
            return [r.get_attribute("data-w") for r in driver.find_elements(By.CSS_SELECTOR,
                                                                            "#map rect")]

        first = cells()
        Select(driver.find_element(By.ID, "layer")).select_by_value("1")
        assert title.text == "encoder attention, layer 2 of 2 (index 1), head 1"
        assert cells() != first and len(cells()) == len(first)
        Select(driver.find_element(By.ID, "kind")).select_by_value("cross")
        Select(driver.find_element(By.ID, "head")).select_by_value("2")
        assert title.text == "cross attention, layer 1 of 2 (index 0), head 3"
        import numpy as np

        with np.load(out / "attention.npz", allow_pickle=False) as data:
            expected = np.round(data["cross"][0, 2], 5).flatten()
        assert np.allclose([float(w) for w in cells()], expected, atol=1e-5)
    finally:
        driver.quit()
