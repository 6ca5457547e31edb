"""The HTTP API (FastAPI): handlers validate a request against the limits of `ServeConfig`,
hand its sentences to the batcher, and format the answer. Endpoints: `POST /v1/translate`,
`GET /health`, `GET /ready`, `GET /v1/models`, `GET /metrics` (Prometheus), the
LibreTranslate-compatible `POST /translate`, and the web page at `/`."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import json
import logging
import time
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl

import torch
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..config import DecodeConfig, ServeConfig, config_to_dict
from ..inference.alignment import AlignmentChoice, hard_alignment
from ..inference.translator import Translation, Translator, has_no_pieces
from ..model.stats import count_parameters
from ..model.transformer import Transformer
from .batcher import (
    Batcher,
    DecodingFailed,
    Draining,
    QueueFull,
    QueueTimeout,
    request_settings,
)
from .metrics import ServerMetrics

log = logging.getLogger(__name__)


# beyond, lp(Y)^alpha overflows a float for long outputs; useful values are below 2
MAX_ALPHA = 10.0

class TranslateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # false is no beam size

    text: str | list[str] = Field(description="a sentence, or a list of them")
    beam_size: int | None = Field(None, ge=1, description="beam size (the model's default: "
                                                         "its config's)")
    n_best: int | None = Field(None, ge=1, description="hypotheses per sentence (<= beam_size)")
    alpha: float | None = Field(None, ge=0, le=MAX_ALPHA, description="length penalty alpha")
    max_length_offset: int | None = Field(None, ge=0, description="an output has at most "
                                          "source length + this many tokens")
    alignment: bool = Field(False, description="add each best translation's alignment: its "
                            "encoder-decoder attention over the source (docs/attention.md)")


class Hypothesis(BaseModel):
    text: str
    score: float | None = Field(description="log P / lp(|Y|); null for an empty input")


class AlignmentOut(BaseModel):
    layer: int = Field(description="the decoder layer that aligns, 0-based, its heads averaged")
    layers: int = Field(description="the decoder's number of layers")
    source: list[str] = Field(description="the source pieces (EOS left out)")
    target: list[str] = Field(description="the translation's pieces (EOS left out)")
    weights: list[list[float]] = Field(description="for each target piece, its weights over "
                                       "the source pieces (summing to 1)")
    pairs: list[list[int]] = Field(description="hard alignment: [source i, target j] pairs, "
                                   "each target piece with its largest source piece")


class TranslationOut(Hypothesis):
    n_best: list[Hypothesis] | None = Field(None, description="with n_best > 1: the "
                                            "hypotheses, best first")
    alignment: AlignmentOut | None = Field(None, description="with alignment: true")


class TranslateResponse(BaseModel):
    translations: list[TranslationOut]
    milliseconds: float = Field(description="time from arrival to answer")


class ReadyBody(BaseModel):
    status: str


FORM = "application/x-www-form-urlencoded"  # what LibreTranslate's client libraries send


class LibreRequest(BaseModel):
    model_config = ConfigDict(strict=True)  # other LibreTranslate fields are ignored

    q: str | list[str]
    source: str = "auto"
    target: str | None = None
    format: str = "text"
    api_key: str | None = None


class DetectedLanguage(BaseModel):
    language: str
    confidence: float


class LibreResponse(BaseModel):
    translatedText: str | list[str]  # noqa: N815 - LibreTranslate's field name
    # with source "auto": the model's one source language (not a detection), one per text
    detectedLanguage: DetectedLanguage | list[DetectedLanguage] | None = None  # noqa: N815


class LibreLanguage(BaseModel):
    code: str
    name: str
    targets: list[str]


# /translate reads either body, as LibreTranslate does; its client libraries send forms
LIBRE_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": LibreRequest.model_json_schema()},
    FORM: {"schema": LibreRequest.model_json_schema()}}}}


class ErrorBody(BaseModel):
    error: str
    field: str | None = Field(None, description="the request field over its limit")
    limit: Any = Field(None, description="the limit it broke")


ERRORS = {status: {"model": ErrorBody} for status in (400, 401, 408, 413, 422, 429, 500,
                                                        503)}


class Problem(Exception):
    """An answer other than 200: status, message, and the field and limit it concerns."""

    def __init__(self, status: int, error: str, *, field: str | None = None,
                 limit: Any = None, headers: dict[str, str] | None = None):
        super().__init__(error)
        self.status, self.error, self.field, self.limit = status, error, field, limit
        self.headers = headers

    def response(self) -> JSONResponse:
        body = {"error": self.error}
        if self.field is not None:
            body |= {"field": self.field, "limit": self.limit}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


def create_app(translator: Translator, cfg: ServeConfig, *,
               languages: tuple[str, str] | None = None, warm_up: bool = True,
               batcher: Batcher | None = None) -> FastAPI:
    """The app serving `translator` under the limits of `cfg`, through `batcher` (whose worker
    the caller runs), else one with a worker thread of its own. Ready once a warm-up
    translation succeeded; `app.state.draining = True` makes /ready answer 503."""
    metrics = ServerMetrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.batcher = batcher or Batcher(translator, cfg)
        app.state.batcher.observe = metrics.observe_round
        metrics.queue_depth.set_function(lambda: app.state.batcher.depth)
        if warm_up:
            await _translate(None, ["warm up"], request_settings(translator.decode_cfg, cfg),
                             batcher=app.state.batcher)
        app.state.ready = True
        log.info("ready: serving on %s:%d", cfg.host, cfg.port)
        yield
        app.state.draining = True
        await asyncio.to_thread(app.state.batcher.close, cfg.grace_seconds)

    # /docs and /redoc from files fastapi-offline ships, not a CDN: they work offline
    app = FastAPIOffline(title="transformer-mt", lifespan=lifespan,
                  description="Translation with a Transformer of 'Attention Is All You Need'. "
                              "Requests from all clients are batched together.")
    app.state.ready, app.state.draining = False, False
    request_ids = itertools.count(1)
    if cfg.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=cfg.cors_origins.split(","),
                           allow_methods=["GET", "POST"], allow_headers=["*"])

    # inner to outer: the guard reads the body within its limit and checks the key, then the
    # log (every request, 500s included, counted and logged with its number)
    app.add_middleware(Guard, cfg=cfg)

    @app.middleware("http")
    async def log_and_count(request: Request, call_next):
        start, number = time.monotonic(), next(request_ids)
        try:
            response = await call_next(request)
        except Exception:  # a bug of ours: JSON that names the request its log line names
            log.exception("request %d: %s %s failed", number, request.method, request.url.path)
            response = JSONResponse({"error": f"internal error (request {number}; the "
                                     "server's log has the details)"}, status_code=500)
        seconds = time.monotonic() - start
        path = request.url.path if request.url.path in routes else "other"  # bounded labels
        metrics.observe_request(path, response.status_code, seconds)
        work = getattr(request.state, "work", None)
        log.info("request %d: %s %s -> %d in %.1f ms%s", number, request.method,
                 request.url.path, response.status_code, 1000 * seconds,
                 "" if work is None else ", {} sentences, {} tokens, queue {:.1f} ms, decode "
                 "{:.1f} ms".format(*work))
        return response

    @app.exception_handler(Problem)
    async def problem_handler(_request: Request, problem: Problem):
        return problem.response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error_handler(_request: Request, err: StarletteHTTPException):
        body = {"error": str(err.detail)}
        if err.status_code == 400:  # FastAPI's only one: a body it cannot decode
            body |= {"field": "body", "limit": None}
        return JSONResponse(body, status_code=err.status_code,
                            headers=getattr(err, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid_handler(_request: Request, err: RequestValidationError):
        first = err.errors()[0]
        # a body that is not JSON is located at ("body", character offset)
        field = "" if first["type"] == "json_invalid" else \
            ".".join(str(part) for part in first["loc"] if part != "body")
        field = field or "body"  # not a JSON object at all
        return JSONResponse({"error": first["msg"], "field": field, "limit": None},
                            status_code=422)

    @app.post("/v1/translate", response_model=TranslateResponse, responses=ERRORS)
    async def translate(body: TranslateRequest, request: Request) -> TranslateResponse:
        start = time.monotonic()
        sentences = [body.text] if isinstance(body.text, str) else body.text
        settings = checked_settings(body, translator, cfg)
        align = checked_alignment(body, translator)
        results = await _translate(request, sentences, settings, align=align)
        return TranslateResponse(
            translations=[translation_out(r, settings.n_best, translator, s, align)
                          for r, s in zip(results, sentences, strict=True)],
            milliseconds=1000 * (time.monotonic() - start))

    @app.post("/translate", response_model=LibreResponse, response_model_exclude_none=True,
              responses=ERRORS, openapi_extra=LIBRE_BODY)
    async def libretranslate(request: Request) -> LibreResponse:
        """LibreTranslate's /translate: q, source, target, format text, as JSON or a form."""
        body = libre_request(request.headers.get("content-type", ""), await request.body())
        check_libre(body, languages)
        sentences = [body.q] if isinstance(body.q, str) else body.q
        results = await _translate(request, sentences,
                                   request_settings(translator.decode_cfg, cfg), field="q")
        texts = [r[0].text if r else "" for r in results]
        detected = None
        if body.source == "auto" and languages is not None:
            one = DetectedLanguage(language=languages[0], confidence=100.0)
            detected = one if isinstance(body.q, str) else [one] * len(texts)
        return LibreResponse(translatedText=texts[0] if isinstance(body.q, str) else texts,
                             detectedLanguage=detected)

    @app.get("/languages", response_model=list[LibreLanguage])
    async def libre_languages() -> list[LibreLanguage]:
        """LibreTranslate's /languages: the model's source language with its one target, and
        the target; [] where the model's languages are not known."""
        if languages is None:
            return []
        source, target = languages
        return [LibreLanguage(code=source, name=language_name(source), targets=[target]),
                LibreLanguage(code=target, name=language_name(target), targets=[])]

    @app.get("/health", response_model=ReadyBody)
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/ready", responses={503: {"model": ReadyBody}}, response_model=ReadyBody)
    async def ready(request: Request):
        if request.app.state.draining or not request.app.state.ready:
            status = "draining" if request.app.state.draining else "starting"
            return JSONResponse({"status": status}, status_code=503)
        return {"status": "ready"}

    @app.get("/v1/models")
    async def models() -> dict:
        model = translator.model
        members = getattr(model, "members", [model])
        with torch.device("meta"):  # the trained shape's count: an int8 copy holds buffers
            parameters = sum(count_parameters(Transformer(m.cfg))[0] for m in members)
        return {"vocab_size": len(translator.vocab), "languages": list(languages or []),
                "parameters": parameters,
                "ensemble": len(members), "model": config_to_dict(model.cfg),
                "decode": config_to_dict(translator.decode_cfg),
                "limits": {k: v for k, v in config_to_dict(cfg).items()
                           if k.startswith("max_")}}

    @app.get("/metrics", response_class=PlainTextResponse)
    async def prometheus() -> Response:
        """Prometheus' text format."""
        return PlainTextResponse(metrics.render(), media_type=metrics.content_type)

    @app.get("/", response_class=HTMLResponse)
    async def page() -> str:
        return resources.files("transformer_mt.serving").joinpath("static/index.html") \
            .read_text(encoding="utf-8")

    async def _translate(request: Request | None, sentences: list[str], settings, *,
                         batcher: Batcher | None = None,
                         align: AlignmentChoice | None = None, field: str = "text") -> list:
        """n-best lists of `sentences` in order; "" for empty or blank ones, without the
        model. Records (sentences, tokens, queue ms, decode ms) on request.state.work."""
        check_sentences(sentences, cfg, field)
        sources, where = [], []
        for i, sentence in enumerate(sentences):
            try:
                ids = translator.encode_source(sentence, i, settings)
            except ValueError as err:
                raise Problem(422, str(err), field=f"{field}[{i}]",
                              limit=translator.model.cfg.max_positions
                              - settings.max_length_offset) from None
            if not has_no_pieces(ids):
                sources.append(ids)
                where.append(i)
        check_work(sources, settings, cfg)
        results: list[list[Translation]] = [[] for _ in sentences]
        waited = decoded = 0.0
        if sources:
            batcher = batcher or request.app.state.batcher
            try:
                futures = batcher.submit(sources, settings, align)
            except QueueFull as err:
                raise Problem(429, str(err), headers={"Retry-After": "1"}) from None
            except Draining as err:
                raise Problem(503, str(err)) from None
            answers = await answered(request, futures, batcher, metrics)
            for i, (nbest, queue_s, decode_s) in zip(where, answers, strict=True):
                results[i] = nbest
                waited, decoded = max(waited, queue_s), max(decoded, decode_s)
        if request is not None:
            request.state.work = (len(sentences), sum(map(len, sources)), 1000 * waited,
                                  1000 * decoded)
        return results

    routes = {route.path for route in app.routes}  # the metrics' path labels
    return app


async def answered(request: Request | None, futures: list[asyncio.Future], batcher: Batcher,
                   metrics: ServerMetrics) -> list[tuple]:
    """The answers of a request's sentences, once all are decoded; if its client disconnects
    first, the batcher drops its sentences (counted) and the request ends with 499."""
    answers = asyncio.ensure_future(gather(futures))
    if request is None:  # the warm-up
        return await answers
    left = asyncio.ensure_future(disconnected(request))
    try:
        await asyncio.wait({answers, left}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        left.cancel()
    if answers.done():
        return answers.result()
    metrics.abandoned.inc(batcher.abandon(futures))  # before cancel() settles the futures
    answers.cancel()
    raise Problem(499, "the client closed the connection before its answer")


async def disconnected(request: Request) -> None:
    """Returns once the client has closed the connection (its body is read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def gather(futures: list[asyncio.Future]) -> list[tuple]:
    try:
        return await asyncio.gather(*futures)
    except DecodingFailed as err:
        raise Problem(500, str(err)) from None
    except QueueTimeout as err:
        raise Problem(503, str(err), headers={"Retry-After": "5"}) from None


def check_work(sources: list[list[int]], settings: DecodeConfig, cfg: ServeConfig) -> None:
    """413 where the request asks for more than serve.max_request_work: beam_size x each
    sentence's output length cap, summed."""
    beam = settings.beam_size if settings.strategy == "beam" else 1
    caps = (len(ids) - 1 + settings.max_length_offset for ids in sources)
    work = beam * sum(min(cap, settings.max_length) if settings.max_length else cap
                      for cap in caps)
    if work > cfg.max_request_work:
        raise Problem(413, f"the request asks for {work} hypothesis tokens (beam_size x each "
                      "sentence's output length cap, summed); send fewer sentences or a "
                      "smaller beam_size or max_length_offset", field="text",
                      limit=cfg.max_request_work)


def translation_out(nbest: list[Translation], n_best: int, translator: Translator,
                    sentence: str, align: AlignmentChoice | None) -> TranslationOut:
    layers = translator.model.cfg.n_decoder_layers
    if not nbest:  # an empty input
        empty = AlignmentOut(layer=align.layer, layers=layers, source=[], target=[],
                             weights=[], pairs=[]) if align else None
        return TranslationOut(text="", score=None, n_best=[] if n_best > 1 else None,
                              alignment=empty)
    best = nbest[0]
    alignment = None
    if best.alignment is not None:
        vocab = translator.vocab
        rows = best.alignment
        alignment = AlignmentOut(
            layer=align.layer, layers=layers,
            source=[vocab.piece(i) for i in vocab.encode(sentence)],
            target=[vocab.piece(i, "target") for i in best.tokens],
            weights=[[round(w, 5) for w in row] for row in rows.tolist()],
            pairs=[list(p) for p in hard_alignment(rows)])
    return TranslationOut(text=best.text, score=best.score, n_best=[
        Hypothesis(text=t.text, score=t.score) for t in nbest] if n_best > 1 else None,
        alignment=alignment)


def checked_alignment(body: TranslateRequest, translator: Translator
                      ) -> AlignmentChoice | None:
    """The alignment asked for (the default layer, all heads), or 422 where this model gives
    none."""
    if not body.alignment:
        return None
    try:
        return translator.alignment_choice(AlignmentChoice())
    except ValueError as err:
        raise Problem(422, str(err), field="alignment") from None


def checked_settings(body: TranslateRequest, translator: Translator, cfg: ServeConfig):
    """The request's decoding settings within the server's limits (422 naming the field)."""
    if body.beam_size is not None and body.beam_size > cfg.max_beam:
        raise Problem(422, f"beam_size {body.beam_size} exceeds the server's limit",
                      field="beam_size", limit=cfg.max_beam)
    if body.max_length_offset is not None and body.max_length_offset > cfg.max_offset:
        raise Problem(422, f"max_length_offset {body.max_length_offset} exceeds the server's "
                      "limit", field="max_length_offset", limit=cfg.max_offset)
    beam = body.beam_size or translator.decode_cfg.beam_size
    if body.n_best is not None and body.n_best > beam:
        raise Problem(422, f"n_best {body.n_best} exceeds beam_size {beam}", field="n_best",
                      limit=beam)
    try:
        return request_settings(translator.decode_cfg, cfg, beam_size=body.beam_size,
                                n_best=body.n_best, length_penalty=body.alpha,
                                max_length_offset=body.max_length_offset)
    except ValueError as err:
        raise Problem(422, str(err)) from None


def check_sentences(sentences: list[str], cfg: ServeConfig, field: str) -> None:
    """413 or 422 naming `field` (the request's list of sentences) or its sentence `field[i]`
    where there are too many sentences, one is too long, or one is not Unicode text."""
    if len(sentences) > cfg.max_sentences:
        raise Problem(413, f"{len(sentences)} sentences in one request", field=field,
                      limit=cfg.max_sentences)
    for i, sentence in enumerate(sentences):
        if len(sentence) > cfg.max_chars:
            raise Problem(422, f"sentence {i + 1} has {len(sentence)} characters",
                          field=f"{field}[{i}]", limit=cfg.max_chars)
        try:
            sentence.encode("utf-8")
        except UnicodeEncodeError as err:  # JSON may escape a lone UTF-16 surrogate: \ud800
            raise Problem(422, f"sentence {i + 1} is not Unicode text: a lone surrogate "
                          f"{sentence[err.start]!r} at character {err.start + 1}",
                          field=f"{field}[{i}]") from None


def libre_request(content_type: str, body: bytes) -> LibreRequest:
    """A LibreTranslate request from its JSON or form body; 422 naming the field (or the
    body) where it is not one."""
    if content_type.split(";")[0].strip().lower() == FORM:
        data: Any = body_fields(content_type, body)
    else:
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            raise Problem(422, "the body is neither JSON nor a form "
                          f"({FORM})", field="body") from None
    try:
        return LibreRequest.model_validate(data)
    except ValidationError as err:
        raise RequestValidationError(err.errors()) from None


def language_name(code: str) -> str:
    """English's name for a language code ("de": "German"), as LibreTranslate's /languages
    gives it; the code itself where it names no language known to langcodes."""
    import langcodes  # here, not at the top: a 90 ms import that only /languages needs

    name = langcodes.Language.get(code).display_name()
    return code if name.startswith("Unknown language") else name


def check_libre(body: LibreRequest, languages: tuple[str, str] | None) -> None:
    if body.format != "text":
        raise Problem(400, f"format {body.format!r} is not supported; only 'text'",
                      field="format", limit="text")
    if languages is None:
        if body.source != "auto" or body.target is not None:
            named = "source" if body.source != "auto" else "target"
            raise Problem(400, "this model does not record its languages (its data was "
                          "prepared from files without language suffixes): serve "
                          "--languages SRC-TGT names them", field=named)
        return
    source, target = languages
    if body.source not in ("auto", source):
        raise Problem(400, f"this model translates from {source!r}, not {body.source!r}",
                      field="source", limit=source)
    if body.target is not None and body.target != target:
        raise Problem(400, f"this model translates into {target!r}, not {body.target!r}",
                      field="target", limit=target)


class Guard:
    """ASGI middleware in front of the handlers: a POST's body is read whole, but never more
    than serve.max_body_bytes of it (413 by its declared length before reading, else as soon
    as what arrived, chunked or streamed, goes past), and with serve.api_key the key is checked
    (`key_given`); the handlers then read the same bytes."""

    def __init__(self, app, cfg: ServeConfig):
        self.app, self.cfg = app, cfg

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request = Request(scope)
        body = b""
        try:
            if request.method == "POST":
                body = await timely_body(request, receive, self.cfg)
                if body is None:  # the client went away while sending
                    return None
            path = request.url.path
            if self.cfg.api_key and (path.startswith("/v1/") or path == "/translate") \
                    and not key_given(request, body, self.cfg.api_key):
                raise Problem(401, "missing or wrong API key (Authorization: Bearer KEY)")
        except Problem as problem:
            return await problem.response()(scope, receive, send)
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()  # what follows the body: a disconnect
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, replay, send)


async def timely_body(request: Request, receive, cfg: ServeConfig) -> bytes | None:
    """`bounded_body` within serve.read_timeout_seconds (408 beyond: a client that trickles
    its body holds a connection, not the server)."""
    try:
        return await asyncio.wait_for(bounded_body(request, receive, cfg.max_body_bytes),
                                      cfg.read_timeout_seconds)
    except asyncio.TimeoutError:
        raise Problem(408, f"the body did not arrive within {cfg.read_timeout_seconds:g} s "
                      "(serve.read_timeout_seconds)", field="body",
                      limit=cfg.read_timeout_seconds, headers={"Connection": "close"}) from None


async def bounded_body(request: Request, receive, limit: int) -> bytes | None:
    """The request's body, or a 413 Problem once it is declared or found to be over `limit`
    bytes; None if the client disconnected before sending it all."""
    declared = request.headers.get("content-length", "")
    too_large = Problem(413, f"request body over {limit} bytes", field="body", limit=limit,
                        headers={"Connection": "close"})  # the rest is never read
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def key_given(request: Request, body: bytes, key: str) -> bool:
    """Whether the request carries serve.api_key: `Authorization: Bearer KEY` (the scheme in
    any case, as HTTP's are), or on the LibreTranslate endpoint its `api_key` field, in a JSON
    or form body. A body that cannot be read has no key."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode()):
        return True
    if request.url.path != "/translate":
        return False
    given = body_fields(request.headers.get("content-type", ""), body).get("api_key")
    return isinstance(given, str) and hmac.compare_digest(given.encode(), key.encode())


def body_fields(content_type: str, body: bytes) -> dict:
    """The fields of a JSON object or form-encoded body; {} for anything else, and for a
    body that does not parse."""
    if content_type.split(";")[0].strip().lower() == FORM:
        try:
            return dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
        except ValueError:
            return {}
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than Python's stack
        return {}
    return data if isinstance(data, dict) else {}
