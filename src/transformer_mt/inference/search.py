"""Inference (§6.1): greedy search, batched beam search with the GNMT length penalty, sampling.

All three decode incrementally: the encoder runs once, cross-attention keys/values are projected
once per source (`model.new_cache`), and each step feeds only the newest target token.
An output holds at most (source length + max_length_offset) tokens, EOS included; at that length
EOS is forced, so every hypothesis ends.

The `model` argument is a `DecodingModel`: it needs only `cfg` (pad/bos/eos ids), `encode`,
`new_cache` (a `DecodingCache`) and `decode`. A Transformer, an Ensemble, a wrapper that
changes the next-token distribution (examples/knn_mt/) and the tests' fake models with
hand-written log-probability tables all are one. Finished sentences leave the batch at once.
"""

# B batch  S source len  T target len  V vocab  N beam  n rows per sentence (1 or N)  A active

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from ..config import DecodeConfig, ModelConfig
from ..model.attention import attention_kernels


class DecodingCache(Protocol):
    """The self-attention (and projected cross-attention) state of the sentences decoding."""

    def reorder(self, index_B: Tensor, beams: int | None = None) -> None:
        """Rows follow the beams that moved: row i becomes row index_B[i]."""

    def keep_sources(self, index_A: Tensor) -> None:
        """Keep only the sentences (all their rows) of index_A; the others finished."""

    # For sentences joining a running search (BeamSearch.add) only:
    def merge(self, other: DecodingCache) -> None:
        """Append the rows of `other`, new, whose outputs begin at the next position."""

    def drop_front(self, m: int) -> None:
        """Forget the first m positions, which no row's output holds any more."""


class DecodingModel(Protocol):
    """What a search decodes with: `cfg` gives pad_id, bos_id, eos_id, vocab_size and
    max_positions; `decode` returns next-token logits (B, T, V), or log-probabilities, which
    the search's log_softmax leaves as they are."""

    cfg: ModelConfig

    def encode(self, src_BS: Tensor) -> Any:
        """The memory of a padded source batch, as `new_cache` and `decode` take it."""

    def new_cache(self, memory: Any, beams: int = 1,
                  kv_dtype: torch.dtype | None = None) -> DecodingCache: ...

    def decode(self, tgt_BT: Tensor, memory: Any, cache: DecodingCache | None = None) -> Tensor:
        ...


@dataclass(frozen=True)
class Hypothesis:
    """One output: tokens without BOS and EOS; log_prob of the tokens and EOS; score used to
    rank them, log_prob / lp(|Y|) (`length_norm`) with |Y| counting EOS."""

    tokens: list[int]
    log_prob: float
    score: float


def length_penalty(length: int | Tensor, alpha: float) -> float | Tensor:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016, used in §6.1 with alpha 0.6)."""
    return ((5 + length) / 6) ** alpha


def length_norm(length: int | Tensor, cfg: DecodeConfig) -> float | Tensor:
    """What a finished output's log-probability is divided by to rank it: GNMT's lp(Y), or
    |Y|^alpha with decode.length_normalization "power"."""
    if cfg.length_normalization == "power":
        return length ** cfg.length_penalty
    return length_penalty(length, cfg.length_penalty)


def max_output_lengths(src_BS: Tensor, pad_id: int, cfg: DecodeConfig) -> Tensor:
    """(B,) the longest output allowed per sentence: `output_length_caps` of its length."""
    return output_length_caps(src_BS.ne(pad_id).sum(dim=1), cfg)


def output_length_caps(src_len_B: Tensor, cfg: DecodeConfig) -> Tensor:
    """(B,) the longest output allowed for sources of these lengths (EOS included): the
    length + offset (§6.1), capped by cfg.max_length and, when set, by Marian's
    max-length-factor: the length x cfg.max_length_factor, rounded up, pieces and then the end
    (`ends_without_eos`); never below cfg.min_length."""
    max_len_B = src_len_B + cfg.max_length_offset
    if cfg.max_length:
        max_len_B = max_len_B.clamp(max=cfg.max_length)
    if cfg.max_length_factor:
        pieces_B = torch.ceil(src_len_B * cfg.max_length_factor).long()
        max_len_B = torch.minimum(max_len_B, pieces_B + 1)
    return max_len_B.clamp(min=max(cfg.min_length, 1))


def ends_without_eos(cfg: DecodeConfig) -> bool:
    """Whether an output that reaches its length cap ends with its last piece, as Marian's do
    (with decode.max_length_factor, Marian's cap): once only the EOS would be left to write,
    the search ends it without that EOS, scored without it and normalised by its pieces.
    Otherwise EOS is the last token allowed, scored as the model gives it (fairseq,
    tensor2tensor)."""
    return bool(cfg.max_length_factor)


def cache_dtype(cfg: DecodeConfig) -> torch.dtype | None:
    """The dtype of the attention keys and values while decoding: bf16 with decode.kv_bf16,
    else the projections' own."""
    return torch.bfloat16 if cfg.kv_bf16 else None


class LogitsProcessor(Protocol):
    """A hook of every search, not in the paper: it may forbid next tokens (their
    log-probabilities set to -inf in place) from what each output holds so far and a state of
    its sentence computed once from the source (research/trees.py's TreeConstraints: parsing's
    word slots and balanced brackets). The output's length limit still ends an output whatever
    it says."""

    def start(self, src_BS: Tensor) -> Tensor:
        """(B,) each source sentence's state."""
        ...

    def apply(self, logp_BV: Tensor, tokens_BT: Tensor, state_B: Tensor, eos: int,
              at_limit_B: Tensor) -> None:
        """Forbid tokens in logp_BV (B, V) in place: rows' outputs tokens_BT, their sentences'
        states, the EOS id, and which rows' next token is the last one allowed."""
        ...


def _next_log_probs(model, tokens_BT: Tensor, memory, cache, max_len_B: Tensor,
                    cfg: DecodeConfig, position_B: Tensor | None = None,
                    processor: tuple[LogitsProcessor, Tensor] | None = None) -> Tensor:
    """Log-probabilities (B, V) of the next token; padding never (as fairseq, and Marian's
    bad_words_ids), <unk> never without cfg.allow_unk, EOS forced where max_len_B is reached
    and forbidden while the output is shorter than cfg.min_length. position_B: the next token
    is the position-th of each row's output (None: the tokens' length, for every row).
    processor: a LogitsProcessor and each row's state (B,)."""
    logits_BV = model.decode(tokens_BT[:, -1:], memory, cache)[:, -1].float()
    logp_BV = torch.log_softmax(logits_BV, dim=-1)
    eos, min_length = model.cfg.eos_id, cfg.min_length
    if model.cfg.pad_id != eos:
        logp_BV[:, model.cfg.pad_id] = float("-inf")
    if not cfg.allow_unk:  # log P as the model gives it, as Marian's scores
        logp_BV[:, model.cfg.unk_id] = float("-inf")
    position = tokens_BT.size(1) if position_B is None else position_B
    if min_length:
        too_short = torch.as_tensor(position < min_length, device=logp_BV.device)  # () or (B,)
        logp_BV[:, eos].masked_fill_(too_short, float("-inf"))
    at_limit_B = max_len_B <= position  # the next token is the last one allowed
    if bool(at_limit_B.any()):  # only then: a pass over (B, V)
        eos_lp_B = logp_BV[:, eos].clone()
        logp_BV.masked_fill_(at_limit_B[:, None], float("-inf"))
        logp_BV[:, eos] = torch.where(at_limit_B, eos_lp_B, logp_BV[:, eos])
    if processor is not None:
        processor[0].apply(logp_BV, tokens_BT, processor[1], eos, at_limit_B)
    return logp_BV


def topk_in_blocks(x_AX: Tensor, k: int, block: int = 128) -> tuple[Tensor, Tensor]:
    """The values and indices of `x_AX.topk(k, dim=1)` (ties may come in another order), found
    without sorting whole rows: the k blocks of `block` consecutive values with the largest
    maxima hold the k largest values. (A block holding one of them, v, is outranked only by
    blocks whose maximum exceeds v, and each of those holds a distinct value among the k
    largest: at most k - 1 of them.) Beam search's top 2N of N x V candidates: 4x faster than
    `topk` on the 2-core CPU (64 x 32,000 values, k 8)."""
    A, X = x_AX.shape
    n_blocks = X // block
    if n_blocks <= k:
        return x_AX.topk(k, dim=1)
    whole = n_blocks * block
    block_max_AM = x_AX[:, :whole].view(A, n_blocks, block).amax(dim=2)
    best_Ak = block_max_AM.topk(k, dim=1).indices
    offsets = torch.arange(block, device=x_AX.device)
    where_AP = (best_Ak[:, :, None] * block + offsets).view(A, k * block)
    if whole < X:  # the last values, fewer than a block, are candidates as they are
        tail = torch.arange(whole, X, device=x_AX.device).expand(A, X - whole)
        where_AP = torch.cat([where_AP, tail], dim=1)
    values_Ak, pick_Ak = x_AX.gather(1, where_AP).topk(k, dim=1)
    return values_Ak, where_AP.gather(1, pick_Ak)


def argmax_in_blocks(x_AX: Tensor, block: int = 128) -> Tensor:
    """`x_AX.argmax(dim=1)`, ties and NaN included (the first index of the row's maximum), found
    by the maxima of blocks of `block` consecutive values: the first block holding the row's
    maximum holds its first index. torch's argmax reads a row value by value; amax is
    vectorised: greedy search's 64 x 8,000 log-probabilities in a third of the time on the
    2-core CPU. Rows: 16 or more (below that, argmax is faster)."""
    A, X = x_AX.shape
    n_blocks = X // block
    if n_blocks < 2 or A < 16:
        return x_AX.argmax(dim=1)
    whole = n_blocks * block
    max_AM = x_AX[:, :whole].view(A, n_blocks, block).amax(dim=2)
    if whole < X:  # the last values, fewer than a block, are one block more
        max_AM = torch.cat([max_AM, x_AX[:, whole:].amax(dim=1, keepdim=True)], dim=1)
    first_A1 = max_AM.argmax(dim=1, keepdim=True) * block
    # the block's indices; a short last block repeats its last index, which argmax never
    # prefers to the same value earlier
    where_AP = (first_A1 + torch.arange(block, device=x_AX.device)).clamp_(max=X - 1)
    pick_A1 = x_AX.gather(1, where_AP).argmax(dim=1, keepdim=True)
    return where_AP.gather(1, pick_A1).squeeze(1)


def _sequential_search(model: DecodingModel, src_BS: Tensor, cfg: DecodeConfig,
                       choose: Callable[[Tensor], Tensor],
                       processor: LogitsProcessor | None = None) -> list[list[Hypothesis]]:
    """One hypothesis per sentence, the next token picked by `choose(logp_AV) -> (A,)` for the
    A sentences still decoding; a sentence leaves the batch (and the caches) at its EOS."""
    mcfg = model.cfg
    memory = model.encode(src_BS)
    cache = model.new_cache(memory, kv_dtype=cache_dtype(cfg))
    B, device = src_BS.size(0), src_BS.device
    active_A = torch.arange(B, device=device)  # the sentence in each row
    max_len_A = max_output_lengths(src_BS, mcfg.pad_id, cfg)
    state_A = processor.start(src_BS) if processor else max_len_A  # (unused without)
    tokens_AT = torch.full((B, 1), mcfg.bos_id, dtype=torch.long, device=device)
    log_prob_A = torch.zeros(B, device=device)
    hyps: list[list[Hypothesis]] = [[] for _ in range(B)]
    while len(active_A):
        logp_AV = _next_log_probs(model, tokens_AT, memory, cache, max_len_A, cfg,
                                  processor=(processor, state_A) if processor else None)
        next_A = choose(logp_AV)
        log_prob_A += logp_AV.gather(1, next_A[:, None]).squeeze(1)
        tokens_AT = torch.cat([tokens_AT, next_A[:, None]], dim=1)
        n = tokens_AT.size(1) - 1  # tokens of the output
        ended_A = next_A.eq(mcfg.eos_id)
        # at Marian's cap, where only EOS would be left to write, the output ends now
        done_A = ended_A | (max_len_A <= n + 1) if ends_without_eos(cfg) else ended_A
        if bool(done_A.any()):
            ended = ended_A.tolist()
            for a in done_A.nonzero().flatten().tolist():
                lp, pieces = float(log_prob_A[a]), n - ended[a]  # EOS counted in n, not kept
                hyps[int(active_A[a])] = [Hypothesis(tokens_AT[a, 1 : 1 + pieces].tolist(),
                                                     lp, lp / length_norm(n, cfg))]
            keep_A = (~done_A).nonzero().flatten()
            active_A, tokens_AT = active_A[keep_A], tokens_AT[keep_A]
            log_prob_A, max_len_A = log_prob_A[keep_A], max_len_A[keep_A]
            state_A = state_A[keep_A]
            cache.keep_sources(keep_A)
    return hyps


@torch.inference_mode()
def greedy_search(model: DecodingModel, src_BS: Tensor, cfg: DecodeConfig,
                  processor: LogitsProcessor | None = None) -> list[list[Hypothesis]]:
    """The most probable next token at each step. Returns one hypothesis per sentence."""
    return _sequential_search(model, src_BS, cfg, argmax_in_blocks, processor)


@torch.inference_mode()
def sample(model: DecodingModel, src_BS: Tensor, cfg: DecodeConfig,
           processor: LogitsProcessor | None = None) -> list[list[Hypothesis]]:
    """Ancestral sampling with temperature, top-k and top-p (nucleus) filtering; seeded by
    cfg.seed. Not in the paper. Scores are the model's own (unfiltered) log-probabilities."""
    generator = torch.Generator(device=src_BS.device).manual_seed(cfg.seed)

    def choose(logp_BV: Tensor) -> Tensor:
        filtered_BV = filter_logits(logp_BV / cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p)
        probs_BV = torch.softmax(filtered_BV, dim=-1)
        return torch.multinomial(probs_BV, 1, generator=generator).squeeze(1)

    return _sequential_search(model, src_BS, cfg, choose, processor)


def filter_logits(logits_BV: Tensor, *, top_k: int, top_p: float) -> Tensor:
    """Set to -inf all but the top_k largest (0: all) and the smallest set whose probability
    mass reaches top_p (the most probable token is always kept)."""
    if top_k > 0:
        kth_B1 = logits_BV.topk(min(top_k, logits_BV.size(-1)), dim=-1).values[:, -1:]
        logits_BV = logits_BV.masked_fill(logits_BV < kth_B1, float("-inf"))
    if top_p < 1.0:
        sorted_BV, order_BV = logits_BV.sort(dim=-1, descending=True)
        mass_before_BV = sorted_BV.softmax(dim=-1).cumsum(dim=-1) - sorted_BV.softmax(dim=-1)
        drop_sorted_BV = mass_before_BV >= top_p
        drop_BV = drop_sorted_BV.scatter(1, order_BV, drop_sorted_BV)
        logits_BV = logits_BV.masked_fill(drop_BV, float("-inf"))
    return logits_BV


class BeamSearch:
    """Batched beam search (§6.1): beam_size hypotheses per sentence, ranked by
    log P(Y|X) / lp(Y). Each step keeps the 2N best extensions of the N alive hypotheses; those
    ending in EOS and ranked within the first N are finished, the N best others stay alive.
    A sentence is done when N hypotheses have finished (with cfg.beam_stop "bound": and no live
    one can outscore the N-th best of them), or at its maximum length; it then leaves the
    batch (and the caches) at once, with its n_best finished hypotheses, best first. With
    "shrink" (Marian's beam) a sentence with k finished keeps only N - k places: of its best
    N - k extensions those ending in EOS finish and the others stay alive.

    Sentences may join between steps (`add`; continuous batching, as the server does): their
    rows are appended, their outputs begin at the step they join, and the positions before it
    are masked, so that a sentence's search is the same whenever it joins. That needs a
    cache with `merge` (a Transformer's, an Ensemble's)."""

    def __init__(self, model: DecodingModel, cfg: DecodeConfig,
                 processor: LogitsProcessor | None = None):
        self.model, self.cfg, self.processor = model, cfg, processor
        self.keys: list[Any] = []  # A: the caller's key of each sentence still searching
        self.finished: list[list[Hypothesis]] = []  # (A,) its finished hypotheses
        self.cache: DecodingCache | None = None
        self.joined = False  # whether sentences joined after others: outputs begin apart
        # Rows a*n .. a*n+n-1 continue sentence a: n is 1 (its BOS) until the first step has
        # chosen N hypotheses. A sentence's output begins at column first_A[a] of tokens.
        self.tokens_AnT = self.alive_lp_An = self.max_len_A = self.first_A = torch.empty(0)
        self.state_A = torch.empty(0)  # with a processor: each sentence's state

    def __len__(self) -> int:
        """Sentences still searching."""
        return len(self.keys)

    def add(self, src_BS: Tensor, keys: list[Any]) -> None:
        """Sentences (B, S) join the search; `step` hands back their results under `keys`."""
        mcfg, B = self.model.cfg, src_BS.size(0)
        memory = self.model.encode(src_BS)
        max_len_B = max_output_lengths(src_BS, mcfg.pad_id, self.cfg)
        state_B = self.processor.start(src_BS) if self.processor else max_len_B  # (unused)
        if not self.keys:  # a new search: one row per sentence until the first step
            self.memory = memory  # decode reads the sources from the cache, merged or not
            self.cache = self.model.new_cache(memory, kv_dtype=cache_dtype(self.cfg))
            self.tokens_AnT = torch.full((B, 1), mcfg.bos_id, dtype=torch.long,
                                         device=src_BS.device)
            self.alive_lp_An = torch.zeros(B, 1, device=src_BS.device)
            self.max_len_A, self.first_A = max_len_B, torch.zeros_like(max_len_B)
            self.state_A = state_B
        else:  # n rows each, all but the first dead (-inf), so the first step starts from one
            n, T = self.alive_lp_An.size(1), self.tokens_AnT.size(1)
            self.cache.merge(self.model.new_cache(memory, n, kv_dtype=cache_dtype(self.cfg)))
            tokens_BnT = self.tokens_AnT.new_full((B * n, T), mcfg.pad_id)
            tokens_BnT[:, -1] = mcfg.bos_id
            alive_lp_Bn = self.alive_lp_An.new_full((B, n), float("-inf"))
            alive_lp_Bn[:, 0] = 0.0
            self.tokens_AnT = torch.cat([self.tokens_AnT, tokens_BnT])
            self.alive_lp_An = torch.cat([self.alive_lp_An, alive_lp_Bn])
            self.max_len_A = torch.cat([self.max_len_A, max_len_B])
            self.state_A = torch.cat([self.state_A, state_B])
            self.first_A = torch.cat([self.first_A, max_len_B.new_full((B,), T - 1)])
            self.joined = True
        self.keys += keys
        self.finished += [[] for _ in range(B)]

    def step(self) -> list[tuple[Any, list[Hypothesis]]]:
        """Extend every sentence by one token; (key, n-best) of the sentences that are done."""
        cfg, mcfg, N = self.cfg, self.model.cfg, self.cfg.beam_size
        A, n = self.alive_lp_An.shape
        device = self.alive_lp_An.device
        # tokens of a hypothesis that ends now, EOS included
        length_A = self.tokens_AnT.size(1) - self.first_A
        logp_AnV = _next_log_probs(self.model, self.tokens_AnT, self.memory, self.cache,
                                   self.max_len_A.repeat_interleave(n), cfg,
                                   length_A.repeat_interleave(n) if self.joined else None,
                                   (self.processor, self.state_A.repeat_interleave(n))
                                   if self.processor else None)
        V = logp_AnV.size(-1)
        if V < 2 * N:
            raise ValueError(f"beam search keeps 2 x beam_size = {2 * N} candidates; the "
                             f"vocabulary has only {V} tokens")
        cand_lp_AX = logp_AnV.view(A, n, V).add_(self.alive_lp_An[:, :, None]).view(A, n * V)
        top_lp_A2N, top_idx_A2N = topk_in_blocks(cand_lp_AX, 2 * N)
        origin_A2N, token_A2N = top_idx_A2N // V, top_idx_A2N % V
        is_eos_A2N = token_A2N.eq(mcfg.eos_id)
        placed_A2N = self._places(A, N, device)  # the extensions that may finish now
        ends = (is_eos_A2N & placed_A2N & top_lp_A2N.isfinite()).nonzero().tolist()
        if ends:
            lengths, firsts = length_A.tolist(), self.first_A.tolist()
        for a, j in ends:
            lp = float(top_lp_A2N[a, j])
            row = a * n + int(origin_A2N[a, j])
            self.finished[a].append(Hypothesis(
                self.tokens_AnT[row, firsts[a] + 1 :].tolist(), lp,
                lp / length_norm(lengths[a], cfg)))
        # alive: the N best others (fairseq), or with "shrink" the others that took a place
        out_A2N = is_eos_A2N | ~placed_A2N if cfg.beam_stop == "shrink" else is_eos_A2N
        self.alive_lp_An, pick_AN = top_lp_A2N.masked_fill(out_A2N, float("-inf")).topk(N, dim=1)
        first_row_A1 = torch.arange(A, device=device)[:, None] * n
        rows = (first_row_A1 + origin_A2N.gather(1, pick_AN)).view(-1)  # (A*N,)
        self.tokens_AnT = torch.cat([self.tokens_AnT[rows],
                                     token_A2N.gather(1, pick_AN).view(-1, 1)], 1)
        self.cache.reorder(rows, beams=N)
        free_end = ends_without_eos(cfg)  # then end where only EOS would be left
        at_limit = (self.max_len_A <= length_A + free_end).tolist()  # one read, not one each
        if free_end and any(at_limit):
            self._end_at_cap([a for a in range(A) if at_limit[a]], length_A.tolist())
        bound = _best_possible_scores(self.alive_lp_An, self.max_len_A, cfg)
        still = [a for a in range(A)
                 if not at_limit[a] and not _beam_done(self.finished[a], N, bound[a])]
        return self._leave(still) if len(still) < A else []

    def _end_at_cap(self, sentences: list[int], lengths: list[int]) -> None:
        """The live hypotheses of `sentences`, whose next token could only be EOS (Marian's
        cap), finish now without it: their pieces, log P, normalised by their pieces."""
        N = self.alive_lp_An.size(1)
        alive_lp, firsts = self.alive_lp_An.tolist(), self.first_A.tolist()
        for a in sentences:
            for k, lp in enumerate(alive_lp[a]):
                if lp != float("-inf"):
                    self.finished[a].append(Hypothesis(
                        self.tokens_AnT[a * N + k, firsts[a] + 1 :].tolist(), lp,
                        lp / length_norm(lengths[a], self.cfg)))

    def _places(self, A: int, N: int, device: torch.device) -> Tensor:
        """(A, 2N): which of each sentence's 2N best extensions take a place in its beam (an
        EOS among them finishes): the first N, or with beam_stop "shrink" the first
        N - (hypotheses finished)."""
        j_2N = torch.arange(2 * N, device=device)
        if self.cfg.beam_stop != "shrink":
            return (j_2N < N).expand(A, 2 * N)
        width_A = torch.tensor([N - len(f) for f in self.finished], device=device)
        return j_2N[None, :] < width_A[:, None]

    def drop(self, keys: set[Any]) -> None:
        """Sentences `keys` leave between steps, unfinished (their client went away)."""
        if self.keys and keys & set(self.keys):
            self._leave([a for a, key in enumerate(self.keys) if key not in keys])

    def _leave(self, still: list[int]) -> list[tuple[Any, list[Hypothesis]]]:
        """Keep sentences `still`; the others leave with their n-best."""
        N, device = self.alive_lp_An.size(1), self.alive_lp_An.device  # N rows: 1 before a step
        kept = set(still)
        done = [(key, sorted(hyps, key=lambda h: -h.score)[: self.cfg.n_best])
                for a, (key, hyps) in enumerate(zip(self.keys, self.finished, strict=True))
                if a not in kept]
        keep_A = torch.tensor(still, dtype=torch.long, device=device)
        keep_rows = (keep_A[:, None] * N + torch.arange(N, device=device)).view(-1)
        self.tokens_AnT, self.alive_lp_An = self.tokens_AnT[keep_rows], self.alive_lp_An[keep_A]
        self.max_len_A, self.first_A = self.max_len_A[keep_A], self.first_A[keep_A]
        self.state_A = self.state_A[keep_A]
        self.cache.keep_sources(keep_A)
        self.keys = [self.keys[a] for a in still]
        self.finished = [self.finished[a] for a in still]
        if still and (m := int(self.first_A.min())) > 0:  # columns no output holds any more
            self.tokens_AnT, self.first_A = self.tokens_AnT[:, m:], self.first_A - m
            self.cache.drop_front(m)
        return done


@torch.inference_mode()
def beam_search(model: DecodingModel, src_BS: Tensor, cfg: DecodeConfig,
                processor: LogitsProcessor | None = None) -> list[list[Hypothesis]]:
    """`BeamSearch` of one batch: the n_best finished hypotheses of each sentence, best first."""
    search = BeamSearch(model, cfg, processor)
    search.add(src_BS, list(range(src_BS.size(0))))
    results: list[list[Hypothesis]] = [[] for _ in range(src_BS.size(0))]
    while search:
        for b, hyps in search.step():
            results[b] = hyps
    return results


def _best_possible_scores(alive_lp_AN: Tensor, max_len_A: Tensor,
                          cfg: DecodeConfig) -> list[float]:
    """The highest score a live hypothesis of each sentence may still reach: with beam_stop
    "bound", the best one's log-probability over lp(maximum length) (log-probabilities only
    fall as tokens are added, lp only grows); with "n_finished", -inf: the search takes the
    first N finished as final."""
    if cfg.beam_stop == "n_finished":
        return [float("-inf")] * alive_lp_AN.size(0)
    best_A = alive_lp_AN.max(dim=1).values
    return (best_A / length_norm(max_len_A.to(best_A.dtype), cfg)).tolist()


def _beam_done(finished: list[Hypothesis], N: int, best_possible: float) -> bool:
    """N hypotheses have finished and no live one can outscore the N-th best of them."""
    return len(finished) >= N and sorted((h.score for h in finished),
                                         reverse=True)[N - 1] >= best_possible


def generate(model: DecodingModel, src_BS: Tensor, cfg: DecodeConfig,
             processor: LogitsProcessor | None = None) -> list[list[Hypothesis]]:
    """Decode a padded batch of source ids (B, S) with cfg.strategy (and a LogitsProcessor)."""
    search = {"beam": beam_search, "greedy": greedy_search, "sample": sample}[cfg.strategy]
    with attention_kernels(src_BS.device):
        return search(model, src_BS, cfg, processor)
