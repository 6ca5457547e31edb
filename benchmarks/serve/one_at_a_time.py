"""A minimal one-request-at-a-time translation server over the same model, the baseline of
`load.py`: what OpenNMT-py's server does (each request decoded alone, under a lock), with the
same JSON shape as `transformer-mt serve`'s POST /v1/translate.

    python benchmarks/serve/one_at_a_time.py --model MODEL_DIR --port 8001
"""

from __future__ import annotations

import argparse
import threading

import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel

from transformer_mt import Translator


class Request(BaseModel):
    text: str | list[str]


def create_app(translator: Translator) -> FastAPI:
    app = FastAPI()
    lock = threading.Lock()

    @app.post("/v1/translate")
    def translate(body: Request) -> dict:  # a plain def: FastAPI runs it in a thread
        sentences = [body.text] if isinstance(body.text, str) else body.text
        with lock:
            texts = translator.translate(sentences)
        return {"translations": [{"text": t} for t in texts]}

    @app.get("/ready")
    def ready() -> dict:
        return {"status": "ready"}

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--port", type=int, default=8001)
    args = parser.parse_args()
    uvicorn.run(create_app(Translator.from_dir(args.model)), host="127.0.0.1", port=args.port,
                log_level="warning")


if __name__ == "__main__":
    main()
