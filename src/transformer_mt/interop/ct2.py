"""CTranslate2 out, and CTranslate2 as an inference engine.

`export_ctranslate2` writes a model directory as a CTranslate2 model through its spec API
(`ctranslate2.specs.TransformerSpec`): post-norm or pre-norm, the position table written out
(so every layout and learned positions are carried), LayerNorm eps, biases where we have
them, the start token, the vocabulary, and weight quantisation (int8, bfloat16, ...) passed
through. Beside CTranslate2's files it keeps our config (`transformer_mt.json`) and vocabulary,
so `CTranslate2Translator` decodes with our settings: the same tokenisation, the same length
cap per sentence with EOS as its last token, padding never generated, and the hypotheses
ranked by our length normalisation (GNMT's or |Y|^alpha) of the log-probabilities CTranslate2
returns.

Where the two differ: CTranslate2 renormalises the next-token distribution around tokens it
may not produce (padding always, EOS under min_length), we (as fairseq and Hugging Face) do
not. So its log-probabilities are higher by what padding had (in a trained model about 1e-4
a token; a few 1e-3 a sentence), and a beam can rank differently in a near tie or under
min_length (greedy is unaffected). Sampling draws from CTranslate2's random generator.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..config import ConfigError, DecodeConfig, ModelConfig, config_from_dict, config_to_dict
from ..data.vocab import MarianVocabulary, Vocabulary, load_model_vocabulary
from ..inference.search import length_norm, max_output_lengths
from ..inference.translator import Translation, Translator
from ..model.transformer import Transformer
from ..storage.model_dir import ModelLoadError, load_model, read_config_json
from ..storage.names import CONFIG_FILE, copy_vocabulary
from . import OURS_FILE, QUANTIZATIONS, ConversionError

ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "silu": "SWISH"}


def _ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise ConversionError("the ctranslate2 package is not installed: "
                              "pip install 'transformer-mt[interop]'") from None
    return ctranslate2


def _pieces(vocab: Vocabulary | MarianVocabulary, side: str) -> list[str]:
    """One side's pieces in id order (CTranslate2 addresses tokens by piece)."""
    size = len(vocab) if side == "source" else vocab.target_size
    return [vocab.piece(i, side) for i in range(size)]


def _linear(spec, *layers: torch.nn.Linear) -> None:
    """CTranslate2's linear `spec` from our layers, fused along the output (q|k|v)."""
    spec.weight = torch.cat([layer.weight for layer in layers]).detach().float().numpy()
    if layers[0].bias is not None:
        spec.bias = torch.cat([layer.bias for layer in layers]).detach().float().numpy()


def _norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma = norm.weight.detach().float().numpy()
    spec.beta = norm.bias.detach().float().numpy()


def _attention(spec, attention, self_attention: bool) -> None:
    a = attention
    if self_attention:
        _linear(spec.linear[0], a.w_q, a.w_k, a.w_v)
    else:
        _linear(spec.linear[0], a.w_q)
        _linear(spec.linear[1], a.w_k, a.w_v)
    _linear(spec.linear[-1], a.w_o)


def _stack(spec, stack, embed, decoder: bool) -> None:
    """One stack: its embeddings and scale, its position table written out, its layers, and
    the final norm of pre-norm."""
    embeddings = spec.embeddings if decoder else spec.embeddings[0]
    embeddings.weight = embed.tokens.weight.detach().float().numpy()
    spec.scale_embeddings = embed.scale
    spec.position_encodings.encodings = \
        embed.positions(0, embed.max_positions).detach().float().numpy()
    for layer_spec, layer in zip(spec.layer, stack.layers, strict=True):
        _attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
        _norm(layer_spec.self_attention.layer_norm, layer.sublayer1.norm)
        if decoder:
            _attention(layer_spec.attention, layer.cross_attn, self_attention=False)
            _norm(layer_spec.attention.layer_norm, layer.sublayer2.norm)
        _linear(layer_spec.ffn.linear_0, layer.ff.w_1)
        _linear(layer_spec.ffn.linear_1, layer.ff.w_2)
        _norm(layer_spec.ffn.layer_norm, (layer.sublayer3 if decoder else layer.sublayer2).norm)
    if stack.final_norm is not None:
        _norm(spec.layer_norm, stack.final_norm)


def ctranslate2_refusals(cfg: ModelConfig) -> list[str]:
    """What of `cfg` CTranslate2's TransformerSpec cannot carry."""
    return [f"{name}={getattr(cfg, name)}: CTranslate2's heads are d_model / h"
            for name in ("d_k", "d_v")
            if getattr(cfg, name) not in (None, cfg.d_model // cfg.n_heads)]


def transformer_spec(model: Transformer, vocab: Vocabulary | MarianVocabulary):
    """CTranslate2's TransformerSpec holding `model`'s weights and `vocab`'s pieces."""
    _ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    cfg = model.cfg
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg.n_encoder_layers, cfg.n_decoder_layers), cfg.n_heads, pre_norm=cfg.norm_first,
        activation=getattr(common_spec.Activation, ACTIVATIONS[cfg.activation]))
    _stack(spec.encoder, model.encoder, model.src_embed, decoder=False)
    _stack(spec.decoder, model.decoder, model.tgt_embed, decoder=True)
    _linear(spec.decoder.projection, model.generator)
    spec.register_source_vocabulary(_pieces(vocab, "source"))
    pieces = _pieces(vocab, "target")
    spec.register_target_vocabulary(pieces)
    spec.config.layer_norm_epsilon = cfg.layer_norm_eps
    spec.config.decoder_start_token = spec.config.bos_token = pieces[cfg.bos_id]
    spec.config.eos_token = pieces[cfg.eos_id]
    spec.config.unk_token = pieces[cfg.unk_id]
    return spec


def export_ctranslate2(model_dir: str | Path, out_dir: str | Path, *,
                       quantization: str = "float32") -> Path:
    """Write the model directory `model_dir` as a CTranslate2 model in `out_dir` (weights
    quantised to `quantization`), with our config and vocabulary beside it."""
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if quantization not in QUANTIZATIONS:
        raise ConversionError(f"quantization={quantization!r} (one of {', '.join(QUANTIZATIONS)})")
    try:
        model, decode = load_model(model_dir)
    except ModelLoadError as err:
        raise ConversionError(str(err)) from None
    problems = ctranslate2_refusals(model.cfg)
    if problems:
        raise ConversionError(f"{model_dir}: cannot export to CTranslate2: " + "; ".join(problems))
    vocab = load_model_vocabulary(model_dir)
    spec = transformer_spec(model, vocab)
    spec.validate()
    spec.optimize(quantization=None if quantization == "float32" else quantization)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec.save(str(out_dir))
    copy_vocabulary(model_dir, out_dir)
    ours = {"model": config_to_dict(model.cfg), "decode": config_to_dict(decode),
            "quantization": quantization,
            "languages": read_config_json(model_dir / CONFIG_FILE).get("languages")}
    (out_dir / OURS_FILE).write_text(json.dumps(ours, indent=2) + "\n", encoding="utf-8")
    return out_dir


# CTranslate2's length penalty for "no penalty": 0 itself would also end the beam at the first
# finished top beam (its early exit), ours ends with beam_size finished; x / L^1e-9 equals x in
# float32, so its order is log P's
NO_PENALTY = 1e-9


def ct2_length_penalty(cfg: DecodeConfig, length: float) -> float:
    """The exponent p of CTranslate2's |Y|^p that ranks outputs of about `length` tokens as we
    do. Its search finds the same hypotheses as ours (candidates by log P; a sentence ends once
    beam_size have finished), but where more than beam_size have finished by its last step it
    keeps the beam_size best by log P / |Y|^p before we rank them (docs/interop.md). Our
    |Y|^alpha is that exactly; GNMT's ((5 + |Y|) / 6)^alpha grows near |Y| = L as
    |Y|^(alpha L / (5 + L)), so p is that at the batch's source length (outputs of about the
    sources' length). alpha 0: NO_PENALTY."""
    if cfg.length_normalization == "power":
        p = cfg.length_penalty
    else:
        p = cfg.length_penalty * length / (5 + length)
    return p or NO_PENALTY


def _compute_type(cfg: DecodeConfig) -> str:
    """Our precision switches as CTranslate2's compute type (default: the export's)."""
    if cfg.bf16 == "auto":
        raise ValueError("decode.bf16 auto measures this package's own search: with --engine "
                         "ctranslate2 give --bf16 alone or leave it out")
    return "int8" if cfg.int8 else "bfloat16" if cfg.bf16 else "default"


class CTranslate2Translator(Translator):
    """`Translator` whose searches CTranslate2 runs, over a directory `export_ctranslate2`
    wrote. Tokenisation, the length cap of each sentence, the n-best lists and their scores
    are ours; CTranslate2's beam keeps the beam_size finished hypotheses and we rank them with
    our length normalisation."""

    def __init__(self, ct2_dir: Path, model_cfg: ModelConfig,
                 vocab: Vocabulary | MarianVocabulary, decode: DecodeConfig, *,
                 device: str = "cpu"):
        ctranslate2 = _ctranslate2()
        if (len(vocab), vocab.target_size) != (model_cfg.vocab_size, model_cfg.tgt_vocab_size):
            raise ValueError(f"{ct2_dir}: vocabulary of {len(vocab)} / {vocab.target_size} "
                             f"pieces, the model expects {model_cfg.vocab_size} / "
                             f"{model_cfg.tgt_vocab_size}")
        if decode.max_length_factor:
            raise ConfigError(f"decode.max_length_factor={decode.max_length_factor}: Marian's "
                              "length cap, whose outputs end without EOS, is our engine's "
                              "only (--engine torch)")
        if decode.beam_stop != "n_finished":
            raise ConfigError(f"decode.beam_stop={decode.beam_stop}: CTranslate2's beam stops "
                              "once beam_size hypotheses have finished (n_finished)")
        self.vocab, self.decode_cfg, self.ct2_dir = vocab, decode, ct2_dir
        with torch.device("meta"):  # the config and the parameter count, no weights
            self.model = Transformer(model_cfg).eval()
        self.device = torch.device(device)
        self.source_pieces = _pieces(vocab, "source")
        self.pieces = _pieces(vocab, "target")  # what the search writes
        self.ids = {piece: i for i, piece in enumerate(self.pieces)}
        pad, eos = model_cfg.pad_id, model_cfg.eos_id
        self._banned = [[self.pieces[pad]]] if pad != eos else None  # as our search
        self.engine = ctranslate2.Translator(  # decode.workers: its translators in parallel
            str(ct2_dir), device="cuda" if self.device.type == "cuda" else "cpu",
            compute_type=_compute_type(decode), inter_threads=decode.workers,
            intra_threads=max(1, torch.get_num_threads() // decode.workers))

    @classmethod
    def from_dirs(cls, model_dirs: Sequence[str | Path], *, device: str = "cpu",
                  **decode_overrides) -> CTranslate2Translator:
        if len(model_dirs) != 1:
            raise ValueError("the ctranslate2 engine decodes one model, not an ensemble")
        ct2_dir = Path(model_dirs[0])
        path = ct2_dir / OURS_FILE
        try:
            ours = json.loads(path.read_text(encoding="utf-8"))
            model_cfg = config_from_dict(ModelConfig, ours["model"], "model")
            decode = config_from_dict(DecodeConfig, ours.get("decode", {}), "decode")
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ModelLoadError(f"{path}: not a CTranslate2 export of transformer-mt "
                                 f"(transformer-mt export ctranslate2 writes it): {err}") from None
        vocab = load_model_vocabulary(ct2_dir)
        return cls(ct2_dir, model_cfg, vocab, dataclasses.replace(decode, **decode_overrides),
                   device=device)

    def joins(self, cfg: DecodeConfig) -> bool:
        return False  # CTranslate2 runs each batch's search to its end

    def alignment_choice(self, choice):
        raise ValueError("alignments come from our engine's attention: --engine torch")

    def _translate_batch(self, sources: list[list[int]], cfg: DecodeConfig
                         ) -> list[list[Translation]]:
        """One batch. CTranslate2's length cap is one per batch, ours one per sentence (with
        EOS forced as the last token): the batch runs to the largest cap, and a sentence whose
        search had not ended strictly before its own cap is searched again with cap - 1 free
        tokens (greedy: its first cap - 1 tokens), EOS then added as ours forces it and scored
        (score_batch)."""
        caps = max_output_lengths(self._padded(sources), self.model.cfg.pad_id, cfg).tolist()
        tokens = [[self.source_pieces[t] for t in ids] for ids in sources]
        eos = self.pieces[self.model.cfg.eos_id]
        # each sentence's (hypothesis without EOS, log P with EOS)
        ended: list[list[tuple[list[str], float]]] = []
        again: dict[int, list[int]] = {}  # cap -> sentences to search again
        for i, (out, cap) in enumerate(zip(self._run(tokens, max(caps), cfg), caps,
                                           strict=True)):
            if all(h and h[-1] == eos and len(h) < cap for h, _ in out):
                ended.append([(h[:-1], lp) for h, lp in out])
            else:
                ended.append(out)  # replaced below
                again.setdefault(cap, []).append(i)
        for cap, members in again.items():
            if cap == 1:
                capped = [[([], 0.0)] for _ in members]
            elif cfg.strategy == "beam":
                capped = self._run([tokens[i] for i in members], cap - 1, cfg)
            else:  # one hypothesis, chosen token by token: its first cap - 1 tokens are ours
                capped = [[(ended[i][0][0][: cap - 1], 0.0)] for i in members]
            for i, out in zip(members, capped, strict=True):
                ended[i] = [(h[:-1], lp) for h, lp in out if h and h[-1] == eos]
            unfinished = [(i, h) for i, out in zip(members, capped, strict=True) for h, _ in out
                          if not h or h[-1] != eos]
            scored = self.engine.score_batch([tokens[i] for i, _ in unfinished],
                                             [h for _, h in unfinished])  # EOS appended
            for (i, h), result in zip(unfinished, scored, strict=True):
                ended[i].append((h, sum(result.log_probs)))
        return [self._ranked(nbest, cfg) for nbest in ended]

    def _run(self, tokens: list[list[str]], cap: int, cfg: DecodeConfig
             ) -> list[list[tuple[list[str], float]]]:
        """(hypothesis, log P) of each sentence, at most `cap` tokens, EOS kept where they
        ended. log P is the search's: renormalised around the banned padding."""
        options = self._options(cfg, statistics.median(map(len, tokens)))
        outs = self.engine.translate_batch(
            tokens, max_batch_size=len(tokens), max_decoding_length=cap,
            min_decoding_length=max(cfg.min_length - 1, 0), max_input_length=0,
            return_end_token=True, return_scores=True, suppress_sequences=self._banned,
            disable_unk=not cfg.allow_unk, **options)
        # the scores are log P / |Y|^lp, |Y| counting EOS where it is returned
        lp = options["length_penalty"]
        return [[(h, score * max(len(h), 1) ** lp) for h, score in zip(o.hypotheses, o.scores,
                                                                      strict=True)] for o in outs]

    def _options(self, cfg: DecodeConfig, length: float) -> dict[str, Any]:
        """CTranslate2's options for a batch whose sources have `length` tokens (median)."""
        if cfg.strategy == "sample":
            _ctranslate2().set_random_seed(cfg.seed)
            return {"beam_size": 1, "num_hypotheses": 1, "length_penalty": 1.0,
                    "sampling_topk": cfg.top_k, "sampling_topp": cfg.top_p,
                    "sampling_temperature": cfg.temperature}
        beam = cfg.beam_size if cfg.strategy == "beam" else 1
        return {"beam_size": beam, "num_hypotheses": beam,
                "length_penalty": ct2_length_penalty(cfg, length)}

    def _ranked(self, hyps: list[tuple[list[str], float]], cfg: DecodeConfig
                ) -> list[Translation]:
        """The n_best of one sentence's (hypothesis without EOS, log P with EOS), ranked by our
        length normalisation."""
        out = []
        for pieces, log_prob in hyps:
            ids = tuple(self.ids[t] for t in pieces)
            score = log_prob / length_norm(len(ids) + 1, cfg)
            out.append(Translation(self.vocab.decode(ids), score, log_prob, ids))
        out.sort(key=lambda t: -t.score)
        return out[: cfg.n_best]
