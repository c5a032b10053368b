"""The collection cycle: the only module that knows the order of the stages.

config -> schedule -> fetch -> backup -> decode -> parse -> spill -> store -> images.
``refresh_feed`` reads one feed's whole refresh top to bottom; ``run_cycle`` runs it for every
due feed with bounded concurrency, then downloads the pending images. Feeds reach the workers
through :class:`~.politeness.PoliteQueue`: one request per host at a time, a gap between them,
other hosts flowing meanwhile; a Retry-After defers a feed (429: its whole host).

Failure policy (seed section 8): fetch and parse failures count against the feed (backoff);
a database or object-store failure aborts that feed's work for this cycle without touching
``last_fetched_at``, and the next cycle tries again; but the database refusing the feed's
data as too large (D1) is the feed's failure, since no retry changes it. One feed never
stops the others.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timedelta

from . import claims, outcomes, store, store_items, store_schedule
from .backups import unused_backup_time, write_backup
from .breaker import StorageBreaker
from .clock_step import clock_mark_key, mark_is_due, write_mark
from .collector import Collector
from .errors import (
    TOO_LARGE,
    DatabaseError,
    FetchError,
    LenientParseNeeded,
    ParseError,
    StorageError,
)
from .feed_urls import feed_url_key
from .fetch import body_digest, fetch_feed
from .httpbody import NOT_TRIED, Unreachable
from .image_stage import download_pending_images
from .models import Feed, ItemRecord, ParsedFeed
from .politeness import PoliteQueue, Ticket, host_key
from .read_body import read_feed_body
from .report import CycleReport, FeedOutcome, counted
from .schedule import (
    MAX_STORED_SECONDS,
    deferred_until,
    images_share,
    next_fetch_after_failure,
    posting_stats,
)
from .spill import plan_batch_spill, spilled_records
from .timestamps import format_timestamp

log = logging.getLogger("feedcollector")

ONE_SECOND = timedelta(seconds=1)
NOT_TRIED_RETRY = timedelta(minutes=1)
"""When a feed not requested because its host took no connection earlier in the cycle is due
again: a minute (``run``'s poll), so a dead host is tried about once a minute, not once a
cycle a second while its feeds are deferred one after another."""
NOT_MODIFIED_FLUSH = 200
"""The bookkeeping of unchanged feeds (304, or the body stored last time) is written in batches
of this many feeds."""
INLINE_PARSE_BYTES = 2 * 2**20
"""Bodies up to this size are decoded and parsed on the event loop (about 20 ms at most);
bigger ones, and any that only feedparser reads, on a worker thread, so the loop keeps serving
the other feeds' sockets meanwhile. A parse on the thread costs more CPU than the same parse
inline (the hop, and the GIL handed back and forth with the loop): on the real-world corpus,
1.6 MB and 290 KB feeds took 70% more CPU there, and the first cycle 4-5% more in all, for no
gain in wall time."""
BACKLOG_PAGES = 25
"""Claimed feeds held at most, in claim pages, while every waiting feed's host is busy."""


async def run_cycle(
    collector: Collector,
    *,
    urls: Sequence[str] | None = None,
    force: bool = False,
    sync: bool = True,
    images_yield: bool = False,
) -> CycleReport:
    """One collection cycle: sync the feeds file (unless the caller did), catch up with what
    other processes left (hosts a 429 defers, stopped collectors' leases), refresh due (or
    forced) feeds, then images. ``images_yield`` (a running service): the image stage stops
    between pages once a feed fell due and it ran as long as the feeds did, 30 s at least
    (:func:`.schedule.images_share`); the next cycle goes on with the rest."""
    report = CycleReport(started=collector.clock(), observer=collector.observer)
    began = time.monotonic()
    if sync:
        await claims.sync_feeds_file(collector, report.started)
    await claims.defer_rate_limited_hosts(collector, report.started)
    await claims.take_back_stopped_leases(collector, report.started)
    if collector.observer is not None and not force:
        report.feeds_due = await store.count_due_feeds(collector.db, report.started)
    lease = claims.feed_lease(collector)
    pages = (
        claims.forced_pages(collector, urls, report, lease)
        if force
        else claims.due_pages(collector, report.started, lease)
    )
    await _refresh_all(collector, pages, report)
    if collector.settings.images.enabled and not collector.stopping.is_set():
        share = None
        if images_yield:
            share = images_share(timedelta(seconds=time.monotonic() - began))
        await download_pending_images(collector, report, share)
    await _mark_the_clock(collector, report)
    report.elapsed_s = time.monotonic() - began
    try:  # the observers first: a progress display's last line comes before the summary
        if collector.observer is not None:
            await collector.observer.cycle_done(report, collector.db)
    finally:
        log.log(report.summary_level(asked=force), "cycle: %s", report.summary())
    return report


async def _mark_the_clock(collector: Collector, report: CycleReport) -> None:
    """Write this machine's clock mark when it is due (:mod:`.clock_step`), unless storage
    failed this cycle (the write would wait for it once more)."""
    now = collector.clock()
    if (
        report.storage_failing is None
        and mark_is_due(collector.clock_mark, now)
        and await write_mark(collector.db, clock_mark_key(collector.owner), now)
    ):
        collector.clock_mark = format_timestamp(now)


async def refresh_feed(
    collector: Collector,
    feed: Feed,
    host: str | None = None,
    unreachable: Unreachable | None = None,
) -> FeedOutcome:
    """Fetch, back up, decode, parse and store one feed; never raises for a feed's own trouble.

    The request waits for its host's turn (``host``: its :func:`host_key`, when the caller
    knows it already), and is not sent while a Retry-After runs, nor to an endpoint in
    ``unreachable`` (see :func:`fetch_feed`)."""
    began = time.monotonic()
    now = collector.clock()
    fetched_at = after_last_fetch(now, feed)
    outcome = FeedOutcome(feed=feed, fetched_at=fetched_at, started=now)
    source = feed.moved_to or feed.url
    if host is None:
        host = host_key(source)
    try:
        wait = deferred_until(
            outcomes.moment(feed.retry_after_until),
            collector.hosts.deferred_until(host, now),
            now,
        )
        if wait is not None:
            return await outcomes.defer(collector, outcome, wait, began)
        try:
            async with collector.hosts.request(host):
                response = await fetch_feed(
                    collector.feed_http,
                    source,
                    etag=feed.last_etag,
                    last_modified=feed.last_modified,
                    limits=collector.fetch_limits,
                    unreachable=unreachable,
                    now=now,
                )
        except FetchError as exc:
            if exc.status == 410:
                return await outcomes.gone(collector, outcome, exc, began)
            if exc.kind == NOT_TRIED:  # its host took no connection this cycle
                outcome.quiet = True
                later = now + NOT_TRIED_RETRY
                return await outcomes.defer(collector, outcome, later, began, str(exc))
            return await outcomes.fail(collector, outcome, exc, exc.status, began)
        outcome.http_status = response.status
        # A permanent redirect moves the feed once the new place answers with a feed (a 304
        # to its validators, the body stored last time, one that parses): a feed redirected
        # to a home page would be asked there for good, never at its own URL again.
        if response.not_modified:
            await outcomes.record_move(collector, outcome, response.permanent_url)
            return outcomes.unchanged(collector, outcome, response, began)

        outcome.bytes = len(response.body)
        if feed.consecutive_failures:  # the last try's backup may be one last_fetched_at lacks
            fetched_at = await unused_backup_time(collector.objects, feed.id, fetched_at)
            outcome.fetched_at = fetched_at
        await write_backup(
            collector.objects, feed.id, response.body, fetched_at, response.content_type
        )
        outcome.backed_up = True
        digest = body_digest(response)
        if digest == feed.body_digest:  # the body stored last time: nothing new to read
            await outcomes.record_move(collector, outcome, response.permanent_url)
            return outcomes.unchanged(collector, outcome, response, began)
        body_args = (response.body, response.content_type, response.final_url, feed.url)
        try:
            parsed, records = await _read_feed_body_quickly(body_args, fetched_at)
        except ParseError as exc:
            if response.unknown_codings:  # passed on undecoded: may be why
                exc = ParseError(
                    f"{exc} (the body came with Content-Encoding {response.unknown_codings!r}, "
                    "which is not decoded; the server's setup may be at fault)"
                )
            if feed_url_key(response.final_url) != feed_url_key(source):
                exc = ParseError(f"{exc} (read at {response.final_url}, where {source} redirects)")
            return await outcomes.fail(collector, outcome, exc, response.status, began)
        await outcomes.record_move(collector, outcome, response.permanent_url)
        stats = posting_stats((i.pub_date for i in parsed.items if i.pub_date), now)
        ttl = min(parsed.ttl_minutes * 60, MAX_STORED_SECONDS) if parsed.ttl_minutes else None
        outcome.next_fetch_at = outcomes.next_fetch(collector, outcome, response.hints, ttl, stats)
        # A body cut inside an item (or between two) keeps no validators and no digest: the
        # next fetch asks for the whole feed (not a 304) and reads it, so the cut item and
        # those after it come.
        # Its whole items are stored, and the feed counts a failure all the same (a body the
        # parser cannot read whole fails, seed section 8): backoff, `status` says so.
        whole = not (parsed.cut_off or parsed.unclosed)
        if not whole:
            outcome.cut_off = True
            where = "inside an item" if parsed.cut_off else "before its channel closes"
            outcome.error = (
                f"parse: the body ends {where}, after "
                f"{counted(len(parsed.items), 'whole item')} "
                "(cut off in transfer, or by the server?)"
            )
            outcome.next_fetch_at = next_fetch_after_failure(now, feed.consecutive_failures + 1)
        success = store.FetchSuccess(
            title=parsed.title,
            etag=response.etag if whole else None,
            last_modified=response.last_modified if whole else None,
            fetched_at=fetched_at,
            next_fetch_at=outcome.next_fetch_at,
            status=response.status,
            feed_ttl_seconds=ttl,
            post_gap_seconds=outcomes.whole_seconds(stats.gap) if stats else None,
            newest_item_at=format_timestamp(stats.newest) if stats else None,
            body_digest=digest if whole else None,
            failure=outcome.error,
        )
        plan = await plan_batch_spill(collector.db, feed.id, records)
        async with spilled_records(
            collector.objects, collector.db, feed.id, feed.url, plan
        ) as to_store:
            new_items = await store_items.save_items(
                collector.db, feed, to_store, success, stored_at=collector.clock()
            )
        outcome.state = "stored"
        outcome.items = len(records)
        outcome.new_items = new_items
        if not whole:
            outcomes.alert_if_failing_long(outcome, feed.consecutive_failures + 1)
        return outcome.finish(began)
    except StorageError as exc:
        if isinstance(exc, DatabaseError) and exc.kind == TOO_LARGE:
            return await outcomes.refused_as_too_large(collector, outcome, exc, began)
        log.error(
            "%s; work on feed %s aborted for this cycle (last_fetched_at untouched; the next "
            "cycle that finds it due retries it)",
            exc,
            feed.url,
        )
        return await outcomes.abort(collector, outcome, str(exc), began)
    except Exception as exc:
        log.exception(
            "internal: unexpected %s while refreshing feed %s; this is a bug in feedcollector "
            "(please report it with this traceback). The feed is backed off like a failure; "
            "the other feeds go on.",
            type(exc).__name__,
            feed.url,
        )
        return await outcomes.fail_unexpected(collector, outcome, exc, began)


def after_last_fetch(now: datetime, feed: Feed) -> datetime:
    """``now``, or one second after the feed's last fetch when that is the same second or
    later (a clock that went back): a backup's key holds whole seconds, and a second fetch
    within one (``fetch`` run twice in a row) replaced the first one's backup, and could
    leave its ``.content-type`` beside the other body. Schedules count from ``now``."""
    last = outcomes.moment(feed.last_fetched_at)
    if last is None or now >= last + ONE_SECOND:
        return now
    return last + ONE_SECOND


async def _read_feed_body_quickly(
    body_args: tuple[bytes, str | None, str, str], fetched_at: datetime
) -> tuple[ParsedFeed, list[ItemRecord]]:
    """:func:`read_feed_body` on the event loop when it is quick (a body up to
    :data:`INLINE_PARSE_BYTES` that strict XML parsing reads, repaired or not); on a worker
    thread when the body is bigger or only feedparser reads it (seconds of CPU per MiB)."""
    if len(body_args[0]) <= INLINE_PARSE_BYTES:
        try:
            return read_feed_body(*body_args, fetched_at, lenient=False)
        except LenientParseNeeded:
            pass
    return await asyncio.to_thread(read_feed_body, *body_args, fetched_at)


async def _refresh_all(
    collector: Collector, pages: AsyncIterator[list[Feed]], report: CycleReport
) -> None:
    """Run refresh_feed over the claimed pages with at most ``concurrency`` feeds in flight,
    handed out host by host (:class:`PoliteQueue`); storage aborting several feeds in a row
    (:class:`StorageBreaker`) hands the feeds not started back, like a stop does."""
    queue: PoliteQueue[Feed] = PoliteQueue(
        collector.hosts,
        lambda feed: host_key(feed.moved_to or feed.url),
        collector.clock,
        low_water=collector.page_size,
        max_backlog=collector.page_size * BACKLOG_PAGES,
    )
    workers = collector.settings.fetch.concurrency
    not_modified: list[store.NotModified] = []
    unstarted: list[Feed] = []
    unreachable: Unreachable = {}
    breaker = StorageBreaker()

    async def flush_not_modified() -> None:
        batch = not_modified[:]
        not_modified.clear()
        try:
            await store.record_not_modified(collector.db, batch)
        except StorageError as exc:
            log.error("%s; bookkeeping of %d unchanged feeds not written", exc, len(batch))

    async def work() -> None:
        while (ticket := await queue.get()) is not None:
            try:
                outcome = await _refresh_ticket(collector, ticket, unstarted, unreachable)
            finally:
                queue.done(ticket)
            if outcome is None:
                continue
            report.add(outcome)
            # The aborts of a stop that gave up waiting for the database are no outage.
            if not collector.gave_up_on_database and breaker.record(outcome):
                unstarted.extend(queue.stop())
            if outcome.bookkeeping is not None:
                not_modified.append(outcome.bookkeeping)
                if len(not_modified) >= NOT_MODIFIED_FLUSH:
                    await flush_not_modified()

    async def produce() -> None:
        try:
            async for page in pages:
                queue.extend(page)
                await queue.wait_for_room()
                if breaker.tripped:
                    break
        except StorageError as exc:
            report.storage_failing = str(exc)
            log.error("%s; could not claim due feeds, the next cycle retries", exc)
        finally:
            queue.close()

    async def stop_when_asked() -> None:
        await collector.stopping.wait()
        unstarted.extend(queue.stop())

    async with asyncio.TaskGroup() as group:
        group.create_task(produce())
        watcher = group.create_task(stop_when_asked())
        await asyncio.gather(*(group.create_task(work()) for _ in range(workers)))
        watcher.cancel()
    unstarted.extend(queue.stop())
    await flush_not_modified()
    await outcomes.release_unstarted(collector, unstarted)
    breaker.count_left(report, len(unstarted))


async def _refresh_ticket(
    collector: Collector,
    ticket: Ticket[Feed],
    unstarted: list[Feed],
    unreachable: Unreachable,
) -> FeedOutcome | None:
    """Refresh the ticket's feed, unless stopping (handed back) or its lease was lost while it
    waited for its host (another collector has it now)."""
    feed = ticket.item
    if collector.stopping.is_set():
        unstarted.append(feed)
        return None
    lease = claims.feed_lease(collector)
    if time.monotonic() - ticket.queued_at > lease.total_seconds() / 2:
        try:
            ours = await store_schedule.renew_lease(
                collector.db, feed.id, owner=collector.owner, until=collector.clock() + lease
            )
        except StorageError as exc:
            log.error(
                "storage: %s; %s skipped this cycle (its lease could not be renewed)", exc, feed.url
            )
            return None
        if not ours:
            log.info(
                "schedule: %s waited for its host past its lease; another collector has it",
                feed.url,
            )
            return None
    return await refresh_feed(collector, feed, ticket.host, unreachable)
