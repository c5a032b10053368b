"""The long-running scheduler (``feedcollector run``) across cycles: when it wakes up after a
cycle, and what it does when the feeds file goes bad while it runs.

Real parts: a loopback feed server, a SQLite file and a local objects folder; the clock is the
tests' fixed one, so every decision is checked exactly.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

from feedcollector import service
from feedcollector.collector import open_collector
from feedcollector.config import load_settings
from feedcollector.pipeline import run_cycle

from .feedserver import FeedServer
from .samples import Entry, rss
from .scheduling import execute, polite_project, stamp
from .test_pipeline import Project


def wake_after_cycle(project: Project) -> timedelta:
    """Run one cycle, then ask the scheduler how long it would sleep."""

    async def go() -> timedelta:
        async with open_collector(load_settings(project.config), clock=project.clock) as collector:
            report = await run_cycle(collector)
            return await service.next_wake(collector, report.started)

    return asyncio.run(go())


def test_a_feed_aborted_by_a_storage_error_waits_for_the_next_poll(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    url = feed_server.route("/feed", body=rss([Entry("one", guid="1")]))
    p = polite_project(tmp_path, [url])
    (tmp_path / "objects").mkdir()
    (tmp_path / "objects" / "backups").write_text("a file where the backups folder goes")

    assert wake_after_cycle(p) == service.POLL_INTERVAL, "not a cycle a second"
    assert len(feed_server.hits("/feed")) == 1
    (feed,) = p.rows("SELECT next_fetch_at, last_fetched_at, lease_owner FROM feeds")
    assert feed == {"next_fetch_at": stamp(p.clock()), "last_fetched_at": None, "lease_owner": None}

    (tmp_path / "objects" / "backups").unlink()
    p.clock.advance(seconds=60)
    p.cycle()
    assert len(feed_server.hits("/feed")) == 2, "the next poll retries it"
    assert p.rows("SELECT COUNT(*) AS n FROM items") == [{"n": 1}]


def test_a_feed_another_collector_holds_does_not_wake_the_scheduler(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    held = feed_server.route("/held", body=rss([Entry("one", guid="1")]))
    later = feed_server.route("/later", body=rss([Entry("two", guid="2")]))
    p = polite_project(tmp_path, [held, {"url": later, "interval": "30m"}])
    p.cycle()
    execute(
        p,
        "UPDATE feeds SET next_fetch_at = ?, lease_owner = 'killed', lease_until = ? WHERE url = ?",
        stamp(p.clock()),
        stamp(p.clock() + timedelta(minutes=15)),
        held,
    )
    execute(
        p,
        "UPDATE feeds SET next_fetch_at = ? WHERE url = ?",
        stamp(p.clock() + timedelta(seconds=20)),
        later,
    )

    assert wake_after_cycle(p) == timedelta(seconds=20), "woken for the next feed due"
    p.clock.advance(seconds=20)
    assert wake_after_cycle(p) == service.POLL_INTERVAL, "not for the one held elsewhere"
    assert len(feed_server.hits("/held")) == 1
    assert len(feed_server.hits("/later")) == 2
