import json

import pytest

from transformer_mt import ModelConfig, load_config
from transformer_mt.config import PRESETS_DIR, ConfigError, config_to_dict, preset_names


def test_presets_follow_the_paper():
    base, big = load_config("base"), load_config("big")
    assert (base.model.d_model, base.model.d_ff, base.model.n_heads, base.model.dropout) == \
        (512, 2048, 8, 0.1)
    assert (big.model.d_model, big.model.d_ff, big.model.n_heads, big.model.dropout) == \
        (1024, 4096, 16, 0.3)
    assert base.model.n_encoder_layers == big.model.n_decoder_layers == 6
    small, tiny = load_config("small").model, load_config("tiny").model
    assert (small.n_encoder_layers, small.d_model, small.n_heads, small.d_ff) == (3, 256, 4, 1024)
    assert (tiny.n_encoder_layers, tiny.d_model) == (2, 64)


def test_every_shipped_preset_loads():
    # a misspelt key or a value of the wrong type in any shipped YAML is a ConfigError here
    names = preset_names()
    assert {"base", "big", "multi30k", "tatoeba", "wmt14-base"} <= set(names)
    for name in names:
        assert load_config(name).model.d_model > 0


def test_defaults_are_the_paper():
    cfg = load_config("base")
    m, d = cfg.model, cfg.decode
    assert not m.norm_first and m.positional == "sinusoidal" and m.scale_embeddings
    assert m.weight_tying == "three_way" and m.activation == "relu"
    assert m.head_dim_k == m.head_dim_v == 64
    assert (d.beam_size, d.length_penalty, d.max_length_offset) == (4, 0.6, 50)
    t = cfg.train
    assert (t.adam_beta1, t.adam_beta2, t.adam_eps) == (0.9, 0.98, 1e-9)
    assert (t.warmup_steps, t.lr_scale, t.label_smoothing, t.max_tokens) == (4000, 1.0, 0.1, 25000)
    assert (t.clip_norm, t.bf16, t.accumulate) == (0.0, False, 1)
    assert cfg.data.vocab_model_type == "bpe"


def test_overrides_and_yaml_file(tmp_path):
    cfg = load_config("tiny", ["model.n_heads=2", "--decode.beam_size=6", "model.d_k=null"])
    assert cfg.model.n_heads == 2 and cfg.decode.beam_size == 6
    path = tmp_path / "mine.yaml"
    path.write_text("model:\n  d_model: 128\n  dropout: 0\n")
    cfg = load_config(path)
    assert cfg.model.d_model == 128 and cfg.model.dropout == 0.0


@pytest.mark.parametrize(("value", "parsed"), [("auto", "auto"), ("true", True), ("false", False)])
def test_bf16_is_a_switch_or_auto(value, parsed):
    assert load_config("tiny", [f"train.bf16={value}"]).train.bf16 == parsed


def test_a_retired_option_in_a_users_config_is_an_error_that_says_so():
    with pytest.raises(ConfigError, match=r"config key 'decode.knn_eos' was retired \(removed on"):
        load_config("tiny", ["decode.knn_eos=mix"])


def test_the_retired_serve_output_cap_points_to_decode_max_length():
    with pytest.raises(ConfigError, match=r"'serve.max_output_tokens' was retired .*"
                                          r"decode.max_length is the output cap"):
        load_config("tiny", ["serve.max_output_tokens=100"])


def test_exponent_floats_without_a_dot(tmp_path):
    """YAML 1.1 reads 1e-8 as a string; a config means a float (and an int stays an int)."""
    path = tmp_path / "eps.yaml"
    path.write_text("train:\n  adam_eps: 1e-8\n  lr_scale: 2E+0\n  warmup_steps: 100\n")
    cfg = load_config(path, ["train.label_smoothing=5e-2", "model.dropout=-0.0e0"])
    assert cfg.train.adam_eps == 1e-8 and cfg.train.lr_scale == 2.0
    assert cfg.train.label_smoothing == 0.05 and cfg.model.dropout == 0.0
    assert cfg.train.warmup_steps == 100 and type(cfg.train.warmup_steps) is int
    with pytest.raises(ConfigError, match="'train.warmup_steps' must be int, got 1000.0"):
        load_config(path, ["train.warmup_steps=1e3"])


@pytest.mark.parametrize("override, message", [
    ("model.d_modle=3", "unknown config key 'model.d_modle'"),
    ("trian.steps=3", "unknown config key 'trian'"),
    ("model.d_model=big", "'model.d_model' must be int"),
    ("model.norm_first=1", "'model.norm_first' must be bool"),
    ("model.positional=rotary", "'model.positional' must be one of"),
    ("train.bf16=always", "'train.bf16' must be bool or 'auto', got 'always'"),
    ("train.bf16=1", "'train.bf16' must be bool or 'auto', got 1"),
    ("model.d_k=big", "'model.d_k' must be int, got 'big'"),
    ("model.n_heads=7", "not divisible by n_heads=7"),
    ("decode.n_best=9", "n_best=9 exceeds beam_size=4"),
    ("decode.beam_stop=never", "'decode.beam_stop' must be one of"),
    ("model", "not of the form"),
    ("train.compile=cuda_graphs", "set train.shape_buckets"),
    ("train.compile=graphs", "'train.compile' must be bool or 'cuda_graphs', got 'graphs'"),
    ("train.shape_buckets=-1", "train.shape_buckets must be >= 0"),
])
def test_bad_overrides_name_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config("base", [override])


def test_unknown_preset():
    names = "base, big, multi30k, parsing, parsing-cpu, small, tatoeba, tiny, wmt14-base, wmt14-big"
    with pytest.raises(ConfigError, match=f"unknown preset 'huge'.*{names}"):
        load_config("huge")


def test_a_folder_named_like_a_preset_does_not_shadow_it(tmp_path, monkeypatch):
    """`--config multi30k` run where the working directory holds a folder `multi30k` (a run's
    output, say) is still the preset, and a file of that name is still that file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny").mkdir()
    assert load_config("tiny") == load_config(PRESETS_DIR / "tiny.yaml")
    (tmp_path / "mine").write_text("model:\n  d_model: 64\n  n_heads: 4\n")
    assert load_config("mine").model.d_model == 64


def test_validation_in_dataclass():
    with pytest.raises(ValueError, match="dropout"):
        ModelConfig(dropout=1.5)
    with pytest.raises(ValueError, match="eos_id"):
        ModelConfig(vocab_size=3)


def test_the_multi30k_preset_is_the_recipe_of_the_recorded_runs():
    """`--config multi30k` (the README's quickstart) is the recipe the post-norm seeds of
    multi30k-preset-postnorm-vs-prenorm trained with: their recorded config.json, but for the
    seed, the budget (18,000 steps, preset_norms.sh's stand-in for the preset's 88 minutes,
    with checkpoints spread over the cooldown) and the threads."""
    import json

    from conftest import REPO
    from transformer_mt.config import Config, config_from_dict, config_to_dict, without_retired

    saved = json.loads((REPO / "benchmarks/results/multi30k-preset-postnorm-vs-prenorm/runs"
                        / "postnorm-seed1/config.json").read_text())
    sections = {k: v for k, v in without_retired(saved, "seed 1").items()
                if k in ("model", "data", "train", "decode")}
    recorded = config_to_dict(config_from_dict(Config, sections))
    budget = ["train.max_minutes=0", "train.max_steps=18000", "train.cooldown_saves=5",
              "train.threads=1"]
    preset = config_to_dict(load_config("multi30k", ["train.seed=1", *budget]))
    recorded["model"]["vocab_size"] = preset["model"]["vocab_size"]  # set from the data
    assert {k: preset[k] for k in ("model", "data", "train", "decode")} == \
        {k: recorded[k] for k in ("model", "data", "train", "decode")}
    assert load_config("multi30k").train.cooldown_minutes == pytest.approx(20, abs=0.01)


def share_not_minutes(preset: dict) -> dict:
    """The recorded runs' 20-minute cooldown, which the presets now give as a share of the
    budget (the same minutes at the recorded budget, asserted beside)."""
    return {"lr_cooldown_minutes": 0.0, "lr_cooldown_share": preset["train"]["lr_cooldown_share"]}


def test_the_tatoeba_preset_is_the_recipe_of_the_recorded_runs():
    """`--config tatoeba` is what both recorded Tatoeba runs trained with (85 of its 90
    minutes, one thread each), with the length penalty they chose on dev."""
    import json

    from conftest import REPO
    from transformer_mt.config import Config, config_from_dict, config_to_dict

    preset = config_to_dict(load_config("tatoeba", ["train.max_minutes=85", "train.threads=1"]))
    for pair in ("de-en", "en-de"):
        folder = REPO / "benchmarks/results" / f"tatoeba-{pair}"
        saved = json.loads((folder / "config.json").read_text())
        recorded = config_to_dict(config_from_dict(Config, {
            k: v for k, v in saved.items() if k in ("model", "data", "train", "decode")}))
        recorded["model"]["vocab_size"] = preset["model"]["vocab_size"]  # set from the data
        assert preset["model"] == recorded["model"] and preset["data"] == recorded["data"]
        assert preset["train"] == recorded["train"] | share_not_minutes(preset), pair
        assert load_config("tatoeba", ["train.max_minutes=85"]).train.cooldown_minutes == \
            pytest.approx(20, abs=0.01)
        chosen = json.loads((folder / "results.json").read_text())["alpha_selected_on_val"]
        assert preset["decode"] == recorded["decode"] | {"length_penalty": chosen}


def test_the_wmt14_presets_are_the_papers_recipes():
    from transformer_mt.config import TrainConfig

    base, big = load_config("wmt14-base"), load_config("wmt14-big")
    assert base.model == load_config("base").model and big.model == load_config("big").model
    assert 8 * base.train.max_tokens == 8 * big.train.max_tokens == 25_000  # on 8 GPUs (§5.1)
    assert (base.train.max_steps, big.train.max_steps) == (100_000, 300_000)  # §5.2
    assert (base.train.keep_last, big.train.keep_last) == (5, 20)  # §6.1's averages
    assert base.train.save_every_minutes == big.train.save_every_minutes == 10
    assert base.data.vocab_size == big.data.vocab_size == 37_000
    paper = TrainConfig()
    for key in ("warmup_steps", "lr_scale", "adam_beta1", "adam_beta2", "adam_eps",
                "label_smoothing", "accumulate", "bf16", "clip_norm"):
        assert getattr(base.train, key) == getattr(big.train, key) == getattr(paper, key), key
    assert base.decode == big.decode == load_config("base").decode  # beam 4, alpha 0.6


def test_a_runs_config_json_is_a_config_less_the_runs_record(tmp_path):
    """`train --config runs/X/config.json` trains run X's config again (with overrides); the
    record of the run (its data directory, languages) is not config, and a YAML file keeps
    refusing such keys."""
    cfg = load_config("tiny", ["train.seed=7"])
    run = config_to_dict(cfg) | {"data_dir": "/data/m30k", "languages": ["en", "de"]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(run))
    assert load_config(path) == cfg
    assert load_config(path, ["train.lr_scale=1.25"]).train.lr_scale == 1.25
    (tmp_path / "config.yaml").write_text(json.dumps(run))
    with pytest.raises(ConfigError, match="unknown config key 'data_dir'"):
        load_config(tmp_path / "config.yaml")
