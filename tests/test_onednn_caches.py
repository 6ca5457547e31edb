"""oneDNN's caches bounded (hardware/onednn.py): bf16 products of ~800 shapes grow resident
memory by hundreds of MB with torch's default capacities, by a fraction of that with ours
(ours stop growing once their 32 entries are full: at ~400 shapes a CPU without bf16 units,
an Intel Xeon of family 6 model 106, had grown by 60 MiB against 144, too early to tell);
set after torch is imported, as the CLI sets them; a capacity the user set is kept."""

import json
import os
import subprocess
import sys

import pytest

from transformer_mt.hardware.onednn import CACHES, CAPACITY, bound_onednn_caches

PROBE = """
import json, torch
from transformer_mt.hardware.onednn import bound_onednn_caches
capacities = bound_onednn_caches()  # after `import torch`, as in the CLI
torch.set_num_threads(1)
linear = torch.nn.Linear(256, 1024)
def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20
with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
    linear(torch.randn(8, 256))
    before = rss_mib()
    for rows in range(9, 800):  # a new problem shape each time, as token batches are
        linear(torch.randn(rows, 256))
print(json.dumps({"capacities": capacities, "growth_mib": rss_mib() - before}))
"""


def probe(**env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in CACHES}
    out = subprocess.run([sys.executable, "-c", PROBE], env=clean | env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_bounded_caches_hold_bf16_memory_down():
    torch_defaults = probe(**{name: "1024" for name in CACHES})
    assert torch_defaults["capacities"] == {name: "1024" for name in CACHES}  # kept
    if torch_defaults["growth_mib"] < 50:
        pytest.skip("this CPU's bf16 products do not fill oneDNN's caches")
    ours = probe()
    assert ours["capacities"] == {name: str(CAPACITY) for name in CACHES}
    assert ours["growth_mib"] < torch_defaults["growth_mib"] / 3, (ours, torch_defaults)


def test_a_capacity_the_user_set_is_kept(monkeypatch):
    monkeypatch.setenv("LRU_CACHE_CAPACITY", "7")
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    assert bound_onednn_caches() == {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": str(CAPACITY),
                                     "LRU_CACHE_CAPACITY": "7"}
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(CAPACITY)
