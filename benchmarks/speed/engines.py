"""The engines compared by the speed benchmarks, built at the same shape with random weights:
transformer-mt, Hugging Face MarianMTModel, CTranslate2 (converted from that Marian model) and
torch.nn.Transformer with the tutorial's naive decoding. Ours runs as the `transformer-mt`
command does, with glibc's malloc thresholds raised (hardware/malloc.py; and for training
oneDNN's caches bounded, hardware/onednn.py, as `train` does); the peers as they ship.
run.sh also runs ours without and the peers with the same thresholds (glibc's environment
variables), as controls; `build` records which. Each engine exposes what its benchmark
needs: a training step on (src, tgt_in, tgt_out) id batches, and decoding of id batches with the
output length forced to `length` tokens (so that random models do identical work).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_mt.config import DecodeConfig, ModelConfig, TrainConfig, load_config
from transformer_mt.data.dataset import ParallelData
from transformer_mt.hardware.cpu_speed import cpu_model
from transformer_mt.hardware.malloc import tune_malloc
from transformer_mt.inference.precision import choose_bf16
from transformer_mt.inference.quantize import quantize_int8
from transformer_mt.inference.search import generate
from transformer_mt.model.attention import attention_kernels
from transformer_mt.model.transformer import Transformer, sinusoidal_positions
from transformer_mt.training.precision import precision
from transformer_mt.training.step import compiled, forward_backward, make_optimizer


def adam(model: nn.Module) -> torch.optim.Adam:
    """torch's Adam; fused on CUDA, as Hugging Face's Trainer does there by default."""
    fused = next(model.parameters()).is_cuda
    return torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9,
                            fused=fused or None)


def decoding_config(shape: str) -> ModelConfig:
    """The decoding benchmarks' model: preset `shape` with an 8k vocabulary and no dropout."""
    return load_config(shape, ["model.vocab_size=8000", "model.dropout=0.0"]).model


def decoding_batches(data_dir: Path, batch_size: int) -> list[Tensor]:
    """The validation sources of a prepared data directory (1,014 Multi30k sentences) sorted by
    length, as padded id batches of `batch_size`: what every decoding benchmark decodes."""
    data = ParallelData(data_dir, "valid")
    order = np.argsort(data.src_lengths, kind="stable")
    return [data.collate(order[i : i + batch_size])[0] for i in range(0, len(order), batch_size)]


def adam_step(loss: Tensor, optimizer: torch.optim.Adam) -> None:
    """A peer's backward pass and update."""
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def smoothed_loss(logits: Tensor, tgt_out: Tensor, n_target: int) -> Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), tgt_out.flatten(), ignore_index=0,
                           label_smoothing=0.1, reduction="sum") / n_target


@contextlib.contextmanager
def peer_precision(device: torch.device, bf16: bool):
    """A peer's autocast, under our attention-kernel choice (on CUDA not cuDNN's attention,
    which plans every new shape on the CPU), so that peers and ours run the same kernels."""
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16), \
            attention_kernels(device):
        yield


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


class Ours:
    name = "transformer-mt"

    def __init__(self, cfg: ModelConfig, *, dtype: str, device: str = "cpu",
                 compile: bool | str = False, shapes: int = 0):
        self.device = torch.device(device)
        self.model = Transformer(cfg).to(self.device)
        self.tcfg = TrainConfig(bf16=dtype == "bf16", fp16=dtype == "fp16", max_steps=1)
        self.net = compiled(self.model, shapes=shapes, cuda_graphs=compile == "cuda_graphs") \
            if compile else self.model  # train.compile, with train.shape_buckets' count
        self.optimizer = make_optimizer(self.model, self.tcfg)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.tcfg.fp16)
        # decoding only: translate --int8's inference copy ("int8row": with --int8-scales row,
        # as the server decodes); "+kv": --kv-bf16 as well; "auto": --bf16 auto, bf16 where
        # measured faster for the search and batch size at hand (measured here, untimed)
        self.decoder_model = self.model if not dtype.startswith("int8") else \
            quantize_int8(self.model, "row" if dtype.startswith("int8row") else "batch")
        self.kv_bf16 = dtype.endswith("+kv")
        self.bf16_choices = {beam: choose_bf16(self.model.eval(), self.decode_config(beam, 16),
                                               self.device)
                             for beam in (1, 4)} if dtype == "auto" else {}

    def train_step(self, src, tgt_in, tgt_out, n_target) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = 1e-4
        self.model.train()
        with precision(self.tcfg, self.device):
            forward_backward(self.net, [(src, tgt_in, tgt_out)], scale=1 / n_target, eps=0.1,
                             pad_id=0, scaler=self.scaler)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)

    def decode_config(self, beam: int, length: int) -> DecodeConfig:
        return DecodeConfig(strategy="beam" if beam > 1 else "greedy", beam_size=beam,
                            min_length=length, max_length=length, kv_bf16=self.kv_bf16)

    def decode(self, src, *, beam: int, length: int) -> None:
        self.model.eval()
        bf16 = self.bf16_choices[beam].for_batch(len(src)) if self.bf16_choices else \
            self.tcfg.bf16
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=bf16):
            generate(self.decoder_model, src, self.decode_config(beam, length))


def marian_config(cfg: ModelConfig):
    """Marian's conventions: <pad> is the last id and starts the decoder. Our batches pad with 0
    under an attention mask, so the padding id does not matter."""
    from transformers import MarianConfig

    return MarianConfig(
        vocab_size=cfg.vocab_size, decoder_vocab_size=cfg.vocab_size, d_model=cfg.d_model,
        encoder_layers=cfg.n_encoder_layers, decoder_layers=cfg.n_decoder_layers,
        encoder_attention_heads=cfg.n_heads, decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff, activation_function="relu",
        dropout=cfg.dropout, attention_dropout=0.0, activation_dropout=0.0,
        max_position_embeddings=cfg.max_positions, scale_embedding=True,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
        pad_token_id=cfg.vocab_size - 1, eos_token_id=cfg.eos_id, bos_token_id=cfg.bos_id,
        decoder_start_token_id=cfg.vocab_size - 1, forced_eos_token_id=None)


class Marian:
    name = "hf-marian"

    def __init__(self, cfg: ModelConfig, *, bf16: bool, device: str = "cpu"):
        from transformers import MarianMTModel

        self.device = torch.device(device)
        self.model = MarianMTModel(marian_config(cfg)).to(self.device)
        self.bf16 = bf16
        self.optimizer = adam(self.model)

    def train_step(self, src, tgt_in, tgt_out, n_target) -> None:
        self.model.train()
        with peer_precision(self.device, self.bf16):
            logits = self.model(input_ids=src, attention_mask=src.ne(0),
                                decoder_input_ids=tgt_in,
                                decoder_attention_mask=tgt_in.ne(0)).logits
            loss = smoothed_loss(logits, tgt_out, n_target)
        adam_step(loss, self.optimizer)

    @torch.inference_mode()
    def decode(self, src, *, beam: int, length: int) -> None:
        self.model.eval()
        beam_options = {"length_penalty": 0.6, "early_stopping": True} if beam > 1 else {}
        with peer_precision(self.device, self.bf16):
            self.model.generate(input_ids=src, attention_mask=src.ne(0), num_beams=beam,
                                do_sample=False, min_new_tokens=length, max_new_tokens=length,
                                **beam_options)


def import_fairseq():
    """fairseq 0.12.2, its last release (2022), as installed by fairseq_env.sh. Its config
    dataclasses (and those of hydra-core 1.0, which it pins) use instances as field defaults,
    which Python 3.11 refuses because dataclasses with eq are unhashable; dataclasses made from
    here on get identity hashing, which is what Python 3.10 allowed. No model code changes."""
    import dataclasses

    if not getattr(dataclasses, "_hashable_for_fairseq", False):
        process_class = dataclasses._process_class

        def hashable(cls, *args, **kwargs):
            cls = process_class(cls, *args, **kwargs)
            if cls.__hash__ is None:
                cls.__hash__ = object.__hash__
            return cls

        dataclasses._process_class = hashable
        dataclasses._hashable_for_fairseq = True
    import fairseq.models.transformer
    import fairseq.sequence_generator

    return fairseq


class Fairseq:
    """fairseq's TransformerModel (post-norm, sinusoidal positions, all embeddings shared, as
    its transformer architecture) at our shape, trained with the same loss and torch's Adam;
    decoding with its SequenceGenerator. Our ids map onto its dictionary's specials (pad 1,
    eos 2, which its decoder also starts from)."""

    name = "fairseq"

    def __init__(self, cfg: ModelConfig, *, bf16: bool):
        import argparse

        fairseq = import_fairseq()
        from fairseq.data import Dictionary

        self.dictionary = Dictionary()  # <s> 0, <pad> 1, </s> 2, <unk> 3
        for i in range(cfg.vocab_size - len(self.dictionary)):
            self.dictionary.add_symbol(f"t{i}")
        args = argparse.Namespace(
            arch="transformer", encoder_embed_dim=cfg.d_model, decoder_embed_dim=cfg.d_model,
            encoder_ffn_embed_dim=cfg.d_ff, decoder_ffn_embed_dim=cfg.d_ff,
            encoder_attention_heads=cfg.n_heads, decoder_attention_heads=cfg.n_heads,
            encoder_layers=cfg.n_encoder_layers, decoder_layers=cfg.n_decoder_layers,
            dropout=cfg.dropout, attention_dropout=0.0, activation_dropout=0.0,
            share_all_embeddings=True, max_source_positions=256, max_target_positions=256)
        fairseq.models.transformer.base_architecture(args)
        task = argparse.Namespace(source_dictionary=self.dictionary,
                                  target_dictionary=self.dictionary)
        self.model = fairseq.models.transformer.TransformerModel.build_model(args, task)
        self.bf16 = bf16
        self.optimizer = adam(self.model)
        # our pad 0, unk 1, bos 2, eos 3 -> its <pad> 1, <unk> 3, <s> 0, </s> 2
        self.ids = torch.arange(cfg.vocab_size)
        self.ids[:4] = torch.tensor([1, 3, 0, 2])
        self.eos = self.dictionary.eos()

    def source(self, src: Tensor) -> dict:
        return {"src_tokens": self.ids[src], "src_lengths": src.ne(0).sum(1)}

    def train_step(self, src, tgt_in, tgt_out, n_target) -> None:
        self.model.train()
        prev = self.ids[tgt_in]
        prev[:, 0] = self.eos  # its decoders start from </s>
        with peer_precision(torch.device("cpu"), self.bf16):
            logits, _ = self.model(**self.source(src), prev_output_tokens=prev)
            loss = smoothed_loss(logits, tgt_out, n_target)
        adam_step(loss, self.optimizer)

    @torch.inference_mode()
    def decode(self, src, *, beam: int, length: int) -> None:
        from fairseq.sequence_generator import SequenceGenerator

        self.model.eval()
        # `length` decoder steps including </s>: its lengths leave </s> out
        generator = SequenceGenerator([self.model], self.dictionary, beam_size=beam,
                                      max_len_a=0, max_len_b=length - 1, min_len=length - 1,
                                      len_penalty=0.6)
        with peer_precision(torch.device("cpu"), self.bf16):
            generator.generate([self.model], {"net_input": self.source(src)})


class CTranslate2:
    """CTranslate2 from the Marian model's weights (float32 or int8); tokens are id strings."""

    def __init__(self, cfg: ModelConfig, *, compute_type: str, threads: int):
        import ctranslate2
        from transformers import MarianMTModel

        # its matrix backend as run.sh forces it (CT2_USE_MKL), or as shipped: MKL on Intel
        backend = {"1": " mkl", "0": " onednn"}.get(os.environ.get("CT2_USE_MKL", ""), "")
        self.name = f"ctranslate2-{compute_type}{backend}"
        model = MarianMTModel(marian_config(cfg))
        self.tmp = tempfile.TemporaryDirectory()
        hf_dir, ct2_dir = Path(self.tmp.name) / "hf", Path(self.tmp.name) / "ct2"
        model.save_pretrained(hf_dir)
        self.vocab = [f"t{i}" for i in range(cfg.vocab_size)]
        self.vocab[cfg.vocab_size - 1], self.vocab[cfg.eos_id] = "<pad>", "</s>"
        self.vocab[cfg.bos_id], self.vocab[1] = "<s>", "<unk>"
        converter = marian_converter(hf_dir, self.vocab)
        converter.convert(str(ct2_dir), force=True)
        self.translator = ctranslate2.Translator(str(ct2_dir), device="cpu",
                                                 compute_type=compute_type,
                                                 intra_threads=threads, inter_threads=1)

    def tokens(self, src: Tensor) -> list[list[str]]:
        return [[self.vocab[i] for i in row if i != 0] for row in src.tolist()]

    def decode(self, src, *, beam: int, length: int) -> None:
        self.translator.translate_batch(
            self.tokens(src), beam_size=beam, length_penalty=0.6, max_batch_size=len(src),
            min_decoding_length=length, max_decoding_length=length, return_scores=False)


def marian_converter(hf_dir: Path, vocab: list[str]):
    """ctranslate2's Transformers converter, given our vocabulary instead of a tokenizer."""
    from ctranslate2.converters import TransformersConverter

    class Converter(TransformersConverter):
        def load_tokenizer(self, tokenizer_class, model_name_or_path, **kwargs):
            class Tokenizer:
                def get_vocab(self):
                    return {piece: i for i, piece in enumerate(vocab)}

                unk_token, pad_token, eos_token, bos_token = "<unk>", "<pad>", "</s>", "<s>"

            return Tokenizer()

    return Converter(str(hf_dir))


class TorchTransformer(nn.Module):
    """The PyTorch tutorial model: nn.Transformer between embeddings and a generator, with
    naive decoding (the whole prefix recomputed at every step, no cache, greedy only)."""

    name = "torch.nn.Transformer"

    def __init__(self, cfg: ModelConfig, *, bf16: bool):
        super().__init__()
        self.cfg, self.bf16 = cfg, bf16
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=0)
        self.register_buffer("positions", sinusoidal_positions(512, cfg.d_model))
        self.transformer = nn.Transformer(
            cfg.d_model, cfg.n_heads, cfg.n_encoder_layers, cfg.n_decoder_layers, cfg.d_ff,
            cfg.dropout, batch_first=True)
        self.generator = nn.Linear(cfg.d_model, cfg.vocab_size)
        self.optimizer = adam(self)

    def embed_ids(self, ids: Tensor) -> Tensor:
        return self.embed(ids) * math.sqrt(self.cfg.d_model) + self.positions[: ids.size(1)]

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1))
        out = self.transformer(self.embed_ids(src), self.embed_ids(tgt_in), tgt_mask=causal,
                               src_key_padding_mask=src.eq(0),
                               tgt_key_padding_mask=tgt_in.eq(0),
                               memory_key_padding_mask=src.eq(0))
        return self.generator(out)

    def train_step(self, src, tgt_in, tgt_out, n_target) -> None:
        self.train()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            loss = smoothed_loss(self(src, tgt_in), tgt_out, n_target)
        adam_step(loss, self.optimizer)

    @torch.inference_mode()
    def decode(self, src, *, beam: int, length: int) -> None:
        if beam != 1:
            raise ValueError("the tutorial baseline decodes greedily only")
        self.eval()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            memory = self.transformer.encoder(self.embed_ids(src),
                                              src_key_padding_mask=src.eq(0))
            ys = torch.full((src.size(0), 1), self.cfg.bos_id, dtype=torch.long)
            for _ in range(length):
                causal = nn.Transformer.generate_square_subsequent_mask(ys.size(1))
                out = self.transformer.decoder(self.embed_ids(ys), memory, tgt_mask=causal,
                                               memory_key_padding_mask=src.eq(0))
                logits = self.generator(out[:, -1])
                logits[:, self.cfg.eos_id] = float("-inf")  # forced length
                ys = torch.cat([ys, logits.argmax(-1, keepdim=True)], dim=1)


def build(engine: str, cfg: ModelConfig, *, dtype: str, threads: int, device: str = "cpu",
          compile: bool | str = False, shapes: int = 0):
    """An engine by name: ours, marian, torch, fairseq (any dtype of fp32/bf16; ours also int8,
    int8row and auto for decoding, and fp32+kv / int8+kv: with bf16 attention keys and values;
    `compile`: its training steps compiled as by train.compile (True or "cuda_graphs"), for
    batches in `shapes` shapes (train.shape_buckets; 0: any)), ct2 (fp32/int8; CPU only).
    Its `malloc` records whether glibc's mmap/trim thresholds are raised ('tuned': ours unless
    run with TRANSFORMER_MT_MALLOC=default, a peer when run.sh sets MALLOC_MMAP_THRESHOLD_ and
    MALLOC_TRIM_THRESHOLD_) or not ('default')."""
    bf16 = dtype == "bf16"
    if engine not in ("ours", "marian") and device != "cpu":
        raise ValueError(f"engine {engine!r} runs on the CPU only here")
    if engine != "ours" and compile:
        raise ValueError("compile: our engine only")
    tuned = tune_malloc() if engine == "ours" else all(
        name in os.environ for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"))
    if engine == "ours":
        built = Ours(cfg, dtype=dtype, device=device, compile=compile, shapes=shapes)
    elif engine == "marian":
        built = Marian(cfg, bf16=bf16, device=device)
    elif engine == "torch":
        built = TorchTransformer(cfg, bf16=bf16)
    elif engine == "fairseq":
        built = Fairseq(cfg, bf16=bf16)
    elif engine == "ct2":
        built = CTranslate2(cfg, compute_type={"fp32": "float32", "int8": "int8"}[dtype],
                            threads=threads)
    else:
        raise ValueError(f"unknown engine {engine!r}")
    built.malloc = "tuned" if tuned else "default"
    return built


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def source_digest() -> str:
    """sha256 (12 hex digits) of the Python sources that a measurement ran: the package and the
    benchmarks. It names the code where `git_commit` cannot (a copy of the working tree whose
    .git is stale, as on the lent GPU machines)."""
    repo = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256()
    for path in sorted([*repo.glob("src/transformer_mt/**/*.py"),
                        *repo.glob("benchmarks/**/*.py")]):
        digest.update(str(path.relative_to(repo)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def emit(result: dict, path: Path | None) -> dict:
    """One measurement, with the commit, the sources' digest and the CPU: a JSON line on stdout
    (run.sh collects them) and, with `path`, a JSON file."""
    result = result | {"commit": git_commit(), "source_sha256": source_digest(),
                       "cpu_model": cpu_model()}
    print(json.dumps(result))
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n")
    return result
