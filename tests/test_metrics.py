"""Prometheus metrics: ``feedcollector run`` with ``[metrics] listen`` serves them, scraped over
HTTP while it runs; outcome labels; a busy port is a clear error."""

from __future__ import annotations

import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from feedcollector.errors import ConfigError
from feedcollector.metrics import CollectorMetrics, serve_metrics
from feedcollector.models import Feed
from feedcollector.report import FeedOutcome
from feedcollector.timestamps import format_timestamp

from .feedserver import FeedServer
from .samples import Entry, png, rss, write_project
from .test_cli import feedcollector

NOW = datetime(2026, 3, 2, 9, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("state", "kind", "status", "label"),
    [
        ("stored", None, 200, "ok"),
        ("not_modified", None, 304, "not_modified"),
        ("aborted", None, 200, "storage_error"),
        ("failed", "http", 503, "http_5xx"),
        ("failed", "http", 404, "http_4xx"),
        ("failed", "timeout", None, "timeout"),
        ("failed", "parse", 200, "parse"),
    ],
)
def test_outcome_labels(state: str, kind: str | None, status: int | None, label: str) -> None:
    outcome = FeedOutcome(
        Feed("id", "https://a.example/"), NOW, state=state, http_status=status, error_kind=kind
    )
    assert outcome.outcome_label == label


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def test_run_serves_metrics_while_it_runs(feed_server: FeedServer, tmp_path: Path) -> None:
    image = feed_server.route("/pic.png", body=png(), headers={"Content-Type": "image/png"})
    first = [Entry("a", guid="a"), Entry("b", guid="b")]
    ok = feed_server.route("/ok.xml", body=rss(first))
    failing = feed_server.route("/down.xml", status=503, body=b"busy")
    config = write_project(
        tmp_path, [ok, failing], extra_toml='[metrics]\nlisten = "127.0.0.1:0"\n'
    )
    assert feedcollector("--config", str(config), "run", "--once", cwd=tmp_path).returncode == 0
    overdue = datetime.now(UTC) - timedelta(hours=1)
    with sqlite3.connect(tmp_path / "collector.db") as conn:
        conn.execute("UPDATE feeds SET next_fetch_at = ?", (format_timestamp(overdue),))
    body = rss([*first, Entry("c", guid="c", content=f'<img src="{image}">')])
    feed_server.route("/ok.xml", body=body)

    process = subprocess.Popen(
        [sys.executable, "-m", "feedcollector", "--config", str(config), "run"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    try:
        url = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = process.stderr.readline()
            found = re.search(r"metrics at (http://\S+)", line)
            url = found.group(1) if found else url
            if "cycle:" in line:
                break
        assert url is not None
        assert url.startswith("http://127.0.0.1:")
        values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        while time.monotonic() < deadline:  # the gauges follow the cycle's log line
            values = samples(httpx.get(url, timeout=10).text)
            if values.get(("feedcollector_cycles_total", ())):
                break
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, rest

    def value(name: str, **labels: str) -> float:
        return values[(name, tuple(sorted(labels.items())))]

    assert value("feedcollector_fetches_total", outcome="ok") == 1
    assert value("feedcollector_fetches_total", outcome="http_5xx") == 1
    assert value("feedcollector_fetched_bytes_total") == len(body)
    assert value("feedcollector_items_stored_total") == 1
    assert value("feedcollector_backups_written_total") == 1
    assert value("feedcollector_fetch_duration_seconds_count") == 2
    assert value("feedcollector_image_downloads_total", result="stored") == 1
    assert value("feedcollector_image_tasks", status="success") == 1
    assert value("feedcollector_image_tasks", status="pending") == 0
    assert value("feedcollector_feeds", state="failing") == 1
    assert value("feedcollector_feeds", state="active") == 1
    assert value("feedcollector_cycles_total") >= 1
    assert 3600 - 5 <= value("feedcollector_cycle_lag_seconds") <= 3600 + 300
    assert value("feedcollector_last_cycle_duration_seconds") > 0
    with pytest.raises(httpx.TransportError):
        httpx.get(url, timeout=5)


def test_a_busy_port_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"metrics: cannot listen on 127\.0\.0\.1:{port}"):
            serve_metrics(f"127.0.0.1:{port}", CollectorMetrics())


def test_each_instance_has_its_own_registry() -> None:
    first, second = CollectorMetrics(), CollectorMetrics()
    first.cycles.inc()
    server = serve_metrics("127.0.0.1:0", second)
    try:
        text = httpx.get(server.url, timeout=10).text
    finally:
        server.close()
    assert samples(text)[("feedcollector_cycles_total", ())] == 0
