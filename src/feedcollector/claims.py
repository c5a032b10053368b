"""Which feeds a cycle refreshes: the feeds file synced into the ``feeds`` table, then the due
ones (or the ones a manual fetch names) claimed a page at a time with a lease, so that no other
collector fetches them meanwhile. Before the claims, this process catches up with what others
left in the database: the hosts a 429 still defers, and the leases of stopped collectors."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from . import store, store_images, store_schedule, store_sync
from .clock_step import clock_mark_key, settle_clock
from .collector import Collector
from .config import load_feeds
from .database import Database, Statement
from .feeds_file import feeds_file_digest
from .image_stage import image_lease, page_size
from .maintenance_leases import LONGEST_LEASE as LONGEST_MAINTENANCE_LEASE
from .models import Feed
from .owners import owner_has_stopped, owner_host
from .politeness import host_key
from .report import CycleReport, counted
from .timestamps import format_timestamp, parse_timestamp

log = logging.getLogger("feedcollector")

FEED_LEASE = timedelta(minutes=15)
"""How long a claimed feed stays reserved at least; a crashed collector's feeds come back after
it. A longer ``[fetch] deadline`` lengthens it (:func:`feed_lease`)."""


def feed_lease(collector: Collector) -> timedelta:
    """How long this collector's claims hold a feed: :data:`FEED_LEASE`, or twice ``[fetch]
    deadline`` when that is longer, so a fetch may use its whole deadline (and the parse and
    store after it) before another collector may take the feed."""
    return max(FEED_LEASE, 2 * collector.settings.fetch.deadline)


FEEDS_FILE_DIGEST = "feeds_file_sha256"
FEEDS_FILE_SYNCED_BY = "feeds_file_synced_by"
"""The collector that last synced the feeds file (``collector_state`` keys)."""
PARTLY = "partly:"
"""Before a digest whose file was synced without taking feeds off (another collector's file
lists feeds this one does not): the next collector with that file syncs it again, whole once
no other file is in the way."""
ANOTHER_FILE_WINDOW = timedelta(minutes=10)
"""How lately another live collector must have synced a different feeds file for this one to
leave the feeds only that file lists scheduled."""


@dataclass(frozen=True, slots=True)
class LastSync:
    digest: str | None
    owner: str | None
    """The collector that synced it (an owner, see :mod:`.owners`)."""
    file: str | None
    """The feeds file it synced, as that collector's path."""
    at: str | None
    clock_mark: str | None = None
    """The clock mark of the machine asked for (:mod:`.clock_step`), read in the same query."""


async def last_feeds_sync(db: Database, clock_key: str = "") -> LastSync:
    """The feeds file last synced into this database, by which collector, when; and the clock
    mark under ``clock_key``."""
    rows = await db.query(
        "SELECT key, value, updated_at FROM collector_state WHERE key IN (?, ?, ?)",
        (FEEDS_FILE_DIGEST, FEEDS_FILE_SYNCED_BY, clock_key),
    )
    found = {row["key"]: row for row in rows}
    digest, synced_by = found.get(FEEDS_FILE_DIGEST), found.get(FEEDS_FILE_SYNCED_BY)
    mark = found.get(clock_key)
    owner = file = at = None
    if synced_by is not None:
        owner, _, file = str(synced_by["value"]).partition(" ")
        at = str(synced_by["updated_at"])
    return LastSync(
        None if digest is None else str(digest["value"]),
        owner,
        file,
        at,
        None if mark is None else str(mark["value"]),
    )


async def record_feeds_sync(
    db: Database, digest: str, owner: str, file: str, now: datetime
) -> None:
    upsert = (
        "INSERT INTO collector_state (key, value, updated_at) VALUES (?, ?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at"
    )
    stamp = format_timestamp(now)
    await db.batch(
        [
            Statement(upsert, (FEEDS_FILE_DIGEST, digest, stamp)),
            Statement(upsert, (FEEDS_FILE_SYNCED_BY, f"{owner} {file}", stamp)),
        ]
    )


def another_feeds_file(
    last: LastSync, digest: str | None, owner: str, file: str, now: datetime
) -> bool:
    """Whether another collector, still running, synced a different feeds file into this
    database lately: two files, two truths. Each removing the feeds only the other lists made
    them flip every minute, fetched (also a 410 Gone one) at every flip. The same file of the
    same machine is one truth, edited since (a ``fetch`` beside ``run``)."""
    if last.owner is None or last.at is None or last.owner == owner:
        return False
    if last.digest is not None and last.digest.removeprefix(PARTLY) == digest:
        return False
    if (owner_host(last.owner), last.file) == (owner_host(owner), file):
        return False
    if owner_has_stopped(last.owner):
        return False
    return now - parse_timestamp(last.at) < ANOTHER_FILE_WINDOW


async def sync_feeds_file(collector: Collector, now: datetime) -> None:
    """Make the ``feeds`` table follow the feeds file; an unchanged file is not even parsed.

    The file's SHA-256 is kept in the database after each sync, so the usual cycle costs one
    hash and one query instead of a YAML parse and a read of every feed row (about 80-130 us
    per feed). A file that cannot be read is left to :func:`load_feeds` to explain. While
    another collector syncs a different file into the database (:func:`another_feeds_file`),
    the feeds only that file lists stay scheduled, and a WARNING says so once a process.

    The same query reads this machine's clock mark: every cycle starts here, and a clock that
    went back is settled before anything is claimed (:func:`.clock_step.settle_clock`); the
    cycle's end writes the mark again when it is due.
    """
    path = collector.settings.feeds_file
    digest = feeds_file_digest(path)
    clock_key = clock_mark_key(collector.owner)
    last = await last_feeds_sync(collector.db, clock_key)
    await _settle_the_clock(collector, clock_key, last.clock_mark, now)
    if digest is not None and digest == last.digest:
        return
    specs = load_feeds(path)
    shared = another_feeds_file(last, digest, collector.owner, str(path), now)
    sync = await store_sync.sync_feeds(collector.db, specs, now, keep_unlisted=shared)
    if sync.kept and not collector.warned_of_another_file:
        collector.warned_of_another_file = True
        log.warning(
            "schedule: another collector (%s) syncs a different feeds file into this "
            "database: feeds %s does not list stay scheduled (%d) until no other file is in "
            "the way. Give every collector sharing a database the same feeds file",
            last.owner,
            path,
            sync.kept,
        )
    if sync.removed and not specs:  # an editor's slip as often as a wish: said louder
        log.warning(
            "schedule: the feeds file %s lists no feeds now: all %d feeds were removed from "
            "the schedule (their items, images and backups are kept; put them back to fetch "
            "them again)",
            path,
            sync.removed,
        )
    elif sync.added or sync.removed or sync.reactivated or sync.changed:
        log.info(
            "schedule: feeds file synced: %d added, %d reactivated, %d changed (title or "
            "interval), %d removed (kept, not scheduled)",
            sync.added,
            sync.reactivated,
            sync.changed,
            sync.removed,
        )
    for old, new in sync.renamed:
        log.info("schedule: %s is now listed as %s: the same feed, its items kept", old, new)
    for added, holder in sync.twins:
        log.warning(
            "schedule: %s is listed again beside %s, where it moved: two feeds now, both "
            "fetching the same document (its items stored twice). Keep one of them in %s",
            added,
            holder,
            path,
        )
    if digest is not None:
        synced = PARTLY + digest if sync.kept else digest
        await record_feeds_sync(collector.db, synced, collector.owner, str(path), now)


async def _settle_the_clock(
    collector: Collector, key: str, mark: str | None, now: datetime
) -> None:
    """This machine's clock against its mark (:mod:`.clock_step`), and this process's against
    its monotonic clock: stored times moved back when it went back, and what the process
    keeps by the wall clock forgotten."""
    collector.clock_mark = mark
    went_back_here = collector.wall_clock_went_back(now)
    images = collector.settings.images
    moved = await settle_clock(
        collector.db,
        key,
        mark,
        now,
        longest_retry_after=collector.schedule_policy.max_retry_after,
        longest_lease=max(
            feed_lease(collector),
            image_lease(page_size(images.concurrency), images.concurrency, images.deadline),
            LONGEST_MAINTENANCE_LEASE,
        ),
    )
    if moved is not None:
        collector.clock_mark = format_timestamp(now)
    if moved is not None or went_back_here:
        collector.forget_wall_clock_state()


async def defer_rate_limited_hosts(collector: Collector, now: datetime) -> None:
    """Defer, in this process's per-host gate, the hosts whose 429 Retry-After still runs
    (asked of any collector, in any cycle), so a new process keeps honouring them too."""
    for limit in await store_schedule.live_rate_limits(collector.db, now):
        collector.hosts.defer(host_key(limit.asked_by), parse_timestamp(limit.until))


async def take_back_stopped_leases(collector: Collector, now: datetime) -> None:
    """Let go of the feed leases of collectors of this machine whose process has stopped
    (killed, or left while the database did not answer), once a process: their feeds
    waited for the leases to run out (15 minutes), and a `run --once` from cron skipped
    them in silence. Their image tasks too: those waited for their lease (half an hour at
    the defaults), no cycle downloading them. Maintenance leases are let go the same way
    (:mod:`.maintenance_leases`)."""
    if collector.stopped_leases_checked:
        return
    host = owner_host(collector.owner)
    for owner in await store_schedule.lease_owners_of_host(collector.db, host, now):
        await _take_back_from(collector, owner)
    for owner in await store_images.image_lease_owners_of_host(collector.db, host, now):
        await _take_back_from(collector, owner, images=True)
    collector.stopped_leases_checked = True


async def _take_back_from(collector: Collector, owner: str | None, *, images: bool = False) -> bool:
    """Hand back every feed (or image task) ``owner`` holds when it is a stopped collector of
    this machine."""
    if owner is None or owner == collector.owner or not owner_has_stopped(owner):
        return False
    if images:
        count = await store_images.release_owned_image_tasks(collector.db, owner)
    else:
        count = await store_schedule.release_owned_feeds(collector.db, owner)
    log.warning(
        "%s: took back %s from collector %s of this machine, whose process stopped "
        "without letting go (killed?)",
        "images" if images else "schedule",
        counted(count, "image task" if images else "feed"),
        owner,
    )
    return True


async def due_pages(
    collector: Collector, due_by: datetime, lease: timedelta
) -> AsyncIterator[list[Feed]]:
    """The feeds due by ``due_by``, claimed a page at a time for ``lease``, until none is left
    or the collector is stopping."""
    collector.claims_feeds = True
    cursor = store.ClaimCursor()
    while not collector.stopping.is_set():
        page = await store.claim_due_feeds(
            collector.db,
            due_by=due_by,
            now=collector.clock(),
            owner=collector.owner,
            lease=lease,
            limit=collector.page_size,
            after=cursor,
        )
        if not page:
            return
        cursor = store.ClaimCursor(page[-1].next_fetch_at or "", page[-1].id)
        yield page


async def forced_pages(
    collector: Collector, urls: Sequence[str] | None, report: CycleReport, lease: timedelta
) -> AsyncIterator[list[Feed]]:
    """A manual fetch: the feeds now, whatever their schedule, backoff or 410 (a running
    Retry-After still holds); a feed another collector is fetching right now is skipped."""
    collector.claims_feeds = True
    ids = await store.active_feed_ids(collector.db, urls)
    report.feeds_due = len(ids)
    for start in range(0, len(ids), collector.page_size):
        if collector.stopping.is_set():
            return
        chunk = ids[start : start + collector.page_size]
        page = await store.claim_feeds_by_id(
            collector.db, chunk, now=collector.clock(), owner=collector.owner, lease=lease
        )
        held = await _held(collector.db, chunk, page)
        # A killed `fetch` held feeds that are not due, which the start's take-back (due
        # feeds only) left to it: its rerun skipped them for the lease's 15 minutes.
        owners = dict.fromkeys(entry.owner for entry in held)
        if [owner for owner in owners if await _take_back_from(collector, owner)]:
            page += await store.claim_feeds_by_id(
                collector.db,
                [entry.id for entry in held],
                now=collector.clock(),
                owner=collector.owner,
                lease=lease,
            )
            held = await _held(collector.db, chunk, page)
        for entry in held:
            log.warning("fetch: %s skipped: %s", entry.url, _holder(entry))
        yield page


async def _held(
    db: Database, chunk: Sequence[str], page: Sequence[Feed]
) -> list[store_schedule.HeldFeed]:
    """The feeds of ``chunk`` that the claim of ``page`` could not take, with their holders."""
    taken = {feed.id for feed in page}
    busy = [feed_id for feed_id in chunk if feed_id not in taken]
    return await store_schedule.held_feeds(db, busy) if busy else []


def _holder(held: store_schedule.HeldFeed) -> str:
    """Who holds the feed, in words: a collector killed while it held feeds leaves their
    leases to run out, and "another collector is fetching it" sent its user looking for a
    process that was not there."""
    until = f" until {held.until}" if held.until else ""
    if held.owner and owner_has_stopped(held.owner):
        return (
            f"its lease{until} belongs to collector {held.owner} of this machine, whose process "
            "has stopped without letting go (killed?); the feed is free when the lease runs out"
        )
    return f"collector {held.owner} holds it{until} (fetching it now, or stopped before it let go)"
