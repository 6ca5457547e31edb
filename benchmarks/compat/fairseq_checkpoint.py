"""Does a checkpoint trained by fairseq itself import with exact parity?

Phase 1 runs in fairseq's environment (benchmarks/speed/fairseq_env.sh: fairseq 0.12.2, its last
release): a fairseq `transformer` (post-norm, sinusoidal positions, all embeddings shared) at
a tiny shape is built by fairseq's own code, trained a few steps on the synthetic corpus with
its label-smoothed loss, and saved as fairseq saves checkpoints (torch_persistent_save of
args + model, dict.en.txt / dict.de.txt, the SentencePiece model); fairseq then computes its
logits on a left-padded batch and decodes it with its SequenceGenerator (greedy and beam 4).
Phase 2 runs here: `transformer-mt import fairseq` reads the checkpoint (weights_only, only
argparse.Namespace allowed), and our logits and outputs are compared with fairseq's.

    bash benchmarks/speed/fairseq_env.sh .venv-fairseq
    python benchmarks/compat/fairseq_checkpoint.py --fairseq-python .venv-fairseq/bin/python \\
        --work /tmp/fairseq-parity --out benchmarks/results/fairseq-checkpoint-parity/results.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "benchmarks" / "speed")]

D, FFN, HEADS, LAYERS, STEPS, MAX_LEN_B = 64, 128, 4, 2, 40, 30


def fairseq_phase(work: Path) -> None:
    """Build, train, save and decode with fairseq (run in its environment)."""
    import torch
    from engines import import_fairseq

    from synthetic import sentences, translate
    from transformer_mt import train_vocabulary

    fairseq = import_fairseq()
    from fairseq import checkpoint_utils
    from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
    from fairseq.data import Dictionary, data_utils
    from fairseq.sequence_generator import SequenceGenerator

    torch.manual_seed(0)
    work.mkdir(parents=True, exist_ok=True)
    src_text = sentences(400, seed=3)
    tgt_text = [translate(s) for s in src_text]
    vocab = train_vocabulary(src_text + tgt_text, vocab_size=200,
                             out_path=work / "sentencepiece.bpe.model")
    dictionary = Dictionary()  # <s> 0, <pad> 1, </s> 2, <unk> 3
    for i in range(4, len(vocab)):
        dictionary.add_symbol(vocab.sp.id_to_piece(i))
    dictionary.pad_to_multiple_(8)
    for lang in ("en", "de"):
        dictionary.save(str(work / f"dict.{lang}.txt"))

    def ids(text: str) -> torch.Tensor:
        pieces = vocab.sp.encode(text, out_type=str)
        return torch.tensor([dictionary.index(p) for p in pieces] + [dictionary.eos()])

    args = argparse.Namespace(
        arch="transformer", encoder_embed_dim=D, decoder_embed_dim=D, encoder_ffn_embed_dim=FFN,
        decoder_ffn_embed_dim=FFN, encoder_attention_heads=HEADS, decoder_attention_heads=HEADS,
        encoder_layers=LAYERS, decoder_layers=LAYERS, dropout=0.1, attention_dropout=0.0,
        activation_dropout=0.0, share_all_embeddings=True, max_source_positions=256,
        max_target_positions=256, source_lang="en", target_lang="de")
    fairseq.models.transformer.base_architecture(args)
    task = argparse.Namespace(source_dictionary=dictionary, target_dictionary=dictionary)
    model = fairseq.models.transformer.TransformerModel.build_model(args, task)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
    pad, eos = dictionary.pad(), dictionary.eos()

    def batch(lo: int, hi: int):
        srcs = [ids(s) for s in src_text[lo:hi]]
        tgts = [ids(t) for t in tgt_text[lo:hi]]
        src = data_utils.collate_tokens(srcs, pad, eos, left_pad=True)  # as fairseq pads
        prev = data_utils.collate_tokens(tgts, pad, eos, left_pad=False,
                                         move_eos_to_beginning=True)
        tgt = data_utils.collate_tokens(tgts, pad, eos, left_pad=False)
        return src, torch.tensor([len(s) for s in srcs]), prev, tgt

    model.train()
    losses = []
    for step in range(STEPS):
        lo = (step * 32) % 384
        src, lengths, prev, tgt = batch(lo, lo + 32)
        logits, _ = model(src, lengths, prev)
        lprobs = model.get_normalized_probs((logits, None), log_probs=True)
        loss, _ = label_smoothed_nll_loss(lprobs.view(-1, lprobs.size(-1)), tgt.view(-1), 0.1,
                                          ignore_index=pad)
        optimizer.zero_grad()
        (loss / tgt.ne(pad).sum()).backward()
        optimizer.step()
        losses.append(float(loss / tgt.ne(pad).sum()))
    checkpoint_utils.torch_persistent_save(
        {"args": args, "model": model.state_dict(), "optimizer_history": [
            {"criterion_name": "LabelSmoothedCrossEntropyCriterion", "optimizer_name": "Adam",
             "lr_scheduler_state": {}, "num_updates": STEPS}], "extra_state": {"epoch": 1},
         "last_optimizer_state": optimizer.state_dict()}, str(work / "checkpoint_last.pt"))

    model.eval()
    test = sentences(16, seed=99)
    srcs = [ids(s) for s in test]
    src = data_utils.collate_tokens(srcs, pad, eos, left_pad=True)
    lengths = torch.tensor([len(s) for s in srcs])
    refs = [ids(translate(s)) for s in test]
    prev = data_utils.collate_tokens(refs, pad, eos, left_pad=False, move_eos_to_beginning=True)
    with torch.no_grad():
        logits, _ = model(src, lengths, prev)
    outputs = {}
    for beam in (1, 4):
        generator = SequenceGenerator([model], dictionary, beam_size=beam, max_len_a=0,
                                      max_len_b=MAX_LEN_B, len_penalty=1.0)
        with torch.no_grad():
            hyps = generator.generate([model], {"net_input": {"src_tokens": src,
                                                              "src_lengths": lengths}})
        outputs[beam] = [{"tokens": h[0]["tokens"].tolist(), "score": float(h[0]["score"])}
                         for h in hyps]
    torch.save({"logits": logits, "prev": prev, "src_right": [s.tolist() for s in srcs]},
               work / "fairseq_outputs.pt")
    (work / "fairseq_outputs.json").write_text(json.dumps(
        {"fairseq": fairseq.__version__, "losses": losses, "test": test,
         "outputs": outputs}, indent=1))


def our_phase(work: Path) -> dict:
    """Import the checkpoint and compare with what fairseq computed."""
    import dataclasses

    import torch

    from transformer_mt import Translator
    from transformer_mt.inference.search import generate
    from transformer_mt.interop.fairseq import import_fairseq

    theirs = json.loads((work / "fairseq_outputs.json").read_text())
    tensors = torch.load(work / "fairseq_outputs.pt", weights_only=True)
    model_dir = import_fairseq(work / "checkpoint_last.pt", work / "ours")
    translator = Translator.from_dir(model_dir)
    model = translator.model
    right = torch.full((len(tensors["src_right"]), max(map(len, tensors["src_right"]))), 1)
    for row, ids in enumerate(tensors["src_right"]):
        right[row, : len(ids)] = torch.tensor(ids)
    with torch.no_grad():
        ours = model(right, tensors["prev"])
    keep = tensors["prev"].ne(1)
    logit_diff = float((ours - tensors["logits"]).abs()[keep].max())
    result = {"fairseq": theirs["fairseq"], "train_losses_first_last": [theirs["losses"][0],
                                                                       theirs["losses"][-1]],
              "max_abs_logit_difference": logit_diff, "sentences": len(right)}
    for beam, hyps in theirs["outputs"].items():
        cfg = dataclasses.replace(translator.decode_cfg, beam_size=int(beam),
                                  strategy="beam" if int(beam) > 1 else "greedy",
                                  max_length=MAX_LEN_B + 1)
        mine = [h[0] for h in generate(model, right, cfg)]
        same = sum(m.tokens + [2] == h["tokens"] for m, h in zip(mine, hyps, strict=True))
        score = max(abs(m.score - h["score"]) for m, h in zip(mine, hyps, strict=True)
                    if m.tokens + [2] == h["tokens"]) if same else None
        result[f"beam{beam}"] = {"token_identical": same, "of": len(hyps),
                                 "max_abs_score_difference": score,
                                 "lengths": sorted({len(h["tokens"]) for h in hyps})}
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fairseq-python", type=Path, help="the Python of fairseq's environment")
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--out", type=Path)
    p.add_argument("--phase", choices=("fairseq", "ours", "both"), default="both")
    args = p.parse_args()
    if args.phase == "fairseq":
        fairseq_phase(args.work)
        return
    if args.phase == "both":
        subprocess.run([str(args.fairseq_python), __file__, "--phase", "fairseq", "--work",
                        str(args.work)], check=True)
    sys.path.insert(0, str(REPO / "benchmarks" / "speed"))
    from engines import emit

    emit(our_phase(args.work), args.out)


if __name__ == "__main__":
    main()
