import json
import os
import pickle

import pytest
import torch
from safetensors.torch import save_file

from conftest import random_batch, tiny_model
from transformer_mt import DecodeConfig, ModelLoadError, beam_search, load_model, save_model
from transformer_mt.storage.model_dir import read_weights
from transformer_mt.storage.names import CONFIG_FILE, WEIGHTS_FILE


@pytest.mark.parametrize("overrides", [
    dict(weight_tying="decoder", positional="learned"),
    dict(weight_tying="three_way"),
    dict(weight_tying="none", sinusoid_layout="concat", position_offset=2),
])
def test_save_load_round_trip_identical_outputs(tmp_path, overrides):
    model = tiny_model(seed=1, **overrides)
    decode = DecodeConfig(beam_size=3, length_penalty=1.0)
    save_model(model, tmp_path / "m", decode=decode)
    random_state = torch.random.get_rng_state()
    loaded, loaded_decode = load_model(tmp_path / "m")
    # no random initialisation was drawn only to be overwritten
    assert torch.equal(torch.random.get_rng_state(), random_state)
    assert loaded.cfg == model.cfg and loaded_decode == decode
    ties = {"three_way": 3, "decoder": 2, "none": 1}[model.cfg.weight_tying]
    assert sum(m.weight is loaded.tgt_embed.tokens.weight for m in (
        loaded.src_embed.tokens, loaded.tgt_embed.tokens, loaded.generator)) == ties
    assert all(p.dtype == torch.float32 and p.requires_grad for p in loaded.parameters())
    src, tgt = random_batch(0, 3, 6), random_batch(1, 3, 5)
    assert torch.equal(loaded(src, tgt), model(src, tgt))
    assert [h[0].tokens for h in beam_search(loaded, src, decode)] == \
        [h[0].tokens for h in beam_search(model, src, decode)]
    assert json.loads((tmp_path / "m" / CONFIG_FILE).read_text())["model"]["d_model"] == 32


def test_tied_matrix_stored_once(tmp_path):
    save_model(tiny_model(), tmp_path)
    from safetensors import safe_open

    with safe_open(str(tmp_path / WEIGHTS_FILE), "pt") as f:
        names = list(f.keys())
    assert sum("tokens.weight" in n or "generator" in n for n in names) == 1


class Payload:
    """Unpickling this runs a shell command that creates a marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("writer", ["pickle", "torch.save"])
def test_pickle_payload_refused_and_not_executed(tmp_path, writer):
    save_model(tiny_model(), tmp_path)
    marker = tmp_path / "pwned"
    weights = tmp_path / WEIGHTS_FILE
    if writer == "pickle":
        weights.write_bytes(pickle.dumps(Payload(marker)))
    else:
        torch.save({"x": Payload(marker)}, weights)
    with pytest.raises(ModelLoadError, match=f"{WEIGHTS_FILE}.*pickle"):
        load_model(tmp_path)
    assert not marker.exists()


def test_truncated_safetensors_refused(tmp_path):
    save_model(tiny_model(), tmp_path)
    weights = tmp_path / WEIGHTS_FILE
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match=f"{WEIGHTS_FILE}: damaged safetensors"):
        load_model(tmp_path)
    weights.write_bytes(data[:100])  # cut inside the header
    with pytest.raises(ModelLoadError, match="header length"):
        load_model(tmp_path)
    weights.write_bytes(data[:3])
    with pytest.raises(ModelLoadError, match="truncated"):
        load_model(tmp_path)


def test_weights_not_matching_config_refused(tmp_path):
    save_model(tiny_model(), tmp_path)
    state = {"encoder.layers.0.ff.w_1.weight": torch.zeros(3, 3)}
    save_file(state, str(tmp_path / "other.safetensors"))
    os.replace(tmp_path / "other.safetensors", tmp_path / WEIGHTS_FILE)
    with pytest.raises(ModelLoadError, match="missing"):
        load_model(tmp_path)
    good = tiny_model()
    save_model(good, tmp_path)
    config = json.loads((tmp_path / CONFIG_FILE).read_text())
    config["model"]["d_ff"] = 48
    (tmp_path / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=r"ff\.w_1\.bias' is \(64,\) .*expected \(48,\)"):
        load_model(tmp_path)


def test_bad_config_refused_naming_file_and_key(tmp_path):
    save_model(tiny_model(), tmp_path)
    path = tmp_path / CONFIG_FILE
    config = json.loads(path.read_text())
    config["model"]["d_modle"] = 8
    path.write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=r"config.json.*unknown config key 'model.d_modle'"):
        load_model(tmp_path)
    path.write_text("{not json")
    with pytest.raises(ModelLoadError, match="config.json: not a valid JSON"):
        load_model(tmp_path)
    path.unlink()
    with pytest.raises(ModelLoadError, match="config.json: missing"):
        load_model(tmp_path)


def test_a_model_saved_with_a_retired_option_loads_only_at_its_kept_value(tmp_path, caplog):
    # decode.knn_eos was removed on 2026-11-28; models saved before still hold it
    model = tiny_model()
    save_model(model, tmp_path)
    path = tmp_path / CONFIG_FILE
    config = json.loads(path.read_text())
    config["decode"]["knn_eos"] = "mix"  # what kNN-MT does now
    path.write_text(json.dumps(config))
    loaded, decode = load_model(tmp_path)
    assert decode == DecodeConfig()
    assert any("config.json: ignoring the retired config key 'decode.knn_eos'" in r.getMessage()
               for r in caplog.records)
    for name, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value)
    config["decode"]["knn_eos"] = "model"  # a behaviour this version no longer has
    path.write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=r"config.json: config key 'decode.knn_eos' was "
                                             r"retired .*holding 'mix'"):
        load_model(tmp_path)


def test_a_checkpoint_with_the_old_serve_section_loads_without_a_warning(tmp_path, caplog):
    # a training run's config.json (its checkpoints') holds every section, serve's too, which
    # held max_output_tokens until 2026-12-05; loading a model reads only model and decode
    save_model(tiny_model(), tmp_path, decode=DecodeConfig(beam_size=5))
    path = tmp_path / CONFIG_FILE
    config = json.loads(path.read_text())
    config["serve"] = {"port": 8000, "max_output_tokens": 512}
    path.write_text(json.dumps(config))
    _, decode = load_model(tmp_path)
    assert decode == DecodeConfig(beam_size=5)
    assert not [r for r in caplog.records if "retired" in r.getMessage()]


def test_a_model_saved_before_knn_and_mbr_left_the_core_still_loads(tmp_path, caplog):
    # until 2026-12-01 every model directory's decode section held kNN-MT's and MBR's settings
    save_model(tiny_model(), tmp_path, decode=DecodeConfig(beam_size=5))
    path = tmp_path / CONFIG_FILE
    config = json.loads(path.read_text())
    config["decode"] |= {"knn_k": 8, "knn_temperature": 10.0, "knn_lambda": 0.4,
                         "knn_probe": 32, "mbr": "none"}
    path.write_text(json.dumps(config))
    _, decode = load_model(tmp_path)
    assert decode == DecodeConfig(beam_size=5)
    ignored = [r.getMessage() for r in caplog.records if "ignoring the retired" in r.getMessage()]
    assert len(ignored) == 1  # one warning naming every key, and where they went
    assert all(f"'decode.{key}'" in ignored[0] for key in
               ("knn_k", "knn_temperature", "knn_lambda", "knn_probe", "mbr"))
    assert "examples/knn_mt/" in ignored[0] and "examples/rerank/" in ignored[0]
    config["decode"]["mbr"] = "bleu"  # reranking by MBR is the example's now, not the model's
    path.write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=r"'decode.mbr' was retired .*examples/rerank/"):
        load_model(tmp_path)


@pytest.mark.parametrize("header_len", [128, 384, 0x4B50])  # first bytes 0x80 or "PK"
def test_valid_file_whose_header_length_looks_like_a_pickle_loads(tmp_path, header_len):
    import struct

    header = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    path = tmp_path / "w.safetensors"
    path.write_bytes(struct.pack("<Q", header_len) + header.ljust(header_len) +
                     struct.pack("<2f", 1.5, -2.0))
    assert read_weights(path)["a"].tolist() == [1.5, -2.0]
