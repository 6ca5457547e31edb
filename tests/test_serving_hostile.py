"""The server under hostile input: text the vocabulary cannot encode, bodies that do not parse
under every auth mode, oversized bodies streamed in chunks, requests uvicorn itself cannot
parse, and an internal failure: every answer is JSON, none is a 5xx but the last, which is
counted in the metrics and logged with its request number."""

import contextlib
import json
import logging
import select
import socket
import threading
import time
import urllib.parse
import urllib.request

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serving_helpers import http, random_translator, running_server

pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")
from fastapi.testclient import TestClient  # noqa: E402

from transformer_mt.config import ServeConfig  # noqa: E402
from transformer_mt.serving.app import create_app  # noqa: E402
from transformer_mt.storage.model_dir import save_model  # noqa: E402

KEY = "s3cret"
ENDPOINTS = {"/v1/translate": "text", "/translate": "q"}


@pytest.fixture(scope="module")
def translator(corpus_vocab):
    return random_translator(corpus_vocab)


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


def closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """(whether the server closed the connection within `seconds`, what it sent before). A
    reset is a close too: a server that closes while our bytes wait unread in its buffer
    resets the connection, after what it sent (which we read first)."""
    data, deadline = b"", time.monotonic() + seconds
    while time.monotonic() < deadline:
        if select.select([sock], [], [], 0.1)[0]:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                return True, data
            if not chunk:
                return True, data
            data += chunk
    return False, data


def answer_of(sock: socket.socket) -> bytes:
    """What the server sent until it closed the connection (or 10 s passed)."""
    return closed_within(sock, 10)[1]


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
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]  # and the server closed
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



def test_a_request_over_the_work_cap_is_a_413_before_any_decoding(translator):
    app = create_app(translator, ServeConfig(max_wait_ms=0.0, max_request_work=100))
    with TestClient(app) as client:
        ok = client.post("/v1/translate", json={"text": "dog", "beam_size": 2})
        assert ok.status_code == 200
        decoded = client.get("/metrics").text.split("transformer_mt_sentences_total ")[1]
        over = client.post("/v1/translate", json={"text": ["dog runs ."] * 3, "beam_size": 8,
                                                  "max_length_offset": 10})
        assert over.status_code == 413
        assert (over.json()["field"], over.json()["limit"]) == ("text", 100)
        assert "hypothesis tokens" in over.json()["error"]
        after = client.get("/metrics").text.split("transformer_mt_sentences_total ")[1]
        assert after.split()[0] == decoded.split()[0]  # nothing decoded for it


@pytest.fixture(scope="module")
def slow_translator(corpus_vocab):
    """A random model wide enough that 16 sentences at beam 16, whose outputs run to their
    length cap, decode for seconds."""
    return random_translator(corpus_vocab, d_model=64, n_heads=4, layers=2, max_positions=512)


HEAVY = {"text": ["a dog runs in the park with a ball and a boy ."] * 16, "beam_size": 16,
         "max_length_offset": 300}


def test_a_request_that_waits_past_the_queue_timeout_gets_503_with_retry_after(
        slow_translator):
    cfg = ServeConfig(max_wait_ms=0.0, queue_timeout_seconds=0.5, max_request_work=1 << 30,
                      max_offset=400)
    with TestClient(create_app(slow_translator, cfg)) as client:
        heavy = threading.Thread(target=client.post, args=("/v1/translate",),
                                 kwargs={"json": HEAVY | {"text": HEAVY["text"][:4]}})
        heavy.start()
        deadline = time.monotonic() + 10
        while "transformer_mt_decode_round_seconds_count 0.0" in client.get("/metrics").text:
            assert time.monotonic() < deadline, "the heavy request never began"
            time.sleep(0.05)
        # other settings wait for the running search to empty: longer than 0.5 s
        start = time.monotonic()
        response = client.post("/v1/translate", json={"text": "dog", "beam_size": 2})
        waited = time.monotonic() - start
        heavy.join()
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "5"
    assert "queue_timeout_seconds" in response.json()["error"]
    assert waited < 30


def metric(base: str, name: str) -> float:
    text = http_text(base + "/metrics")
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def http_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode()


def timed_translation(base: str) -> float:
    start = time.monotonic()
    status, _ = http("POST", base + "/v1/translate", {"text": "dog runs .", "beam_size": 2})
    assert status == 200
    return time.monotonic() - start


@pytest.fixture(scope="module")
def slow_server(slow_translator, tmp_path_factory):
    """A real server of `slow_translator` with a 1-second read timeout and room for HEAVY."""
    model = tmp_path_factory.mktemp("slow") / "model"
    save_model(slow_translator.model, model, vocab_path=slow_translator.vocab.path,
               decode=slow_translator.decode_cfg)
    with running_server(model, "--read-timeout-seconds", "1", "--max-request-work",
                        str(1 << 30), "--max-offset", "400") as (base, process):
        yield base


def test_a_heavy_request_whose_client_left_stops_decoding_and_the_next_is_answered_at_once(
        slow_server):
    base = slow_server
    alone = min(timed_translation(base) for _ in range(3))
    rounds = metric(base, "transformer_mt_decode_round_seconds_count")
    body = json.dumps(HEAVY).encode()
    with socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1]))) as sock:
        sock.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: t\r\nContent-Type: application/"
                     b"json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        deadline = time.monotonic() + 20
        while metric(base, "transformer_mt_decode_round_seconds_count") < rounds + 5:
            assert time.monotonic() < deadline, "the heavy request never began"
            time.sleep(0.05)
    # the client is gone: its 16 sentences leave the search at its next step
    deadline = time.monotonic() + 10
    while metric(base, "transformer_mt_abandoned_sentences_total") < 16:
        assert time.monotonic() < deadline, http_text(base + "/metrics")
        time.sleep(0.05)
    time.sleep(0.2)  # a step that had begun ends
    stopped = metric(base, "transformer_mt_decode_round_seconds_count")
    time.sleep(1.0)
    assert metric(base, "transformer_mt_decode_round_seconds_count") == stopped
    after = timed_translation(base)
    assert after < max(1.0, 10 * alone), (after, alone)
    assert metric(base, 'transformer_mt_requests_total{path="/v1/translate",status="499"}') \
        == 1


@pytest.mark.parametrize("sent", [b"", b"POST /v1/translate HTT"], ids=["nothing", "half a head"])
def test_a_connection_without_a_whole_head_is_closed_after_the_read_timeout(slow_server, sent):
    with socket.create_connection(("127.0.0.1", int(slow_server.rsplit(":", 1)[1]))) as sock:
        sock.sendall(sent)
        start = time.monotonic()
        closed, answer = closed_within(sock, 10)
    assert closed and answer == b"" and 0.8 < time.monotonic() - start < 5


def test_a_kept_alive_connection_that_starts_a_request_and_stalls_is_closed(slow_server):
    with socket.create_connection(("127.0.0.1", int(slow_server.rsplit(":", 1)[1]))) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        closed, answer = closed_within(sock, 0.5)
        assert not closed and answer.startswith(b"HTTP/1.1 200")
        sock.sendall(b"G")  # one byte: uvicorn's keep-alive timer stops waiting
        closed, _ = closed_within(sock, 10)
    assert closed


def test_a_body_that_trickles_in_gets_408_and_the_connection_closes(slow_server):
    with socket.create_connection(("127.0.0.1", int(slow_server.rsplit(":", 1)[1]))) as sock:
        sock.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
                     b"\r\nContent-Length: 100\r\n\r\n{\"text\": ")
        start = time.monotonic()
        closed, answer = closed_within(sock, 10)
    assert closed and time.monotonic() - start < 4
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer
    assert json.loads(body)["field"] == "body"


texts = st.text(st.characters(exclude_categories=()), max_size=60)  # surrogates included
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | texts,
                           lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(texts, inner, max_size=3), max_leaves=8)


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(path=st.sampled_from(sorted(ENDPOINTS)),
       body=st.one_of(
           st.builds(lambda f, t: {f: t}, st.sampled_from(["text", "q"]),
                     texts | st.lists(texts, max_size=5)),
           st.dictionaries(st.sampled_from(["text", "q", "source", "target", "format",
                                            "beam_size", "n_best", "alpha", "api_key",
                                            "max_length_offset", "alignment"]),
                           json_values, max_size=6)),
       as_form=st.booleans(), raw=st.binary(max_size=200), use_raw=st.booleans())
def test_generated_texts_fields_and_bytes_never_get_a_5xx(keyed, path, body, as_form, raw,
                                                          use_raw):
    client, headers = keyed
    if use_raw:
        content, kind = raw, "application/json"
    elif as_form:
        content = urllib.parse.urlencode({k: str(v) for k, v in body.items()},
                                         errors="surrogatepass").encode()
        kind = "application/x-www-form-urlencoded"
    else:
        content, kind = json.dumps(body).encode(), "application/json"
    response = post(client, path, content, headers, content_type=kind)
    assert response.status_code < 500, (response.status_code, response.text)
    assert response.headers["content-type"] == "application/json"
    if response.status_code >= 400:
        assert response.json()["error"]


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(head=st.binary(min_size=1, max_size=300)
       | st.builds(lambda a, b: a + b, st.sampled_from(
           [b"POST /v1/translate HTTP/1.1\r\n", b"GET /health HTTP/1.1\r\nHost: t\r\n",
            b"POST /translate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"]),
           st.binary(max_size=200)))
def test_random_bytes_on_the_wire_get_a_json_4xx_or_a_close_and_the_server_lives(
        slow_server, head):
    port = int(slow_server.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(head)
            sock.shutdown(socket.SHUT_WR)  # nothing more comes: the server must decide
        _, answer = closed_within(sock, 3)
    if answer:
        status = answer.split(b" ", 2)[1]
        assert status.startswith(b"4") or status == b"200", answer[:300]
        if status.startswith(b"4"):
            assert b"content-type: application/json" in answer.lower(), answer[:300]
    assert http("GET", slow_server + "/health", timeout=5)[0] == 200
