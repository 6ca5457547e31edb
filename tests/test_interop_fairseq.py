"""fairseq checkpoints in. A checkpoint is written here in fairseq's layout (its state dict
names, a pickled argparse.Namespace of settings, dict.txt, a SentencePiece model beside it);
the reference is fairseq's transformer written out below from its formulas (make_positions
over left-padded sources, its sinusoid table, q scaled after the projection, post- or
pre-norm), independent of our model. After import our logits equal the reference's and greedy
decoding is the reference's. A checkpoint carrying any other pickled global is refused naming
it, and an audit hook proves no code ran."""

import argparse
import math
import shutil
import sys

import pytest
import torch
import torch.nn.functional as F

from synthetic import sentences
from transformer_mt import Translator
from transformer_mt.cli.main import main
from transformer_mt.inference.search import generate
from transformer_mt.interop import ConversionError
from transformer_mt.interop.fairseq import import_fairseq
from transformer_mt.storage.model_dir import load_model

PAD, EOS = 1, 2
D, HEADS, FFN, LAYERS, MAX_POS = 32, 4, 48, 2, 64


def fairseq_args(**overrides) -> argparse.Namespace:
    args = dict(arch="transformer", encoder_embed_dim=D, decoder_embed_dim=D,
                encoder_ffn_embed_dim=FFN, decoder_ffn_embed_dim=FFN, encoder_layers=LAYERS,
                decoder_layers=LAYERS, encoder_attention_heads=HEADS,
                decoder_attention_heads=HEADS, encoder_normalize_before=False,
                decoder_normalize_before=False, activation_fn="relu", dropout=0.1,
                attention_dropout=0.0, activation_dropout=0.0, share_all_embeddings=True,
                share_decoder_input_output_embed=True, no_scale_embedding=False,
                encoder_learned_pos=False, decoder_learned_pos=False,
                max_source_positions=MAX_POS, max_target_positions=MAX_POS)
    return argparse.Namespace(**{**args, **overrides})


def fairseq_state(args: argparse.Namespace, vocab: int, seed: int,
                  target_vocab: int | None = None) -> dict[str, torch.Tensor]:
    """A random state dict with fairseq's names and shapes."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=g) * 0.3

    state = {}
    for stack in ("encoder", "decoder"):
        for i in range(LAYERS):
            attns = ["self_attn"] + (["encoder_attn"] if stack == "decoder" else [])
            for attn in attns:
                for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    state[f"{stack}.layers.{i}.{attn}.{proj}.weight"] = rand(D, D)
                    state[f"{stack}.layers.{i}.{attn}.{proj}.bias"] = rand(D)
            for norm in [f"{a}_layer_norm" for a in attns] + ["final_layer_norm"]:
                state[f"{stack}.layers.{i}.{norm}.weight"] = 1 + rand(D)
                state[f"{stack}.layers.{i}.{norm}.bias"] = rand(D)
            state[f"{stack}.layers.{i}.fc1.weight"], state[f"{stack}.layers.{i}.fc1.bias"] = \
                rand(FFN, D), rand(FFN)
            state[f"{stack}.layers.{i}.fc2.weight"], state[f"{stack}.layers.{i}.fc2.bias"] = \
                rand(D, FFN), rand(D)
        if args.encoder_normalize_before:
            state[f"{stack}.layer_norm.weight"], state[f"{stack}.layer_norm.bias"] = \
                1 + rand(D), rand(D)
        if args.encoder_learned_pos:
            state[f"{stack}.embed_positions.weight"] = rand(MAX_POS + PAD + 1, D)
        else:
            state[f"{stack}.embed_positions._float_tensor"] = torch.zeros(1)
        state[f"{stack}.version"] = torch.tensor([3.0])
    shared = rand(vocab, D)
    state["encoder.embed_tokens.weight"] = shared
    target_vocab = target_vocab or vocab
    state["decoder.embed_tokens.weight"] = shared if args.share_all_embeddings else \
        rand(target_vocab, D)
    state["decoder.output_projection.weight"] = state["decoder.embed_tokens.weight"] \
        if args.share_decoder_input_output_embed else rand(target_vocab, D)
    return state


# --- fairseq's transformer, from its formulas ------------------------------------------------

def sinusoids(n: int, dim: int, padding_idx: int) -> torch.Tensor:
    """fairseq's SinusoidalPositionalEmbedding.get_embedding."""
    half = dim // 2
    emb = torch.exp(torch.arange(half, dtype=torch.float) * -(math.log(10000) / (half - 1)))
    emb = torch.arange(n, dtype=torch.float)[:, None] * emb[None]
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1)
    emb[padding_idx] = 0
    return emb


def embed(state, args, stack, tokens):
    positions = torch.cumsum(tokens.ne(PAD), dim=1) * tokens.ne(PAD) + PAD  # make_positions
    table = state[f"{stack}.embed_positions.weight"] if args.encoder_learned_pos else \
        sinusoids(MAX_POS + PAD + 1, D, PAD)
    scale = 1.0 if args.no_scale_embedding else math.sqrt(D)
    return scale * F.embedding(tokens, state[f"{stack}.embed_tokens.weight"]) + table[positions]


def attention(state, name, x, memory, mask):
    def proj(p, y):
        return F.linear(y, state[f"{name}.{p}_proj.weight"], state[f"{name}.{p}_proj.bias"])

    def heads(y):
        return y.view(y.size(0), y.size(1), HEADS, D // HEADS).transpose(1, 2)

    q = heads(proj("q", x) * (D // HEADS) ** -0.5)
    k, v = heads(proj("k", memory)), heads(proj("v", memory))
    weights = (q @ k.transpose(-1, -2)).masked_fill(mask, float("-inf")).softmax(-1)
    out = (weights @ v).transpose(1, 2).reshape(x.shape)
    return proj("out", out)


def sublayer(state, args, norm, x, f):
    ln = lambda y: F.layer_norm(y, (D,), state[f"{norm}.weight"], state[f"{norm}.bias"])  # noqa
    return x + f(ln(x)) if args.encoder_normalize_before else ln(x + f(x))


def reference_logits(state, args, src, prev):
    """fairseq's TransformerModel forward (eval), src left-padded as fairseq pads it."""
    act = {"relu": F.relu, "gelu": F.gelu}[args.activation_fn]
    ffn = lambda p: lambda y: F.linear(act(F.linear(y, state[f"{p}.fc1.weight"],  # noqa
                                                      state[f"{p}.fc1.bias"])),
                                        state[f"{p}.fc2.weight"], state[f"{p}.fc2.bias"])
    src_mask = src.eq(PAD)[:, None, None, :]
    x = embed(state, args, "encoder", src)
    for i in range(LAYERS):
        p = f"encoder.layers.{i}"
        x = sublayer(state, args, f"{p}.self_attn_layer_norm", x,
                     lambda y, p=p: attention(state, f"{p}.self_attn", y, y, src_mask))
        x = sublayer(state, args, f"{p}.final_layer_norm", x, ffn(p))
    memory = x if not args.encoder_normalize_before else F.layer_norm(
        x, (D,), state["encoder.layer_norm.weight"], state["encoder.layer_norm.bias"])
    T = prev.size(1)
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)[None, None]
    y = embed(state, args, "decoder", prev)
    for i in range(LAYERS):
        p = f"decoder.layers.{i}"
        y = sublayer(state, args, f"{p}.self_attn_layer_norm", y,
                     lambda z, p=p: attention(state, f"{p}.self_attn", z, z, causal))
        y = sublayer(state, args, f"{p}.encoder_attn_layer_norm", y,
                     lambda z, p=p: attention(state, f"{p}.encoder_attn", z, memory, src_mask))
        y = sublayer(state, args, f"{p}.final_layer_norm", y, ffn(p))
    if args.encoder_normalize_before:
        y = F.layer_norm(y, (D,), state["decoder.layer_norm.weight"],
                         state["decoder.layer_norm.bias"])
    return F.linear(y, state["decoder.output_projection.weight"])


def reference_greedy(state, args, src, max_len):
    """fairseq's greedy SequenceGenerator: from </s>, padding banned, EOS not first (its
    min_len 1), EOS at max_len."""
    prev = torch.full((src.size(0), 1), EOS)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for step in range(max_len):
        logp = reference_logits(state, args, src, prev)[:, -1].log_softmax(-1)
        logp[:, PAD] = float("-inf")
        if step == 0:
            logp[:, EOS] = float("-inf")
        if step == max_len - 1:
            logp[:, :EOS], logp[:, EOS + 1:] = float("-inf"), float("-inf")
        token = torch.where(done, torch.full_like(done, PAD, dtype=torch.long), logp.argmax(-1))
        prev = torch.cat([prev, token[:, None]], dim=1)
        done |= token.eq(EOS)
        if done.all():
            break
    return [[t for t in row[1:] if t != PAD] for row in prev.tolist()]


# --- the checkpoint on disk ------------------------------------------------------------------

@pytest.fixture(scope="module")
def spm_and_dict(corpus_vocab, tmp_path_factory):
    """Our SentencePiece model and a fairseq dict.txt of its pieces (the specials first)."""
    sp = corpus_vocab.sp
    pieces = [sp.id_to_piece(i) for i in range(4, len(corpus_vocab))]
    root = tmp_path_factory.mktemp("fairseq_vocab")
    (root / "dict.txt").write_text("".join(f"{p} {100 - i % 90}\n"
                                           for i, p in enumerate(pieces)), encoding="utf-8")
    return corpus_vocab.path, (root / "dict.txt").read_text(encoding="utf-8"), len(pieces) + 4


def write_checkpoint(tmp_path, spm_and_dict, *, seed=0, payload=None, target_dictionary=None,
                     **overrides):
    """checkpoint_best.pt as fairseq saves it, with dict.en.txt, dict.de.txt (the same, or
    `target_dictionary`) and sentencepiece.bpe.model beside it; returns (path, args, state)."""
    spm_path, dictionary, n = spm_and_dict
    args = fairseq_args(**overrides)
    m = n if target_dictionary is None else len(target_dictionary.splitlines()) + 4
    # fairseq pads its dictionaries to a multiple of 8
    state = fairseq_state(args, n + (-n % 8), seed, target_vocab=m + (-m % 8))
    folder = tmp_path / f"fairseq-{seed}"
    folder.mkdir()
    for lang, text in (("en", dictionary), ("de", target_dictionary or dictionary)):
        (folder / f"dict.{lang}.txt").write_text(text, encoding="utf-8")
    (folder / "sentencepiece.bpe.model").write_bytes(spm_path.read_bytes())
    checkpoint = {"args": args, "model": state, "optimizer_history": [
        {"criterion_name": "LabelSmoothedCrossEntropyCriterion", "optimizer_name": "FairseqAdam",
         "lr_scheduler_state": {"best": 3.5}, "num_updates": 10}],
        "extra_state": {"epoch": 2, "val_loss": 3.5}, "last_optimizer_state": None}
    if payload is not None:
        checkpoint["extra_state"]["payload"] = payload
    torch.save(checkpoint, folder / "checkpoint_best.pt")
    return folder / "checkpoint_best.pt", args, state


def padded_sources(vocab, texts, *, left: bool):
    ids = [vocab.encode(t) + [EOS] for t in texts]
    width = max(map(len, ids))
    return torch.tensor([[PAD] * (width - len(i)) + i if left else i + [PAD] * (width - len(i))
                         for i in ids])


@pytest.mark.parametrize("overrides", [
    {},  # fairseq's transformer: post-norm, sinusoids, all embeddings shared
    {"encoder_normalize_before": True, "decoder_normalize_before": True,
     "encoder_learned_pos": True, "decoder_learned_pos": True, "activation_fn": "gelu",
     "share_all_embeddings": False},
    {"share_all_embeddings": False, "share_decoder_input_output_embed": False,
     "no_scale_embedding": True},
])
def test_imported_logits_equal_fairseqs(spm_and_dict, tmp_path, overrides):
    path, args, state = write_checkpoint(tmp_path, spm_and_dict, **overrides)
    model, decode = load_model(import_fairseq(path, tmp_path / "ours"))
    translator = Translator.from_dir(tmp_path / "ours")
    texts = sentences(6, seed=31)
    left = padded_sources(translator.vocab, texts, left=True)
    right = padded_sources(translator.vocab, texts, left=False)
    assert left.eq(PAD).any(), "the batch has padding"
    prev = torch.randint(4, model.cfg.vocab_size, (6, 8))
    prev[:, 0] = EOS
    with torch.no_grad():
        torch.testing.assert_close(model(right, prev), reference_logits(state, args, left, prev),
                                   atol=1e-5, rtol=1e-5)
    assert (decode.beam_size, decode.length_normalization, decode.min_length) == (5, "power", 2)


def test_greedy_decoding_is_fairseqs(spm_and_dict, tmp_path):
    path, args, state = write_checkpoint(tmp_path, spm_and_dict, seed=4)
    translator = Translator.from_dir(import_fairseq(path, tmp_path / "ours"), strategy="greedy",
                                     max_length=12)
    texts = sentences(8, seed=32)
    left = padded_sources(translator.vocab, texts, left=True)
    right = padded_sources(translator.vocab, texts, left=False)
    with torch.no_grad():
        theirs = reference_greedy(state, args, left, 12)
    mine = [h[0].tokens + [EOS] for h in generate(translator.model, right, translator.decode_cfg)]
    assert mine == theirs
    assert translator.translate(texts) == [translator.vocab.decode(t[:-1]) for t in theirs]


def test_separate_dictionaries_are_separate_vocabularies(spm_and_dict, tmp_path):
    _, dictionary, _ = spm_and_dict
    target = "".join(dictionary.splitlines(keepends=True)[::-1][:-20])  # other ids, fewer
    path, args, state = write_checkpoint(
        tmp_path, spm_and_dict, seed=6, target_dictionary=target, source_lang="en",
        target_lang="de", share_all_embeddings=False)
    translator = Translator.from_dir(import_fairseq(path, tmp_path / "ours"), strategy="greedy",
                                     max_length=10)
    cfg = translator.model.cfg
    assert cfg.separate_vocabularies and cfg.tgt_vocab_size == \
        state["decoder.embed_tokens.weight"].shape[0]
    texts = sentences(6, seed=33)
    left = padded_sources(translator.vocab, texts, left=True)
    right = padded_sources(translator.vocab, texts, left=False)
    prev = torch.randint(4, cfg.tgt_vocab_size, (6, 8))
    prev[:, 0] = EOS
    with torch.no_grad():
        torch.testing.assert_close(translator.model(right, prev),
                                   reference_logits(state, args, left, prev), atol=1e-5,
                                   rtol=1e-5)
        theirs = reference_greedy(state, args, left, 10)
    mine = [h[0].tokens + [EOS] for h in generate(translator.model, right, translator.decode_cfg)]
    assert mine == theirs
    pieces = ["<s>", "<pad>", "</s>", "<unk>"] + [line.rsplit(" ", 1)[0]
                                                  for line in target.splitlines()]
    expected = [translator.vocab.target.decode_pieces(
        [pieces[t] for t in row[:-1] if t > 3]).replace("\u2581", " ").strip() for row in theirs]
    assert translator.translate(texts) == expected


class Exploit:
    """What a hostile checkpoint pickles: unpickling it would run a shell command."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


def test_a_checkpoint_with_another_global_is_refused_and_runs_nothing(spm_and_dict, tmp_path):
    marker = tmp_path / "pwned"
    path, _, _ = write_checkpoint(tmp_path, spm_and_dict, payload=Exploit(marker))
    events = []

    def hook(event, _args):
        if event in ("os.system", "subprocess.Popen", "exec", "os.exec", "os.posix_spawn"):
            events.append(event)

    sys.addaudithook(hook)  # stays for the session: it only records
    with pytest.raises(ConversionError, match=r"global (posix|os)\.system.* not allowed"):
        import_fairseq(path, tmp_path / "out")
    assert not marker.exists() and events == [], "no code ran"
    assert not (tmp_path / "out").exists()


def test_the_import_command_and_what_it_refuses(spm_and_dict, tmp_path, capsys):
    path, args, state = write_checkpoint(tmp_path, spm_and_dict)
    assert main(["import", "fairseq", str(path), "--out", str(tmp_path / "m")]) == 0
    assert "import fairseq" in capsys.readouterr().out

    def refused(match, *, edit_args=None, edit_state=None, remove=None, dictionary=None):
        folder = tmp_path / "broken"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(path.parent, folder)
        for name in remove or ():
            (folder / name).unlink()
        if dictionary is not None:
            (folder / "dict.de.txt").write_text(dictionary, encoding="utf-8")
        bad_args = argparse.Namespace(**{**vars(args), **(edit_args or {})})
        bad_state = {k: v for k, v in {**state, **(edit_state or {})}.items() if v is not None}
        torch.save({"args": bad_args, "model": bad_state}, folder / "checkpoint_best.pt")
        with pytest.raises(ConversionError, match=match):
            import_fairseq(folder / "checkpoint_best.pt", tmp_path / "out")
        assert not (tmp_path / "out").exists(), "nothing written"

    refused(r"no dict\.\*\.txt", remove=("dict.en.txt", "dict.de.txt"))
    refused(r"no \*\.model", remove=("sentencepiece.bpe.model",))
    refused(r"dict.de.txt, dict.en.txt differ and the checkpoint names no source_lang",
            dictionary="a 1\n")
    refused("activation_fn='tanh'.*layernorm_embedding=True",
            edit_args={"layernorm_embedding": True, "activation_fn": "tanh"})
    refused("encoder_ffn_embed_dim=48 differs", edit_args={"decoder_ffn_embed_dim": 64})
    refused("tensor decoder.layers.1.fc2.bias is missing",
            edit_state={"decoder.layers.1.fc2.bias": None})
    refused("encoder.embed_tokens.weight has 3 rows",
            edit_state={"encoder.embed_tokens.weight": torch.zeros(3, D)})
    refused("line 2: expected 'piece count'", dictionary="a 1\nb\n")
