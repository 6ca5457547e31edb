"""`transformer-mt serve`: translations over HTTP, batched across clients."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from ..config import ConfigError, DecodeConfig, ServeConfig, serve_defaults
from ..interop import OURS_FILE
from .options import (
    add_config_options,
    add_model_options,
    given,
    open_translator,
    section_overrides,
)

log = logging.getLogger(__name__)

# decode settings that mean nothing to the server, and why
NOT_SERVED = {"workers": "the server decodes one batch at a time, the sentences of concurrent "
                         "requests together; decode.workers is for translate's files"}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "serve", help="serve translations over HTTP (an API, metrics and a web page)",
        description="Load a model (or several, an ensemble) once and serve it: POST "
                    "/v1/translate, the LibreTranslate-compatible POST /translate, GET /health, "
                    "/ready, /v1/models, /metrics (Prometheus) and a web page at /. Sentences "
                    "of concurrent requests are decoded together. Listens on 127.0.0.1 unless "
                    "--host says otherwise; SIGTERM or SIGINT finish the queued work, then "
                    "exit. docs/serving.md documents the API and limits.")
    add_model_options(p)
    add_config_options(p, ServeConfig, "serve")
    add_config_options(p, DecodeConfig, "decode", defaults=serve_defaults(DecodeConfig),
                       exclude=NOT_SERVED)
    p.set_defaults(run=run, overrides=[])


# what prepare recorded for files whose languages it was not told, before it read them from
# the files' names: no languages
UNKNOWN_LANGUAGES = ("src", "tgt")


def model_languages(model_dir: Path, given: tuple[str, str] | None = None
                    ) -> tuple[str, str] | None:
    """(source, target): `given` (serve.languages) where set, else from a model directory's
    config.json (a CTranslate2 export's transformer_mt.json), where training recorded them;
    None where they are not known."""
    if given:
        return given
    from ..storage.model_dir import read_config_json
    from ..storage.names import CONFIG_FILE

    ours = model_dir / OURS_FILE
    config = read_config_json(ours if ours.exists() else model_dir / CONFIG_FILE)
    languages = config.get("languages")
    if not (isinstance(languages, list) and len(languages) == 2
            and all(isinstance(code, str) for code in languages)):
        return None
    return None if tuple(languages) == UNKNOWN_LANGUAGES else tuple(languages)


def run(args: argparse.Namespace) -> int:
    from ..serving.server import serve as run_server  # the serve extra: fastapi, uvicorn, ...

    decode = serve_defaults(DecodeConfig) | section_overrides(
        [o for o in args.overrides if o.startswith("decode.")], DecodeConfig, "decode") \
        | given(args, "decode")
    serve = ServeConfig(**section_overrides(
        [o for o in args.overrides if not o.startswith("decode.")], ServeConfig, "serve")
        | given(args, "serve"))
    for name in NOT_SERVED:
        if name in decode:
            raise ConfigError(f"decode.{name}: {NOT_SERVED[name]}")
    translator, model_dirs = open_translator(args, decode)
    run_server(translator, serve, languages=model_languages(model_dirs[0], serve.language_pair))
    return 0
