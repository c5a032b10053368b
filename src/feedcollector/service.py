"""The long-running scheduler behind ``feedcollector run``.

Each cycle re-reads the feeds file (a bad one is logged, and the feeds already known are
still collected), refreshes the due feeds and downloads pending images, runs
the retention cleanup when the last one is a day old, then sleeps until the next feed falls
due (at most ``POLL_INTERVAL``, so feeds added to the file are picked up quickly). Ctrl-C or
SIGTERM stops claiming new work, lets in-flight feeds finish and write their state, then
returns; the database (a hung D1 Worker, another process's SQLite write lock) is waited for
``STOP_PATIENCE`` at most in all, and a second Ctrl-C exits at once. :func:`serve` handles
them from before the database is opened, so a collector stopped while it starts stops cleanly.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import datetime, timedelta
from pathlib import Path

from . import retention, retention_daily, store
from .backends.sqlite import file_identity
from .claims import sync_feeds_file
from .collector import (
    STOP_PATIENCE,
    Collector,
    StopRequest,
    open_collector,
    termination_signals,
)
from .config import Settings
from .errors import ConfigError, StorageError
from .held_lease import LeaseLost
from .pipeline import run_cycle
from .report import CycleObserver, CycleReport
from .retention import CleanupReport
from .timestamps import parse_timestamp

log = logging.getLogger("feedcollector")

POLL_INTERVAL = timedelta(seconds=60)
REMIND_EVERY = timedelta(hours=1)
"""How often ``run`` repeats the ERROR about a feeds file that stays unusable."""


async def serve(
    settings: Settings,
    work: Callable[[Collector], Awaitable[None]],
    *,
    observer: CycleObserver | None = None,
) -> None:
    """Open the collector and run ``work`` (:func:`run_forever`, :func:`run_once`), with
    Ctrl-C and SIGTERM handled from before the database is opened until it is closed.

    A stop asked for while the collector starts lets the step at hand end (a migration is one
    transaction, never cut short), waits for the database ``STOP_PATIENCE`` at most, and
    ``work`` then starts nothing: a service manager stopping a collector that is still
    starting sees it exit 0, not die by the signal. A second Ctrl-C exits at once."""
    stop = StopRequest()
    restore = _stop_on_signals(stop)
    try:
        async with AsyncExitStack() as opened:
            try:
                collector = await opened.enter_async_context(
                    open_collector(settings, observer=observer, stop=stop)
                )
            except StorageError:
                if not (stop.stopping.is_set() and stop.gave_up_on_database):
                    raise
                log.info(
                    "run: stopped while starting: the migration waiting for the database was "
                    "given up (see above); each is one transaction, none is half applied"
                )
                return
            # As with_collector does: what start-up built lives as long as the process.
            gc.freeze()
            stop.started = True
            await work(collector)
    finally:
        restore()


async def run_forever(collector: Collector) -> None:
    """Cycle until asked to stop (its ``stopping``: see :func:`serve`). A feeds file that
    cannot be used at start is fatal (exit 2); later it is logged and the known feeds are
    still collected (:class:`FeedsFileWatch`). A storage outage skips a cycle; a SQLite file
    deleted or replaced under it is fatal."""
    feeds_file = FeedsFileWatch()
    database_file = _database_file(collector)
    opened = file_identity(str(database_file)) if database_file else None
    while not collector.stopping.is_set():
        if database_file is not None and file_identity(str(database_file)) != opened:
            raise StorageError(
                f"storage: the database file {database_file} was deleted or replaced "
                "while run was running: what it collected went to the old file, which "
                "nothing else reads. Put the file back, or start feedcollector again to "
                "use the new one (a restore from the backups rebuilds a lost database)"
            )
        started = collector.clock()
        report: CycleReport | None = None
        try:
            await feeds_file.sync(collector, started)
            report = await run_cycle(collector, sync=False, images_yield=True)
            started = report.started
        except StorageError as exc:
            log.error("%s (this cycle skipped; the next cycle retries)", exc)
        if not _storage_troubled(report):  # else wait for storage to answer again
            await cleanup_if_due(collector)
        if collector.stopping.is_set():  # no sleep ahead: asking when to wake is a wait
            break
        await _sleep(collector, await next_wake(collector, started, report))
    if collector.gave_up_on_database:
        log.info("run: stopped, without the database's last answers (see above)")
    else:
        log.info("run: stopped cleanly")


def _database_file(collector: Collector) -> Path | None:
    """The SQLite file ``run`` keeps open (None on D1)."""
    database = collector.settings.database
    return database.path if database.backend == "sqlite" else None


class FeedsFileWatch:
    """Follows the feeds file before each cycle of ``run``. Until it has been synced once, a
    file that cannot be used raises (``run`` exits 2, as every command does). After that, such a
    file (invalid, empty, deleted, half-written by an editor) is logged and the cycle goes on
    with the feeds the database already knows: an ERROR when the problem is new or changes,
    then once every ``REMIND_EVERY`` while it lasts (the file is re-read every cycle), and an
    INFO line once the file is good again."""

    def __init__(self) -> None:
        self.synced = False
        self.problem: str | None = None
        self._logged_at = 0.0

    async def sync(self, collector: Collector, now: datetime) -> None:
        try:
            await sync_feeds_file(collector, now)
        except ConfigError as exc:
            if not self.synced:
                raise
            problem = str(exc)
            stale = time.monotonic() - self._logged_at >= REMIND_EVERY.total_seconds()
            if problem != self.problem or stale:
                log.error(
                    "%s (still collecting the feeds already known; every cycle re-reads the file)",
                    problem,
                )
                self._logged_at = time.monotonic()
            self.problem = problem
            return
        self.synced = True
        if self.problem is not None:
            log.info("config: the feeds file %s is usable again", collector.settings.feeds_file)
            self.problem = None


async def run_once(collector: Collector) -> None:
    """``run --once``: one cycle, then the daily cleanup if it is due (for cron set-ups).

    SIGTERM (a timer unit stopping) and Ctrl-C finish the in-flight feeds here too, and one
    that came while the collector started (:func:`serve`) leaves the cycle out."""
    if collector.stopping.is_set():
        log.info("run: stopped while starting, before its cycle")
        return
    report = await run_cycle(collector)
    await cleanup_if_due(collector)
    refuse_storage_down(report)


def refuse_storage_down(report: CycleReport) -> None:
    """Raise StorageError when feeds the cycle refreshed were aborted by one and none was
    stored (the others answered 304 or sent the body stored last time, whose bookkeeping goes
    to the database alone), or storage failing stopped the cycle before any feed was stored
    (its feeds could not even be claimed: a locked or unreachable database): a revoked key, a
    missing bucket or a full disk stops every feed alike, and ``run --once`` (or ``fetch``)
    ended 0 each time, nothing in ``status``, every body downloaded again. One feed aborted
    among feeds stored is a passing fault, its error logged: the cycle still succeeds."""
    every_one = report.aborted == report.feeds - report.deferred
    stopped = report.storage_failing is not None and not report.stored
    if report.aborted and not report.stored:
        what = "all " if every_one else ""
        left = f", and {report.left} more were left untried" if report.left else ""
        raise StorageError(
            f"storage: {what}{report.aborted} feeds this cycle refreshed were aborted by "
            f"storage errors{left} (logged above), and no feed was stored: the database or "
            "object store cannot be used now; the next run tries them again (an item of a "
            "batch the database took without answering is not stored twice)"
        )
    if stopped:  # no feed even claimed (a database locked or unreachable)
        raise StorageError(
            f"storage: the cycle could not claim its due feeds ({report.storage_failing}); "
            "nothing was stored, the next run tries again"
        )


async def cleanup_if_due(collector: Collector) -> CleanupReport | None:
    """The daily retention run, by whichever collector claims it first once a day is over.

    A claim the database does not answer took nothing: the next cycle asks again. A cleanup
    that fails lets go of its claim but keeps its time, so it is retried within the hour
    rather than on every cycle. So does SIGTERM or Ctrl-C: the cleanup stops after the chunk
    of backups or page of items at hand (a sweep of a month of backups, or the first cleanup
    of a large archive, can take longer than a service manager waits). A cleanup done but not
    recorded returns its report, and may run again within the hour. Once a claim finds the
    day's cleanup done, the database is not asked again until the next is due: on D1 the
    claim is a request of four statements, and a service's cycles may be a minute apart.
    """
    now = collector.clock()
    not_before = collector.cleanup_not_due_before
    if collector.stopping.is_set() or (not_before is not None and now < not_before):
        return None
    try:
        claim = await retention_daily.claim_cleanup(collector.db, now=now, owner=collector.owner)
        collector.cleanup_not_due_before = claim.not_due_before
        if not claim.taken:
            return None
    except StorageError as exc:
        log.error(
            "cleanup: could not ask the database whether the daily cleanup is due, so none "
            "started; the next cycle asks again: %s",
            exc,
        )
        return None
    retain = collector.settings.retention
    try:
        report = await retention.run_cleanup(
            collector.db,
            collector.objects,
            now=now,
            item_days=retain.item_days,
            backup_days=retain.backup_days,
            progress=_stop_between_chunks(collector.stopping),
            owner=collector.owner,
            daily=True,
        )
    except LeaseLost as exc:  # says what happens next
        log.error("%s", exc)
        return None
    except StorageError as exc:
        log.error("cleanup: the daily cleanup stopped; it is tried again within the hour: %s", exc)
        return None
    except _Stopped:
        log.info("cleanup: stopped part-way, as asked; it is tried again within the hour")
        return None
    log.info("%s", report.summary())
    try:
        await retention_daily.record_cleanup(collector.db, started_at=now, owner=collector.owner)
    except StorageError as exc:
        log.error("%s", exc)
    return report


class _Stopped(Exception):
    """The collector was asked to stop while the cleanup ran."""


def _stop_between_chunks(stopping: asyncio.Event) -> Callable[[CleanupReport], None]:
    """A cleanup progress hook that ends the cleanup once ``stopping`` is set; it is called
    after each chunk of backups and each page of items, where stopping leaves nothing half
    done."""

    def check(_report: CleanupReport) -> None:
        if stopping.is_set():
            raise _Stopped

    return check


async def next_wake(collector: Collector, since: datetime, report: CycleReport | None) -> timedelta:
    """How long to sleep after the cycle that started at ``since`` (``report``, None when a
    storage error skipped it): until the first feed due after that, and at most
    ``POLL_INTERVAL``.

    A feed that was due when the cycle started and is due still was that cycle's to take:
    its work was aborted by a storage error (a full disk, a locked database), or another
    collector (or a killed one, until its lease ends) holds it. Waking at once for it
    would run a cycle a second, downloading such feeds again each time; the next poll retries.
    After a cycle storage troubled (skipped, or a feed aborted) the next poll it is, whatever
    falls due sooner: such a feed, handed back and due still, was claimed again by every cycle
    another feed's time woke (a dozen downloads of it in a 45 s outage, an ERROR each).
    """
    if _storage_troubled(report):
        return POLL_INTERVAL
    try:
        due = await store.next_due_at(collector.db, after=since)
    except StorageError:
        return POLL_INTERVAL
    if due is None:
        return POLL_INTERVAL
    return min(POLL_INTERVAL, _until(parse_timestamp(due), collector.clock()))


def _storage_troubled(report: CycleReport | None) -> bool:
    """Whether a storage error skipped the cycle (no ``report``), aborted a feed of it or
    kept it from claiming feeds."""
    return report is None or report.aborted > 0 or report.storage_failing is not None


async def _sleep(collector: Collector, delay: timedelta) -> None:
    """Sleep ``delay`` (at least a second), or until asked to stop."""
    try:
        await asyncio.wait_for(collector.stopping.wait(), timeout=max(delay.total_seconds(), 1.0))
    except TimeoutError:
        return


def _until(moment: datetime, now: datetime) -> timedelta:
    return max(moment - now, timedelta(0))


def _stop_signals() -> list[int]:
    """SIGINT and :func:`.collector.termination_signals` (SIGHUP killed the process
    mid-fetch, its feeds then skipped by the next one until their lease ran out)."""
    return [signal.SIGINT, *termination_signals()]


def _stop_on_signals(stop: StopRequest) -> Callable[[], None]:
    """First SIGINT/SIGTERM/SIGHUP: finish in-flight work (the feeds, or while starting the step at
    hand), waiting for the database ``STOP_PATIENCE`` at most in all (a hung D1 Worker held
    each request of the stop for the whole ``[database] timeout``, one after another); second
    SIGINT: exit now, without waiting for the database at all (handing back the leases was
    such a request)."""
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()

    def request_stop(signum: int) -> None:
        if stop.stopping.is_set() and signum == signal.SIGINT and main_task is not None:
            log.warning("run: second interrupt, exiting now")
            stop.stop_waiting(timedelta(0))
            main_task.cancel()
            return
        if stop.stopping.is_set():  # a second SIGTERM: the stop is under way, said once
            return
        stop.stopping.set()
        stop.stop_waiting(STOP_PATIENCE)
        waits_for = "in-flight feeds finish" if stop.started else "the start-up step at hand"
        log.info("run: stopping after %s (Ctrl-C again to exit at once)", waits_for)

    handled = []
    for signum in _stop_signals():
        try:
            loop.add_signal_handler(signum, request_stop, signum)
        except (NotImplementedError, RuntimeError):
            log.debug(
                "run: %s keeps Python's default handling (this event loop takes no signal "
                "handlers: Windows, or not the main thread)",
                signal.Signals(signum).name,
            )
        else:
            handled.append(signum)

    def restore() -> None:
        for signum in handled:
            loop.remove_signal_handler(signum)

    return restore
