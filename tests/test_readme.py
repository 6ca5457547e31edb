"""The README runs as written: its quickstart commands (on the synthetic corpus in Multi30k's
layout, shortened by overrides) train a model that translates, and its Python examples run."""

import re
import shlex

import torch

from conftest import REPO
from synthetic import translate, write_multi30k_layout
from transformer_mt import ModelConfig, Transformer, save_model
from transformer_mt.cli.main import main

README = (REPO / "README.md").read_text(encoding="utf-8")
# The quickstart's train command, shortened: 400 steps of the multi30k recipe without dropout,
# a warmup as long as the run at eq. (3) x 1 (the post-norm model learns nothing in 400 steps
# with 100 of warmup, whose peak rate is twice as high: 0 of 30 sentences) and smaller batches;
# the model and the rest of the recipe stay.
SHORTER = ["--train.max_minutes=0", "--train.lr_cooldown_share=0", "--train.max_steps=400",
           "--train.warmup_steps=400", "--train.lr_scale=1", "--train.max_tokens=512",
           "--train.save_every=20", "--train.valid_every=400", "--train.bf16=false",
           "--model.dropout=0", "--model.attention_dropout=0", "--model.activation_dropout=0"]


def quickstart_commands() -> list[list[str]]:
    section = README.split("## Quickstart", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    return [shlex.split(line) for line in block.splitlines() if line.strip()]


def test_readme_quickstart_trains_a_model_that_translates(tmp_path, capsys):
    data = write_multi30k_layout(tmp_path / "shared-data")
    commands = quickstart_commands()
    assert [c[:2] for c in commands] == [["transformer-mt", name] for name in
                                         ("prepare", "train", "average", "translate", "evaluate")]
    for command in commands:
        args = [a.replace("../shared/data", str(data)).replace("runs/m30k", str(tmp_path / "m30k"))
                for a in command[1:]]
        if args[0] == "train":
            args += SHORTER
        assert main(args) == 0, command
    sources = (data / "plain/test.en").read_text(encoding="utf-8").splitlines()
    hyps = (tmp_path / "m30k/test.de").read_text(encoding="utf-8").splitlines()
    assert len(hyps) == len(sources) == 30
    right = sum(h == translate(s) for h, s in zip(hyps, sources, strict=True))
    assert right >= 15, f"{right} of 30 test sentences translated exactly"  # 27 on a Zen 4
    printed = capsys.readouterr().out
    scores = dict(re.findall(r"^(sacreBLEU|tokBLEU) +([0-9.]+)", printed, flags=re.M))
    assert set(scores) == {"sacreBLEU", "tokBLEU"}, printed
    assert float(scores["sacreBLEU"]) >= 70 and float(scores["tokBLEU"]) >= 70, printed  # 94.8


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, flags=re.S)


def test_readme_python_examples_run(tmp_path, monkeypatch, corpus_vocab, capsys):
    first, second = python_blocks()
    exec(compile(first, "README.md", "exec"), {})
    assert capsys.readouterr().out.strip()
    # the second example loads "my-model": make one with the README's own save_model call
    monkeypatch.chdir(tmp_path)
    cfg = ModelConfig(vocab_size=len(corpus_vocab), d_model=32, n_heads=4, d_ff=64,
                      n_encoder_layers=1, n_decoder_layers=1)
    torch.manual_seed(0)
    save_model(Transformer(cfg), "my-model", vocab_path=corpus_vocab.path)
    exec(compile(second, "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert printed.startswith("[") and printed.count("'") >= 4
