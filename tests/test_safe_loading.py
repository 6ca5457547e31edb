"""Malicious and malformed weight files at every entry point: the Python API, `translate`,
`train` resume, `average`, and the foreign-weights import. Every one is refused with
ModelLoadError (or exit code 2 naming the file), and an audit hook sees no process creation,
no os.system and no pickle global lookup while loading. The package's source uses no pickle."""

import io
import json
import os
import pickle
import re
import shutil
import struct
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from conftest import REPO, tiny_model
from transformer_mt.cli.main import main
from transformer_mt.config import load_config
from transformer_mt.inference.translator import Translator
from transformer_mt.storage import names
from transformer_mt.storage.files import sha256_file
from transformer_mt.storage.model_dir import (
    ModelLoadError,
    load_model,
    read_foreign_weights,
    save_model,
    unique_state_dict,
)
from transformer_mt.storage.run_dir import checkpoint_dirs
from transformer_mt.training.checkpoint import average_checkpoints
from transformer_mt.training.loop import train

DANGEROUS = ("os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "subprocess.",
             "pickle.find_class", "os.startfile")
AUDIT = {"on": False, "events": []}


def _audit(event, args):
    if AUDIT["on"] and event.startswith(DANGEROUS):
        AUDIT["events"].append(event)


sys.addaudithook(_audit)  # cannot be removed; records only while AUDIT["on"]


class Audited:
    def __enter__(self):
        AUDIT["events"].clear()
        AUDIT["on"] = True

    def __exit__(self, *exc):
        AUDIT["on"] = False
        assert AUDIT["events"] == [], AUDIT["events"]


class Payload:
    """Unpickling this runs a shell command that creates a marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def torch_zip(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def header_file(header: dict, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def variants(marker: Path, valid: bytes, model) -> dict[str, bytes]:
    state = unique_state_dict(model)
    name = next(iter(state))
    wrong_shape = dict(state) | {name: torch.zeros(3, 3)}
    wrong_dtype = dict(state) | {name: state[name].long()}
    missing = {k: v for k, v in state.items() if k != name}
    out = {
        "pickle protocol 2": pickle.dumps(Payload(marker), protocol=2),
        "pickle protocol 0": pickle.dumps(Payload(marker), protocol=0),
        "torch.save zip": torch_zip({"w": Payload(marker)}),
        "truncated": valid[: len(valid) // 2],
        "empty": b"",
        "oversized header": struct.pack("<Q", 2**40) + b"{}",
        "header not JSON": struct.pack("<Q", 16) + b"not json at all!" + b"\0" * 8,
        "overlapping tensors": header_file(
            {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
             "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8),
        "offsets past the end": header_file(
            {"a": {"dtype": "F32", "shape": [1000], "data_offsets": [0, 4000]}}, b"\0" * 8),
    }
    for label, tensors in (("wrong shape", wrong_shape), ("wrong dtype", wrong_dtype),
                           ("missing tensor", missing)):
        buffer_path = marker.parent / f"{label}.safetensors"
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(buffer_path))
        out[label] = buffer_path.read_bytes()
    return out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, corpus_vocab):
    root = tmp_path_factory.mktemp("model")
    model = tiny_model(vocab_size=300)
    save_model(model, root / "good", vocab_path=corpus_vocab.path)
    return root / "good", model


def bad_copies(model_dir, tmp_path):
    good, model = model_dir
    marker = tmp_path / "PWNED"
    valid = (good / names.WEIGHTS_FILE).read_bytes()
    for label, data in variants(marker, valid, model).items():
        bad = tmp_path / re.sub(r"\W", "_", label)
        shutil.copytree(good, bad)
        (bad / names.WEIGHTS_FILE).write_bytes(data)
        yield label, bad, marker


def test_python_api_and_translate_refuse_every_bad_file(model_dir, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("a dog runs .\n")
    count = 0
    for label, bad, marker in bad_copies(model_dir, tmp_path):
        weights = str(bad / names.WEIGHTS_FILE)
        with Audited():
            with pytest.raises(ModelLoadError, match=re.escape(weights)):
                load_model(bad)
            with pytest.raises(ModelLoadError, match=re.escape(weights)):
                Translator.from_dir(bad)
            code = main(["translate", "--model", str(bad), "--input", str(tmp_path / "in.txt")])
        assert code == 2, label
        assert weights in capsys.readouterr().err, label
        assert not marker.exists(), label
        count += 1
    assert count == 12
    load_model(model_dir[0])  # the good directory loads


@pytest.fixture(scope="module")
def trained_run(prepared_corpus, tmp_path_factory):
    run = tmp_path_factory.mktemp("run") / "run"
    cfg = load_config("tiny", ["train.max_steps=2", "train.save_every=2", "train.threads=1",
                               "train.valid_bleu=false", "train.max_tokens=800"])
    train(cfg, data_dir=prepared_corpus, run_dir=run)
    return run, cfg


def resign(path: Path) -> None:
    """Rewrite the manifest so the bad file passes the checksum (an attacker would)."""
    listed = sorted(p.name for p in path.iterdir() if p.name != names.MANIFEST_FILE)
    (path / names.MANIFEST_FILE).write_text(
        "".join(f"{sha256_file(path / n)}  {n}\n" for n in listed))


@pytest.mark.parametrize("target", [names.WEIGHTS_FILE, names.OPTIMIZER_FILE])
def test_resume_and_average_refuse_every_bad_checkpoint(trained_run, prepared_corpus, model_dir,
                                                        tmp_path, capsys, target):
    run, cfg = trained_run
    good = checkpoint_dirs(run)[-1]
    marker = tmp_path / "PWNED"
    count = 0
    for label, data in variants(marker, (good / target).read_bytes(), model_dir[1]).items():
        bad_run = tmp_path / re.sub(r"\W", "_", label)
        shutil.copytree(run, bad_run)
        bad = checkpoint_dirs(bad_run)[-1]
        (bad / target).write_bytes(data)
        resign(bad)
        with Audited():
            with pytest.raises(ModelLoadError, match=re.escape(str(bad / target))):
                train(cfg, data_dir=prepared_corpus, run_dir=bad_run)
            if target == names.WEIGHTS_FILE:
                with pytest.raises(ModelLoadError, match=re.escape(str(bad / target))):
                    average_checkpoints([bad], tmp_path / "avg")
                assert main(["average", "--run-dir", str(bad_run), "--last", "1", "--out",
                             str(tmp_path / "avg")]) == 2
                assert str(bad / target) in capsys.readouterr().err
        assert not marker.exists(), label
        count += 1
    assert count == 12


def test_foreign_weights_use_the_restricted_unpickler_only(tmp_path, model_dir):
    marker = tmp_path / "PWNED"
    state = unique_state_dict(model_dir[1])
    good = tmp_path / "good.bin"
    good.write_bytes(torch_zip(state))
    loaded = read_foreign_weights(good)
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], state[k]) for k in state)
    bad = {"payload.pt": torch_zip({"w": Payload(marker)}),
           "payload.bin": pickle.dumps(Payload(marker), protocol=2),
           "nested.pt": torch_zip({"model": state}),
           "not_tensors.pth": torch_zip({"w": [1, 2, 3]}),
           "payload.safetensors": pickle.dumps(Payload(marker), protocol=2),
           "payload.pkl": pickle.dumps(Payload(marker), protocol=2)}
    for name, data in bad.items():
        (tmp_path / name).write_bytes(data)
        with Audited(), pytest.raises(ModelLoadError, match=re.escape(str(tmp_path / name))):
            read_foreign_weights(tmp_path / name)
    assert not marker.exists()


def test_no_pickle_in_the_package_source():
    """The only deserialiser of pickles is load_torch_file's torch.load(weights_only=True)."""
    offending = []
    for path in sorted((REPO / "src" / "transformer_mt").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if re.search(r"\bimport pickle|\bpickle\.|\bdill\b|\bjoblib\b|allow_pickle=True|"
                         r"\bshelve\b|marshal\.load", code):
                offending.append(f"{path.name}:{number}: {line.strip()}")
            if "torch.load(" in code and "weights_only=True" not in code:
                offending.append(f"{path.name}:{number}: {line.strip()}")
    assert offending == []
    loads = [p.name for p in (REPO / "src" / "transformer_mt").rglob("*.py")
             if "torch.load(" in p.read_text()]
    assert loads == ["model_dir.py"]
