"""Progress of long work: periodic plain lines off a terminal (through the log), rich bars on
a (forced) terminal, and never on stdout."""

from __future__ import annotations

import io
import json
import logging
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from feedcollector.cli.progress import (
    BarDisplay,
    CycleProgress,
    LineDisplay,
    open_display,
    progress_line,
)
from feedcollector.logs import configure_logging
from feedcollector.models import Feed
from feedcollector.report import CycleReport, FeedOutcome

from .feedserver import FeedServer
from .samples import Entry, png, rss, write_project
from .test_cli import feedcollector

NOW = datetime(2026, 3, 2, 9, 0, 0, tzinfo=UTC)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_line_wording() -> None:
    assert progress_line("fetch", 120, 1000, "3 failed") == "fetch: [120/1000] 12%, 3 failed"
    assert progress_line("images", 7, None, "") == "images: [7]"


def test_line_display_is_periodic(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    display = LineDisplay(every_s=10, clock=clock)
    with caplog.at_level(logging.INFO, logger="feedcollector"):
        for done in range(1, 51):
            clock.now = done * 0.5  # 50 updates over 25 s
            display.update("feeds", done, 100, "")
        display.close()
    assert [r.getMessage() for r in caplog.records] == [
        "feeds: [1/100] 1%",
        "feeds: [21/100] 21%",
        "feeds: [41/100] 41%",
        "feeds: [50/100] 50%",
    ]


def test_line_display_always_shows_the_end(caplog: pytest.LogCaptureFixture) -> None:
    display = LineDisplay(every_s=3600, clock=FakeClock())
    with caplog.at_level(logging.INFO, logger="feedcollector"):
        display.update("restore", 0, 2, "a")
        display.update("restore", 1, 2, "b")
        display.update("restore", 2, 2, "c")
        display.close()
    assert [r.getMessage() for r in caplog.records] == [
        "restore: [0/2] 0%, a",
        "restore: [2/2] 100%, c",
    ]


def test_bars_on_a_terminal() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, color_system=None)
    display = open_display(console)
    assert isinstance(display, BarDisplay)
    display.update("feeds", 3, 4, "1 failed")
    display.update("feeds", 4, 4, "1 failed")
    display.update("restore", 1, 2, "3 items recovered, x.example/f?tag[a]=[/]")
    display.close()
    text = out.getvalue()
    assert "feeds" in text
    assert "4/4" in text
    assert "1 failed" in text
    assert "x.example/f?tag[a]=[/]" in text, "details are text, not rich markup"
    assert "━" in text, "a drawn bar"
    assert isinstance(open_display(Console(file=io.StringIO())), LineDisplay)


def test_cycle_progress_only_for_cycles_of_many_feeds() -> None:
    calls: list[tuple[str, int, int | None, str]] = []

    class Recorder:
        def update(self, task: str, done: int, total: int | None, detail: str) -> None:
            calls.append((task, done, total, detail))

        def close(self) -> None:
            calls.append(("closed", 0, None, ""))

    progress = CycleProgress(Recorder(), min_feeds=3)
    outcome = FeedOutcome(Feed("id", "https://a.example/"), NOW, state="stored", new_items=2)
    small = CycleReport(NOW, observer=progress, feeds_due=2)
    small.add(outcome)
    assert calls == []
    big = CycleReport(NOW, observer=progress, feeds_due=3)
    big.add(outcome)
    big.images_stored = 5
    big.images_counted()
    assert calls == [
        ("feeds", 1, 3, "0 failed, 2 new items"),
        ("images", 5, None, "5 stored, 0 to retry, 0 failed"),
    ]


def test_fetch_all_of_many_feeds_logs_progress_lines(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    urls = [feed_server.route(f"/f{n}", body=rss([Entry("x", guid=f"{n}")])) for n in range(24)]
    config = str(write_project(tmp_path, urls))
    result = feedcollector("--config", config, "fetch", "--all", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "feeds: [1/24] 4%" in result.stderr
    assert "feeds: [24/24] 100%, 0 failed, 24 new items" in result.stderr
    assert "feeds: [" not in result.stdout
    as_json = feedcollector(
        "--config", config, "--log-format", "json", "fetch", "--all", cwd=tmp_path
    )
    messages = [json.loads(line)["message"] for line in as_json.stderr.splitlines()]
    assert "feeds: [24/24] 100%, 0 failed, 0 new items" in messages


def test_the_last_progress_lines_come_before_the_cycles_summary(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """A display shows a task's last state when it closes (the second page of images, within
    10 s of the first): it closed after the cycle's summary was logged, which then read as
    if work went on after it (``feeds: [13/22]`` after ``run`` stopped mid-cycle)."""
    image = feed_server.route("/i.png", body=png(), headers={"Content-Type": "image/png"})
    entries = [
        Entry("x", guid=f"{n}", content=f'<img src="{image}?{n}-a"><img src="{image}?{n}-b">')
        for n in range(3)
    ]
    urls = [feed_server.route(f"/f{n}", body=rss(entries)) for n in range(24)]
    config = str(write_project(tmp_path, urls))
    result = feedcollector(
        "--config", config, "--log-format", "json", "fetch", "--all", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    messages = [json.loads(line)["message"] for line in result.stderr.splitlines()]
    progress = [n for n, text in enumerate(messages) if text.startswith("images: [")]
    summary = next(n for n, text in enumerate(messages) if text.startswith("cycle: "))
    assert len(progress) >= 2
    assert max(progress) < summary


def test_run_shows_the_progress_of_a_cycle_of_many_feeds(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """`run --once` showed it and `run` did not, though its help promises it for a first
    fetch of many feeds."""
    urls = [feed_server.route(f"/f{n}", body=rss([Entry("x", guid=f"{n}")])) for n in range(24)]
    config = write_project(tmp_path, urls)
    process = subprocess.Popen(
        [sys.executable, "-m", "feedcollector", "--config", str(config), "run"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not all(feed_server.hits(f"/f{n}") for n in range(24)):
            assert time.monotonic() < deadline, "the scheduler never fetched every feed"
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)  # the feeds in flight finish, and say so
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert "feeds: [1/24] 4%" in stderr
    assert "feeds: [24/24] 100%, 0 failed, 24 new items" in stderr


def test_cleanup_logs_progress_lines(feed_server: FeedServer, tmp_path: Path) -> None:
    url = feed_server.route("/f", body=rss([Entry("a", guid="a"), Entry("b", guid="b")]))
    config = str(write_project(tmp_path, [url]))
    assert feedcollector("--config", config, "run", "--once", cwd=tmp_path).returncode == 0
    with sqlite3.connect(tmp_path / "collector.db") as conn:
        conn.execute("UPDATE items SET created_at = '2020-01-01T00:00:00Z'")
    result = feedcollector("--config", config, "cleanup", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "cleanup: backups: [0], old backups" in result.stderr
    assert "cleanup: items: [0/2] 0%, with 0 image and content objects" in result.stderr
    assert "cleanup: items: [2/2] 100%, with 0 image and content objects" in result.stderr
    assert result.stdout.startswith("cleanup: deleted 0 backups")


def test_console_lines_are_stamped_in_utc_and_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Messages, status and the database speak UTC; a console line in local time without a
    zone stamped 21:18 said its feeds "wait until 12:20Z", which read as long past."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    logger = logging.getLogger("feedcollector")
    saved = (logger.handlers[:], logger.propagate, logger.level)
    try:
        configure_logging("INFO", "console")
        (handler,) = logging.getLogger("feedcollector").handlers
        record = logging.LogRecord("feedcollector", logging.INFO, __file__, 1, "hello", (), None)
        record.created = 0.0
        assert handler.format(record) == "1970-01-01 00:00:00Z INFO    hello"
    finally:
        logger.handlers[:], logger.propagate, logger.level = saved
        monkeypatch.delenv("TZ")
        time.tzset()
