"""The endpoints: each validates its request against the limits of `ServeConfig`, hands the
sentences to the batcher, and formats the answer. `POST /v1/translate`, the
LibreTranslate-compatible `POST /translate` and `GET /languages`, `GET /health`, `/ready`,
`/v1/models`, `/metrics` (Prometheus), and the web page at `/`. What they serve (`Served`) is
in `app.state.served`."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from importlib import resources

import torch
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

from ..config import DecodeConfig, ServeConfig, config_to_dict
from ..inference.alignment import AlignmentChoice, hard_alignment
from ..inference.search import output_length_caps
from ..inference.translator import Translation, Translator, has_no_pieces
from ..model.stats import count_parameters
from ..model.transformer import Transformer
from .api import (
    ERRORS,
    LIBRE_BODY,
    AlignmentOut,
    DetectedLanguage,
    Hypothesis,
    LibreLanguage,
    LibreRequest,
    LibreResponse,
    Problem,
    ReadyBody,
    TranslateRequest,
    TranslateResponse,
    TranslationOut,
    libre_request,
)
from .batcher import (
    Batcher,
    DecodingFailed,
    Draining,
    QueueFull,
    QueueTimeout,
)
from .metrics import ServerMetrics


@dataclass
class Served:
    """What the endpoints serve: the translator under the server's limits, the model's
    languages (None: not known), the metrics, and the batcher (once the app has started)."""

    translator: Translator
    cfg: ServeConfig
    languages: tuple[str, str] | None
    metrics: ServerMetrics
    batcher: Batcher | None = None


router = APIRouter()


def served(request: Request) -> Served:
    return request.app.state.served


@router.post("/v1/translate", response_model=TranslateResponse, responses=ERRORS)
async def translate(body: TranslateRequest, request: Request) -> TranslateResponse:
    start, it = time.monotonic(), served(request)
    sentences = [body.text] if isinstance(body.text, str) else body.text
    settings = checked_settings(body, it.translator, it.cfg)
    align = checked_alignment(body, it.translator)
    results = await translate_sentences(it, request, sentences, settings, align=align)
    return TranslateResponse(
        translations=[translation_out(r, settings.n_best, it.translator, s, align)
                      for r, s in zip(results, sentences, strict=True)],
        milliseconds=1000 * (time.monotonic() - start))


@router.post("/translate", response_model=LibreResponse, response_model_exclude_none=True,
             responses=ERRORS, openapi_extra=LIBRE_BODY)
async def libretranslate(request: Request) -> LibreResponse:
    """LibreTranslate's /translate: q, source, target, format text, as JSON or a form."""
    it = served(request)
    body = libre_request(request.headers.get("content-type", ""), await request.body())
    check_libre(body, it.languages)
    sentences = [body.q] if isinstance(body.q, str) else body.q
    results = await translate_sentences(
        it, request, sentences, it.translator.decode_cfg, field="q")
    texts = [r[0].text if r else "" for r in results]
    detected = None
    if body.source == "auto" and it.languages is not None:
        one = DetectedLanguage(language=it.languages[0], confidence=100.0)
        detected = one if isinstance(body.q, str) else [one] * len(texts)
    return LibreResponse(translatedText=texts[0] if isinstance(body.q, str) else texts,
                         detectedLanguage=detected)


@router.get("/languages", response_model=list[LibreLanguage])
async def libre_languages(request: Request) -> list[LibreLanguage]:
    """LibreTranslate's /languages: the model's source language with its one target, and
    the target; [] where the model's languages are not known."""
    if (languages := served(request).languages) is None:
        return []
    source, target = languages
    return [LibreLanguage(code=source, name=language_name(source), targets=[target]),
            LibreLanguage(code=target, name=language_name(target), targets=[])]


@router.get("/health", response_model=ReadyBody)
async def health() -> dict:
    return {"status": "ok"}


@router.get("/ready", responses={503: {"model": ReadyBody}}, response_model=ReadyBody)
async def ready(request: Request):
    if request.app.state.draining or not request.app.state.ready:
        status = "draining" if request.app.state.draining else "starting"
        return JSONResponse({"status": status}, status_code=503)
    return {"status": "ready"}


@router.get("/v1/models")
async def models(request: Request) -> dict:
    it = served(request)
    model = it.translator.model
    members = getattr(model, "members", [model])
    with torch.device("meta"):  # the trained shape's count: an int8 copy holds buffers
        parameters = sum(count_parameters(Transformer(m.cfg))[0] for m in members)
    return {"vocab_size": len(it.translator.vocab), "languages": list(it.languages or []),
            "parameters": parameters,
            "ensemble": len(members), "model": config_to_dict(model.cfg),
            "decode": config_to_dict(it.translator.decode_cfg),
            "limits": {k: v for k, v in config_to_dict(it.cfg).items()
                       if k.startswith("max_")}}


@router.get("/metrics", response_class=PlainTextResponse)
async def prometheus(request: Request) -> Response:
    """Prometheus' text format."""
    metrics = served(request).metrics
    return PlainTextResponse(metrics.render(), media_type=metrics.content_type)


@router.get("/", response_class=HTMLResponse)
async def page() -> str:
    return resources.files("transformer_mt.serving").joinpath("static/index.html") \
        .read_text(encoding="utf-8")


async def translate_sentences(it: Served, request: Request | None, sentences: list[str],
                              settings: DecodeConfig, *, align: AlignmentChoice | None = None,
                              field: str = "text") -> list[list[Translation]]:
    """n-best lists of `sentences` in order ([] for empty or blank ones, without the model),
    within the server's limits (Problems naming `field`, the request's list of sentences).
    Records (sentences, tokens, queue ms, decode ms) on request.state.work; request None:
    the warm-up."""
    translator, cfg = it.translator, it.cfg
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
        try:
            futures = it.batcher.submit(sources, settings, align)
        except QueueFull as err:
            raise Problem(429, str(err), headers={"Retry-After": "1"}) from None
        except Draining as err:
            raise Problem(503, str(err)) from None
        answers = await answered(request, futures, it.batcher, it.metrics)
        for i, (nbest, queue_s, decode_s) in zip(where, answers, strict=True):
            results[i] = nbest
            waited, decoded = max(waited, queue_s), max(decoded, decode_s)
    if request is not None:
        request.state.work = (len(sentences), sum(map(len, sources)), 1000 * waited,
                              1000 * decoded)
    return results


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
    caps = output_length_caps(torch.tensor([len(ids) for ids in sources], dtype=torch.long),
                              settings)
    work = beam * int(caps.sum())
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
    asked = {"beam_size": body.beam_size, "n_best": body.n_best, "length_penalty": body.alpha,
             "max_length_offset": body.max_length_offset}
    try:  # the server's decode.max_length stays the absolute output cap
        return replace(translator.decode_cfg,
                       **{k: v for k, v in asked.items() if v is not None})
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
