import logging
import re
import subprocess
import sys

import pytest
import torch

from transformer_mt import ModelConfig, Transformer, save_model
from transformer_mt.cli.main import build_parser, main


def test_info_prints_parameters_and_flops(capsys):
    assert main(["info", "--config", "base"]) == 0
    out = capsys.readouterr().out
    assert "63,045,632 (63.0M)" in out and "44,101,632" in out
    assert "forward FLOPs per token:  127,148,032" in out
    assert main(["info", "--config", "big", "--vocab-size", "32000"]) == 0
    assert f"{214_171_648 - 5000 * 1024:,}" in capsys.readouterr().out


def test_info_bad_config_is_a_clear_error(capsys):
    assert main(["info", "--config", "base", "--model.d_modle=3"]) == 2
    assert "unknown config key 'model.d_modle'" in capsys.readouterr().err


def test_overrides_are_dotted_flags_everywhere_and_the_bare_form_warns(capsys, caplog):
    """One override syntax, --section.key=value; info and prepare's earlier bare
    section.key=value still works, with a warning naming the flag to write."""
    assert main(["info", "--config", "tiny", "--model.n_heads=2"]) == 0
    flagged = capsys.readouterr().out
    assert "heads 2" in flagged and not caplog.records
    assert main(["info", "--config", "tiny", "model.n_heads=2"]) == 0
    assert capsys.readouterr().out == flagged
    assert "write --model.n_heads=2" in caplog.text


def test_console_script_help():
    out = subprocess.run([sys.executable, "-m", "transformer_mt.cli", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "info" in out and "translate" in out


NO_TORCH = """
import importlib, sys
class NoTorch:  # importing torch fails, naming who asked
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            raise ImportError("torch imported")
sys.meta_path.insert(0, NoTorch())
main = importlib.import_module("transformer_mt.cli.main")
parser = main.build_parser()
for command in parser._subparsers._group_actions[0].choices.values():
    command.format_help()
sys.exit(main.main(sys.argv[1:]))
"""


def test_help_and_the_commands_that_need_no_model_run_without_torch(tmp_path, corpus):
    """`transformer-mt --help`, every command's --help, evaluate and prepare start without
    importing torch (2-3 s of a cold start); what needs torch imports it where it runs."""
    def no_torch(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", NO_TORCH, *argv], capture_output=True,
                              text=True, timeout=120)

    assert no_torch("--help").returncode == 0
    hyp = corpus / "valid.de"
    done = no_torch("evaluate", "--hyp", str(hyp), "--ref", str(hyp))
    assert done.returncode == 0 and "BLEU" in done.stdout, done.stderr
    done = no_torch("prepare", "--train-src", str(corpus / "train.en"), "--train-tgt",
                    str(corpus / "train.de"), "--vocab-size", "300", "--out",
                    str(tmp_path / "data"))
    assert done.returncode == 0, done.stderr
    done = no_torch("info", "--config", "tiny")  # a model's statistics need torch
    assert "torch imported" in done.stderr


def test_translate_end_to_end(tmp_path, corpus_vocab, monkeypatch, caplog):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=len(corpus_vocab), d_model=32, n_heads=4, d_ff=64,
                      n_encoder_layers=1, n_decoder_layers=1, dropout=0.0)
    save_model(Transformer(cfg), tmp_path / "model", vocab_path=corpus_vocab.path)
    src = tmp_path / "in.txt"
    src.write_text("Two dogs.\nA man sleeps.\r\nA girl.\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    caplog.set_level(logging.INFO, logger="transformer_mt")
    assert main(["translate", "--model", str(tmp_path / "model"), "--input", str(src),
                 "--output", str(out), "--beam-size", "2"]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 3
    assert "translated 3 sentences in" in caplog.text and "sentences/s" in caplog.text
    pair = tmp_path / "pair.txt"  # an ensemble of the model with itself: the same translations
    assert main(["translate", "--model", str(tmp_path / "model"), str(tmp_path / "model"),
                 "--input", str(src), "--output", str(pair), "--beam-size", "2"]) == 0
    assert pair.read_text(encoding="utf-8") == out.read_text(encoding="utf-8")
    nbest = tmp_path / "nbest.txt"
    assert main(["translate", "--model", str(tmp_path / "model"), "--input", str(src),
                 "--output", str(nbest), "--beam-size", "2", "--n-best", "2"]) == 0
    rows = [line.split("\t") for line in nbest.read_text(encoding="utf-8").splitlines()]
    assert [r[0] for r in rows] == ["0", "0", "1", "1", "2", "2"]
    assert float(rows[0][1]) >= float(rows[1][1])
    kv_bf16 = tmp_path / "kv_bf16.txt"  # bf16 keys and values in every decoding cache
    kv_dtypes = []
    new_cache = Transformer.new_cache
    monkeypatch.setattr(Transformer, "new_cache", lambda self, memory, beams=1, kv_dtype=None: (
        kv_dtypes.append(kv_dtype), new_cache(self, memory, beams, kv_dtype))[1])
    assert main(["translate", "--model", str(tmp_path / "model"), "--input", str(src),
                 "--output", str(kv_bf16), "--beam-size", "2", "--int8", "--kv-bf16"]) == 0
    assert len(kv_bf16.read_text(encoding="utf-8").splitlines()) == 3
    assert kv_dtypes and set(kv_dtypes) == {torch.bfloat16}
    dotted = tmp_path / "dotted.txt"  # --decode.key=value is the same option as its flag
    assert main(["translate", "--model", str(tmp_path / "model"), "--input", str(src),
                 "--output", str(dotted), "--decode.beam_size=2", "--decode.n_best=2"]) == 0
    assert dotted.read_text(encoding="utf-8") == nbest.read_text(encoding="utf-8")
    best = {}  # --beam-stop bound searches on from the default's finished set: never worse
    for stop in ("n_finished", "bound"):
        path = tmp_path / f"{stop}.txt"
        assert main(["translate", "--model", str(tmp_path / "model"), "--input", str(src),
                     "--output", str(path), "--beam-size", "2", "--n-best", "1", "--alpha",
                     "1.5", "--beam-stop", stop]) == 0
        best[stop] = [float(line.split("\t")[1]) for line in path.read_text().splitlines()]
    assert len(best["bound"]) == 3
    assert all(b >= f - 1e-6 for b, f in zip(best["bound"], best["n_finished"], strict=True))


def test_translate_missing_model_is_a_clear_error(tmp_path, capsys):
    assert main(["translate", "--model", str(tmp_path / "nope")]) == 2
    assert "neither a model directory nor a run" in capsys.readouterr().err


def test_every_command_has_help_and_no_option_is_declared_twice(capsys):
    """Options are generated from several dataclasses for one command (serve: ServeConfig and
    DecodeConfig); a clash of flag names would break the whole command line."""
    from transformer_mt.cli.main import COMMANDS

    build_parser()
    names = [name for command in COMMANDS
             for name in getattr(command, "COMMANDS", [command.__name__.rsplit(".", 1)[1]])]
    assert {"import", "export", "translate"} <= set(names)
    for name in names:
        with pytest.raises(SystemExit) as exit_:
            main([name, "--help"])
        assert exit_.value.code == 0
        assert "usage: transformer-mt " + name in capsys.readouterr().out


def test_every_config_key_is_declared_once_with_help_and_train_help_explains_each(capsys):
    """Each field of every config section carries its help in its one declaration
    (config.option); `train --help` lists every key train reads with that help and default,
    and the run properties (resumable, fine-tunable, init-only) come from the same
    declarations."""
    import dataclasses

    from transformer_mt.config import Config, ModelConfig
    from transformer_mt.training.fine_tune import FINE_TUNING_OPTIONS
    from transformer_mt.training.resume import INIT_ONLY_MODEL_KEYS, RESUMABLE_TRAIN_KEYS

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for section in dataclasses.fields(Config):
        for f in dataclasses.fields(getattr(Config(), section.name)):
            assert f.metadata.get("help"), f"{section.name}.{f.name} has no help"
            if section.name in ("model", "train", "decode"):
                assert f"--{section.name}.{f.name} (default: " in help_text
                assert " ".join(f.metadata["help"].split()) in help_text
    assert "--data.vocab_size" not in help_text  # prepare's, not train's
    assert {"max_steps", "keep_last", "device"} <= set(RESUMABLE_TRAIN_KEYS)
    assert not {"lr_scale", "warmup_steps", "seed"} & set(RESUMABLE_TRAIN_KEYS)
    assert set(FINE_TUNING_OPTIONS) == {f.name for f in dataclasses.fields(ModelConfig)
                                        if f.name.endswith("dropout")}
    assert INIT_ONLY_MODEL_KEYS == {"qkv_init_gain": 1.0, "cross_attention_init": "as_self"}


def test_serve_help_shows_serves_own_decode_defaults(capsys):
    """serve decodes with int8 scales per row and a 512-token output cap unless told otherwise
    (config.option's serve_default): its --help says so, translate's the plain defaults."""
    for command, cap, scales in (("serve", 512, "row"), ("translate", 0, "batch")):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        help_text = " ".join(capsys.readouterr().out.split())
        assert re.search(rf"--max-length MAX_LENGTH not in the paper: .*?\(default: {cap}\)",
                         help_text), command
        assert re.search(rf"--int8-scales {{batch,row}} with int8: .*?\(default: {scales}\)",
                         help_text), command
        assert ("--workers WORKERS" in help_text) == (command == "translate"), \
            "decode.workers: translate's, not the server's"
    assert main(["serve", "--model", "nowhere", "--decode.workers=2"]) == 2
    assert "decode.workers: the server decodes one batch at a time" in capsys.readouterr().err


def test_translate_streams_in_chunks_and_treats_too_long_lines_as_told(tmp_path, corpus_vocab,
                                                                        monkeypatch, caplog,
                                                                        capsys):
    from transformer_mt.inference.translator import Translator

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=len(corpus_vocab), d_model=32, n_heads=4, d_ff=64,
                      n_encoder_layers=1, n_decoder_layers=1, dropout=0.0, max_positions=40)
    save_model(Transformer(cfg), tmp_path / "model", vocab_path=corpus_vocab.path)
    lines = [f"A dog runs {i} times." for i in range(10)]
    lines[6] = " ".join(["dog"] * 60)  # longer than 40 - 10 positions
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def translate(path, *extra):
        return main(["translate", "--model", str(tmp_path / "model"), "--input", str(src),
                     "--output", str(path), "--beam-size", "2", "--batch-size", "1",
                     "--max-length-offset", "10", *extra])

    assert translate(tmp_path / "error.txt") == 2
    assert "sentence 7 has 61 tokens; this model takes at most 30" in capsys.readouterr().err
    whole = tmp_path / "whole.txt"
    assert translate(whole, "--too-long", "skip") == 0
    # each chunk's translation starts after the previous chunk is written (to the temporary
    # file that becomes the output once all is written)
    written_before = []
    chunked = tmp_path / "chunked.txt"
    original = Translator.translate_ids

    def spy(self, sources, cfg, **kw):
        for partial in tmp_path.glob(".chunked.txt.*"):
            written_before.append(len(partial.read_text().splitlines()))
            assert not chunked.exists()
        return original(self, sources, cfg, **kw)

    monkeypatch.setattr(Translator, "translate_ids", spy)
    caplog.set_level(logging.INFO, logger="transformer_mt")
    assert translate(chunked, "--too-long", "skip", "--chunk", "4") == 0
    assert written_before == [0, 4, 8]
    assert chunked.read_text() == whole.read_text()
    out = chunked.read_text().splitlines()
    assert len(out) == 10 and out[6] == "" and all(out[i] for i in range(10) if i != 6)
    assert "1 of 10 sentences were longer than the model takes: skipped" in caplog.text
    cut = tmp_path / "cut.txt"
    assert translate(cut, "--too-long", "truncate", "--chunk", "4") == 0
    truncated = cut.read_text().splitlines()
    assert len(truncated) == 10 and truncated[6] and truncated[:6] == out[:6]
    assert "cut to the model's length" in caplog.text
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"A dog.\nA cat.\n\xff\xfe\n")
    src = bad
    assert translate(tmp_path / "bad-out.txt") == 2
    assert f"{bad}:3: invalid UTF-8" in capsys.readouterr().err


def test_info_reports_the_model_a_preset_builds(capsys, prepared_corpus):
    # multi30k's model is trained on the 8k vocabulary its data.vocab_size makes prepare build
    assert main(["info", "--config", "multi30k"]) == 0
    out = capsys.readouterr().out
    # post-norm: no final LayerNorms (pre-norm's two add 512 parameters)
    assert "vocab 8000" in out and "2,342,912 (2.3M)" in out
    # with --data, the vocabulary train would take from that directory
    from transformer_mt.data.prepare import load_vocab

    assert main(["info", "--config", "multi30k", "--data", str(prepared_corpus)]) == 0
    assert f"vocab {len(load_vocab(prepared_corpus))}," in capsys.readouterr().out


def test_a_command_line_typo_is_named_as_such_with_the_closest_key(capsys):
    assert main(["train", "--config", "tiny", "--data", "d", "--run-dir", "r",
                 "--train.max_step=5"]) == 2
    err = capsys.readouterr().err
    assert "the overrides --train.max_step=5 (on tiny.yaml)" in err
    assert "did you mean 'max_steps'?" in err and "configs/tiny.yaml" not in err
    # a value after a space is the same override as after '='
    assert main(["info", "--config", "tiny", "--train.max_steps", "50"]) == 0
    assert main(["info", "--config", "tiny", "--train.max_step", "50"]) == 2
    assert "did you mean 'max_steps'?" in capsys.readouterr().err


@pytest.fixture
def model_dir(tmp_path, corpus_vocab):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=len(corpus_vocab), d_model=32, n_heads=4, d_ff=64,
                      n_encoder_layers=1, n_decoder_layers=1, dropout=0.0, max_positions=80)
    return save_model(Transformer(cfg), tmp_path / "model", vocab_path=corpus_vocab.path)


def test_a_failed_translate_leaves_an_existing_output_as_it_was(tmp_path, model_dir, capsys):
    out = tmp_path / "good.de"
    out.write_text("".join(f"Zeile {i}.\n" for i in range(1000)), encoding="utf-8")
    before = out.read_bytes()
    bad_utf8, too_long = tmp_path / "bad.en", tmp_path / "long.en"
    # the bad line comes after a whole chunk has been translated and written
    bad_utf8.write_bytes(b"A dog.\n" * 5 + b"A \xff cat.\n")
    too_long.write_text("A dog.\n" * 5 + " ".join(["dog"] * 60) + "\n", encoding="utf-8")
    for source, message in ((tmp_path / "missing.en", "missing.en"),
                            (bad_utf8, "bad.en:6"), (too_long, "sentence 6 has")):
        assert main(["translate", "--model", str(model_dir), "--input", str(source),
                     "--output", str(out), "--beam-size", "1", "--chunk", "2"]) == 2
        assert message in capsys.readouterr().err
        assert out.read_bytes() == before, source
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".good")] == []
    # a run that succeeds replaces it whole, with an ordinary file's permissions
    good = tmp_path / "good.en"
    good.write_text("A dog.\nA cat.\n", encoding="utf-8")
    assert main(["translate", "--model", str(model_dir), "--input", str(good), "--output",
                 str(out), "--beam-size", "1"]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2
    assert out.stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_blank_lines_translate_to_blank_lines_on_every_path(tmp_path, model_dir, monkeypatch,
                                                            capsys):
    import io

    src = tmp_path / "in.en"
    src.write_text("A dog.\n\n   \nA cat.\n\t\n", encoding="utf-8")
    blank = [1, 2, 4]
    base = ["translate", "--model", str(model_dir), "--beam-size", "2"]
    outputs = {}
    for name, extra in {"file": [], "ensemble": [str(model_dir)], "greedy": ["--beam-size", "1"],
                        "sample": ["--decode.strategy=sample"]}.items():
        path = tmp_path / f"{name}.de"
        assert main([*base[:3], *extra, *base[3:], "--input", str(src), "--output",
                     str(path)]) == 0
        outputs[name] = path.read_text(encoding="utf-8").split("\n")[:-1]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(src.read_bytes())))
    assert main(base) == 0
    outputs["stdin"] = capsys.readouterr().out.split("\n")[:-1]
    for name, lines in outputs.items():
        assert len(lines) == 5, name
        assert [i for i, line in enumerate(lines) if line == ""] == blank, (name, lines)
    # n-best and alignment output: no rows for a blank line, the others numbered as before
    nbest = tmp_path / "nbest.de"
    assert main([*base, "--input", str(src), "--output", str(nbest), "--n-best", "2"]) == 0
    rows = [line.split("\t")[0] for line in nbest.read_text(encoding="utf-8").splitlines()]
    assert rows == ["0", "0", "3", "3"]
    aligned = tmp_path / "aligned.de"
    assert main([*base, "--input", str(src), "--output", str(aligned),
                 "--print-alignment"]) == 0
    rows = [line.split("\t")[0] for line in aligned.read_text(encoding="utf-8").splitlines()]
    assert rows == ["H-0", "A-0", "H-3", "A-3"]
    from transformer_mt import Translator

    assert Translator.from_dir(model_dir).translate(["", " ", "A dog."])[:2] == ["", ""]


def test_average_and_export_write_whole_directories_or_nothing(tmp_path, trained_model,
                                                               monkeypatch, caplog):
    from transformer_mt.storage import model_dir
    from transformer_mt.storage.names import WEIGHTS_FILE

    run = trained_model.parent.parent
    out = tmp_path / "avg"
    assert main(["average", "--run-dir", str(run), "--last", "1", "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def dying(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(model_dir, "copy_vocabulary", dying)  # after the weights are written
    assert main(["average", "--run-dir", str(run), "--last", "1", "--out", str(out)]) == 2
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["avg"]  # no temporary left
    assert (out / WEIGHTS_FILE).exists()
