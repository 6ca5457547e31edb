"""The HTTP app (FastAPI): the endpoints of `routes` behind two middlewares, the guard (a
body read within its size and time limits, the API key) and the log (every request counted
and logged with its number, a failure of ours a JSON 500), every error answered as JSON
(`api.Problem`). Ready once a warm-up translation succeeded."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import logging
import time

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..config import ServeConfig
from ..inference.translator import Translator
from .api import Problem, body_fields
from .batcher import Batcher
from .metrics import ServerMetrics
from .routes import Served, router, translate_sentences

log = logging.getLogger(__name__)


def create_app(translator: Translator, cfg: ServeConfig, *,
               languages: tuple[str, str] | None = None, warm_up: bool = True,
               batcher: Batcher | None = None) -> FastAPI:
    """The app serving `translator` under the limits of `cfg`, through `batcher` (whose worker
    the caller runs), else one with a worker thread of its own. Ready once a warm-up
    translation succeeded; `app.state.draining = True` makes /ready answer 503."""
    metrics = ServerMetrics()
    it = Served(translator, cfg, languages, metrics)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        it.batcher = batcher or Batcher(translator, cfg)
        it.batcher.observe = metrics.observe_round
        metrics.queue_depth.set_function(lambda: it.batcher.depth)
        if warm_up:
            await translate_sentences(it, None, ["warm up"], translator.decode_cfg)
        app.state.ready = True
        log.info("ready: serving on %s:%d", cfg.host, cfg.port)
        yield
        app.state.draining = True
        await asyncio.to_thread(it.batcher.close, cfg.grace_seconds)

    # /docs and /redoc from files fastapi-offline ships, not a CDN: they work offline
    app = FastAPIOffline(title="transformer-mt", lifespan=lifespan,
                  description="Translation with a Transformer of 'Attention Is All You Need'. "
                              "Requests from all clients are batched together.")
    app.state.served, app.state.ready, app.state.draining = it, False, False
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

    app.include_router(router)
    # the metrics' path labels: the endpoints' and FastAPI's own (/docs, /openapi.json)
    routes = {route.path for route in [*router.routes, *app.routes] if hasattr(route, "path")}
    return app


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
