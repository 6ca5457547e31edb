"""The server's Prometheus metrics (prometheus-client), in a registry of its own."""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class ServerMetrics:
    """Requests by path and status, request and queue latency, batch sizes, sentences and
    tokens decoded (rates per second: Prometheus' rate()), and the queue's depth."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("transformer_mt_requests", "HTTP requests", ["path", "status"],
                                registry=r)
        self.request_seconds = Histogram("transformer_mt_request_seconds",
                                         "time from a request's arrival to its answer",
                                         ["path"], buckets=LATENCY_BUCKETS, registry=r)
        self.queue_seconds = Histogram("transformer_mt_queue_seconds",
                                       "time a sentence waited before its decoding began",
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.decode_seconds = Histogram("transformer_mt_decode_round_seconds",
                                        "time of one round of decoding: a step of the running "
                                        "search, or a whole batch", buckets=LATENCY_BUCKETS,
                                        registry=r)
        self.batch_sentences = Histogram("transformer_mt_batch_sentences",
                                         "sentences decoded together in one round",
                                         buckets=(1, 2, 4, 8, 16, 32, 64, 128), registry=r)
        self.sentences = Counter("transformer_mt_sentences", "sentences decoded", registry=r)
        self.tokens = Counter("transformer_mt_source_tokens", "source tokens decoded",
                              registry=r)
        self.abandoned = Counter("transformer_mt_abandoned_sentences", "sentences dropped "
                                 "unanswered because their client went away", registry=r)
        self.queue_depth = Gauge("transformer_mt_queue_depth", "sentences waiting", registry=r)

    def observe_request(self, path: str, status: int, seconds: float) -> None:
        self.requests.labels(path, str(status)).inc()
        self.request_seconds.labels(path).observe(seconds)

    def observe_round(self, sentences: int, finished: int, tokens: int, waits: list[float],
                      seconds: float) -> None:
        """One round of decoding (Batcher.observe)."""
        self.batch_sentences.observe(sentences)
        self.sentences.inc(finished)
        self.tokens.inc(tokens)
        self.decode_seconds.observe(seconds)
        for wait in waits:
            self.queue_seconds.observe(wait)

    def render(self) -> bytes:
        return generate_latest(self.registry)
