"""A real `transformer-mt serve` process on 127.0.0.1 for the tests, and a small HTTP client."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import torch

from transformer_mt import DecodeConfig, ModelConfig, Transformer, Translator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body: dict | None = None, timeout: float = 30):
    """(status, JSON body) of one request."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


@contextlib.contextmanager
def running_server(model_dir, *options: str, ready_within: float = 60):
    """`transformer-mt serve --model model_dir *options` on a free port, once /ready says so:
    yields (base URL, process); stdout and stderr go to process.stdout. Killed if still up."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "transformer_mt", "serve", "--model", str(model_dir),
         "--port", str(port), *options], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_within
        while True:
            with contextlib.suppress(OSError):
                if http("GET", base + "/ready", timeout=1)[0] == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not get ready:\n{process.stdout.read()}")
            time.sleep(0.2)
        yield base, process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def random_translator(vocab, *, d_model: int = 16, n_heads: int = 2, layers: int = 1,
                      max_positions: int = 64, max_length: int = 0) -> Translator:
    """A translator of a seeded random model (d_ff 2 d_model, no dropout) over `vocab`, beam 2,
    length offset 4 (and decode.max_length): its outputs tend to run to their length cap."""
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=len(vocab), d_model=d_model, n_heads=n_heads,
                      d_ff=2 * d_model, n_encoder_layers=layers, n_decoder_layers=layers,
                      dropout=0.0, max_positions=max_positions)
    return Translator(Transformer(cfg).eval(), vocab,
                      DecodeConfig(beam_size=2, max_length_offset=4, max_length=max_length))
