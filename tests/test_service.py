"""The long-running scheduler (``feedcollector run``) across cycles: when it wakes up after a
cycle, and what it does when the feeds file goes bad while it runs.

Real parts: a loopback feed server, a SQLite file and a local objects folder; the clock is the
tests' fixed one, so every decision is checked exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest

from feedcollector import held_lease, retention_daily, service
from feedcollector import maintenance_leases as leases
from feedcollector.backends.local import LocalObjectStore
from feedcollector.breaker import STORAGE_TRIP_AFTER
from feedcollector.collector import Collector, StopRequest, open_collector
from feedcollector.config import load_settings
from feedcollector.database import CountingDatabase, Database, Row, SqlValue, Statement
from feedcollector.errors import ConfigError, StorageError
from feedcollector.pipeline import run_cycle
from feedcollector.report import CycleReport, FeedOutcome
from feedcollector.retention import run_cleanup
from feedcollector.retention_daily import CLEANUP_LEASE, last_cleanup_at, take_cleanup
from feedcollector.schedule import feed_id_for
from feedcollector.timestamps import format_timestamp, parse_timestamp

from .feedserver import FeedServer
from .samples import Clock, Entry, rss, write_project
from .scheduling import execute, polite_project, stamp
from .test_cli import feedcollector
from .test_pipeline import Project

HANG_S = 120.0
"""Generous "did not hang" bound for a run of a few cycles."""


def wake_after_cycle(project: Project) -> timedelta:
    """Run one cycle, then ask the scheduler how long it would sleep."""

    async def go() -> timedelta:
        async with open_collector(load_settings(project.config), clock=project.clock) as collector:
            report = await run_cycle(collector)
            return await service.next_wake(collector, report.started, report)

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


def test_a_feed_aborted_by_a_storage_error_is_not_fetched_again_when_another_falls_due(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """A soak of the cloud shape: with S3 down, a feed aborted and handed back was claimed
    again by every cycle another feed's time woke, a few seconds apart (13 downloads of it in
    45 s, an ERROR each). After a cycle with an abort the service waits for the next poll."""
    aborted = feed_server.route("/aborted", body=rss([Entry("one", guid="1")]))
    soon = feed_server.route("/soon", body=rss([Entry("two", guid="2")]))
    p = polite_project(tmp_path, [aborted, soon])
    p.cycle()
    execute(p, "UPDATE feeds SET next_fetch_at = ? WHERE url = ?", stamp(p.clock()), aborted)
    due_soon = p.clock() + timedelta(seconds=5)
    execute(p, "UPDATE feeds SET next_fetch_at = ? WHERE url = ?", stamp(due_soon), soon)
    shutil.rmtree(tmp_path / "objects" / "backups")
    (tmp_path / "objects" / "backups").write_text("a file where the backups folder goes")
    feed_server.route("/aborted", body=rss([Entry("one", guid="1"), Entry("new", guid="3")]))

    assert wake_after_cycle(p) == service.POLL_INTERVAL, "not when the other feed falls due"
    assert len(feed_server.hits("/aborted")) == 2


def test_run_once_exits_1_when_storage_failing_stopped_a_cycle_that_stored_nothing() -> None:
    """A 304 among the feeds storage aborted is no abort, so "every feed aborted" no longer
    held, and ``run --once`` (or ``fetch``) ended 0 on a cycle that stored nothing."""
    started, why = Clock()(), "storage: cannot write backups/f/x.xml"
    stopped = CycleReport(started, feeds=4, aborted=3, not_modified=1, left=6, storage_failing=why)
    with pytest.raises(StorageError) as raised:
        service.refuse_storage_down(stopped)
    assert str(raised.value).startswith(
        "storage: 3 feeds this cycle refreshed were aborted by storage errors, and 6 more were "
        "left untried (logged above)"
    )

    some_stored = CycleReport(started, feeds=5, stored=2, aborted=3, left=5, storage_failing=why)
    service.refuse_storage_down(some_stored)  # what it stored is there; the next run probes again
    service.refuse_storage_down(CycleReport(started, feeds=7, stored=1, aborted=1, not_modified=5))


def test_run_once_exits_1_when_the_feeds_storage_aborted_were_all_it_had_to_store() -> None:
    """A missing bucket or a revoked key aborts every feed with a body to store; the others
    answer 304, whose bookkeeping goes to the database alone: "every feed aborted" did not
    hold, and a cron job saw exit 0 for as long as the outage lasted."""
    quiet = CycleReport(Clock()(), feeds=4, aborted=2, not_modified=1, unchanged=1)
    with pytest.raises(StorageError) as raised:
        service.refuse_storage_down(quiet)
    assert str(raised.value) == (
        "storage: 2 feeds this cycle refreshed were aborted by storage errors (logged above), "
        "and no feed was stored: the database or object store cannot be used now; the next run "
        "tries them again (an item of a batch the database took without answering is not "
        "stored twice)"
    )


def test_run_once_exits_1_when_a_locked_database_kept_it_from_claiming_feeds(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """Another process held the SQLite write lock past ``[database] timeout``: the cycle
    claimed nothing and stored nothing, and a cron job saw exit 0."""
    url = feed_server.route("/f", body=rss([Entry("1", guid="1")]))
    p = polite_project(tmp_path, [url])
    p.cycle()
    execute(p, "UPDATE feeds SET next_fetch_at = '2000-01-01T00:00:00Z'")
    text = p.config.read_text()
    p.config.write_text(text.replace("[database]\n", '[database]\ntimeout = "1s"\n'))
    holder = sqlite3.connect(tmp_path / "collector.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        done = feedcollector("--config", str(p.config), "run", "--once", cwd=tmp_path)
    finally:
        holder.close()
    assert done.returncode == 1, done.stderr
    assert "could not claim due feeds, the next cycle retries" in done.stderr
    assert "storage: the cycle could not claim its due feeds (database: " in done.stderr
    assert len(feed_server.hits("/f")) == 1, "the first cycle's request only"


def test_fetch_all_with_storage_failing_requests_a_few_feeds_and_exits_1(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """``fetch --all`` goes through the cycle's breaker: it stops after a few storage aborts,
    leaves the other feeds as they were, and exits 1 saying why."""
    urls = [feed_server.route(f"/f{n}", body=rss([Entry(f"{n}", guid=f"{n}")])) for n in range(8)]
    p = polite_project(tmp_path, urls, host_gap="0s", concurrency=1)
    (tmp_path / "objects").mkdir()
    (tmp_path / "objects" / "backups").write_text("a file where the backups folder goes")
    done = feedcollector("--config", str(p.config), "fetch", "--all", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    sent = sum(len(feed_server.hits(f"/f{n}")) for n in range(8))
    assert sent == STORAGE_TRIP_AFTER
    assert "storage: failing, so this cycle starts no more feeds" in done.stderr
    assert "all 3 feeds this cycle refreshed were aborted by storage errors, and 5 more" in (
        done.stderr
    )
    assert done.stderr.count("aborted for this cycle") == STORAGE_TRIP_AFTER
    rows = p.rows(
        "SELECT DISTINCT last_fetched_at, consecutive_failures, lease_owner, "
        "next_fetch_at <= strftime('%Y-%m-%dT%H:%M:%SZ', 'now') AS due FROM feeds"
    )
    assert rows == [
        {"last_fetched_at": None, "consecutive_failures": 0, "lease_owner": None, "due": 1}
    ], "every feed is as it was: never fetched, due now"


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


# --- the feeds file going bad while it runs -------------------------------------------------------


class Script:
    """A cycle observer that drives ``run``: after each cycle it moves the test clock past the
    feeds' 30-minute interval (so the next cycle fetches them again), runs that cycle's action,
    and stops the collector after ``cycles``."""

    def __init__(
        self, clock: Clock, cycles: int, actions: dict[int, Callable[[], None]] | None = None
    ) -> None:
        self.clock, self.cycles, self.actions = clock, cycles, actions or {}
        self.done = 0
        self.stopping: asyncio.Event | None = None

    def feed_done(self, outcome: FeedOutcome, report: CycleReport) -> None:
        pass

    def images_done(self, report: CycleReport) -> None:
        pass

    async def cycle_done(self, report: CycleReport, db: Database) -> None:
        self.done += 1
        self.clock.advance(minutes=31)
        self.actions.get(self.done, lambda: None)()
        if self.done >= self.cycles and self.stopping is not None:
            self.stopping.set()


def serve(project: Project, script: Script) -> None:
    """``run`` (the real scheduler loop, sleeps included) until the script stops it."""

    async def go() -> None:
        settings = load_settings(project.config)
        async with open_collector(settings, clock=project.clock, observer=script) as collector:
            script.stopping = collector.stopping
            await asyncio.wait_for(service.run_forever(collector), HANG_S)

    asyncio.run(go())


@pytest.mark.parametrize("damage", ["deleted", "replaced"])
def test_run_stops_when_its_database_file_is_deleted_or_replaced(
    feed_server: FeedServer, tmp_path: Path, damage: str
) -> None:
    """``run`` went on writing into the deleted file: status saw nothing, and everything was
    collected (and downloaded) again from scratch at the next start."""
    url = feed_server.route("/feed", body=rss([Entry("one", guid="1")]))
    p = polite_project(tmp_path, [url])
    database = tmp_path / "collector.db"

    def damage_it() -> None:
        database.rename(tmp_path / "moved.db")
        if damage == "replaced":
            database.write_bytes(b"")

    with pytest.raises(StorageError, match="was deleted or replaced while run was running"):
        serve(p, Script(p.clock, 3, {1: damage_it}))


BROKEN = {
    "invalid": lambda path: path.write_text("feeds:\n  - url: [oops\n"),
    "empty": lambda path: path.write_text(""),
    "deleted": lambda path: path.unlink(),
}


@pytest.mark.parametrize("damage", list(BROKEN))
def test_a_feeds_file_broken_while_running_keeps_the_known_feeds_collected(
    feed_server: FeedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    url = feed_server.route("/feed", body=rss([Entry("one", guid="1")]))
    p = polite_project(tmp_path, [url])
    feeds_file = tmp_path / "feeds.yaml"
    good = feeds_file.read_bytes()
    actions = {1: lambda: BROKEN[damage](feeds_file), 3: lambda: feeds_file.write_bytes(good)}
    caplog.set_level(logging.INFO, logger="feedcollector")

    serve(p, Script(p.clock, 4, actions))

    assert len(feed_server.hits("/feed")) == 4, "fetched in every cycle, the broken ones too"
    assert p.rows("SELECT active FROM feeds") == [{"active": 1}]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, errors
    assert "feeds.yaml" in errors[0]
    assert "still collecting the feeds already known" in errors[0]
    assert any("usable again" in r.getMessage() for r in caplog.records)


def test_run_refuses_to_start_on_a_broken_feeds_file(tmp_path: Path) -> None:
    config = polite_project(tmp_path, ["https://blog.example/feed"]).config
    (tmp_path / "feeds.yaml").write_text("feeds:\n  - url: [oops\n")
    done = subprocess.run(
        [sys.executable, "-m", "feedcollector", "--config", str(config), "run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert done.returncode == 2, done.stderr
    assert "feeds.yaml line 3" in done.stderr


# --- stopping during the daily cleanup ------------------------------------------------------------


class StoppedWhileDeleting(LocalObjectStore):
    """The real local store; SIGTERM (the collector's stop event) arrives while it deletes."""

    def __init__(self, root: Path, stopping: asyncio.Event) -> None:
        super().__init__(root)
        self.stopping = stopping

    async def delete_many(self, keys: Sequence[str]) -> None:
        await super().delete_many(keys)
        self.stopping.set()


class SignalledWhileDeleting(StoppedWhileDeleting):
    """As a real SIGTERM arrives: its handler is a callback the event loop runs when the
    cleanup lets it (on SQLite and a local folder nothing in the cleanup waits)."""

    async def delete_many(self, keys: Sequence[str]) -> None:
        await LocalObjectStore.delete_many(self, keys)
        asyncio.get_running_loop().call_soon(self.stopping.set)


@pytest.mark.parametrize("store", [StoppedWhileDeleting, SignalledWhileDeleting])
def test_a_stop_during_the_daily_cleanup_ends_it_after_the_chunk_at_hand(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, store: type[StoppedWhileDeleting]
) -> None:
    p = polite_project(tmp_path, ["https://blog.example/feed"])
    folder = tmp_path / "objects" / "backups" / feed_id_for("https://blog.example/feed")
    folder.mkdir(parents=True)
    old = p.clock() - timedelta(days=90)
    for n in range(2500):
        (folder / f"{format_timestamp(old + timedelta(minutes=n))}.xml").write_bytes(b"<rss/>")
    caplog.set_level(logging.INFO, logger="feedcollector")

    async def go() -> tuple[object, str | None]:
        async with open_collector(load_settings(p.config), clock=p.clock) as collector:
            collector.objects = store(tmp_path / "objects", collector.stopping)
            report = await service.cleanup_if_due(collector)
            return report, await last_cleanup_at(collector.db)

    report, last_done = asyncio.run(go())

    assert report is None
    assert len(list(folder.iterdir())) == 1500, "the first chunk of 1000 went, then it stopped"
    assert last_done is None, "not recorded as the day's cleanup: it is tried again"
    assert any("cleanup: stopped part-way" in r.getMessage() for r in caplog.records)


def test_signals_off_the_main_thread_keep_pythons_handling(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An event loop off the main thread takes no signal handlers (asyncio raises): the
    service still starts, says so at DEBUG, and has nothing to restore."""
    errors: list[BaseException] = []

    async def start_and_restore() -> None:
        restore = service._stop_on_signals(StopRequest())
        restore()

    def in_thread() -> None:
        try:
            asyncio.run(start_and_restore())
        except BaseException as exc:  # re-raised in the test's thread below
            errors.append(exc)

    with caplog.at_level(logging.DEBUG, logger="feedcollector"):
        worker = threading.Thread(target=in_thread)
        worker.start()
        worker.join()
    assert errors == []
    kept = [r.getMessage() for r in caplog.records if "keeps Python's default" in r.getMessage()]
    expected = [signal.Signals(signum).name for signum in service._stop_signals()]
    assert expected[:2] == ["SIGINT", "SIGTERM"]
    assert [message.split()[1] for message in kept] == expected


def test_sighup_stops_run_unless_the_process_was_started_to_ignore_it() -> None:
    """``nohup`` sets SIGHUP to be ignored, so a closed terminal does not stop the process:
    a handler would undo that. Otherwise SIGHUP stops it like SIGTERM."""
    before = signal.getsignal(signal.SIGHUP)
    try:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        assert service._stop_signals() == [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        assert service._stop_signals() == [signal.SIGINT, signal.SIGTERM]
    finally:
        signal.signal(signal.SIGHUP, before)


# --- the daily cleanup's failures: what the log says, what its lease is left as -------------------

T = TypeVar("T")
CLEANUP_STARTS = Clock().now
"""When the daily cleanup of these tests claims its lease (the tests' fixed clock)."""
OTHER = "web2:77:0badf00d"
"""Another collector (of another machine)."""


class Hooked(CountingDatabase):
    """A collector's real database; ``hook`` sees the SQL of each round trip (a batch's
    statements joined by "; ") before it is sent, to act at a known point as another process
    would (take the write lock, take over a lease)."""

    def __init__(self, inner: Database, hook: Callable[[str], None]) -> None:
        super().__init__(inner)
        self.hook = hook

    async def query(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        self.hook(sql)
        return await super().query(sql, params)

    async def batch(self, statements: Sequence[Statement]) -> list[list[Row]]:
        self.hook("; ".join(statement.sql for statement in statements))
        return await super().batch(statements)


class WriteLock:
    """Another process's SQLite write lock (a sqlite3 shell with a transaction open), taken
    before the first round trip whose SQL starts with or contains ``marker``, and held until
    :meth:`release`."""

    def __init__(self, database: Path, marker: str, *, starts: bool = False) -> None:
        self.database = database
        self.marker = marker
        self.starts = starts
        self.holder: sqlite3.Connection | None = None

    def hook(self, sql: str) -> None:
        found = sql.startswith(self.marker) if self.starts else self.marker in sql
        if self.holder is None and found:
            self.holder = sqlite3.connect(self.database, isolation_level=None)
            self.holder.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        assert self.holder is not None, "the lock was taken"
        self.holder.close()


def with_daily_collector(
    tmp_path: Path, clock: Clock, scenario: Callable[[Collector], Awaitable[T]]
) -> T:
    """``scenario`` with a collector whose ``[database] timeout`` is 0.3 s."""
    config = write_project(tmp_path, ["https://blog.example/feed"])
    config.write_text(config.read_text().replace("[database]\n", '[database]\ntimeout = "300ms"\n'))

    async def go() -> T:
        async with open_collector(load_settings(config), clock=clock) as collector:
            return await scenario(collector)

    return asyncio.run(go())


async def cleanup_row(db: Database) -> dict[str, object]:
    (row,) = await db.query(
        "SELECT lease_owner, lease_until, last_done_at FROM maintenance WHERE task = 'cleanup'"
    )
    return row


async def restore_refused(db: Database, now: datetime) -> str | None:
    """A restore's refusal now, or None when it could start (it lets go at once)."""
    try:
        lease = await held_lease.take(db, leases.RESTORE, owner=OTHER, now=now, command="restore")
    except ConfigError as exc:
        return str(exc)
    await lease.release()
    return None


def logged(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


def test_a_daily_cleanup_that_could_not_be_claimed_is_tried_again_next_cycle(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The claim itself failed (another process held the SQLite write lock past ``[database]
    timeout``): nothing was claimed, yet the log said it was tried again within the hour."""
    lock = WriteLock(tmp_path / "collector.db", "SET lease_owner = ?, lease_until = ?")

    async def scenario(collector: Collector) -> tuple[object, list[Row], object]:
        collector.db = Hooked(collector.db, lock.hook)
        failed = await service.cleanup_if_due(collector)
        lock.release()
        claimed = await collector.db.query("SELECT * FROM maintenance")
        return failed, claimed, await service.cleanup_if_due(collector)

    with caplog.at_level(logging.INFO, logger="feedcollector"):
        failed, claimed, next_cycle = with_daily_collector(tmp_path, Clock(), scenario)

    assert (failed, claimed) == (None, []), "nothing claimed, nothing run"
    assert next_cycle is not None, "the next cycle claims it and runs it"
    (error,) = logged(caplog, logging.ERROR)
    assert error.startswith(
        "cleanup: could not ask the database whether the daily cleanup is due, so none started; "
        "the next cycle asks again: database: SQLite "
    ), error
    assert "within the hour" not in error


def test_a_service_asks_for_the_daily_cleanup_again_only_once_it_is_due(tmp_path: Path) -> None:
    """The claim is a batch of four statements (a request to D1): once a claim finds the
    day's cleanup done, the cycles before the next is due send none. A cleanup by hand moves
    the next one later, and the claim at the remembered time finds that."""
    clock = Clock()

    async def scenario(collector: Collector) -> list[tuple[bool, int]]:
        counting = CountingDatabase(collector.db)
        collector.db = counting
        seen: list[tuple[bool, int]] = []

        async def cycle(**later: float) -> None:
            clock.advance(**later)
            before = counting.round_trips
            ran = await service.cleanup_if_due(collector) is not None
            seen.append((ran, counting.round_trips - before))

        await cycle()  # the first cleanup runs
        await cycle(minutes=1)  # the claim finds it done: when is the next one due?
        await cycle(minutes=1)
        await cycle(hours=12)
        await take_cleanup(collector.db, now=clock(), owner="by hand")
        await retention_daily.record_cleanup(collector.db, started_at=clock(), owner="by hand")
        await cycle(hours=12)  # due as remembered: the claim finds the cleanup by hand
        await cycle(hours=11)
        await cycle(hours=1, seconds=1)
        return seen

    seen = with_daily_collector(tmp_path, clock, scenario)

    (ran, _), *later = seen
    assert ran
    assert [(ran, trips > 0) for ran, trips in later] == [
        (False, True),
        (False, False),
        (False, False),
        (False, True),
        (False, False),
        (True, True),
    ]


def test_a_daily_cleanup_that_lost_its_lease_says_it_tries_again_by_itself(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its lease taken over by another collector (ours ran out while this process was
    suspended), the daily cleanup stops, and said "Run cleanup again" though it retries by
    itself; ``cleanup`` by hand still says so."""
    database = tmp_path / "collector.db"
    armed = [True]

    def take_over(sql: str) -> None:
        if armed[0] and "SET lease_until = ? WHERE task = ? AND lease_owner = ?" in sql:
            armed[0] = False
            with contextlib.closing(sqlite3.connect(database)) as conn, conn:
                conn.execute(
                    "UPDATE maintenance SET lease_owner = ? WHERE task = 'cleanup'", (OTHER,)
                )

    async def scenario(collector: Collector) -> tuple[object, str]:
        collector.db = Hooked(collector.db, take_over)
        daily = await service.cleanup_if_due(collector)
        await collector.db.query("UPDATE maintenance SET lease_owner = NULL, lease_until = NULL")
        now = collector.clock()
        await take_cleanup(collector.db, now=now, owner=collector.owner)
        armed[0] = True
        retain = collector.settings.retention
        with pytest.raises(held_lease.LeaseLost) as by_hand:
            await run_cleanup(
                collector.db,
                collector.objects,
                now=now,
                item_days=retain.item_days,
                backup_days=retain.backup_days,
                owner=collector.owner,
            )
        return daily, str(by_hand.value)

    with caplog.at_level(logging.INFO, logger="feedcollector"):
        daily, by_hand = with_daily_collector(tmp_path, Clock(), scenario)

    assert daily is None
    (error,) = logged(caplog, logging.ERROR)
    assert error.startswith("cleanup: stopped, its cleanup lease is no longer its own"), error
    assert error.endswith(
        "The daily cleanup is tried again by itself once its lease is free (within the hour), "
        "unless the process that holds it now finishes it; nothing needs doing by hand"
    ), error
    assert "Run cleanup again" not in error
    assert by_hand.startswith("cleanup: stopped, its cleanup lease is no longer its own")
    assert by_hand.endswith("Run cleanup again"), by_hand


def test_a_daily_cleanup_done_but_not_recorded_leaves_no_live_lease(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The record after the cleanup failed: the lease kept its owner for an hour (restores and
    cleanups by hand refused, naming a collector that cleaned nothing), and the log said the
    cleanup had stopped. Its deletes are over, so it lets go first, its time kept as the daily
    run's wait."""
    lock = WriteLock(tmp_path / "collector.db", "last_done_at = ?")
    clock = Clock(CLEANUP_STARTS)

    async def scenario(collector: Collector) -> tuple[object, dict[str, object], str | None]:
        collector.db = Hooked(collector.db, lock.hook)
        report = await service.cleanup_if_due(collector)
        lock.release()
        clock.advance(minutes=1)
        return report, await cleanup_row(collector.db), await restore_refused(collector.db, clock())

    with caplog.at_level(logging.INFO, logger="feedcollector"):
        report, row, refused = with_daily_collector(tmp_path, clock, scenario)

    assert report is not None, "it was done"
    assert row["lease_owner"] is None, "let go"
    assert row["lease_until"] is not None, "its time kept: the daily run's wait"
    assert row["last_done_at"] is None
    assert refused is None, "a restore need not wait"
    (error,) = logged(caplog, logging.ERROR)
    assert error.startswith(
        "cleanup: its deletes are done, but recording the cleanup failed, so it does not count "
        "as the day's one and the daily cleanup may run again within the hour (finding little "
        "left to delete): database: SQLite "
    ), error


def test_a_lease_the_daily_cleanup_could_not_let_go_of_is_let_go_at_the_next_cycle(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Neither the letting go nor the record got through (the write lock held past the
    timeout): the lease can only run out, an hour later. Meanwhile a refusal says it is not
    renewed, and the collector's next cycle lets go of it once the database answers."""
    lock = WriteLock(
        tmp_path / "collector.db", "UPDATE maintenance SET lease_owner = NULL", starts=True
    )
    clock = Clock(CLEANUP_STARTS)

    async def scenario(collector: Collector) -> list[object]:
        collector.db = Hooked(collector.db, lock.hook)
        seen: list[object] = [await service.cleanup_if_due(collector)]
        lock.release()
        seen.append(await cleanup_row(collector.db))
        clock.advance(minutes=5)
        seen.append(await restore_refused(collector.db, clock()))
        seen.append(await service.cleanup_if_due(collector))
        seen.append(await cleanup_row(collector.db))
        seen.append(await restore_refused(collector.db, clock()))
        return [*seen, collector.owner]

    with caplog.at_level(logging.INFO, logger="feedcollector"):
        report, left, refusal, next_cycle, row, refused, owner = with_daily_collector(
            tmp_path, clock, scenario
        )

    assert report is not None
    assert isinstance(left, dict)
    assert left["lease_owner"] == owner, "nothing got through"
    until = str(left["lease_until"])
    renewed = format_timestamp(parse_timestamp(until) - CLEANUP_LEASE)
    assert refusal == (
        "restore: refused, a retention cleanup (the daily one of `run`, or `cleanup`) is under "
        f"way: collector {owner} holds its lease until {until}, though it last renewed it at "
        f"{renewed} (one at work does every minute: its work may have ended without letting go, "
        "the database not answering then, or that process is stuck or gone) (the cleanup "
        "deletes old backups, which the restore replays, and old items, whose images it may be "
        "linking). Wait for it to finish, then run restore again; if that process is dead, its "
        f"lease runs out at {until} (a process at work renews it every minute)"
    )
    assert next_cycle is None, "it waits out its lease's time, as after a failure"
    assert row == {"lease_owner": None, "lease_until": until, "last_done_at": None}
    assert refused is None
    (warning,) = logged(caplog, logging.WARNING)
    assert warning.startswith(
        f"cleanup: its cleanup lease could not be let go (it runs out at {until})"
    )
