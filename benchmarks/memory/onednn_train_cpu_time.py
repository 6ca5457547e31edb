"""bf16 training's CPU time and resident memory under a given capacity of oneDNN's two caches
(hardware/onednn.py): the Multi30k tiny recipe's model, 120 steps of its 4k-token batches
after 10 of warm-up, one thread. CPU time, not wall time, so that a loaded machine disturbs it
less.

    python benchmarks/memory/onednn_train_cpu_time.py DATA_DIR CAPACITY
"""

import json
import os
import sys
import time
from pathlib import Path

CACHES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
REPO = Path(__file__).resolve().parents[2]


def main(data_dir: Path, capacity: str) -> dict:
    for name in CACHES:
        os.environ[name] = capacity  # before torch's first product
    sys.path.insert(0, str(REPO / "benchmarks" / "speed"))
    import torch
    from engines import build

    from transformer_mt.config import load_config
    from transformer_mt.data.batching import token_batches
    from transformer_mt.data.dataset import ParallelData
    from transformer_mt.training.metrics import resident_mib

    torch.set_num_threads(1)
    cfg = load_config(str(REPO / "benchmarks/multi30k/multi30k-tiny-prenorm.yaml"),
                      ["train.bf16=true"])
    torch.manual_seed(0)
    engine = build("ours", cfg.model, dtype="bf16", threads=1)
    data = ParallelData(data_dir, "train")
    batches = token_batches(data.src_lengths, data.tgt_lengths, max_tokens=4096, seed=1,
                            epoch=0)

    def step(batch) -> None:
        engine.train_step(*data.collate(batch), int(data.tgt_lengths[batch].sum()))

    for batch in batches[:10]:
        step(batch)
    start = time.process_time()
    for batch in batches[10:130]:
        step(batch)
    out = {"capacity": capacity, "cpu_s_120_steps": round(time.process_time() - start, 1),
           "rss_mib": round(resident_mib())}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
