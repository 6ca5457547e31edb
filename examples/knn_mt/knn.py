"""kNN-MT (Khandelwal et al., ICLR 2021; not in the paper): decoding with a memory of the
training data, without further training.

A datastore holds, for every target position of a parallel corpus decoded by teacher forcing,
the decoder's output state (the input of the pre-softmax linear) as key and the target token
that followed as value. While decoding, the k stored states nearest the current state q vote for
their tokens,

    p_kNN(y) = sum over neighbours i with v_i = y of softmax_i(-||q - k_i||^2 / T),

and the search uses p(y) = lambda p_kNN(y) + (1 - lambda) p_model(y). The neighbours come from a
faiss inverted-file index (`nlist` k-means cells, `probe` of them searched per query; probe =
nlist searches every key: exact). A datastore belongs to the model whose states it stores: it
records the sha256 of that model's weights, and loading it for other weights is an error.

On disk a datastore is a directory: `values.safetensors` (the tokens, with the model's hash and
the corpus in its metadata) and `index.faiss` (the keys, in faiss's own format).

`KnnModel` plugs into transformer-mt's decoding protocol (`transformer_mt.inference.search.
DecodingModel`): any search and the `Translator` decode with it as with the plain model.
"""

# N entries  D d_model  R query rows  k neighbours  B batch  T target len  V vocab

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor, nn

from transformer_mt.config import option
from transformer_mt.data.dataset import ParallelData
from transformer_mt.model.transformer import DecoderCache, Memory, Transformer
from transformer_mt.storage.files import atomic_write, sha256_file
from transformer_mt.storage.model_dir import WEIGHTS_FILE, load_model

VALUES_FILE = "values.safetensors"
INDEX_FILE = "index.faiss"


@dataclass(frozen=True, kw_only=True)
class KnnConfig:
    """kNN-MT's settings; each is a command-line option of cli.py translate."""

    knn_k: int = option(16, "neighbours per step")
    knn_temperature: float = option(10.0, "neighbours weigh softmax(-squared distance / this)")
    knn_lambda: float = option(0.25, "weight of the neighbours' distribution, in [0, 1)")
    knn_probe: int = option(32, "index cells searched per step; the datastore's cell count "
                                "searches all keys, exactly")

    def __post_init__(self):
        for name in ("knn_k", "knn_temperature", "knn_probe"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0.0 <= self.knn_lambda < 1.0:
            raise ValueError(f"knn_lambda must be in [0, 1), got {self.knn_lambda}")


class DatastoreError(ValueError):
    """A datastore is missing, damaged or built for another model; the message names the file."""


def _faiss():
    """faiss, imported when a datastore is used, with torch's thread count."""
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)  # which SIMD build it found
    import faiss

    faiss.omp_set_num_threads(torch.get_num_threads())
    return faiss


def default_nlist(n_entries: int) -> int:
    """faiss's rule of thumb, about 4 sqrt(N) cells, with at least 39 training points per cell
    (k-means warns below that); small datastores get a single cell, an exact search."""
    return max(1, min(4 * math.isqrt(n_entries), n_entries // 39))


@torch.inference_mode()
def decoder_states(model: Transformer, data: ParallelData, *, batch_sentences: int = 256,
                   progress: Callable[[int], None] | None = None) -> tuple[Tensor, Tensor]:
    """Teacher-forced decoder output states (N, D) float32 and the tokens that follow them (N,),
    for every target position of `data` (EOS included), sentences in order of target length.
    `progress` gets the number of sentences done after each batch."""
    model.eval()
    device = next(model.parameters()).device
    order = np.argsort(data.tgt_lengths, kind="stable")
    keys, values = [], []
    for start in range(0, len(order), batch_sentences):
        src_BS, tgt_in_BT, tgt_out_BT = data.collate(order[start : start + batch_sentences])
        states_BTD = model(src_BS.to(device), tgt_in_BT.to(device), project=False)
        real_BT = tgt_out_BT.ne(model.cfg.pad_id)
        keys.append(states_BTD[real_BT.to(device)].float().cpu())
        values.append(tgt_out_BT[real_BT])
        if progress is not None:
            progress(min(start + batch_sentences, len(order)))
    return torch.cat(keys), torch.cat(values)


@dataclass
class Datastore:
    """Values (N,) and the faiss index over their keys; `model_sha256` of the weights that made
    them."""

    values_N: Tensor
    index: object  # faiss.IndexIVFFlat
    model_sha256: str

    def __len__(self) -> int:
        return len(self.values_N)

    @classmethod
    def build(cls, keys_ND: Tensor, values_N: Tensor, *, model_sha256: str,
              nlist: int | None = None, seed: int = 1234) -> Datastore:
        faiss = _faiss()
        if len(keys_ND) != len(values_N) or len(keys_ND) == 0:
            raise DatastoreError(f"a datastore needs as many keys as values, at least one "
                                 f"(got {len(keys_ND)} and {len(values_N)})")
        N, D = keys_ND.shape
        nlist = nlist or default_nlist(N)
        if not 1 <= nlist <= N:
            raise DatastoreError(f"nlist must be between 1 and the {N} entries, got {nlist}")
        keys = np.ascontiguousarray(keys_ND.float().numpy())
        index = faiss.IndexIVFFlat(faiss.IndexFlatL2(D), D, nlist, faiss.METRIC_L2)
        index.cp.seed = seed
        index.train(keys)
        index.add(keys)
        return cls(values_N.long(), index, model_sha256)

    def search(self, queries_RD: Tensor, k: int, probe: int) -> tuple[Tensor, Tensor]:
        """Squared L2 distances (R, k) ascending and entry ids (R, k) of the k nearest keys of
        each query in the `probe` cells nearest it; -1 (distance inf) where fewer were found."""
        self.index.nprobe = min(probe, self.index.nlist)
        queries = np.ascontiguousarray(queries_RD.detach().float().cpu().numpy())
        distances, ids = self.index.search(queries, k)
        distances_Rk = torch.from_numpy(distances)
        ids_Rk = torch.from_numpy(ids)
        return distances_Rk.masked_fill(ids_Rk < 0, float("inf")), ids_Rk

    def log_probs(self, queries_RD: Tensor, vocab_size: int, *, k: int, temperature: float,
                  probe: int) -> Tensor:
        """log p_kNN (R, V): the k neighbours' tokens weighted by softmax(-distance / T)."""
        distances_Rk, ids_Rk = self.search(queries_RD, k, probe)
        weights_Rk = torch.softmax(-distances_Rk / temperature, dim=1).nan_to_num_(0.0)
        tokens_Rk = self.values_N[ids_Rk.clamp(min=0)]
        probs_RV = torch.zeros(len(ids_Rk), vocab_size).scatter_add_(1, tokens_Rk, weights_Rk)
        return probs_RV.log_().to(queries_RD.device)

    def save(self, out_dir: str | Path, *, corpus: str = "") -> Path:
        """Write values.safetensors and index.faiss into `out_dir`, each renamed into place."""
        faiss = _faiss()
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        metadata = {"model_sha256": self.model_sha256, "corpus": corpus,
                    "d_model": str(self.index.d), "nlist": str(self.index.nlist)}
        atomic_write(out_dir / VALUES_FILE, lambda p: save_file(
            {"values": self.values_N.int().contiguous()}, str(p), metadata=metadata))
        atomic_write(out_dir / INDEX_FILE, lambda p: faiss.write_index(self.index, str(p)))
        return out_dir

    @classmethod
    def load(cls, store_dir: str | Path, *, model_sha256: str | None = None,
             d_model: int | None = None) -> Datastore:
        """Read a datastore directory; with `model_sha256` / `d_model`, check it was built for
        that model."""
        faiss = _faiss()
        store_dir = Path(store_dir)
        values_path, index_path = store_dir / VALUES_FILE, store_dir / INDEX_FILE
        for path in (values_path, index_path):
            if not path.exists():
                raise DatastoreError(f"{path}: missing (a datastore directory holds "
                                     f"{VALUES_FILE} and {INDEX_FILE}; `transformer-mt "
                                     "datastore` writes them)")
        try:
            with safe_open(str(values_path), framework="pt") as f:
                metadata = f.metadata() or {}
                values_N = f.get_tensor("values").long()
        except (SafetensorError, KeyError, OSError) as err:
            raise DatastoreError(f"{values_path}: not a datastore's values ({err})") from None
        built_for = metadata.get("model_sha256", "")
        if model_sha256 is not None and built_for != model_sha256:
            raise DatastoreError(f"{values_path}: built for the model with weights sha256 "
                                 f"{built_for[:12]}..., not this one ({model_sha256[:12]}...): "
                                 "build a datastore with this model")
        try:
            index = faiss.read_index(str(index_path))
        except RuntimeError as err:
            raise DatastoreError(f"{index_path}: not a faiss index ({err})") from None
        if index.ntotal != len(values_N):
            raise DatastoreError(f"{index_path}: {index.ntotal} keys, but {values_path} has "
                                 f"{len(values_N)} values")
        if d_model is not None and index.d != d_model:
            raise DatastoreError(f"{index_path}: keys of {index.d} dimensions, the model's "
                                 f"states have {d_model}")
        return cls(values_N, index, built_for)


def build_datastore(model_dir: str | Path, data_dir: str | Path, *, split: str = "train",
                    nlist: int | None = None,
                    progress: Callable[[int], None] | None = None) -> Datastore:
    """The datastore of the model in `model_dir` over one split of a prepared data directory."""
    model, _ = load_model(model_dir)
    data = ParallelData(Path(data_dir), split)
    keys_ND, values_N = decoder_states(model, data, progress=progress)
    return Datastore.build(keys_ND, values_N, nlist=nlist,
                           model_sha256=sha256_file(Path(model_dir) / WEIGHTS_FILE))


class KnnModel(nn.Module):
    """A model decoding with a datastore: `encode` and `new_cache` are the model's, `decode`
    returns log(lambda p_kNN + (1 - lambda) p_model) (B, T, V) in fp32, normalised already, so
    the search's log_softmax leaves it unchanged."""

    def __init__(self, model: nn.Module, store: Datastore, knn: KnnConfig):
        super().__init__()
        self.model, self.store, self.cfg = model, store, model.cfg
        self.search = {"k": knn.knn_k, "temperature": knn.knn_temperature,
                       "probe": knn.knn_probe}
        self.lam = knn.knn_lambda

    def encode(self, src_BS: Tensor) -> Memory:
        return self.model.encode(src_BS)

    def new_cache(self, memory: Memory, beams: int = 1,
                  kv_dtype: torch.dtype | None = None) -> DecoderCache:
        return self.model.new_cache(memory, beams, kv_dtype)

    def decode(self, tgt_BT: Tensor, memory: Memory, cache: DecoderCache | None = None) -> Tensor:
        states_BTD = self.model.decode(tgt_BT, memory, cache, project=False)
        logits_BTV = self.model.pre_softmax(
            states_BTD, None if cache is None else cache.pre_softmax_DV)
        logp_BTV = torch.log_softmax(logits_BTV.float(), dim=-1)
        if self.lam == 0:
            return logp_BTV
        B, T, V = logp_BTV.shape
        knn_logp_BTV = self.store.log_probs(states_BTD.reshape(B * T, -1), V,
                                            **self.search).view(B, T, V)
        return torch.logaddexp(logp_BTV + math.log1p(-self.lam),
                               knn_logp_BTV + math.log(self.lam))
