"""bf16 decoding's CPU time under a given capacity of oneDNN's two caches (hardware/onednn.py):
greedy and beam 4 over six batches of 64 Multi30k validation sentences, and beam 4 over eight
single sentences, one thread, outputs forced to 30 tokens, random small-shape weights.
CPU time, not wall time, so that a loaded machine disturbs it less.

    python benchmarks/memory/onednn_decode_cpu_time.py DATA_DIR CAPACITY
"""

import json
import os
import sys
import time
from pathlib import Path

CACHES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")



def main(data_dir: Path, capacity: str) -> dict:
    for name in CACHES:
        os.environ[name] = capacity  # before torch's first product
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "speed"))
    import torch
    from engines import build, decoding_batches, decoding_config

    torch.set_num_threads(1)
    torch.manual_seed(0)
    engine = build("ours", decoding_config("small"), dtype="bf16", threads=1)
    batches = decoding_batches(data_dir, 64)[:6]
    singles = decoding_batches(data_dir, 1)[::100][:8]
    engine.decode(batches[0], beam=4, length=30)  # warm-up
    out = {"capacity": capacity}
    for name, beam, inputs in (("beam4_batch64", 4, batches), ("greedy_batch64", 1, batches),
                               ("beam4_one_sentence", 4, singles)):
        start = time.process_time()
        for src in inputs:
            engine.decode(src, beam=beam, length=30)
        out[name + "_cpu_s"] = round(time.process_time() - start, 2)
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
