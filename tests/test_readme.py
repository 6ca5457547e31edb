"""The README's Python examples run as written."""

import re

import torch

from conftest import REPO
from transformer_mt import ModelConfig, Transformer, save_model


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)


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
