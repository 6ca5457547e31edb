"""The server under hostile input: text the vocabulary cannot encode, bodies that do not parse
under every auth mode, oversized bodies streamed in chunks, requests uvicorn itself cannot
parse, and an internal failure: every answer is JSON, none is a 5xx but the last, which is
counted in the metrics and logged with its request number."""

import contextlib
import logging
import select
import socket
import time

import pytest
import torch

from serving_helpers import running_server

pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")
from fastapi.testclient import TestClient  # noqa: E402

from transformer_mt import DecodeConfig, ModelConfig, Transformer, Translator  # noqa: E402
from transformer_mt.config import ServeConfig  # noqa: E402
from transformer_mt.serving.app import create_app  # noqa: E402
from transformer_mt.storage.model_dir import save_model  # noqa: E402

KEY = "s3cret"
ENDPOINTS = {"/v1/translate": "text", "/translate": "q"}


@pytest.fixture(scope="module")
def translator(corpus_vocab):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=len(corpus_vocab), d_model=16, n_heads=2, d_ff=32,
                      n_encoder_layers=1, n_decoder_layers=1, dropout=0.0, max_positions=64)
    return Translator(Transformer(cfg).eval(), corpus_vocab,
                      DecodeConfig(beam_size=2, max_length_offset=4))


@pytest.fixture(scope="module", params=["no key", "key"])
def keyed(request, translator):
    """(client, headers that carry the key where the server wants one)."""
    key = KEY if request.param == "key" else ""
    app = create_app(translator, ServeConfig(max_wait_ms=0.0, api_key=key),
                     languages=("en", "de"))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, {"Authorization": f"Bearer {KEY}"} if key else {}


def post(client, path, body: bytes | str, headers=None, content_type="application/json"):
    return client.post(path, content=body, headers={"Content-Type": content_type,
                                                    **(headers or {})})


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize("raw", [False, True], ids=["escaped", "raw bytes"])
def test_a_lone_surrogate_is_a_422_naming_the_sentence(keyed, path, raw):
    client, headers = keyed
    field = ENDPOINTS[path]
    # JSON lets a lone UTF-16 surrogate through escaped; Python's JSON reader lets its UTF-8
    # form (ED A0 80, not valid UTF-8) through too
    surrogate = b"\xed\xa0\x80" if raw else b"\\ud800"
    body = b'{"%s": ["dog runs .", "cat %s sleeps"]}' % (field.encode(), surrogate)
    response = post(client, path, body, headers)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == f"{field}[1]"
    assert "lone surrogate '\\ud800' at character 5" in response.json()["error"]


HOSTILE_BODIES = {
    "not JSON": b"nul",
    "not UTF-8": b"\xff\xfe{",
    "a JSON array": b"[1]",
    "nested deeper than Python's stack": b"[" * 100_000,
    "a key nested deeper than Python's stack": b'{"api_key": ' + b"[" * 100_000,
    "NUL in a string": b'{"text": "a\\u0000b", "q": "a\\u0000b"}',
    "a number too large for a float": b'{"text": "a", "q": "a", "alpha": 1e999}',
    "an empty body": b"",
}


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize("name", HOSTILE_BODIES)
def test_hostile_bodies_get_json_answers_and_never_a_5xx(keyed, path, name):
    client, headers = keyed
    response = post(client, path, HOSTILE_BODIES[name], headers)
    assert response.status_code < 500, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    if response.status_code >= 400:
        assert body["error"]
    if response.status_code in (400, 422):
        assert body["field"]  # names what is wrong: "body" where the body is
    assert client.get("/health").status_code == 200


def test_a_body_that_does_not_parse_is_401_without_the_key_and_names_the_body_with_it(
        translator):
    app = create_app(translator, ServeConfig(max_wait_ms=0.0, api_key=KEY))
    with TestClient(app, raise_server_exceptions=False) as client:
        for path in ENDPOINTS:
            for body in (b"[" * 100_000, b"\xff", b"nul"):
                assert post(client, path, body).status_code == 401
            response = post(client, path, b"nul", {"Authorization": f"Bearer {KEY}"})
            assert (response.status_code, response.json()["field"]) == (422, "body")


def test_the_authorization_scheme_is_case_insensitive(translator):
    app = create_app(translator, ServeConfig(max_wait_ms=0.0, api_key=KEY))
    with TestClient(app) as client:
        for scheme in ("Bearer", "bearer", "BEARER"):
            response = client.post("/v1/translate", json={"text": "dog"},
                                   headers={"Authorization": f"{scheme} {KEY}"})
            assert response.status_code == 200, scheme
        for wrong in (f"Basic {KEY}", f"Bearer {KEY}x", KEY, "Bearer"):
            response = client.post("/v1/translate", json={"text": "dog"},
                                   headers={"Authorization": wrong})
            assert response.status_code == 401, wrong


def test_an_internal_failure_is_a_json_500_counted_and_logged_with_its_number(
        translator, monkeypatch, caplog):
    app = create_app(translator, ServeConfig(max_wait_ms=0.0))
    with TestClient(app, raise_server_exceptions=False) as client:
        def broken(*_args, **_kwargs):
            raise RuntimeError("a bug")

        monkeypatch.setattr(translator, "encode_source", broken)
        with caplog.at_level(logging.INFO, logger="transformer_mt.serving.app"):
            response = client.post("/v1/translate", json={"text": "dog"})
        assert response.status_code == 500
        assert response.headers["content-type"] == "application/json"
        number = response.json()["error"].split("(request ")[1].split(";")[0]
        failed = [r for r in caplog.records if r.getMessage().startswith(f"request {number}: ")]
        assert any("failed" in r.getMessage() and r.exc_info for r in failed)
        assert any(r.getMessage().endswith("-> 500") or " -> 500 in " in r.getMessage()
                   for r in failed)
        monkeypatch.undo()
        assert 'path="/v1/translate",status="500"} 1.0' in client.get("/metrics").text
        assert client.post("/v1/translate", json={"text": "dog"}).status_code == 200


@pytest.fixture(scope="module")
def server(translator, tmp_path_factory):
    """A real `transformer-mt serve` process with a 64 KiB body limit."""
    model = tmp_path_factory.mktemp("hostile") / "model"
    save_model(translator.model, model, vocab_path=translator.vocab.path,
               decode=translator.decode_cfg)
    with running_server(model, "--max-body-bytes", str(64 << 10)) as (base, process):
        yield base.rsplit(":", 1)[1], process


def answer_of(sock: socket.socket) -> bytes:
    """What the server sent until it closed the connection (or 10 s passed)."""
    data, deadline = b"", time.monotonic() + 10
    while time.monotonic() < deadline:
        if not select.select([sock], [], [], 0.5)[0]:
            continue
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_a_chunked_body_over_the_limit_is_refused_while_it_arrives(server):
    port = int(server[0])
    sent, total = 0, 64 << 20  # 64 MiB offered against a 64 KiB limit
    chunk = b"x" * (64 << 10)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
                     b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        try:
            while sent < total and not select.select([sock], [], [], 0)[0]:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed while we were still sending
        answer = answer_of(sock)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"field":"body"' in answer
    assert sent < 16 << 20, f"the server read {sent} bytes before answering"


@pytest.mark.parametrize("request_bytes", [
    b"GARBAGE\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n",
    b"POST /v1/translate HTTP/1.1\r\nHost: t\r\nContent-Length: ten\r\n\r\n",
], ids=["request line", "header without colon", "length not a number"])
def test_requests_uvicorn_cannot_parse_get_json_400s(server, request_bytes):
    with socket.create_connection(("127.0.0.1", int(server[0])), timeout=10) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(request_bytes)  # the server may answer and close before the end
        answer = answer_of(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b"content-type: application/json" in head.lower()
    assert b'"error"' in body

