"""Running the app under uvicorn, with a graceful stop: on SIGTERM or SIGINT /ready answers
503, no new connection is accepted, and queued and running requests finish (within
serve.grace_seconds) before the process exits 0. uvicorn's event loop runs in a thread and
the batcher decodes on the main thread (batcher.py says why)."""

from __future__ import annotations

import contextlib
import functools
import json
import signal
import socket
import threading

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..config import ServeConfig
from ..inference.translator import Translator
from .app import create_app
from .batcher import Batcher


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


class GuardedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with two changes. Its own answer to a request it cannot
    parse (a bad request line, a malformed header) is JSON as the app's errors are, not plain
    text; such a request never reaches the app, so the metrics do not count it. And a
    connection must send a request's head within `read_timeout` seconds of opening or of its
    previous answer, else it is closed: uvicorn times out only connections that sent nothing
    since their last answer, so a client could hold one with a single byte, or before its
    first request."""

    def __init__(self, *args, read_timeout: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.read_timeout, self.head_timer = read_timeout, None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._await_head()

    def handle_events(self) -> None:
        super().handle_events()
        if self.head_timer is not None and self.conn.their_state is not h11.IDLE:
            self.head_timer.cancel()  # the head has arrived
            self.head_timer = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._await_head()

    def connection_lost(self, exc) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
        self.head_timer = self.loop.call_later(self.read_timeout, self._no_head)

    def _no_head(self) -> None:
        self.head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()

    def send_400_response(self, msg: str) -> None:
        body = json.dumps({"error": msg}).encode()
        headers = [(b"content-type", b"application/json"), (b"connection", b"close"),
                   (b"content-length", str(len(body)).encode())]
        for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
                      h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        self.transport.close()


def serve(translator: Translator, cfg: ServeConfig, *,
          languages: tuple[str, str] | None = None) -> None:
    """Serve `translator` until SIGTERM or SIGINT, then drain and return. The address is
    bound first, so that a busy port is an OSError before anything starts or says "ready"."""
    sock = listening_socket(cfg.host, cfg.port)
    batcher = Batcher(translator, cfg, thread=False)
    app = create_app(translator, cfg, languages=languages, batcher=batcher)
    config = uvicorn.Config(app, host=cfg.host, port=cfg.port, log_level="info",
                            http=functools.partial(GuardedH11Protocol,
                                                   read_timeout=cfg.read_timeout_seconds),
                            access_log=False,  # the app logs one line per request
                            timeout_graceful_shutdown=cfg.grace_seconds)
    server = DrainingServer(config)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, server.handle_exit)

    def run_loop() -> None:
        try:
            server.run(sockets=[sock])
        finally:  # also where uvicorn failed to start: the main thread stops decoding
            batcher.close(timeout=0)

    loop = threading.Thread(target=run_loop, name="uvicorn")
    loop.start()
    batcher.run()  # until the app's shutdown closes it
    loop.join()
    if not server.started:
        raise OSError(f"the server did not start on {cfg.host}:{cfg.port} (see the log)")


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port (an IPv6 host where it has a colon), as uvicorn binds
    one; an OSError naming the address where it cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {err.strerror} (serve --port picks "
                      "another)") from None
    sock.set_inheritable(True)
    return sock
