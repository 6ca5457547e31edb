"""The glibc malloc tuning keeps freed memory for reuse: in steady state, a step that allocates
and frees 64 MB logits and their gradient page-faults almost nothing, where by default glibc
maps those blocks fresh (and faults every page in) at every step."""

import json
import os
import platform
import subprocess
import sys

import pytest

from transformer_mt.hardware.malloc import OPT_OUT, tune_malloc

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")

PROBE = """
import json, resource, torch
from transformer_mt.hardware.malloc import tune_malloc
tuned = tune_malloc()
# float32 logits of 64 MB (bf16 would be the same bytes, but some CPUs multiply it 50x slower)
hidden, weight = torch.randn(2048, 64), torch.randn(8000, 64)
def step():
    w = weight.clone().requires_grad_()
    logits = hidden @ w.t()
    logits.logsumexp(-1).sum().backward()  # the gradient: another 64 MB
for _ in range(8):  # warm-up: the heap reaches its steady size (3 steps were not always enough)
    step()
faults = []  # the fewest of 5 steps: a step where the heap still grew does not decide
for _ in range(5):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    step()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"tuned": tuned, "faults_per_step": min(faults)}))
"""

PAGES_64MB = (64 << 20) // os.sysconf("SC_PAGE_SIZE")


def probe(**env: str) -> dict:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("TRANSFORMER_MT_MALLOC", "MALLOC_MMAP_THRESHOLD_",
                          "MALLOC_TRIM_THRESHOLD_")}
    out = subprocess.run([sys.executable, "-c", PROBE], env=clean | env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_tuned_malloc_reuses_freed_memory():
    result = probe()
    assert result["tuned"]
    assert result["faults_per_step"] < PAGES_64MB // 10


def test_default_malloc_faults_the_logits_in_at_every_step():
    result = probe(TRANSFORMER_MT_MALLOC="default")
    assert not result["tuned"]
    assert result["faults_per_step"] > PAGES_64MB


@pytest.mark.parametrize("name", ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"])
def test_user_settings_are_left_alone(monkeypatch, name):
    # in this process: tune_malloc returns before it calls mallopt, so nothing here changes
    for other in (OPT_OUT, "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(name, "131072")
    assert not tune_malloc()

