"""Learning: a tiny model learns to reverse sequences on CPU in seconds (a hand loop), and
train() learns the synthetic corpus (exact-match accuracy both)."""

import pytest
import torch
import torch.nn.functional as F

from transformer_mt import DecodeConfig, ModelConfig, Transformer, greedy_search

BOS, EOS, PAD = 2, 3, 0


def reverse_batch(g: torch.Generator, batch: int, vocab: int):
    """Sources: 3..8 random tokens + EOS; targets: the tokens reversed."""
    lengths = torch.randint(3, 9, (batch,), generator=g).tolist()
    src = torch.full((batch, 9), PAD)
    tgt_in, tgt_out = torch.full((batch, 10), PAD), torch.full((batch, 10), PAD)
    for b, n in enumerate(lengths):
        seq = torch.randint(4, vocab, (n,), generator=g)
        src[b, :n], src[b, n] = seq, EOS
        tgt_in[b, 0], tgt_in[b, 1 : n + 1] = BOS, seq.flip(0)
        tgt_out[b, :n], tgt_out[b, n] = seq.flip(0), EOS
    return src, tgt_in, tgt_out


def test_tiny_model_learns_to_reverse():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=16, d_model=64, n_heads=4, d_ff=128, n_encoder_layers=2,
                      n_decoder_layers=2, dropout=0.0, max_positions=64)
    model = Transformer(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.9, 0.98), eps=1e-9)
    steps = 450  # warm up over 50 steps, then decay linearly to 0: stable across thread counts
    schedule = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * (1 - s / steps))
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        src, tgt_in, tgt_out = reverse_batch(g, 64, cfg.vocab_size)
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
    model.eval()
    src, _, tgt_out = reverse_batch(torch.Generator().manual_seed(123), 200, cfg.vocab_size)
    hyps = greedy_search(model, src, DecodeConfig(max_length_offset=3))
    want = [row[row.ne(PAD) & row.ne(EOS)].tolist() for row in tgt_out]
    accuracy = sum(h[0].tokens == w for h, w in zip(hyps, want, strict=True)) / len(want)
    assert accuracy >= 0.95, f"exact-match accuracy {accuracy:.2f}"


def test_train_learns_the_synthetic_translation(prepared_corpus, corpus, tmp_path):
    """train() itself (eq. (3)'s schedule, the fused label-smoothed loss, Adam, checkpoints)
    learns the synthetic corpus's word-by-word translation with the faithful post-norm model:
    most held-out sentences come out exactly right."""
    from synthetic import translate
    from transformer_mt import Translator, load_config
    from transformer_mt.storage.run_dir import latest_checkpoint
    from transformer_mt.training.loop import train
    from transformer_mt.training.metrics import read_metrics
    from transformer_mt.training.schedule import noam_lr

    cfg = load_config("tiny", ["train.max_steps=600", "train.max_tokens=512",
                               "train.warmup_steps=100", "train.valid_every=600",
                               "train.save_every=600", "train.log_every=50",
                               "model.dropout=0.0"])
    train(cfg, data_dir=prepared_corpus, run_dir=tmp_path / "run")
    records = read_metrics(tmp_path / "run")
    logged = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in logged] == list(range(50, 601, 50))
    for r in logged:  # the rate of every logged step is eq. (3)
        assert r["lr"] == pytest.approx(noam_lr(r["step"], d_model=64, warmup_steps=100))
    assert logged[-1]["loss"] < 0.5 * logged[0]["loss"]
    (valid,) = [r for r in records if r["kind"] == "valid"]
    assert valid["step"] == 600 and valid["bleu"] > 60
    translator = Translator.from_dir(latest_checkpoint(tmp_path / "run"))
    sources = (corpus / "test.en").read_text(encoding="utf-8").splitlines()
    right = sum(h == translate(s) for h, s in zip(translator.translate(sources), sources,
                                                  strict=True))
    assert right >= 20, f"{right} of {len(sources)} test sentences exactly right"  # 26 on a Zen 4
