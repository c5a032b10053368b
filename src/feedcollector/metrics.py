"""Prometheus metrics of a running collector (``[metrics] listen``), off by default.

:class:`CollectorMetrics` is a cycle observer (:class:`~feedcollector.report.CycleObserver`):
the pipeline reports to it and never imports the metrics library. Counters grow as feeds
finish; the gauges read from the database (image tasks by status, feeds by state) are
sampled once per cycle with two GROUP BY queries, so a scrape costs the database nothing and
the values are at most one cycle old. Each instance has its own registry, so tests (and
several collectors in one process) do not share counters.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from .database import Database
from .errors import ConfigError, StorageError
from .report import CycleReport, FeedOutcome
from .status import feed_state_counts, image_task_counts

log = logging.getLogger("feedcollector")

FETCH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
"""Seconds; the default fetch deadline is 2 minutes."""


class CollectorMetrics:
    """The metrics of one collector process, updated from cycle events."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.fetches = Counter(
            "feedcollector_fetches",
            "Feed fetches by outcome: ok, not_modified, unchanged, http_4xx, http_5xx, timeout, "
            "dns, connect, tls, too_large, redirect, parse, storage_error, ...",
            ["outcome"],
            registry=r,
        )
        self.fetch_duration = Histogram(
            "feedcollector_fetch_duration_seconds",
            "Time of one feed's refresh (fetch, backup, parse, store).",
            buckets=FETCH_BUCKETS,
            registry=r,
        )
        self.fetched_bytes = Counter(
            "feedcollector_fetched_bytes", "Feed body bytes downloaded (decompressed).", registry=r
        )
        self.items_stored = Counter("feedcollector_items_stored", "New items stored.", registry=r)
        self.backups_written = Counter(
            "feedcollector_backups_written", "Raw feed bodies backed up.", registry=r
        )
        self.image_downloads = Counter(
            "feedcollector_image_downloads",
            "Image download attempts by result: stored, retry_later, failed (for good).",
            ["result"],
            registry=r,
        )
        self.image_tasks = Gauge(
            "feedcollector_image_tasks",
            "Image tasks in the database by status (sampled after each cycle).",
            ["status"],
            registry=r,
        )
        self.feeds = Gauge(
            "feedcollector_feeds",
            "Feeds in the database by state: active, failing, gone, removed (after each cycle).",
            ["state"],
            registry=r,
        )
        self.cycles = Counter("feedcollector_cycles", "Collection cycles completed.", registry=r)
        self.cycle_lag = Gauge(
            "feedcollector_cycle_lag_seconds",
            "How overdue the most overdue feed was when the last cycle started.",
            registry=r,
        )
        self.cycle_duration = Gauge(
            "feedcollector_last_cycle_duration_seconds",
            "Duration of the last cycle (feeds and images).",
            registry=r,
        )
        self.last_cycle = Gauge(
            "feedcollector_last_cycle_end_timestamp_seconds",
            "When the last cycle ended (Unix time): alert when it is too old.",
            registry=r,
        )

    def feed_done(self, outcome: FeedOutcome, report: CycleReport) -> None:
        self.fetches.labels(outcome.outcome_label).inc()
        self.fetch_duration.observe(outcome.elapsed_s)
        self.fetched_bytes.inc(outcome.bytes)
        self.items_stored.inc(outcome.new_items)
        if outcome.backed_up:
            self.backups_written.inc()

    def images_done(self, report: CycleReport) -> None:
        """Image results are counted per cycle, in :meth:`cycle_done`."""

    async def cycle_done(self, report: CycleReport, db: Database) -> None:
        self.cycles.inc()
        self.cycle_lag.set(report.lag_s)
        self.cycle_duration.set(report.elapsed_s)
        self.last_cycle.set_to_current_time()
        self.image_downloads.labels("stored").inc(report.images_stored)
        self.image_downloads.labels("retry_later").inc(report.images_retry_later)
        self.image_downloads.labels("failed").inc(report.images_failed)
        try:
            tasks = await image_task_counts(db)
            feeds = await feed_state_counts(db)
        except StorageError as exc:
            log.warning("metrics: database gauges not refreshed this cycle: %s", exc)
            return
        for status, count in tasks.items():
            self.image_tasks.labels(status).set(count)
        for state, count in feeds.items():
            self.feeds.labels(state).set(count)


@dataclass
class MetricsServer:
    """The HTTP endpoint serving ``/metrics`` from a background thread."""

    server: WSGIServer
    thread: threading.Thread

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        shown = f"[{name}]" if ":" in name else name
        return f"http://{shown}:{port}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve_metrics(listen: str, metrics: CollectorMetrics) -> MetricsServer:
    """Serve ``metrics`` at ``listen`` (``HOST:PORT``, port 0 for any free one)."""
    host, _, port = listen.rpartition(":")
    address = host.strip("[]")
    try:
        server, thread = start_http_server(int(port), addr=address, registry=metrics.registry)
    except OSError as exc:
        raise ConfigError(
            f"metrics: cannot listen on {listen} ({exc.strerror or exc}). Choose another "
            "address or port for [metrics] listen, or stop what uses it."
        ) from exc
    return MetricsServer(server, thread)
