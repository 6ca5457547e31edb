"""Shared fixtures: tiny seeded models, a synthetic corpus the tests generate, and the real
data in ../shared/data for the tests marked real_data."""

import os
import sys
from pathlib import Path

import pytest
import torch

from synthetic import write_corpus
from transformer_mt import ModelConfig, Transformer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))  # the research extras: knn_mt, rerank
SHARED_DATA = Path(os.environ.get("TRANSFORMER_MT_DATA", REPO.parent / "shared" / "data"))


def tiny_config(**overrides) -> ModelConfig:
    """d_model 32, 2+2 layers, vocabulary 50, no dropout (deterministic forward)."""
    fields = dict(vocab_size=50, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2,
                  n_decoder_layers=2, dropout=0.0, max_positions=128)
    fields.update(overrides)
    return ModelConfig(**fields)


def tiny_model(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(tiny_config(**overrides)).eval()


def random_batch(seed: int, batch: int, length: int, vocab: int = 50, pad_to: int = 0,
                 lengths: list[int] | None = None) -> torch.Tensor:
    """Padded source ids (B, S): tokens 4..vocab-1, ending in EOS (3), then padding (0)."""
    g = torch.Generator().manual_seed(seed)
    lengths = lengths or [length] * batch
    src = torch.zeros(batch, max(max(lengths), pad_to), dtype=torch.long)
    for b, n in enumerate(lengths):
        src[b, : n - 1] = torch.randint(4, vocab, (n - 1,), generator=g)
        src[b, n - 1] = 3
    return src


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (set TRANSFORMER_MT_DATA)")
    return SHARED_DATA


def read_lines(path: Path, n: int) -> list[str]:
    import gzip

    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    """The synthetic corpus (synthetic.py): plain-text train (600 pairs), valid (40) and test
    (30) en/de files, generated here, so that no test below needs the real data."""
    return write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="session")
def corpus_vocab(corpus, tmp_path_factory):
    """A joint BPE vocabulary (at most 300 pieces) of the synthetic training text."""
    from transformer_mt import train_vocabulary

    texts = [line for lang in ("en", "de")
             for line in (corpus / f"train.{lang}").read_text(encoding="utf-8").splitlines()]
    path = tmp_path_factory.mktemp("vocab") / "sentencepiece.model"
    return train_vocabulary(texts, vocab_size=300, out_path=path)


@pytest.fixture(scope="session")
def prepared_corpus(corpus, tmp_path_factory) -> Path:
    """`corpus` prepared (a data directory for train) with a vocabulary of at most 500
    pieces."""
    from transformer_mt.cli.main import main

    out = tmp_path_factory.mktemp("prepared") / "data"
    assert main(["prepare", "--train-src", str(corpus / "train.en"), "--train-tgt",
                 str(corpus / "train.de"), "--valid-src", str(corpus / "valid.en"),
                 "--valid-tgt", str(corpus / "valid.de"), "--vocab-size", "500", "--out",
                 str(out), "--src-lang", "en", "--tgt-lang", "de"]) == 0
    return out


def pytest_collection_modifyitems(items):
    """Tests that read ../shared/data carry the `real_data` mark (-m real_data runs them)."""
    for item in items:
        if "shared_data" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.real_data)


@pytest.fixture(scope="session")
def trained_model(prepared_corpus, tmp_path_factory) -> Path:
    """A tiny model (d_model 64) trained 300 steps on `prepared_corpus`, LayerNorm eps 1e-5 so
    that every export format carries it: a model directory whose outputs end as a trained
    model's do."""
    from transformer_mt.config import load_config
    from transformer_mt.training.loop import train

    run = tmp_path_factory.mktemp("trained") / "run"
    cfg = load_config("tiny", ["model.layer_norm_eps=1e-5", "train.max_steps=300",
                               "train.max_tokens=1000", "train.warmup_steps=100",
                               "train.valid_every=1000000", "train.valid_bleu=false",
                               "train.save_every=300", "train.threads=2", "train.log_every=100"])
    train(cfg, data_dir=prepared_corpus, run_dir=run)
    return sorted((run / "checkpoints").iterdir())[-1]


class FakeClock:
    """train.py's `time`: each reading of the monotonic clock advances it by `tick` seconds, so
    a run's pace, and the step at which a timed cooldown is planned, do not depend on the
    machine."""

    def __init__(self, tick: float):
        self.now, self.tick = 0.0, tick

    def monotonic(self) -> float:
        self.now += self.tick
        return self.now
