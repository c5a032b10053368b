"""A wall clock that went back: the stored schedules move back with it, once, on both backend
pairs (SQLite, and D1 through the Proxy Worker), and end to end through a cycle."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from feedcollector.backends.sqlite import SQLiteDatabase
from feedcollector.clock_step import (
    STEP_TOLERANCE,
    clock_mark_key,
    mark_is_due,
    settle_clock,
    went_back,
    write_mark,
)
from feedcollector.collector import open_collector
from feedcollector.config import load_settings
from feedcollector.pipeline import run_cycle
from feedcollector.schedule import feed_id_for
from feedcollector.schema import migrate
from feedcollector.timestamps import format_timestamp

from . import test_retention
from .feedserver import FeedServer
from .samples import Clock, Entry, rss, write_project
from .test_pipeline import Project
from .test_retention import FEED_URL, NOW, Pair, add_feed, add_item

pair = test_retention.pair

DAY = timedelta(days=1)
KEY = clock_mark_key("this-host:1:00000000")


def at(delta: timedelta) -> str:
    return format_timestamp(NOW + delta)


def test_a_step_counts_only_beyond_the_tolerance() -> None:
    assert went_back(None, NOW) is None
    assert went_back(at(STEP_TOLERANCE), NOW) is None
    assert went_back(at(STEP_TOLERANCE + timedelta(seconds=1)), NOW) == timedelta(
        minutes=5, seconds=1
    )
    assert went_back(at(-DAY), NOW) is None  # a clock that jumped forward


def test_the_mark_is_written_every_few_minutes_not_every_cycle() -> None:
    assert mark_is_due(None, NOW)
    assert not mark_is_due(at(-timedelta(minutes=4)), NOW)
    assert mark_is_due(at(-timedelta(minutes=5)), NOW)


OTHER_URL = "https://other.example.org/feed.xml"
LONGEST_RETRY_AFTER = timedelta(hours=24)
LONGEST_LEASE = timedelta(hours=1)


def settle(pair: Pair, mark: str | None, now: datetime = NOW) -> timedelta | None:
    settling = settle_clock(
        pair.db,
        KEY,
        mark,
        now,
        longest_retry_after=LONGEST_RETRY_AFTER,
        longest_lease=LONGEST_LEASE,
    )
    return pair.run(settling)


def schedules(pair: Pair) -> dict[str, object]:
    feeds = pair.rows(
        "SELECT url, next_fetch_at, retry_after_until, lease_until FROM feeds ORDER BY url"
    )
    tasks = pair.rows("SELECT position, retry_at, lease_until FROM image_tasks ORDER BY position")
    cleanups = pair.rows("SELECT task, last_done_at, lease_until FROM maintenance ORDER BY task")
    return {
        **{f"{row.pop('url')}": row for row in feeds},
        **{f"task {row.pop('position')}": row for row in tasks},
        **{f"{row.pop('task')}": row for row in cleanups},
    }


def test_a_step_back_moves_the_stored_schedules_back_once(pair: Pair) -> None:
    """The clock read a day ahead and was set right: what was scheduled then is ahead by a
    day. A lease a right clock can have taken stays (a process of this machine that took it
    after the clock came back is fetching that feed: moved, the lease let another process take
    it too), and a Retry-After within the longest a server may ask. A second process of the
    machine that read the same mark moves nothing again."""
    pair.run(add_feed(pair.db))
    pair.run(add_feed(pair.db, OTHER_URL))
    pair.run(add_item(pair, "post", NOW - DAY, images=(False, False)))
    set_feed = (
        "UPDATE feeds SET next_fetch_at = ?, retry_after_until = ?, lease_until = ?, "
        "lease_owner = ? WHERE url = ?"
    )
    two_hours, quarter = timedelta(hours=2), timedelta(minutes=15)
    half = timedelta(minutes=30)
    pair.rows(
        set_feed, at(DAY + half), at(DAY + two_hours), at(DAY + quarter), "this-host:2:0", FEED_URL
    )
    pair.rows(set_feed, at(two_hours), at(two_hours), at(quarter), "this-host:3:0", OTHER_URL)
    pair.rows(
        "UPDATE image_tasks SET status = CASE position WHEN 0 THEN 'pending' ELSE 'failed' END, "
        "retry_at = CASE position WHEN 0 THEN ? ELSE ? END, lease_until = ?",
        at(DAY + timedelta(hours=1)),
        at(DAY + timedelta(hours=3)),
        at(DAY + timedelta(minutes=15)),
    )
    pair.rows(
        "INSERT INTO maintenance (task, last_done_at, lease_owner, lease_until) "
        "VALUES ('cleanup', ?, 'this-host:3:0', ?), ('orphans', ?, 'another-host:3:0', ?)",
        at(DAY - timedelta(hours=1)),
        at(DAY + timedelta(minutes=50)),
        at(-timedelta(hours=5)),
        at(timedelta(minutes=4)),
    )
    mark = at(DAY)
    pair.rows(
        "INSERT INTO collector_state (key, value, updated_at) VALUES (?, ?, ?)", KEY, mark, mark
    )

    assert settle(pair, mark) == DAY

    assert schedules(pair) == {
        FEED_URL: {
            "next_fetch_at": at(timedelta(minutes=30)),
            "retry_after_until": at(timedelta(hours=2)),  # beyond the longest: moved
            "lease_until": at(timedelta(minutes=15)),
        },
        OTHER_URL: {
            "next_fetch_at": at(-timedelta(hours=22)),  # one fetch early, once
            "retry_after_until": at(timedelta(hours=2)),
            "lease_until": at(timedelta(minutes=15)),
        },
        "task 0": {  # a lease no right clock writes: the page that held it died
            "retry_at": at(timedelta(hours=1)),
            "lease_until": at(timedelta(minutes=15)),
        },
        "task 1": {
            "retry_at": at(DAY + timedelta(hours=3)),
            "lease_until": at(DAY + timedelta(minutes=15)),
        },
        "cleanup": {
            "last_done_at": at(-timedelta(hours=1)),
            "lease_until": at(timedelta(minutes=50)),
        },
        "orphans": {
            "last_done_at": at(-timedelta(hours=5)),
            "lease_until": at(timedelta(minutes=4)),
        },
    }
    assert pair.rows("SELECT value FROM collector_state WHERE key = ?", KEY) == [
        {"value": at(timedelta(0))}
    ]
    moved = schedules(pair)

    assert settle(pair, mark) is None
    assert schedules(pair) == moved


def test_the_mark_keeps_the_latest_time_and_a_short_step_moves_nothing(pair: Pair) -> None:
    pair.run(add_feed(pair.db))
    pair.rows("UPDATE feeds SET next_fetch_at = ?", at(timedelta(minutes=30)))
    assert pair.run(write_mark(pair.db, KEY, NOW))
    mark = at(timedelta(0))
    assert pair.rows("SELECT value FROM collector_state WHERE key = ?", KEY) == [{"value": mark}]
    slightly_back = NOW - STEP_TOLERANCE
    assert settle(pair, mark, slightly_back) is None
    assert pair.rows("SELECT next_fetch_at FROM feeds") == [
        {"next_fetch_at": at(timedelta(minutes=30))}
    ]
    # a process that read an older mark never lowers the one another process wrote
    assert pair.run(write_mark(pair.db, KEY, slightly_back))
    assert pair.rows("SELECT value FROM collector_state WHERE key = ?", KEY) == [{"value": mark}]


def test_a_mark_that_cannot_be_written_waits_for_the_next_cycle(tmp_path: Path) -> None:
    """Bookkeeping: a database another process holds locked fails the claims anyway (with
    their own message), and the mark must not fail the cycle before them."""
    database = SQLiteDatabase(tmp_path / "collector.db", busy_timeout_s=0.2)
    holder = sqlite3.connect(tmp_path / "collector.db", isolation_level=None)

    async def go() -> bool:
        try:
            await migrate(database)
            holder.execute("BEGIN IMMEDIATE")
            return await write_mark(database, KEY, NOW)
        finally:
            holder.close()
            await database.close()

    assert asyncio.run(go()) is False


def write_clock_project(tmp_path: Path, url: str) -> Project:
    config = write_project(tmp_path, [{"url": url, "interval": "30m"}])
    return Project(tmp_path, config, Clock())


def test_after_the_clock_went_back_a_feed_is_fetched_on_its_interval_not_a_day_late(
    feed_server: FeedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Fetched while the clock read a day ahead, the feed would have waited a day once the
    clock was set right. Its next fetch counts from the clock again, while its backup is
    dated a second past the last one, whose key it must not take."""
    url = feed_server.route("/feed.xml", body=rss([Entry("a", guid="a")]))
    p = write_clock_project(tmp_path, url)
    p.cycle()
    p.clock.advance(days=1)
    p.cycle()  # the clock runs a day ahead
    ahead = p.clock()
    p.clock.advance(days=-1, minutes=1)  # and is set right
    caplog.set_level(logging.WARNING, "feedcollector")

    assert p.cycle().feeds == 0
    [warning] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("clock:")]
    assert "went back by 23:59:00" in warning
    assert p.rows("SELECT next_fetch_at FROM feeds") == [
        {"next_fetch_at": format_timestamp(p.clock() + timedelta(minutes=30))}
    ]
    p.clock.advance(minutes=29)
    assert p.cycle().feeds == 0
    p.clock.advance(minutes=1)
    assert p.cycle().feeds == 1
    assert p.rows("SELECT next_fetch_at, last_fetched_at FROM feeds") == [
        {
            "next_fetch_at": format_timestamp(p.clock() + timedelta(minutes=30)),
            "last_fetched_at": format_timestamp(ahead + timedelta(seconds=1)),
        }
    ]
    feed_id = feed_id_for(url)
    assert p.keys(f"backups/{feed_id}")[-1] == (
        f"backups/{feed_id}/{format_timestamp(ahead + timedelta(seconds=1))}.xml"
    )
    assert len(p.keys(f"backups/{feed_id}")) == 3


def test_another_machines_clock_moves_nothing(feed_server: FeedServer, tmp_path: Path) -> None:
    url = feed_server.route("/feed.xml", body=rss([Entry("a", guid="a")]))
    p = write_clock_project(tmp_path, url)
    p.cycle()
    [before] = p.rows("SELECT next_fetch_at FROM feeds")
    far = format_timestamp(p.clock() + timedelta(days=3))
    p.execute(
        "INSERT INTO collector_state (key, value, updated_at) VALUES (?, ?, ?)",
        clock_mark_key("a-machine-with-its-clock-ahead:1:0"),
        far,
        far,
    )
    p.clock.advance(minutes=1)
    p.cycle()
    assert p.rows("SELECT next_fetch_at FROM feeds") == [before]


def test_a_process_forgets_its_own_wall_clock_state_whoever_moved_the_stored_times(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """A ``fetch`` or a cron ``run --once`` moved the stored times first: the running
    service sees the mark at now, yet its own host deferrals and cleanup time are ahead."""
    url = feed_server.route("/feed.xml", body=rss([Entry("a", guid="a")]))
    p = write_clock_project(tmp_path, url)

    async def scenario() -> tuple[object, object]:
        async with open_collector(load_settings(p.config), clock=p.clock) as collector:
            await run_cycle(collector)
            collector.hosts.defer("example.org", p.clock() + timedelta(hours=1))
            collector.cleanup_not_due_before = p.clock() + DAY
            p.clock.advance(hours=-2)
            await collector.db.query(  # as the process that moved the stored times left it
                "UPDATE collector_state SET value = ? WHERE key = ?",
                (format_timestamp(p.clock()), clock_mark_key(collector.owner)),
            )
            await run_cycle(collector)
            return (
                collector.hosts.deferred_until("example.org", p.clock()),
                collector.cleanup_not_due_before,
            )

    assert asyncio.run(scenario()) == (None, None)
