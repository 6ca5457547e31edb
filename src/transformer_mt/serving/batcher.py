"""Dynamic batching across clients: the sentences of concurrent requests wait in one queue and
are decoded together, in batches bounded by a token budget and a maximum wait.

Each request is split into its sentences. One worker thread takes, request by request in turn
(round robin, so that one long request cannot starve short ones), the sentences that share the
first waiting sentence's decoding settings, until the batch holds `max_batch_tokens` source
tokens or the decoding batch size, waiting at most `max_wait_ms` for more to arrive. Results go
back to each request's asyncio futures. A batch whose decoding fails is decoded again one
request at a time, so that only the request that fails gets the error.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..config import DecodeConfig, ServeConfig
from ..inference.translator import Translation, Translator

log = logging.getLogger(__name__)


class QueueFull(RuntimeError):
    """More sentences wait than serve.max_queue allows."""


class Draining(RuntimeError):
    """The batcher is shutting down and accepts no new work."""


@dataclass
class Job:
    """One sentence of a request."""

    request: int
    ids: list[int]  # source ids + EOS
    cfg: DecodeConfig
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    enqueued: float = field(default_factory=time.monotonic)

    def resolve(self, result: list[Translation] | BaseException, *, started: float) -> None:
        """Hand the n-best list (or the error) to the request, as (n-best, seconds waited,
        seconds decoding) for its log line."""
        if isinstance(result, BaseException):
            setter, value = self.future.set_exception, result
        else:
            now = time.monotonic()
            setter, value = self.future.set_result, (result, started - self.enqueued,
                                                     now - started)
        self.loop.call_soon_threadsafe(_set_unless_done, self.future, setter, value)


def _set_unless_done(future: asyncio.Future, setter: Callable, result) -> None:
    if not future.done():  # the client may have gone away
        setter(result)


class Batcher:
    """The queue and its worker. `observe(batch_sentences, batch_tokens, queue_waits,
    decode_seconds)` is called after each batch (the server's metrics). With `thread` the
    worker is a thread of its own; without, the caller runs `run()`: `transformer-mt serve`
    decodes on the main thread, where torch's CPU kernels ran 1.7x faster than in another
    thread (2-core Zen 4, benchmarks/results/serve-batching)."""

    def __init__(self, translator: Translator, cfg: ServeConfig, *, thread: bool = True,
                 observe: Callable[[int, int, list[float], float], None] | None = None):
        self.translator, self.cfg, self.observe = translator, cfg, observe
        self.queues: collections.OrderedDict[int, collections.deque[Job]] = \
            collections.OrderedDict()  # request id -> its waiting sentences, in arrival order
        self.waiting = 0
        self.lock = threading.Condition()
        self.closing = False
        self.request_ids = itertools.count()
        self.stopped = threading.Event()
        self.worker = threading.Thread(target=self.run, name="batcher", daemon=True) \
            if thread else None
        if self.worker is not None:
            self.worker.start()

    def submit(self, sources: list[list[int]], cfg: DecodeConfig) -> list[asyncio.Future]:
        """Queue one request's encoded sentences; futures of their n-best lists, in order."""
        loop = asyncio.get_running_loop()
        with self.lock:
            if self.closing:
                raise Draining("the server is shutting down")
            if self.waiting + len(sources) > self.cfg.max_queue:
                raise QueueFull(f"{self.waiting} sentences are waiting; serve.max_queue is "
                                f"{self.cfg.max_queue}")
            request = next(self.request_ids)
            jobs = [Job(request, ids, cfg, loop.create_future(), loop) for ids in sources]
            self.queues[request] = collections.deque(jobs)
            self.waiting += len(jobs)
            self.lock.notify()
        return [job.future for job in jobs]

    @property
    def depth(self) -> int:
        return self.waiting

    def close(self, timeout: float | None = None) -> None:
        """Accept nothing more; the worker decodes what is queued, then stops (waited for up
        to `timeout` seconds)."""
        with self.lock:
            self.closing = True
            self.lock.notify()
        self.stopped.wait(timeout)

    def run(self) -> None:
        """Decode batches until closed and empty."""
        try:
            while (batch := self._next_batch()) is not None:
                self._decode(batch)
        finally:
            self.stopped.set()

    def _next_batch(self) -> list[Job] | None:
        """Wait for work, then up to max_wait_ms for a batch to fill; None once closed and
        empty."""
        with self.lock:
            while not self.waiting:
                if self.closing:
                    return None
                self.lock.wait()
            deadline = time.monotonic() + self.cfg.max_wait_ms / 1000
            while not self.closing and self._fill(take=False) is None and \
                    (left := deadline - time.monotonic()) > 0:
                self.lock.wait(left)
            batch = self._fill(take=True)
            self.waiting -= len(batch)
            return batch

    def _fill(self, *, take: bool) -> list[Job] | None:
        """The next batch, round robin over the requests, of sentences sharing the first
        waiting one's settings. Without `take`: None unless it is full already."""
        first = next(iter(self.queues.values()))[0]
        cfg, budget = first.cfg, self.cfg.max_batch_tokens
        batch: list[Job] = []
        tokens = 0
        cursors = {r: 0 for r in self.queues}
        full = False
        while not full:
            progressed = False
            for request, queue in self.queues.items():
                i = cursors[request]
                if i >= len(queue) or queue[i].cfg != cfg:
                    continue
                job = queue[i]
                if batch and (tokens + len(job.ids) > budget or len(batch) >= cfg.batch_size):
                    full = True
                    break
                batch.append(job)
                tokens += len(job.ids)
                cursors[request] = i + 1
                progressed = True
            if not progressed:
                break
        if not take:
            return batch if full else None
        for request, n in cursors.items():
            for _ in range(n):
                self.queues[request].popleft()
            if not self.queues[request]:
                del self.queues[request]
        return batch

    def _decode(self, batch: list[Job]) -> None:
        start = time.monotonic()
        waits = [start - job.enqueued for job in batch]
        try:
            results = self.translator.translate_ids([job.ids for job in batch], batch[0].cfg)
        except Exception:  # noqa: BLE001 - isolate the request that fails
            log.exception("a batch of %d sentences failed; decoding its requests one by one",
                          len(batch))
            self._decode_each_request(batch, start)
        else:
            for job, result in zip(batch, results, strict=True):
                job.resolve(result, started=start)
        if self.observe is not None:
            self.observe(len(batch), sum(len(j.ids) for j in batch), waits,
                         time.monotonic() - start)

    def _decode_each_request(self, batch: list[Job], start: float) -> None:
        by_request: dict[int, list[Job]] = {}
        for job in batch:
            by_request.setdefault(job.request, []).append(job)
        for jobs in by_request.values():
            try:
                results = self.translator.translate_ids([j.ids for j in jobs], jobs[0].cfg)
            except Exception as err:  # noqa: BLE001 - the request's error, not the server's
                for job in jobs:
                    job.resolve(DecodingFailed(f"decoding failed: {type(err).__name__}: {err}"),
                                started=start)
            else:
                for job, result in zip(jobs, results, strict=True):
                    job.resolve(result, started=start)


class DecodingFailed(RuntimeError):
    """Decoding a request's sentences raised; the message says what."""


def request_settings(base: DecodeConfig, cfg: ServeConfig, **asked) -> DecodeConfig:
    """The decoding settings of one request: the model's, with what it asked for (None: not
    asked), and the server's absolute output cap."""
    asked = {k: v for k, v in asked.items() if v is not None}
    capped = min(base.max_length, cfg.max_output_tokens) if base.max_length else \
        cfg.max_output_tokens
    return dataclasses.replace(base, **asked, max_length=capped)
