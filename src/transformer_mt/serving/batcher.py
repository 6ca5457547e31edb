"""Dynamic batching across clients: the sentences of concurrent requests wait in one queue and
are decoded together, in a search bounded by a token budget and the decoding batch size.

Each request is split into its sentences. One worker takes, request by request in turn (round
robin, so that one long request cannot starve short ones), sentences that share the first
waiting sentence's decoding settings, waiting at most `max_wait_ms` for more to arrive when it
is idle. With beam search of a Transformer or an Ensemble the batching is continuous: between
any two steps of the running search, waiting sentences with its settings join it, up to the
budget, and each leaves, answered, as soon as it is done, so the search stays full while clients
keep sending (a request with other settings waits for the running search to empty). Other
models and strategies decode batch by batch. If decoding fails, the sentences it held are
decoded again one request at a time, so that only the request that fails gets the error.
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
from ..inference.alignment import AlignmentChoice
from ..inference.translator import RunningSearch, Translation, Translator

log = logging.getLogger(__name__)


class QueueFull(RuntimeError):
    """More sentences wait than serve.max_queue allows."""


class Draining(RuntimeError):
    """The batcher is shutting down and accepts no new work."""


class QueueTimeout(RuntimeError):
    """A request's sentences waited serve.queue_timeout_seconds without all starting."""


@dataclass
class Job:
    """One sentence of a request."""

    request: int
    ids: list[int]  # source ids + EOS
    cfg: DecodeConfig
    align: AlignmentChoice | None  # add the best translation's alignment rows
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    enqueued: float = field(default_factory=time.monotonic)
    started: float = 0.0  # when its decoding began
    abandoned: bool = False  # its client went away: dropped at the worker's next step

    def resolve(self, result: list[Translation] | BaseException) -> None:
        """Hand the n-best list (or the error) to the request, as (n-best, seconds waited,
        seconds decoding) for its log line."""
        if isinstance(result, BaseException):
            setter, value = self.future.set_exception, result
        else:
            now = time.monotonic()
            setter, value = self.future.set_result, (result, self.started - self.enqueued,
                                                     now - self.started)
        self.loop.call_soon_threadsafe(_set_unless_done, self.future, setter, value)


def _set_unless_done(future: asyncio.Future, setter: Callable, result) -> None:
    if not future.done():  # the client may have gone away
        setter(result)


class Batcher:
    """The queue and its worker. `observe(sentences, finished, tokens, queue_waits,
    seconds)` is called after each round of decoding (the server's metrics): one step of a
    running search, or one batch, with the sentences it held, those it finished, and the
    source tokens and queue waits of those that began. With `thread` the worker is a thread
    of its own; without, the caller runs `run()`: `transformer-mt serve` decodes on the main
    thread, where torch's CPU kernels ran 1.7x faster than in another thread (2-core Zen 4,
    benchmarks/results/archive/serve-batching-static)."""

    def __init__(self, translator: Translator, cfg: ServeConfig, *, thread: bool = True,
                 observe: Callable[[int, int, int, list[float], float], None] | None = None):
        self.translator, self.cfg, self.observe = translator, cfg, observe
        self.queues: collections.OrderedDict[int, collections.deque[Job]] = \
            collections.OrderedDict()  # request id -> its waiting sentences, in arrival order
        self.waiting = 0
        self.lock = threading.Condition()
        self.closing = False
        self.request_ids = itertools.count()
        self.jobs: dict[int, Job] = {}  # id(job) -> job, those being decoded (lock held)
        self.stopped = threading.Event()
        self.worker = threading.Thread(target=self.run, name="batcher", daemon=True) \
            if thread else None
        if self.worker is not None:
            self.worker.start()

    def submit(self, sources: list[list[int]], cfg: DecodeConfig,
               align: AlignmentChoice | None = None) -> list[asyncio.Future]:
        """Queue one request's encoded sentences; futures of their n-best lists, in order
        (with `align`, the best translation of each carries its alignment rows)."""
        loop = asyncio.get_running_loop()
        with self.lock:
            if self.closing:
                raise Draining("the server is shutting down")
            if self.waiting + len(sources) > self.cfg.max_queue:
                raise QueueFull(f"{self.waiting} sentences are waiting; serve.max_queue is "
                                f"{self.cfg.max_queue}")
            request = next(self.request_ids)
            jobs = [Job(request, ids, cfg, align, loop.create_future(), loop) for ids in sources]
            self.queues[request] = collections.deque(jobs)
            self.waiting += len(jobs)
            self.lock.notify()
        return [job.future for job in jobs]

    def abandon(self, futures: list[asyncio.Future]) -> int:
        """A request's client went away: its waiting sentences leave the queue now, those
        being decoded leave the search at its next step. Returns how many it had not been
        answered for."""
        ours = {id(f) for f in futures}
        with self.lock:
            for request, queue in list(self.queues.items()):
                if any(id(job.future) in ours for job in queue):
                    self.waiting -= len(queue)
                    del self.queues[request]
            for job in self.jobs.values():
                if id(job.future) in ours:
                    job.abandoned = True
        return sum(not f.done() for f in futures)

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
        """Decode until closed and empty."""
        try:
            while (batch := self._next_batch()) is not None:
                if self.translator.joins(batch[0].cfg):
                    self._search(batch)
                else:
                    self._decode(batch)
        finally:
            self.stopped.set()

    def _next_batch(self) -> list[Job] | None:
        """Wait for work, then up to max_wait_ms for a batch to fill; None once closed and
        empty. Requests past serve.queue_timeout_seconds leave first (`_expire`), and those
        whose client went away meanwhile are gone (`abandon`)."""
        with self.lock:
            while True:
                self._expire()
                if not self.waiting:
                    if self.closing:
                        return None
                    self.lock.wait()
                    continue
                cfg = self._oldest_settings()
                deadline = time.monotonic() + self.cfg.max_wait_ms / 1000
                while not self.closing and not self._fill(cfg, cfg.batch_size,
                                                          self.cfg.max_batch_tokens,
                                                          take=False) \
                        and (left := deadline - time.monotonic()) > 0:
                    self.lock.wait(left)
                batch = self._fill(cfg, cfg.batch_size, self.cfg.max_batch_tokens, take=True,
                                   at_least_one=True)
                if batch:
                    return batch

    def _admit(self, cfg: DecodeConfig, sentences: int, tokens: int) -> list[Job]:
        """Waiting sentences with settings `cfg`, at most `sentences` of `tokens` source
        tokens, as long as the oldest waiting request has these settings."""
        with self.lock:
            self._expire()
            if not self.waiting or self._oldest_settings() != cfg:
                return []
            return self._fill(cfg, sentences, tokens, take=True)

    def _oldest_settings(self) -> DecodeConfig:
        """The decoding settings of the oldest waiting request (lock held, queue not empty)."""
        return next(iter(self.queues.values()))[0].cfg

    def _fill(self, cfg: DecodeConfig, sentences: int, tokens: int, *, take: bool,
              at_least_one: bool = False) -> list[Job]:
        """Sentences of settings `cfg`, round robin over the requests, up to `sentences`
        sentences and `tokens` source tokens (the first one whatever its length with
        `at_least_one`). Without `take` (the queue unchanged): [] unless full already.
        Called with the lock held."""
        batch: list[Job] = []
        used = 0
        cursors = {r: 0 for r in self.queues}
        full = False
        while not full:
            progressed = False
            for request, queue in self.queues.items():
                i = cursors[request]
                if i >= len(queue) or queue[i].cfg != cfg:
                    continue
                job = queue[i]
                over_budget = used + len(job.ids) > tokens and not (at_least_one and not batch)
                if len(batch) >= sentences or over_budget:
                    full = True
                    break
                batch.append(job)
                used += len(job.ids)
                cursors[request] = i + 1
                progressed = True
            if not progressed:
                break
        if not take:
            return batch if full else []
        for request, n in cursors.items():
            for _ in range(n):
                self.queues[request].popleft()
            if not self.queues[request]:
                del self.queues[request]
        self.waiting -= len(batch)
        for job in batch:
            self.jobs[id(job)] = job
        return batch

    def _expire(self) -> None:
        """Requests whose oldest waiting sentence has waited serve.queue_timeout_seconds
        leave the queue with QueueTimeout (lock held)."""
        limit = time.monotonic() - self.cfg.queue_timeout_seconds
        for request, queue in list(self.queues.items()):
            if queue[0].enqueued < limit:
                for job in queue:
                    job.resolve(QueueTimeout(
                        f"waited {self.cfg.queue_timeout_seconds:g} s (serve."
                        "queue_timeout_seconds) without being decoded"))
                self.waiting -= len(queue)
                del self.queues[request]

    def _search(self, batch: list[Job]) -> None:
        """Continuous batching: a search that `batch` begins, and that waiting sentences with
        its settings join between steps, until it holds none."""
        cfg = batch[0].cfg
        search = RunningSearch(self.translator, cfg)
        held: dict[int, Job] = {}  # id(job) -> job, the sentences in the search
        tokens = 0
        while batch or held:
            start = time.monotonic()
            try:
                if batch:
                    for job in batch:
                        job.started = start
                        held[id(job)] = job
                    tokens += sum(len(job.ids) for job in batch)
                    search.add([job.ids for job in batch], [id(job) for job in batch])
                if gone := {key for key, job in held.items() if job.abandoned}:
                    search.drop(gone)
                    for key in gone:
                        job = held.pop(key)
                        tokens -= len(job.ids)
                        self._forget(job)
                    if not held:
                        batch = self._admit(cfg, cfg.batch_size, self.cfg.max_batch_tokens)
                        continue
                done = search.step()
            except Exception:  # noqa: BLE001 - isolate the request that fails
                log.exception("a search of %d sentences failed; decoding its requests one by "
                              "one", len(held))
                self._decode_each_request(list(held.values()))
                return
            for key, nbest in done:
                job = held.pop(key)
                tokens -= len(job.ids)
                self._resolve(job, nbest)
            self._observe(len(search) + len(done), len(done), batch, start)
            batch = self._admit(cfg, cfg.batch_size - len(held),
                                self.cfg.max_batch_tokens - tokens)

    def _decode(self, batch: list[Job]) -> None:
        """One batch, decoded whole (models and strategies that sentences cannot join)."""
        start = time.monotonic()
        for job in batch:
            job.started = start
        try:
            results = self.translator.translate_ids([job.ids for job in batch], batch[0].cfg)
        except Exception:  # noqa: BLE001 - isolate the request that fails
            log.exception("a batch of %d sentences failed; decoding its requests one by one",
                          len(batch))
            self._decode_each_request(batch)
        else:
            for job, result in zip(batch, results, strict=True):
                self._resolve(job, result)
        self._observe(len(batch), len(batch), batch, start)

    def _observe(self, sentences: int, finished: int, began: list[Job], start: float) -> None:
        if self.observe is not None:
            self.observe(sentences, finished, sum(len(j.ids) for j in began),
                         [start - j.enqueued for j in began], time.monotonic() - start)

    def _decode_each_request(self, jobs: list[Job]) -> None:
        by_request: dict[int, list[Job]] = {}
        for job in jobs:
            by_request.setdefault(job.request, []).append(job)
        for jobs in by_request.values():
            try:
                results = self.translator.translate_ids([j.ids for j in jobs], jobs[0].cfg)
            except Exception as err:  # noqa: BLE001 - the request's error, not the server's
                for job in jobs:
                    self._forget(job)
                    job.resolve(DecodingFailed(f"decoding failed: {type(err).__name__}: {err}"))
            else:
                for job, result in zip(jobs, results, strict=True):
                    self._resolve(job, result)

    def _forget(self, job: Job) -> None:
        """`job` is no longer being decoded."""
        with self.lock:
            self.jobs.pop(id(job), None)

    def _resolve(self, job: Job, nbest: list[Translation]) -> None:
        """Hand `nbest` to the job's request, its best with alignment rows where asked: on
        this thread, which alone runs the model (the rows' hooks must not see another's
        forward pass)."""
        self._forget(job)
        if job.align is not None and nbest:
            try:
                rows = self.translator.alignments([job.ids], nbest[:1], job.align)[0]
            except Exception as err:  # noqa: BLE001 - the request's error, not the server's
                log.exception("aligning a translation failed")
                job.resolve(DecodingFailed(f"alignment failed: {type(err).__name__}: {err}"))
                return
            nbest = [dataclasses.replace(nbest[0], alignment=rows), *nbest[1:]]
        job.resolve(nbest)


class DecodingFailed(RuntimeError):
    """Decoding a request's sentences raised; the message says what."""
