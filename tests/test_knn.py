"""kNN-MT: the datastore holds the model's teacher-forced states and the tokens that followed,
the index finds the true nearest keys, the mixture is the one of Khandelwal et al. (2021), and
decoding with it is the same with and without the incremental cache (examples/knn_mt/)."""

import math

import pytest
import torch

pytest.importorskip("faiss", reason="kNN-MT needs faiss-cpu: pip install -e '.[knn]'")
from conftest import random_batch, tiny_model
from knn_mt.cli import main  # noqa: E402  (examples/ is on the path: conftest.py)
from knn_mt.knn import Datastore, DatastoreError, KnnConfig, KnnModel, decoder_states  # noqa: E402
from transformer_mt.cli.main import main as core_main
from transformer_mt.config import DecodeConfig
from transformer_mt.data.dataset import ParallelData
from transformer_mt.data.prepare import load_vocab
from transformer_mt.inference.search import generate
from transformer_mt.storage.model_dir import save_model


def vocab_size(data_dir) -> int:
    return len(load_vocab(data_dir))


def random_store(n: int = 3000, d: int = 16, nlist: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    keys_ND = torch.randn(n, d, generator=g)
    values_N = torch.randint(0, 50, (n,), generator=g)
    return keys_ND, values_N, Datastore.build(keys_ND, values_N, model_sha256="0" * 64,
                                              nlist=nlist)


def test_search_of_every_cell_is_exact_nearest_neighbours():
    keys_ND, _, store = random_store()
    queries_RD = torch.randn(40, 16, generator=torch.Generator().manual_seed(1))
    distances_Rk, ids_Rk = store.search(queries_RD, k=10, probe=store.index.nlist)  # exact
    true_RN = torch.cdist(queries_RD.double(), keys_ND.double()).pow(2)
    true_Rk, true_ids_Rk = true_RN.topk(10, dim=1, largest=False)
    assert torch.equal(ids_Rk, true_ids_Rk)
    torch.testing.assert_close(distances_Rk.double(), true_Rk, rtol=1e-4, atol=1e-4)


def test_fewer_cells_find_fewer_but_never_wrong_neighbours():
    keys_ND, _, store = random_store()
    queries_RD = torch.randn(40, 16, generator=torch.Generator().manual_seed(1))
    distances_Rk, ids_Rk = store.search(queries_RD, k=10, probe=1)
    found = ids_Rk >= 0
    assert found[:, 0].all()
    true_Rk = (queries_RD[:, None] - keys_ND[ids_Rk.clamp(min=0)]).pow(2).sum(-1)
    torch.testing.assert_close(distances_Rk[found], true_Rk[found], rtol=1e-4, atol=1e-4)
    assert torch.isinf(distances_Rk[~found]).all()


def test_knn_distribution_by_hand():
    # keys on a line: 0, 1, 2, 10; values 7, 7, 9, 5; query at 0.5, k 3, temperature 2:
    # squared distances 0.25, 0.25, 2.25 -> weights softmax(-d / 2) over tokens 7, 7, 9
    keys_ND = torch.tensor([[0.0], [1.0], [2.0], [10.0]])
    store = Datastore.build(keys_ND, torch.tensor([7, 7, 9, 5]), model_sha256="", nlist=1)
    logp_RV = store.log_probs(torch.tensor([[0.5]]), 12, k=3, temperature=2.0, probe=1)
    w = torch.softmax(torch.tensor([-0.125, -0.125, -1.125]), dim=0)
    expected = torch.full((12,), float("-inf"))
    expected[7], expected[9] = math.log(w[0] + w[1]), math.log(w[2])
    torch.testing.assert_close(logp_RV[0], expected)


def test_datastore_holds_the_teacher_forced_states(prepared_corpus):
    model = tiny_model(vocab_size=vocab_size(prepared_corpus))
    data = ParallelData(prepared_corpus, "train")
    keys_ND, values_N = decoder_states(model, data, batch_sentences=64)
    assert len(values_N) == int(data.tgt_lengths.sum())  # every target token and each EOS
    assert int((values_N == model.cfg.eos_id).sum()) == len(data)
    # the states of sentence i, one at a time, are among the keys, with its tokens + EOS
    i = 17
    src_BS, tgt_in_BT, tgt_out_BT = data.collate([i])
    with torch.inference_mode():
        states_TD = model(src_BS, tgt_in_BT, project=False)[0]
    distances_TN = torch.cdist(states_TD, keys_ND)
    nearest_T = distances_TN.argmin(dim=1)
    assert distances_TN.min(dim=1).values.max() < 1e-2  # batched with other lengths: fp32 noise
    assert torch.equal(values_N[nearest_T], tgt_out_BT[0])


def test_lambda_zero_is_the_model_and_mixture_is_normalised():
    model = tiny_model()
    keys_ND, values_N, store = random_store(n=2000, d=32)
    src_BS = random_batch(0, batch=3, length=6)
    tgt_BT = random_batch(1, batch=3, length=5)
    tgt_BT[:, 0] = model.cfg.bos_id
    memory = model.encode(src_BS)
    plain = KnnModel(model, store, KnnConfig(knn_lambda=0.0)).decode(tgt_BT, memory)
    with torch.inference_mode():
        expected = torch.log_softmax(model.decode(tgt_BT, memory).float(), dim=-1)
    torch.testing.assert_close(plain, expected)
    mixed = KnnModel(model, store, KnnConfig(knn_lambda=0.4)).decode(tgt_BT, memory)
    torch.testing.assert_close(mixed.logsumexp(dim=-1), torch.zeros(3, 5), atol=1e-5, rtol=0)
    assert not torch.allclose(mixed, expected)


def test_incremental_decoding_equals_full_recomputation():
    model = tiny_model()
    _, _, store = random_store(n=2000, d=32)
    knn = KnnModel(model, store, KnnConfig(knn_lambda=0.3, knn_probe=8))
    src_BS = random_batch(2, batch=2, length=7)
    tgt_BT = random_batch(3, batch=2, length=6)
    tgt_BT[:, 0] = model.cfg.bos_id
    with torch.inference_mode():
        memory = knn.encode(src_BS)
        full_BTV = knn.decode(tgt_BT, memory)
        cache = knn.new_cache(memory)
        steps = [knn.decode(tgt_BT[:, t : t + 1], memory, cache)[:, -1] for t in range(6)]
    torch.testing.assert_close(torch.stack(steps, dim=1), full_BTV, atol=1e-4, rtol=1e-4)


def test_a_heavy_datastore_recites_the_training_targets(prepared_corpus):
    """An untrained model, whose own outputs are noise, with its datastore of the training split
    and lambda 0.99: each step's state is a stored one, so greedy search reads back the
    training target of a training source, token by token."""
    model = tiny_model(vocab_size=vocab_size(prepared_corpus))
    data = ParallelData(prepared_corpus, "train")
    keys_ND, values_N = decoder_states(model, data)
    store = Datastore.build(keys_ND, values_N, model_sha256="", nlist=4)
    cfg = DecodeConfig(strategy="greedy")
    knn = KnnConfig(knn_lambda=0.99, knn_temperature=0.01, knn_k=4, knn_probe=4)
    sources = [data.text("src")[i] for i in range(40)]
    unique = [i for i in range(40) if sources.count(sources[i]) == 1][:8]
    src_BS = data.collate(unique)[0]
    recited = [h[0].tokens for h in generate(KnnModel(model, store, knn), src_BS, cfg)]
    assert recited == [data.ids("tgt", i).tolist() for i in unique]
    alone = [h[0].tokens for h in generate(model, src_BS, cfg)]
    assert alone != recited


def test_save_load_and_refusals(tmp_path):
    keys_ND, values_N, store = random_store()
    store.save(tmp_path / "ds", corpus="random")
    loaded = Datastore.load(tmp_path / "ds", model_sha256="0" * 64, d_model=16)
    assert torch.equal(loaded.values_N, values_N) and loaded.model_sha256 == "0" * 64
    queries_RD = keys_ND[:5] + 0.01
    assert torch.equal(loaded.search(queries_RD, 4, probe=2)[1],
                       store.search(queries_RD, 4, probe=2)[1])
    with pytest.raises(DatastoreError, match="values.safetensors: built for the model"):
        Datastore.load(tmp_path / "ds", model_sha256="1" * 64)
    with pytest.raises(DatastoreError, match="keys of 16 dimensions, the model's states have 32"):
        Datastore.load(tmp_path / "ds", d_model=32)
    (tmp_path / "ds" / "index.faiss").unlink()
    with pytest.raises(DatastoreError, match="index.faiss: missing"):
        Datastore.load(tmp_path / "ds")


def test_knn_lambda_must_leave_the_model_a_share():
    with pytest.raises(ValueError, match="knn_lambda must be in"):
        KnnConfig(knn_lambda=1.0)


def test_cli_datastore_then_translate(prepared_corpus, corpus, tmp_path, capsys):
    model_dir = save_model(tiny_model(vocab_size=vocab_size(prepared_corpus)), tmp_path / "model",
                           vocab_path=prepared_corpus / "sentencepiece.model")
    store = tmp_path / "store"
    assert main(["datastore", "--model", str(model_dir), "--data", str(prepared_corpus),
                 "--out", str(store)]) == 0
    entries = int(ParallelData(prepared_corpus, "train").tgt_lengths.sum())
    assert f"datastore: {entries:,} target positions" in capsys.readouterr().out
    test_en = corpus / "test.en"
    plain = tmp_path / "plain.de"
    assert core_main(["translate", "--model", str(model_dir), "--input", str(test_en),
                      "--output", str(plain), "--beam-size", "2"]) == 0
    outputs = {"plain": plain.read_text(encoding="utf-8").splitlines()}
    for name, lam in (("lambda0", "0"), ("knn", "0.6")):
        out = tmp_path / f"{name}.de"
        assert main(["translate", "--model", str(model_dir), "--input", str(test_en),
                     "--output", str(out), "--beam-size", "2", "--datastore", str(store),
                     "--knn-lambda", lam]) == 0
        outputs[name] = out.read_text(encoding="utf-8").splitlines()
    assert len(outputs["knn"]) == 30
    assert outputs["lambda0"] == outputs["plain"] and outputs["knn"] != outputs["plain"]

    other = save_model(tiny_model(seed=1, vocab_size=vocab_size(prepared_corpus)),
                       tmp_path / "other", vocab_path=prepared_corpus / "sentencepiece.model")
    assert main(["translate", "--model", str(other), "--input", str(test_en),
                 "--datastore", str(store)]) == 2
    assert "built for the model with weights sha256" in capsys.readouterr().err
    # the core no longer knows kNN-MT's options, and says where they went
    assert core_main(["translate", "--model", str(model_dir), "--input", str(test_en),
                      "--decode.knn_lambda=0.3"]) == 2
    assert "moved out of the core to examples/knn_mt/" in capsys.readouterr().err
