"""The HTTP API's shapes: requests, answers and errors as the OpenAPI schema publishes them,
the `Problem` every handler raises for an answer other than 200, and reading a body that may be
JSON or a form."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

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
