"""Running the app under uvicorn, with a graceful stop: on SIGTERM or SIGINT /ready answers
503, no new connection is accepted, and queued and running requests finish (within
serve.grace_seconds) before the process exits 0."""

from __future__ import annotations

import contextlib
import signal
import threading

import uvicorn
from fastapi import FastAPI

from ..config import ServeConfig


class DrainingServer(uvicorn.Server):
    """uvicorn's server; its first exit signal also marks the app as draining, and the process
    exits 0 after a graceful stop (uvicorn raises the signal again once it has stopped, which
    would end the process with -SIGTERM)."""

    def handle_exit(self, sig, frame) -> None:
        self.config.app.state.draining = True
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self):
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit)
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def serve(app: FastAPI, cfg: ServeConfig) -> None:
    config = uvicorn.Config(app, host=cfg.host, port=cfg.port, log_level="info",
                            access_log=False,  # the app logs one line per request
                            timeout_graceful_shutdown=cfg.grace_seconds)
    DrainingServer(config).run()
