"""Prometheus metrics of one app: the engine's state, read at each scrape, and the HTTP
requests the app measured itself.

Each app has its own `CollectorRegistry`, never prometheus_client's global one, so that two
apps in one process (tests, a benchmark) do not share or clash over counters. The engine's
figures are copied from one `EngineStats` snapshot per scrape, so they are consistent with
each other and cost the engine nothing between scrapes.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from transformer_mt.serve.contract import Engine

# Request latency buckets, seconds: from a cached sentence to a long beam search under load.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class EngineCollector:
    """The `tmt_*` engine families, from `engine.stats()` at each scrape."""

    def __init__(self, engine: Engine):
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        stats = self.engine.stats()
        gauges = (
            ("queue_sentences", "Sentences waiting for admission", stats.queue_sentences),
            ("running_sentences", "Sentences being decoded", stats.running_sentences),
            ("running_hypotheses", "Hypotheses being decoded (beams)", stats.running_hypotheses),
            ("kv_blocks_used", "KV cache blocks in use", stats.kv_blocks_used),
            (
                "kv_dense_positions",
                "Positions a dense cache with one copy per hypothesis would hold now",
                stats.kv_dense_positions,
            ),
            ("kv_block_size", "Positions per KV cache block", stats.kv_block_size),
            (
                "kv_blocks_reserved",
                "KV cache blocks reserved by admission for the running sentences",
                stats.kv_blocks_reserved,
            ),
            (
                "kv_blocks_free",
                "KV cache blocks free",
                stats.kv_blocks_total - stats.kv_blocks_used,
            ),
            (
                "tokens_per_second",
                "Tokens generated per second, last ~10 s",
                stats.tokens_per_second,
            ),
        )
        for name, documentation, value in gauges:
            yield GaugeMetricFamily(f"tmt_{name}", documentation, value=value)
        counters = (
            ("generated_tokens", "Tokens generated since start", stats.generated_tokens),
            ("engine_requests_done", "Requests the engine finished", stats.requests_done),
            ("engine_requests_cancelled", "Requests cancelled", stats.requests_cancelled),
            (
                "tagged_texts",
                "Texts that held a language tag, taken out (the request names the languages)",
                stats.tagged_texts,
            ),
        )
        for name, documentation, value in counters:
            yield CounterMetricFamily(f"tmt_{name}", documentation, value=value)
        by_cache = (
            (CounterMetricFamily, "cache_hits", "Cache hits", stats.cache_hits),
            (CounterMetricFamily, "cache_misses", "Cache misses", stats.cache_misses),
            (GaugeMetricFamily, "cache_entries", "Entries held", stats.cache_entries),
        )
        for family_class, name, documentation, values in by_cache:
            family = family_class(f"tmt_{name}", f"{documentation}, by cache", labels=["cache"])
            for cache, value in sorted(values.items()):
                family.add_metric([cache], value)
            yield family


class Metrics:
    """An app's registry: the engine's families and the requests measured by the app."""

    def __init__(self, engine: Engine):
        self.registry = CollectorRegistry()
        self.registry.register(EngineCollector(engine))
        self.latency = Histogram(
            "tmt_http_request_seconds",
            "Time from a request's arrival to its last response byte, by path",
            ["path"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.requests = Counter(
            "tmt_http_requests",
            "HTTP requests answered, by path and status code",
            ["path", "status"],
            registry=self.registry,
        )

    def observe(self, path: str, status: int, seconds: float) -> None:
        """Count one answered request and its latency."""
        self.latency.labels(path).observe(seconds)
        self.requests.labels(path, str(status)).inc()

    def render(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)
