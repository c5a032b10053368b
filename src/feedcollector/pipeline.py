"""The collection cycle: the only module that knows the order of the stages.

config -> schedule -> fetch -> backup -> decode -> parse -> spill -> store -> images.
``refresh_feed`` reads one feed's whole refresh top to bottom; ``run_cycle`` runs it for every
due feed with bounded concurrency, then downloads the pending images.

Failure policy (seed section 8): fetch and parse failures count against the feed (backoff);
a database or object-store failure aborts that feed's work for this cycle without touching
``last_fetched_at``, and the next cycle tries again. One feed never stops the others.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timedelta

from . import store
from .backups import write_backup
from .collector import Collector
from .config import load_feeds
from .decode import decode_feed
from .errors import FetchError, ParseError, StorageError
from .fetch import fetch_feed
from .image_stage import download_pending_images
from .models import Feed, ItemRecord, ParsedFeed
from .normalize import item_records
from .parse import parse_feed
from .parse_common import MAX_ITEMS_PER_FEED
from .report import CycleReport, FeedOutcome
from .schedule import (
    FAILURE_ALERT_THRESHOLD,
    feed_interval,
    next_fetch_after_failure,
    next_fetch_after_success,
)
from .spill import plan_spill, write_spilled

log = logging.getLogger("feedcollector")

FEED_LEASE = timedelta(minutes=15)
"""How long a claimed feed stays reserved; a crashed collector's feeds come back after it."""
NOT_MODIFIED_FLUSH = 200
"""304 bookkeeping is written in batches of this many feeds."""


async def run_cycle(
    collector: Collector, *, urls: Sequence[str] | None = None, force: bool = False
) -> CycleReport:
    """One collection cycle: sync the feeds file, refresh due (or forced) feeds, then images."""
    report = CycleReport(started=collector.clock(), observer=collector.observer)
    began = time.monotonic()
    specs = load_feeds(collector.settings.feeds_file)
    sync = await store.sync_feeds(collector.db, specs, report.started)
    if sync.added or sync.removed or sync.reactivated:
        log.info(
            "schedule: feeds file synced: %d added, %d reactivated, "
            "%d removed (kept, not scheduled)",
            sync.added,
            sync.reactivated,
            sync.removed,
        )
    if collector.observer is not None and not force:
        report.feeds_due = await store.count_due_feeds(collector.db, report.started)
    pages = (
        _forced_pages(collector, urls, report) if force else _due_pages(collector, report.started)
    )
    await _refresh_all(collector, pages, report)
    if collector.settings.images.enabled and not collector.stopping.is_set():
        await download_pending_images(collector, report)
    report.elapsed_s = time.monotonic() - began
    log.info("cycle: %s", report.summary())
    if collector.observer is not None:
        await collector.observer.cycle_done(report, collector.db)
    return report


async def refresh_feed(collector: Collector, feed: Feed) -> FeedOutcome:
    """Fetch, back up, decode, parse and store one feed; never raises for a feed's own trouble."""
    settings = collector.settings
    began = time.monotonic()
    fetched_at = collector.clock()
    outcome = FeedOutcome(feed=feed, fetched_at=fetched_at)
    try:
        try:
            response = await fetch_feed(
                collector.feed_http,
                feed.url,
                etag=feed.last_etag,
                last_modified=feed.last_modified,
                limits=collector.fetch_limits,
            )
        except FetchError as exc:
            return await _fail(collector, outcome, exc, exc.status, began)
        outcome.http_status = response.status
        interval = feed_interval(feed.interval_seconds, settings.fetch.default_interval)
        outcome.next_fetch_at = next_fetch_after_success(fetched_at, interval)
        if response.not_modified:
            outcome.state = "not_modified"
            return outcome.finish(began)

        outcome.bytes = len(response.body)
        await write_backup(collector.objects, feed.id, response.body, fetched_at)
        outcome.backed_up = True
        try:
            parsed, records = await asyncio.to_thread(
                read_feed_body,
                response.body,
                response.content_type,
                response.final_url,
                feed.url,
                fetched_at,
            )
        except ParseError as exc:
            return await _fail(collector, outcome, exc, response.status, began)
        plan = plan_spill(feed.id, records)
        await write_spilled(collector.objects, feed.url, plan.spilled)
        new_ids = await store.save_items(
            collector.db,
            feed,
            plan.records,
            store.FetchSuccess(
                title=parsed.title,
                etag=response.etag,
                last_modified=response.last_modified,
                fetched_at=fetched_at,
                next_fetch_at=outcome.next_fetch_at,
                status=response.status,
            ),
        )
        outcome.state = "stored"
        outcome.items = len(records)
        outcome.new_items = len(new_ids)
        return outcome.finish(began)
    except StorageError as exc:
        log.error(
            "%s; work on feed %s aborted for this cycle (last_fetched_at untouched, "
            "the next cycle retries)",
            exc,
            feed.url,
        )
        outcome.state = "aborted"
        outcome.error = str(exc)
        await _release(collector, feed)
        return outcome.finish(began)
    except Exception as exc:
        log.exception(
            "internal: unexpected %s while refreshing feed %s; this is a bug in feedcollector "
            "(please report it with this traceback). The feed is backed off like a failure; "
            "the other feeds go on.",
            type(exc).__name__,
            feed.url,
        )
        return await _fail_unexpected(collector, outcome, exc, began)


def read_feed_body(
    body: bytes,
    content_type: str | None,
    document_url: str,
    feed_url: str,
    fetched_at: datetime,
    *,
    warn_undated: bool = True,
) -> tuple[ParsedFeed, list[ItemRecord]]:
    """Decode, parse and normalize one body: the path of every fetch and of every replayed
    backup (:mod:`.restore`). Raises ParseError; an unreadable pubDate is dated ``fetched_at``
    and logged (seed section 5) unless ``warn_undated`` is off (a replay repeats no warnings)."""
    decoded = decode_feed(body, content_type)
    parsed = parse_feed(decoded.data, document_url)
    if parsed.items_dropped:
        log.warning(
            "parse: feed %s lists more than %d items; the first %d are stored, %d more were not "
            "read",
            feed_url,
            MAX_ITEMS_PER_FEED,
            MAX_ITEMS_PER_FEED,
            parsed.items_dropped,
        )
    records, undated = item_records(parsed.items, fetched_at)
    for item in undated if warn_undated else ():
        log.warning(
            "parse: unreadable pubDate %r in feed %s, item %r: stored with the fetch time",
            item.raw_pub_date,
            feed_url,
            item.title,
        )
    return parsed, records


async def _fail(
    collector: Collector,
    outcome: FeedOutcome,
    exc: FetchError | ParseError,
    status: int | None,
    began: float,
) -> FeedOutcome:
    """Count a fetch/parse failure and back off (30 min · 2^(n-1), capped at 24 h)."""
    failures = outcome.feed.consecutive_failures + 1
    outcome.state = "failed"
    outcome.error = str(exc)
    outcome.error_kind = exc.kind if isinstance(exc, FetchError) else "parse"
    outcome.http_status = status
    outcome.next_fetch_at = next_fetch_after_failure(outcome.fetched_at, failures)
    await store.record_failure(
        collector.db,
        outcome.feed.id,
        failures=failures,
        next_fetch_at=outcome.next_fetch_at,
        error=str(exc),
        status=status,
    )
    if failures >= FAILURE_ALERT_THRESHOLD:
        log.warning(
            "!!! feed %s has failed %d times in a row (last: %s). Check whether it moved or died, "
            "and fix or remove it in the feeds file.",
            outcome.feed.url,
            failures,
            exc,
        )
    return outcome.finish(began)


async def _fail_unexpected(
    collector: Collector, outcome: FeedOutcome, exc: Exception, began: float
) -> FeedOutcome:
    """Record a bug's exception as the feed's failure, so it backs off and shows in status."""
    error = ParseError(f"internal: {type(exc).__name__}: {exc}")
    try:
        return await _fail(collector, outcome, error, outcome.http_status, began)
    except Exception:
        log.exception("internal: could not record the failure of feed %s", outcome.feed.url)
        outcome.state = "aborted"
        outcome.error = str(error)
        await _release(collector, outcome.feed)
        return outcome.finish(began)


async def _release(collector: Collector, feed: Feed) -> None:
    try:
        await store.release_feed(collector.db, feed.id, collector.owner)
    except StorageError as exc:
        log.debug("%s; the lease of %s is left to expire", exc, feed.url)


async def _due_pages(collector: Collector, due_by: datetime) -> AsyncIterator[list[Feed]]:
    cursor = store.ClaimCursor()
    while not collector.stopping.is_set():
        page = await store.claim_due_feeds(
            collector.db,
            due_by=due_by,
            now=collector.clock(),
            owner=collector.owner,
            lease=FEED_LEASE,
            limit=collector.page_size,
            after=cursor,
        )
        if not page:
            return
        cursor = store.ClaimCursor(page[-1].next_fetch_at or "", page[-1].id)
        yield page


async def _forced_pages(
    collector: Collector, urls: Sequence[str] | None, report: CycleReport
) -> AsyncIterator[list[Feed]]:
    ids = await store.active_feed_ids(collector.db, urls)
    report.feeds_due = len(ids)
    for start in range(0, len(ids), collector.page_size):
        if collector.stopping.is_set():
            return
        chunk = ids[start : start + collector.page_size]
        yield await store.claim_feeds_by_id(
            collector.db, chunk, now=collector.clock(), owner=collector.owner, lease=FEED_LEASE
        )


async def _refresh_all(
    collector: Collector, pages: AsyncIterator[list[Feed]], report: CycleReport
) -> None:
    """Run refresh_feed over the claimed pages with at most ``concurrency`` feeds in flight."""
    queue: asyncio.Queue[Feed | None] = asyncio.Queue(maxsize=collector.page_size)
    workers = collector.settings.fetch.concurrency
    not_modified: list[store.NotModified] = []

    async def flush_not_modified() -> None:
        batch = not_modified[:]
        not_modified.clear()
        try:
            await store.record_not_modified(collector.db, batch)
        except StorageError as exc:
            log.error("%s; 304 bookkeeping of %d feeds not written", exc, len(batch))

    async def work() -> None:
        while (feed := await queue.get()) is not None:
            if collector.stopping.is_set():
                await _release(collector, feed)
                continue
            outcome = await refresh_feed(collector, feed)
            report.add(outcome)
            if outcome.state == "not_modified" and outcome.next_fetch_at is not None:
                not_modified.append(
                    store.NotModified(feed.id, outcome.fetched_at, outcome.next_fetch_at)
                )
                if len(not_modified) >= NOT_MODIFIED_FLUSH:
                    await flush_not_modified()

    async def produce() -> None:
        try:
            async for page in pages:
                for feed in page:
                    await queue.put(feed)
        except StorageError as exc:
            log.error("%s; could not claim due feeds, the next cycle retries", exc)
        finally:
            for _ in range(workers):
                await queue.put(None)

    async with asyncio.TaskGroup() as group:
        group.create_task(produce())
        for _ in range(workers):
            group.create_task(work())
    await flush_not_modified()
