"""The HTTP server: every endpoint, every limit, batching across clients that does not change a
sentence's translation, errors that fail one request only, and a real uvicorn process that
drains its work on SIGTERM."""

import asyncio
import dataclasses
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import torch

from serving_helpers import http, running_server

pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")
from fastapi.testclient import TestClient  # noqa: E402

from transformer_mt import DecodeConfig, ModelConfig, Transformer, Translator  # noqa: E402
from transformer_mt.config import ServeConfig  # noqa: E402
from transformer_mt.serving.app import create_app  # noqa: E402
from transformer_mt.serving.batcher import Batcher  # noqa: E402
from transformer_mt.storage.model_dir import save_model  # noqa: E402

SENTENCES = ["dog runs .", "small girl sees a big ball !", "cat sleeps ?", "red horse",
             "boy plays with the blue ball .", "woman walks", "bird eats ."]


@pytest.fixture(scope="module")
def translator(corpus_vocab):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=len(corpus_vocab), d_model=32, n_heads=4, d_ff=64,
                      n_encoder_layers=2, n_decoder_layers=2, dropout=0.0, max_positions=64)
    return Translator(Transformer(cfg).eval(), corpus_vocab,
                      DecodeConfig(beam_size=3, max_length_offset=8))


def client_for(translator, **limits):
    cfg = ServeConfig(**{"max_wait_ms": 20.0, **limits})
    return TestClient(create_app(translator, cfg, languages=("en", "de")))


@pytest.fixture(scope="module")
def client(translator):
    with client_for(translator) as c:
        yield c


def translate(client, text, **fields):
    return client.post("/v1/translate", json={"text": text, **fields})


def test_translations_equal_the_offline_translator_alone_and_in_one_request(client, translator):
    offline = translator.translate(SENTENCES)
    response = translate(client, SENTENCES)
    assert response.status_code == 200
    assert [t["text"] for t in response.json()["translations"]] == offline
    for sentence, expected in zip(SENTENCES, offline, strict=True):
        body = translate(client, sentence).json()
        assert [t["text"] for t in body["translations"]] == [expected]


def test_concurrent_clients_are_batched_together_and_get_their_own_answers(translator):
    offline = dict(zip(SENTENCES, translator.translate(SENTENCES), strict=True))
    with client_for(translator, max_wait_ms=200.0) as client:
        answers: dict[str, str] = {}
        barrier = threading.Barrier(len(SENTENCES))

        def ask(sentence):
            barrier.wait()
            answers[sentence] = translate(client, sentence).json()["translations"][0]["text"]

        threads = [threading.Thread(target=ask, args=(s,)) for s in SENTENCES]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert answers == offline
        metrics = client.get("/metrics").text
    rounds = float(metric(metrics, "transformer_mt_batch_sentences_count"))
    alone = float(metric(metrics, 'transformer_mt_batch_sentences_bucket{le="1.0"}'))
    assert float(metric(metrics, "transformer_mt_sentences_total")) == len(SENTENCES) + 1
    assert alone < rounds, "some clients' sentences were decoded together"


def test_alignments_on_request_equal_the_offline_ones_while_others_decode(translator):
    from transformer_mt.inference.alignment import AlignmentChoice, hard_alignment

    best = [n[0] for n in translator.translate_nbest(SENTENCES)]
    sources = [translator.encode_source(s, i) for i, s in enumerate(SENTENCES)]
    offline = translator.alignments(sources, best, AlignmentChoice())
    with client_for(translator, max_wait_ms=100.0) as client:
        answers: dict[int, dict] = {}
        barrier = threading.Barrier(len(SENTENCES))

        def ask(i):  # every other client asks for alignments, all in one batch
            barrier.wait()
            answers[i] = translate(client, [SENTENCES[i], ""], alignment=i % 2 == 0).json()

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(SENTENCES))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    vocab = translator.vocab
    for i, body in answers.items():
        first, empty = body["translations"]
        assert first["text"] == best[i].text
        if i % 2:
            assert first["alignment"] is None and empty["alignment"] is None
            continue
        got = first["alignment"]
        assert (got["layer"], got["layers"]) == (0, 2)  # the default of a 2-layer decoder
        assert got["source"] == [vocab.piece(t) for t in sources[i][:-1]]
        assert got["target"] == [vocab.piece(t, "target") for t in best[i].tokens]
        assert torch.allclose(torch.tensor(got["weights"]), offline[i], atol=1e-5)
        assert [tuple(p) for p in got["pairs"]] == hard_alignment(offline[i])
        assert empty["alignment"] == {"layer": 0, "layers": 2, "source": [], "target": [],
                                      "weights": [], "pairs": []}


def test_a_model_without_alignments_answers_422_naming_the_field(translator):
    from transformer_mt.inference.ensemble import Ensemble

    ensemble = Translator(Ensemble([translator.model, translator.model]), translator.vocab,
                          translator.decode_cfg)
    with client_for(ensemble) as client:
        response = translate(client, "dog runs .", alignment=True)
        assert response.status_code == 422
        assert response.json()["field"] == "alignment"
        assert "not an Ensemble" in response.json()["error"]
        assert translate(client, "dog runs .").status_code == 200


def metric(text: str, name: str) -> str:
    return next(line.split()[-1] for line in text.splitlines() if line.startswith(name + " ")
                or line.startswith(name + "{"))


def test_empty_and_blank_input_gives_empty_translations_without_the_model(client):
    before = metric(client.get("/metrics").text, "transformer_mt_sentences_total")
    body = translate(client, ["", "   ", "\t"]).json()
    assert [(t["text"], t["score"]) for t in body["translations"]] == [("", None)] * 3
    assert metric(client.get("/metrics").text, "transformer_mt_sentences_total") == before


def test_n_best_lists_and_scores(client, translator):
    body = translate(client, SENTENCES[:2], beam_size=3, n_best=3).json()
    translator_nbest = translator.translate_nbest(SENTENCES[:2])
    for out, nbest in zip(body["translations"], translator_nbest, strict=True):
        assert len(out["n_best"]) == 3 and out["text"] == out["n_best"][0]["text"]
        scores = [h["score"] for h in out["n_best"]]
        assert scores == sorted(scores, reverse=True)
        assert out["text"] == nbest[0].text and out["score"] == pytest.approx(nbest[0].score)


@pytest.mark.parametrize("fields, status, field", [
    ({"beam_size": 17}, 422, "beam_size"),
    ({"beam_size": 2, "n_best": 3}, 422, "n_best"),
    ({"max_length_offset": 201}, 422, "max_length_offset"),
    ({"beam_size": 0}, 422, "beam_size"),
    ({"alpha": -1}, 422, "alpha"),
    ({"alpha": 1e308}, 422, "alpha"),
    ({"colour": "red"}, 422, "colour"),
])
def test_each_setting_limit_is_an_error_naming_the_field(client, fields, status, field):
    response = translate(client, "dog runs .", **fields)
    assert response.status_code == status
    assert response.json()["field"] == field


def test_sentence_count_character_and_token_limits(translator):
    with client_for(translator, max_sentences=3, max_chars=40) as client:
        response = translate(client, ["dog"] * 4)
        assert response.status_code == 413
        assert response.json() | {"error": ""} == {"error": "", "field": "text", "limit": 3}
        response = translate(client, ["dog", "x" * 41])
        assert response.status_code == 422
        assert (response.json()["field"], response.json()["limit"]) == ("text[1]", 40)
    with client_for(translator) as client:  # the model's 64 positions - offset 8: 56 tokens
        response = translate(client, ["dog", "dog " * 100])
        assert response.status_code == 422
        assert (response.json()["field"], response.json()["limit"]) == ("text[1]", 56)


def test_body_size_limit(translator):
    with client_for(translator, max_body_bytes=200) as client:
        response = translate(client, ["dog runs ."] * 30)
        assert response.status_code == 413
        assert response.json()["field"] == "body" and response.json()["limit"] == 200


def test_unicode_control_characters_and_crlf(client):
    texts = ["dog 🐕 runs .", "\u202bcat sleeps\u202c", "bird\x00eats\x07 .", "girl\r\nsees"]
    response = translate(client, texts)
    assert response.status_code == 200
    assert len(response.json()["translations"]) == 4


def test_health_ready_models_and_metrics(client, translator):
    assert client.get("/health").json() == {"status": "ok"}
    assert client.get("/ready").json() == {"status": "ready"}
    models = client.get("/v1/models").json()
    assert models["vocab_size"] == len(translator.vocab) and models["languages"] == ["en", "de"]
    assert models["parameters"] == sum(p.numel() for p in translator.model.parameters())
    assert models["decode"]["beam_size"] == 3
    translate(client, "dog runs .")
    text = client.get("/metrics").text
    for name in ("transformer_mt_requests_total", "transformer_mt_request_seconds_bucket",
                 "transformer_mt_queue_seconds_bucket", "transformer_mt_batch_sentences_bucket",
                 "transformer_mt_sentences_total", "transformer_mt_source_tokens_total",
                 "transformer_mt_queue_depth"):
        assert name in text, name
    assert 'path="/v1/translate",status="200"' in text


def test_libretranslate_shape(client, translator):
    expected = translator.translate(SENTENCES[:2])
    body = client.post("/translate", json={"q": SENTENCES[0], "source": "en", "target": "de",
                                           "format": "text"}).json()
    assert body == {"translatedText": expected[0]}
    body = client.post("/translate", json={"q": SENTENCES[:2], "source": "auto",
                                           "target": "de"}).json()
    assert body["translatedText"] == expected
    assert client.post("/translate", json={"q": "x", "target": "fr"}).status_code == 400
    assert client.post("/translate", json={"q": "x", "format": "html"}).status_code == 400


def test_api_key(translator):
    with client_for(translator, api_key="s3cret") as client:
        assert translate(client, "dog").status_code == 401
        ok = client.post("/v1/translate", json={"text": "dog"},
                         headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert client.post("/translate", json={"q": "dog", "api_key": "s3cret"}).status_code \
            == 200
        assert client.post("/translate", json={"q": "dog", "api_key": "no"}).status_code == 401
        assert client.get("/v1/models").status_code == 401
        assert client.get("/health").status_code == 200  # probes need no key
    with client_for(translator) as client:
        assert translate(client, "dog").status_code == 200


def test_cors_origins(translator):
    with client_for(translator, cors_origins="http://example.test") as client:
        response = client.options("/v1/translate", headers={
            "Origin": "http://example.test", "Access-Control-Request-Method": "POST"})
        assert response.headers["access-control-allow-origin"] == "http://example.test"


def test_a_full_queue_answers_429_with_retry_after_and_recovers(translator):
    with client_for(translator, max_queue=2) as client:
        response = translate(client, ["dog", "cat", "bird"])
        assert response.status_code == 429 and response.headers["retry-after"] == "1"
        assert translate(client, ["dog", "cat"]).status_code == 200


def test_a_decoding_error_fails_only_its_request(translator, monkeypatch):
    poison = torch.tensor(translator.vocab.encode("horse") + [translator.model.cfg.eos_id])
    real = translator.model.encode

    def failing(src_BS):
        if any(row[row.ne(0)].equal(poison) for row in src_BS):
            raise RuntimeError("poisoned sentence")
        return real(src_BS)

    with client_for(translator, max_wait_ms=200.0) as client:
        monkeypatch.setattr(translator.model, "encode", failing)
        results = {}
        barrier = threading.Barrier(2)

        def ask(name, text):
            barrier.wait()
            results[name] = translate(client, text)

        threads = [threading.Thread(target=ask, args=a) for a in
                   (("bad", ["dog", "horse"]), ("good", ["cat sleeps ?"]))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results["bad"].status_code == 500
        assert "poisoned sentence" in results["bad"].json()["error"]
        assert results["good"].status_code == 200
        assert translate(client, "dog").status_code == 200  # still serving


def test_the_web_page_is_self_contained(client):
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    html = page.text
    assert 'id="translate"' in html and "v1/translate" in html
    # no CDN: works offline (the SVG namespace is a name, never fetched)
    urls = re.findall(r"https?://[^\s\"'`]*", html)
    assert urls == ["http://www.w3.org/2000/svg"], urls


def test_the_api_docs_work_offline(client):
    page = client.get("/docs")
    assert page.status_code == 200
    # Swagger UI's script and style come from this server (fastapi-offline), not a CDN
    assert re.findall(r"https?://[^\s\"'`]*", page.text) == []
    assets = re.findall(r"(?:src|href)=['\"](/[^'\"]+\.(?:js|css))", page.text)
    assert len(assets) == 2, page.text
    for asset in assets:
        answer = client.get(asset)
        assert answer.status_code == 200 and len(answer.content) > 10_000, asset


def test_a_busy_port_is_a_clear_error_before_any_ready(translator, tmp_path):
    save_model(translator.model, tmp_path / "model", vocab_path=translator.vocab.path,
               decode=translator.decode_cfg)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "transformer_mt", "serve", "--model",
                               str(tmp_path / "model"), "--port", str(port)],
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in done.stderr
    assert "ready: serving" not in done.stderr + done.stdout


def test_a_real_server_drains_on_sigterm_and_exits_0(translator, tmp_path):
    save_model(translator.model, tmp_path / "model", vocab_path=translator.vocab.path,
               decode=translator.decode_cfg)
    offline = translator.translate(SENTENCES)
    with running_server(tmp_path / "model", "--max-wait-ms", "300",
                        "--grace-seconds", "20") as (base, server):
        answers = {}

        def ask(i):
            answers[i] = http("POST", base + "/v1/translate", {"text": SENTENCES[i]})

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(SENTENCES))]
        for t in threads:
            t.start()
        time.sleep(0.1)  # the requests are in, waiting for their batch
        server.send_signal(signal.SIGTERM)
        for t in threads:
            t.join()
        assert server.wait(timeout=30) == 0
        log = server.stdout.read()
    assert {i: a[0] for i, a in answers.items()} == dict.fromkeys(range(len(SENTENCES)), 200), log
    assert [answers[i][1]["translations"][0]["text"] for i in range(len(SENTENCES))] == offline
    assert "POST /v1/translate -> 200" in log and "1 sentences" in log


def test_a_real_int8_server_quantises_per_row_and_answers_as_each_sentence_alone(translator,
                                                                                 tmp_path):
    save_model(translator.model, tmp_path / "model", vocab_path=translator.vocab.path,
               decode=translator.decode_cfg)
    int8 = Translator(translator.model, translator.vocab,
                      dataclasses.replace(translator.decode_cfg, int8=True, int8_scales="row"))
    alone = [int8.translate([s])[0] for s in SENTENCES]
    with running_server(tmp_path / "model", "--int8", "--max-wait-ms", "300") as (base, _):
        decode = http("GET", base + "/v1/models")[1]["decode"]
        assert (decode["int8_scales"], decode["max_length"]) == ("row", 512)  # serve's defaults
        answers = {}

        def ask(i):
            answers[i] = http("POST", base + "/v1/translate", {"text": SENTENCES[i]})[1]

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(SENTENCES))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert [answers[i]["translations"][0]["text"] for i in range(len(SENTENCES))] == alone


def test_ready_answers_503_while_draining_and_before_the_warm_up(translator):
    app = create_app(translator, ServeConfig(), languages=None)
    with TestClient(app) as client:
        assert client.get("/ready").status_code == 200
        app.state.draining = True
        assert client.get("/ready").json() == {"status": "draining"}
        assert client.get("/ready").status_code == 503
    fresh = create_app(translator, ServeConfig())
    assert TestClient(fresh).get("/ready").status_code == 503  # no lifespan: never warmed up


def test_the_absolute_output_cap(translator):
    import dataclasses

    capped_at_3 = Translator(translator.model, translator.vocab,
                             dataclasses.replace(translator.decode_cfg, max_length=3))
    with client_for(capped_at_3) as client:
        body = translate(client, SENTENCES, max_length_offset=50).json()
    ids = [translator.encode_source(s, i) for i, s in enumerate(SENTENCES)]
    offset50 = dataclasses.replace(translator.decode_cfg, max_length_offset=50)
    capped = translator.translate_ids(ids, dataclasses.replace(offset50, max_length=3))
    uncapped = translator.translate_ids(ids, offset50)
    served = [t["text"] for t in body["translations"]]
    assert served == [n[0].text for n in capped] != [n[0].text for n in uncapped]


def test_fifty_real_sentences_in_any_grouping_equal_the_translate_command(shared_data,
                                                                         tmp_path):
    """Batch invariance on real text: 50 Multi30k sentences sent as one request, as 50
    concurrent single-sentence requests and as 10 concurrent requests of 5 come back byte for
    byte as `transformer-mt translate` wrote them (fp32)."""
    from conftest import read_lines
    from transformer_mt import train_vocabulary
    from transformer_mt.cli.main import main

    sources = read_lines(shared_data / "multi30k/val.en.gz", 50)
    texts = read_lines(shared_data / "multi30k/train.en.gz", 500) + \
        read_lines(shared_data / "multi30k/train.de.gz", 500)
    vocab = train_vocabulary(texts, vocab_size=400, out_path=tmp_path / "sentencepiece.model")
    torch.manual_seed(1)
    cfg = ModelConfig(vocab_size=len(vocab), d_model=32, n_heads=4, d_ff=64,
                      n_encoder_layers=2, n_decoder_layers=2, dropout=0.0, max_positions=128)
    save_model(Transformer(cfg), tmp_path / "model", vocab_path=vocab.path,
               decode=DecodeConfig(max_length_offset=10))
    (tmp_path / "src.en").write_text("\n".join(sources) + "\n", encoding="utf-8")
    assert main(["translate", "--model", str(tmp_path / "model"), "--input",
                 str(tmp_path / "src.en"), "--output", str(tmp_path / "out.de")]) == 0
    expected = (tmp_path / "out.de").read_text(encoding="utf-8").splitlines()
    translator = Translator.from_dir(tmp_path / "model")
    with client_for(translator, max_wait_ms=50.0) as client:
        whole = [t["text"] for t in translate(client, sources).json()["translations"]]
        assert whole == expected
        for size in (1, 5):
            got: dict[int, list[str]] = {}

            def ask(start, size=size, got=got):
                body = translate(client, sources[start : start + size]).json()
                got[start] = [t["text"] for t in body["translations"]]

            threads = [threading.Thread(target=ask, args=(i,)) for i in range(0, 50, size)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert [text for start in sorted(got) for text in got[start]] == expected


def test_a_sentence_joins_the_running_search_and_leaves_when_done(translator):
    """Continuous batching, deterministically: B is queued after A's first step; it joins A's
    search at the next, both get the offline translations, and B, shorter, is answered first."""
    cfg = dataclasses.replace(translator.decode_cfg, min_length=20, max_length_offset=30)
    ids = {name: translator.encode_source(text, 0) for name, text in
           (("a", "small girl sees a big ball !"), ("b", "dog"))}
    offline = {name: translator.translate_ids([i], cfg)[0][0].text for name, i in ids.items()}
    rounds, answered, queued = [], [], threading.Event()

    async def scenario():
        loop = asyncio.get_running_loop()
        futures = {}

        def submit_b():
            futures["b"] = batcher.submit([ids["b"]], cfg)[0]
            futures["b"].add_done_callback(lambda _: answered.append("b"))
            queued.set()

        def observe(sentences, finished, *_):
            rounds.append((sentences, finished))
            if len(rounds) == 1:
                loop.call_soon_threadsafe(submit_b)
                queued.wait(10)

        batcher = Batcher(translator, ServeConfig(), observe=observe)
        futures["a"] = batcher.submit([ids["a"]], cfg)[0]
        futures["a"].add_done_callback(lambda _: answered.append("a"))
        a = await futures["a"]
        b = await futures["b"]
        batcher.close(timeout=10)
        return {"a": a[0][0].text, "b": b[0][0].text}

    assert asyncio.run(scenario()) == offline
    assert rounds[0] == (1, 0) and rounds[1][0] == 2  # B decoded beside A from step 2
    assert answered == ["b", "a"]
