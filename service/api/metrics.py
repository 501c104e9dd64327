"""Prometheus metrics of one app, served at /metrics in the text exposition format.

- `attend_http_requests_total{method, route, status}` and
  `attend_http_request_duration_seconds{method, route, status}` (a histogram), where `route` is
  the route's template (`/books/{book_id}`), never the raw path, so ids cannot blow up the label
  set (`route_label`); requests that match no route share `route="<unmatched>"`.
- `attend_search_batch_size`: queries per encoder and attention call (a histogram), read at
  scrape time from the searcher's counts (the engine never calls into the API).
- Gauges read when scraped, through callbacks registered with `Metrics.gauge`: the catalog size,
  and whatever else the app knows (index generation, re-index progress). A callback that returns
  None leaves its gauge out of that scrape.

Each app has its own registry, so apps built side by side (the tests) never share counts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

logger = logging.getLogger(__name__)

CONTENT_TYPE = CONTENT_TYPE_LATEST
UNMATCHED = "<unmatched>"
# the methods of HTTP (RFC 9110 and PATCH): a request's method label is one of these or OTHER
METHODS = frozenset(
    ["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"]
)
OTHER_METHOD = "other"
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)

GaugeReader = Callable[[], float | None]


class _Gauges(Collector):
    """Gauges whose values are read from the app at scrape time."""

    def __init__(self) -> None:
        self.readers: dict[str, tuple[str, GaugeReader]] = {}

    def collect(self) -> Iterator[Metric]:
        for name, (documentation, read) in self.readers.items():
            try:
                value = read()
            except Exception:  # a scrape never fails for one bad reading
                logger.exception("reading gauge %s failed", name)
                continue
            if value is not None:
                yield GaugeMetricFamily(name, documentation, value=float(value))


class _BatchSizes(Collector):
    """The search batch-size histogram, from the searcher's counts of each size."""

    def __init__(self) -> None:
        self.read: Callable[[], Mapping[int, int] | None] = lambda: None

    def collect(self) -> Iterator[Metric]:
        counts = self.read()
        if counts is None:
            return
        buckets = [
            (str(float(edge)), sum(n for size, n in counts.items() if size <= edge))
            for edge in _BATCH_BUCKETS
        ]
        total = sum(counts.values())
        yield HistogramMetricFamily(
            "attend_search_batch_size",
            "Queries answered by one encoder and attention call (searches coalesced under load).",
            buckets=[*buckets, ("+Inf", total)],
            sum_value=sum(size * n for size, n in counts.items()),
        )


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        labels = ["method", "route", "status"]
        self.requests = Counter(
            "attend_http_requests", "HTTP requests answered.", labels, registry=self.registry
        )
        self.latency = Histogram(
            "attend_http_request_duration_seconds",
            "Time from a request's arrival to the end of its response.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._gauges = _Gauges()
        self.registry.register(self._gauges)
        self._batches = _BatchSizes()
        self.registry.register(self._batches)

    def gauge(self, name: str, documentation: str, read: GaugeReader) -> None:
        """Export `read()` as gauge `name` at every scrape (left out while it returns None)."""
        self._gauges.readers[name] = (documentation, read)

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """One request answered. Its method is a label value only when it is one of HTTP's
        (`METHODS`), any other `other`: a client choosing its method string (30,000 random ones
        made /metrics 67 MB and each scrape block the event loop for 6 s) cannot grow the
        label set. The route is a template already (`route_label`), the status a number."""
        labels = (method if method in METHODS else OTHER_METHOD, route, str(status))
        self.requests.labels(*labels).inc()
        self.latency.labels(*labels).observe(seconds)

    def batch_sizes(self, read: Callable[[], Mapping[int, int] | None]) -> None:
        """Export `read()`, how many batches of each size were answered, as the batch-size
        histogram at every scrape."""
        self._batches.read = read

    def render(self) -> bytes:
        return generate_latest(self.registry)


def route_label(scope: Scope, arrived: Scope) -> str:
    """The template of the route that answered the request (`/books/{book_id}`), or UNMATCHED.
    `scope` is the request's scope after the app answered, `arrived` a copy from before.

    FastAPI's router puts its own routes (the API's) in the scope; the plain Starlette routes
    and mounts it answers through (`/openapi.json`, the docs' assets under
    `/static-offline-docs/{path}`) it does not, so those are matched again among the app's
    routes, with the scope as it arrived (a mount rewrites `root_path` and `app`). Without that
    they were counted as `<unmatched>`, beside the unknown paths."""
    template = _template(scope.get("route"))
    if template is not None:
        return template
    routes: list[BaseRoute] = getattr(arrived.get("app"), "routes", [])
    for route in routes:
        match, _ = route.matches(arrived)
        if match is Match.FULL:
            return _template(route) or UNMATCHED
    return UNMATCHED


def _template(route: object) -> str | None:
    template = getattr(route, "path_format", None) or getattr(route, "path", None)
    return str(template) if template else None
