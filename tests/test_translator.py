import copy
import threading

import pytest
import torch

from transformer_mt import (
    DecodeConfig,
    Ensemble,
    ModelConfig,
    Transformer,
    Translator,
    save_model,
)
from transformer_mt.inference.quantize import Int8Linear, Int8RowLinear, quantize_int8
from transformer_mt.model.attention import MultiHeadAttention


def make_translator(vocab):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=len(vocab), d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2,
                      n_decoder_layers=2, dropout=0.0, max_positions=96)
    return Translator(Transformer(cfg), vocab)


SENTENCES = [
    "A man in an orange hat starring at something.",
    "Two dogs.",
    "A little girl climbing into a wooden playhouse while her father watches nearby.",
    "",
    "People are fixing the roof of a house.",
]


def test_batched_translation_keeps_order_and_equals_one_by_one(corpus_vocab):
    translator = make_translator(corpus_vocab)
    translator.decode_cfg = DecodeConfig(batch_size=2, max_length_offset=8)
    batched = translator.translate_nbest(SENTENCES)
    assert_alike_alone(translator, batched)
    assert translator.translate(SENTENCES) == [r[0].text if r else "" for r in batched]


def assert_alike_alone(translator, batched):
    """Each sentence's n-best in the batch is its n-best alone; the empty one has none (not
    decoded: its translation is "")."""
    for sentence, result in zip(SENTENCES, batched, strict=True):
        alone = translator.translate_nbest([sentence])[0]
        assert [t.text for t in result] == [t.text for t in alone]
        assert [t.score for t in result] == pytest.approx([t.score for t in alone], abs=1e-4)
        assert bool(result) == bool(sentence)


def test_progress_counts_sentences_after_each_batch(corpus_vocab):
    translator = make_translator(corpus_vocab)
    translator.decode_cfg = DecodeConfig(batch_size=2, max_length_offset=4)
    done = []
    results = translator.translate_nbest(SENTENCES, progress=done.append)
    assert done == [3, 5] and len(results) == len(SENTENCES)  # the empty one: done at once


def test_workers_decode_batches_at_once_with_a_share_of_the_threads_and_the_same_output(
        corpus_vocab, monkeypatch):
    translator = make_translator(corpus_vocab)
    translator.decode_cfg = DecodeConfig(batch_size=1, max_length_offset=8)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        alone = translator.translate_nbest(SENTENCES)
        seen = []  # (thread, its torch threads) of each batch
        decode_batch = translator._translate_batch

        def recorded(sources, cfg):
            seen.append((threading.get_ident(), torch.get_num_threads()))
            return decode_batch(sources, cfg)

        monkeypatch.setattr(translator, "_translate_batch", recorded)
        translator.decode_cfg = DecodeConfig(batch_size=1, max_length_offset=8, workers=2)
        done = []
        together = translator.translate_nbest(SENTENCES, progress=done.append)
        assert torch.get_num_threads() == 2, "the caller's threads are restored"
    finally:
        torch.set_num_threads(threads)
    assert [[t.text for t in r] for r in together] == [[t.text for t in r] for r in alone]
    assert [t.score for r in together for t in r] == \
        pytest.approx([t.score for r in alone for t in r], abs=1e-4)
    assert done == [2, 3, 4, 5], "progress in order, the empty sentence done at once"
    assert {n for _, n in seen} == {1} and len(seen) == 4, "each worker on 1 of the 2 threads"
    assert threading.get_ident() not in {t for t, _ in seen}, "batches decoded by the workers"
    with pytest.raises(ValueError, match="workers must be positive"):
        DecodeConfig(workers=0)


def test_from_dir_round_trip(tmp_path, corpus_vocab):
    translator = make_translator(corpus_vocab)
    save_model(translator.model, tmp_path, vocab_path=corpus_vocab.path)
    loaded = Translator.from_dir(tmp_path, beam_size=2, max_length_offset=6)
    assert loaded.decode_cfg.beam_size == 2
    translator.decode_cfg = loaded.decode_cfg
    assert loaded.translate(SENTENCES) == translator.translate(SENTENCES)


def test_too_long_sentence_is_an_error_naming_it(corpus_vocab):
    translator = make_translator(corpus_vocab)
    with pytest.raises(ValueError, match="sentence 2 has .* at most 46"):
        translator.translate(["Two dogs.", "dog " * 60])


def test_vocabulary_size_must_match_model(corpus_vocab):
    model = Transformer(ModelConfig(vocab_size=len(corpus_vocab) + 1, d_model=32, n_heads=4,
                                    d_ff=64, n_encoder_layers=1, n_decoder_layers=1))
    with pytest.raises(ValueError, match="pieces, the model expects"):
        Translator(model, corpus_vocab)


def test_vocabulary_round_trip_and_special_ids(corpus_vocab):
    text = "small girl sees a big ball! klein mädchen sieht groß ball!"
    ids = corpus_vocab.encode(text)
    assert corpus_vocab.decode(ids) == text
    assert min(ids) > 3  # 0..3 are pad, unk, bos, eos and never produced by encode


@pytest.mark.parametrize("scales, layer", [("batch", Int8Linear), ("row", Int8RowLinear)])
def test_int8_decoding_approximates_float_and_leaves_the_model_alone(corpus_vocab, scales, layer):
    translator = make_translator(corpus_vocab)
    model = translator.model
    n_linear = sum(type(m) is torch.nn.Linear for m in model.modules())
    int8 = Translator(model, corpus_vocab, DecodeConfig(int8=True, int8_scales=scales,
                                                        max_length_offset=8))
    quantized = [m for m in int8.model.modules() if isinstance(m, layer)]
    assert n_linear == 2 * (4 + 2) + 2 * (8 + 2) + 1  # attention, FFN, output
    # per-row scales: each self-attention's W^Q, W^K, W^V stacked into one layer as well
    assert len(quantized) == n_linear + (4 if scales == "row" else 0)
    assert sum(type(m) is torch.nn.Linear for m in model.modules()) == n_linear  # a copy
    torch.manual_seed(1)
    src, tgt = torch.randint(4, len(corpus_vocab), (3, 9)), torch.randint(4, 100, (3, 7))
    with torch.no_grad():
        exact, approx = model(src, tgt), int8.model(src, tgt)
    assert 0 < (approx - exact).norm() / exact.norm() < 0.05
    outputs = int8.translate(SENTENCES)
    assert len(outputs) == len(SENTENCES) and all(isinstance(o, str) for o in outputs)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.ao's announced move
def test_int8_linear_is_bitwise_torch_ao_dynamic_quantisation():
    """Int8Linear calls the operator of torch.ao's dynamically quantised Linear directly: the
    same outputs, bit for bit, with and without bias, for any leading shape."""
    from torch.ao.quantization import quantize_dynamic

    torch.manual_seed(0)
    for bias in (True, False):
        linear = torch.nn.Sequential(torch.nn.Linear(48, 100, bias=bias))
        reference = quantize_dynamic(linear, {torch.nn.Linear}, dtype=torch.qint8)[0]
        for shape in ((7, 48), (2, 5, 48)):
            x = torch.randn(shape) * 3
            assert torch.equal(Int8Linear(reference)(x), reference(x))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.ao's announced move
def test_int8_row_scales_make_a_row_independent_of_its_batch():
    """Per-row scales: a row's output is bitwise the same alone or beside a row 50 times larger,
    and close to the float layer's; with one range per batch (fbgemm) the large row coarsens
    the others' quantisation, which is what the row scales avoid."""
    from torch.ao.quantization import quantize_dynamic

    torch.manual_seed(0)
    for bias in (True, False):
        linear = torch.nn.Linear(48, 100, bias=bias)
        per_row = Int8RowLinear(linear)
        per_batch = Int8Linear(quantize_dynamic(torch.nn.Sequential(linear), {torch.nn.Linear},
                                                dtype=torch.qint8)[0])
        x = torch.randn(6, 48)
        x[3] *= 50
        with torch.no_grad():
            exact = linear(x)
            batched = per_row(x)
            for i in range(len(x)):
                assert torch.equal(per_row(x[i:i + 1]), batched[i:i + 1])
            assert torch.equal(per_row(x.view(2, 3, 48)), batched.view(2, 3, 100))
            assert ((batched - exact).norm(dim=1) / exact.norm(dim=1)).max() < 0.02
            assert not torch.equal(per_batch(x[:1]), per_batch(x)[:1])


def test_stacked_projections_are_exactly_the_three_with_row_scales(corpus_vocab):
    """stack_qkv: self-attention's W^Q, W^K, W^V in one product. With per-row int8 scales the
    copy's logits are bitwise those of the same copy projecting separately (w_qkv removed), in
    the encoder, under teacher forcing and step by step with a cache."""
    model = make_translator(corpus_vocab).model
    stacked = quantize_int8(model, "row")
    separate = copy.deepcopy(stacked)
    for module in separate.modules():
        if isinstance(module, MultiHeadAttention):
            is_cross = any(module is layer.cross_attn for layer in separate.decoder.layers)
            assert (module.w_qkv is None) == is_cross
            module.w_qkv = None
    torch.manual_seed(2)
    src, tgt = torch.randint(4, len(corpus_vocab), (3, 9)), torch.randint(4, 100, (3, 7))
    with torch.no_grad():
        assert torch.equal(stacked(src, tgt), separate(src, tgt))
        steps = []
        for m in (stacked, separate):
            memory = m.encode(src)
            cache = m.new_cache(memory)
            steps.append(torch.cat([m.decode(tgt[:, t:t + 1], memory, cache)
                                    for t in range(tgt.size(1))], dim=1))
        assert torch.equal(*steps)


def test_int8_row_scales_translate_a_sentence_alike_in_any_batch(corpus_vocab):
    int8 = Translator(make_translator(corpus_vocab).model, corpus_vocab,
                      DecodeConfig(int8=True, int8_scales="row", batch_size=5,
                                   max_length_offset=8))
    assert_alike_alone(int8, int8.translate_nbest(SENTENCES))


def test_int8_is_cpu_only_and_not_with_bf16(corpus_vocab):
    with pytest.raises(ValueError, match="bf16 and decode.int8 are exclusive"):
        DecodeConfig(int8=True, bf16=True)
    with torch.device("meta"):
        model = Transformer(ModelConfig(vocab_size=len(corpus_vocab), d_model=32, n_heads=4,
                                        d_ff=64, n_encoder_layers=1, n_decoder_layers=1))
    with pytest.raises(ValueError, match="int8 runs on the CPU only"):
        Translator(model, corpus_vocab, DecodeConfig(int8=True))


def test_ensemble_step_is_the_mean_of_the_members_probabilities_with_and_without_cache():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=50, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2,
                      n_decoder_layers=2, dropout=0.0)
    a, b = Transformer(cfg).eval(), Transformer(cfg).eval()
    ensemble = Ensemble([a, b]).eval()
    src = torch.randint(4, 50, (3, 7))
    tgt = torch.cat([torch.full((3, 1), cfg.bos_id), torch.randint(4, 50, (3, 5))], dim=1)
    with torch.no_grad():
        mean_p = (a(src, tgt).softmax(-1) + b(src, tgt).softmax(-1)) / 2
        full = ensemble.decode(tgt, ensemble.encode(src))
        memories = ensemble.encode(src)
        cache = ensemble.new_cache(memories)
        steps = [ensemble.decode(tgt[:, t : t + 1], memories, cache) for t in range(6)]
    torch.testing.assert_close(full, mean_p.log(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_ensemble_of_one_model_twice_translates_as_that_model(tmp_path, corpus_vocab):
    translator = make_translator(corpus_vocab)
    translator.decode_cfg = DecodeConfig(beam_size=3, n_best=2, max_length_offset=8)
    for name in ("a", "b"):
        save_model(translator.model, tmp_path / name, vocab_path=corpus_vocab.path)
    pair = Translator.from_dirs([tmp_path / "a", tmp_path / "b"], beam_size=3, n_best=2,
                                max_length_offset=8)
    assert isinstance(pair.model, Ensemble)
    for alone, together in zip(translator.translate_nbest(SENTENCES),
                               pair.translate_nbest(SENTENCES), strict=True):
        assert [t.text for t in together] == [t.text for t in alone]
        assert [t.score for t in together] == pytest.approx([t.score for t in alone], abs=1e-4)


def test_ensemble_members_must_share_vocabulary_and_special_ids(tmp_path, corpus_vocab):
    translator = make_translator(corpus_vocab)
    save_model(translator.model, tmp_path / "a", vocab_path=corpus_vocab.path)
    save_model(translator.model, tmp_path / "b", vocab_path=corpus_vocab.path)
    (tmp_path / "b" / "sentencepiece.model").write_bytes(b"another vocabulary")
    with pytest.raises(ValueError, match="b/sentencepiece.model differs from .*a/sentencepiece"):
        Translator.from_dirs([tmp_path / "a", tmp_path / "b"])
    other = Transformer(ModelConfig(vocab_size=len(corpus_vocab), d_model=32, n_heads=4,
                                    d_ff=64, n_encoder_layers=1, n_decoder_layers=1, eos_id=4))
    with pytest.raises(ValueError, match="member 2 has eos_id 4, member 1 has 3"):
        Ensemble([translator.model, other])


def test_bf16_auto_decodes_each_batch_in_the_precision_measured_faster(corpus_vocab,
                                                                       monkeypatch):
    from transformer_mt.cli.main import build_parser
    from transformer_mt.inference import precision

    parser = build_parser()
    for flags, value in (([], None), (["--bf16"], True), (["--bf16", "auto"], "auto")):
        args = parser.parse_args(["translate", "--model", "m", *flags])
        assert vars(args)["decode.bf16"] == value
    with pytest.raises(SystemExit):
        parser.parse_args(["translate", "--model", "m", "--bf16", "yes"])

    translator = make_translator(corpus_vocab)
    measured = precision.choose_bf16(translator.model, DecodeConfig(batch_size=4),
                                     translator.device)  # a real measurement: both sizes
    assert set(measured.speedup) == {1, 4} and all(s >= 0 for s in measured.speedup.values())

    seen = []
    monkeypatch.setattr(precision, "bf16_pays", lambda device: True)
    monkeypatch.setattr(precision, "time_search", lambda model, cfg, device, batch, bf16: (
        seen.append((batch, bf16)), {(1, False): 1.0, (1, True): 1.5,  # bf16 slower alone
                                     (8, False): 2.0, (8, True): 1.0}[batch, bf16])[1])
    translator.decode_cfg = DecodeConfig(batch_size=8, bf16="auto", max_length_offset=6)
    assert [translator.bf16_for(translator.decode_cfg, b) for b in (1, 2, 3, 8)] == \
        [False, False, True, True]  # batch 2 is nearer 1 than 8 on a log scale
    assert len(seen) == 4, "measured once"
    chosen = []
    original = translator._precision
    monkeypatch.setattr(translator, "_precision", lambda cfg, batch=None: (
        chosen.append((batch, translator.bf16_for(cfg, batch or cfg.batch_size))),
        original(cfg, batch))[1])
    ten = ([s for s in SENTENCES if s] * 3)[:10]
    auto = translator.translate(ten)  # 10 sentences: a batch of 8, then 2
    assert chosen == [(8, True), (2, False)]
    explicit = []
    for cfg, batch in ((DecodeConfig(batch_size=8, bf16=True, max_length_offset=6), 8),
                       (DecodeConfig(batch_size=8, bf16=False, max_length_offset=6), 2)):
        translator.decode_cfg = cfg
        order = sorted(range(10), key=lambda i: len(translator.encode_source(
            (ten)[i], i)))
        part = order[:8] if batch == 8 else order[8:]
        texts = translator.translate([(ten)[i] for i in part])
        explicit += list(zip(part, texts, strict=True))
    assert [auto[i] for i, _ in explicit] == [t for _, t in explicit]

    monkeypatch.setattr(precision, "bf16_pays", lambda device: False)  # no bf16 units here
    seen.clear()
    assert not precision.choose_bf16(translator.model, DecodeConfig(batch_size=8),
                                     translator.device).for_batch(8)
    assert not seen, "nothing measured where bf16 cannot pay"
