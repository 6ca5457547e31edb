"""Load on `transformer-mt serve`: 1, 8 and 64 concurrent clients each sending single
sentences to 127.0.0.1, against offline translation of the same sentences in one process and
against a one-request-at-a-time server over the same model (one_at_a_time.py).

    python benchmarks/serve/load.py --model MODEL_DIR --sentences test.en.gz --out OUT.json \
        [--requests 400] [--clients 1 8 64] [--rounds 3]

For each server and client count: sentences/s, p50/p95/p99 latency, failures; offline:
`Translator.translate` over the sentences at batch 64 (sentences/s) and one sentence at a time
(median latency). A bounded asyncio client (httpx): a fixed number of requests, each with a
timeout, to 127.0.0.1 only. The batched server is measured in `rounds` rounds, each beside an
offline measurement of its own (shared machines drift by tens of percent within minutes): the
ratios to offline are given per round, with their mean and spread.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import itertools
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
from serving_helpers import free_port, http  # noqa: E402
from transformer_mt import Translator  # noqa: E402
from transformer_mt.hardware.cpu_speed import cpu_model  # noqa: E402


def read_sentences(path: Path, n: int) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in itertools.islice(f, n)]


def offline(translator: Translator, sentences: list[str], single: int) -> dict:
    start = time.perf_counter()
    translator.translate(sentences)
    batch_seconds = time.perf_counter() - start
    latencies = []
    for sentence in sentences[:single]:
        start = time.perf_counter()
        translator.translate([sentence])
        latencies.append(time.perf_counter() - start)
    return {"sentences_per_s": len(sentences) / batch_seconds,
            "one_sentence_p50_ms": 1000 * statistics.median(latencies)}


async def load(base: str, sentences: list[str], clients: int, requests: int) -> dict:
    """`requests` single-sentence requests from `clients` concurrent clients."""
    todo = iter(range(requests))
    latencies, failures = [], 0

    async def client(session: httpx.AsyncClient) -> None:
        nonlocal failures
        for i in todo:
            start = time.perf_counter()
            try:
                response = await session.post(base + "/v1/translate",
                                              json={"text": sentences[i % len(sentences)]})
                ok = response.status_code == 200
            except httpx.HTTPError:
                ok = False
            latencies.append(time.perf_counter() - start)
            failures += not ok

    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(timeout=120, limits=limits) as session:
        start = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(clients)))
        seconds = time.perf_counter() - start
    q = statistics.quantiles(latencies, n=100)
    return {"clients": clients, "requests": requests, "failures": failures,
            "sentences_per_s": requests / seconds, "p50_ms": 1000 * statistics.median(latencies),
            "p95_ms": 1000 * q[94], "p99_ms": 1000 * q[98]}


def start(command: list[str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen([*command, "--port", str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if http("GET", base + "/ready", timeout=1)[0] == 200:
                return process, base
        except OSError:
            time.sleep(0.3)
    process.kill()
    raise RuntimeError(f"{command} did not get ready")


def measure(name: str, command: list[str], sentences: list[str], args,
            between=None) -> list[list[dict]]:
    """Rounds of loads on the server `command` starts: per round, `between()` (when given),
    then each client count."""
    process, base = start(command)
    try:
        asyncio.run(load(base, sentences, 8, 32))  # warm up
        rounds = []
        for _ in range(args.rounds if between else 1):
            extra = between() if between else {}
            rows = []
            for clients in args.clients:
                n = max(args.requests // 4, 50) if clients == 1 else args.requests
                rows.append({**asyncio.run(load(base, sentences, clients, n)), **extra})
                print(name, json.dumps(rows[-1]), flush=True)
            rounds.append(rows)
        return rounds
    finally:
        process.terminate()
        process.wait(timeout=60)


def spread(values: list[float]) -> dict:
    return {"mean": statistics.mean(values), "sd": statistics.stdev(values) if len(values) > 1
            else 0.0, "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--sentences", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sentences = read_sentences(args.sentences, args.requests)
    translator = Translator.from_dir(args.model)
    translator.translate(sentences[:64])  # warm up

    def offline_now() -> dict:
        result = offline(translator, sentences, 50)
        print("offline", json.dumps(result), flush=True)
        return {"offline_" + k: v for k, v in result.items()}

    batched = measure("batched", [sys.executable, "-m", "transformer_mt", "serve", "--model",
                                  str(args.model)], sentences, args, between=offline_now)
    baseline = Path(__file__).with_name("one_at_a_time.py")
    single = measure("one_at_a_time", [sys.executable, str(baseline), "--model",
                                       str(args.model)], sentences, args)[0]
    for rows in batched:
        for row, one in zip(rows, single, strict=True):
            row["vs_offline"] = row["sentences_per_s"] / row["offline_sentences_per_s"]
            row["vs_one_at_a_time"] = row["sentences_per_s"] / one["sentences_per_s"]
        rows[0]["p50_vs_offline_one_sentence"] = \
            rows[0]["p50_ms"] / rows[0]["offline_one_sentence_p50_ms"]
    summary = {str(clients): spread([rows[i]["vs_offline"] for rows in batched])
               for i, clients in enumerate(args.clients)}
    result = {"machine": cpu_model(), "threads": torch.get_num_threads(),
              "torch": torch.__version__, "python": platform.python_version(),
              "commit": subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                       capture_output=True, text=True).stdout.strip(),
              "model": str(args.model), "batched_rounds": batched, "one_at_a_time": single,
              "vs_offline_by_clients": summary,
              "single_client_p50_vs_offline_latency": spread(
                  [rows[0]["p50_vs_offline_one_sentence"] for rows in batched])}
    print(json.dumps({"vs_offline_by_clients": summary,
                      "single_client": result["single_client_p50_vs_offline_latency"]}))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
