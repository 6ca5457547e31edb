"""Fine-tuning: a run that starts from a model directory's weights (`train --init-from`), its
config taken from the model and its data prepared with the model's vocabulary
(`prepare --vocabulary`), so an imported OPUS-MT or fairseq model adapts to new data."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..config import ConfigError, ModelConfig, fields_where
from ..data.prepare import vocabulary_sha256
from ..storage.model_dir import load_config_json
from ..storage.names import CONFIG_FILE

# what --init-from lets a user change of the model it starts from (declared `fine_tunable` in
# config.py): regularisation only
FINE_TUNING_OPTIONS = fields_where(ModelConfig, "fine_tunable")


def init_model_config(model_dir: Path, overrides: dict) -> ModelConfig:
    """The config of the model `model_dir` that a run --init-from it trains, with `overrides`
    (a dict of model fields) of FINE_TUNING_OPTIONS only; other fields are an error."""
    other = sorted(set(overrides) - set(FINE_TUNING_OPTIONS))
    if other:
        raise ConfigError(f"--init-from {model_dir}: model.{other[0]} is the model's own (only "
                          f"{', '.join('model.' + k for k in FINE_TUNING_OPTIONS)} can change)")
    model_cfg, _ = load_config_json(model_dir / CONFIG_FILE)
    return dataclasses.replace(model_cfg, **overrides)


def check_init_data(model_cfg: ModelConfig, model_dir: Path, data_dir: Path, meta: dict) -> None:
    """The data must be prepared with `model_dir`'s vocabulary and special ids."""
    how = f"prepare the data with --vocabulary {model_dir}"
    if vocabulary_sha256(model_dir) != meta.get("vocab_sha256"):
        raise ConfigError(f"{data_dir}: its vocabulary is not {model_dir}'s ({how})")
    specials = meta.get("special_ids") or {"pad": 0, "bos": 2, "eos": 3}
    wanted = {"pad": model_cfg.pad_id, "bos": model_cfg.bos_id, "eos": model_cfg.eos_id}
    if specials != wanted:
        raise ConfigError(f"{data_dir}/meta.json: special ids {specials}, {model_dir}'s "
                          f"{wanted} ({how})")
