"""What a feed's answer means for its row and its host, beyond items: the next fetch time
from the answer's hints, an answer with nothing new (304, or the body stored last time), a
failure's backoff, a Retry-After (429: for the whole host), 410 Gone,
a permanent move, and handing a claimed feed back.

The decisions are :mod:`.schedule`'s pure functions; this module applies them to one feed with
the collector's settings, database and host gate, and words the log lines the operator acts on.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from . import store, store_schedule
from .collector import Collector
from .errors import TOO_LARGE, DatabaseError, FetchError, ParseError, StorageError
from .http_hints import freshness, retry_after
from .models import Feed, FetchedFeed, ResponseHints
from .politeness import host_key
from .report import FeedOutcome
from .schedule import (
    FAILURE_ALERT_THRESHOLD,
    MAX_STORED_SECONDS,
    RATE_LIMIT_PAUSE,
    PostingStats,
    cache_floor,
    capped_retry_after,
    next_fetch_after_answer,
    next_fetch_after_refusal,
)
from .timestamps import format_timestamp, parse_timestamp

log = logging.getLogger("feedcollector")


def honour_refusal(
    collector: Collector,
    outcome: FeedOutcome,
    exc: FetchError | ParseError,
    status: int | None,
) -> timedelta | None:
    """The (capped) Retry-After of a 429/503, or None; a 429 also makes the host that answered
    it wait in this process, for the Retry-After or ``RATE_LIMIT_PAUSE`` without one (said in
    the outcome's ``host_waits``). That is the host of :func:`refused_by`: after a redirect to
    another host, not the feed's own."""
    now = outcome.now
    hints = exc.hints if isinstance(exc, FetchError) and status in (429, 503) else None
    asked = capped_retry_after(collector.schedule_policy, retry_after(hints, now))
    if status == 429:
        host = host_key(refused_by(outcome.feed, exc))
        until = now + (asked or RATE_LIMIT_PAUSE)
        collector.hosts.defer(host, until)
        outcome.host_waits = (
            f"{host} rate-limits this collector: its feeds wait until {format_timestamp(until)}"
        )
    return asked


def refused_by(feed: Feed, exc: FetchError | ParseError) -> str:
    """The URL whose answer refused the fetch: a redirect's target when the chain left the
    feed's URL, else where the feed is fetched from."""
    answered = exc.url if isinstance(exc, FetchError) else None
    return answered or feed.moved_to or feed.url


async def defer(
    collector: Collector,
    outcome: FeedOutcome,
    until: datetime,
    began: float,
    why: str | None = None,
) -> FeedOutcome:
    """No request, no failure: a Retry-After (the feed's, or its host's 429) still runs, or
    ``why`` says what else kept the request from being sent."""
    outcome.state = "deferred"
    outcome.next_fetch_at = until
    outcome.error = why or (
        f"not requested: the server asked to wait until {format_timestamp(until)} (a "
        "Retry-After, or a 429 Too Many Requests from its host: then a minute at least)"
    )
    await store_schedule.defer_feed(
        collector.db, outcome.feed.id, until=until, owner=collector.owner
    )
    return outcome.finish(began)


async def gone(
    collector: Collector, outcome: FeedOutcome, exc: FetchError, began: float
) -> FeedOutcome:
    """410 Gone: no longer scheduled, items kept; the operator is told once what to do (this
    WARNING; the outcome line is DEBUG then, and INFO when a manual fetch finds it gone again)."""
    feed = outcome.feed
    outcome.state = "gone"
    outcome.error = str(exc)
    outcome.http_status = 410
    first = await store_schedule.record_gone(
        collector.db, feed.id, at=outcome.fetched_at, error=str(exc)
    )
    outcome.warned = first
    if first:
        log.warning(
            "fetch: %s answered 410 Gone: it is no longer fetched, and its items stay. Remove "
            "it from the feeds file %s (`%s` tries it once more).",
            feed.url,
            collector.settings.feeds_file,
            collector.settings.command("fetch", feed.url),
        )
    return outcome.finish(began)


async def record_move(collector: Collector, outcome: FeedOutcome, target: str | None) -> None:
    """A permanent redirect (to ``target``; None: none): fetch from there from now on, and
    tell the operator."""
    if target is None:
        return
    feed = outcome.feed
    moved_to = None if target == feed.url else target
    if moved_to == feed.moved_to:
        return
    await store_schedule.record_move(collector.db, feed.id, moved_to)
    outcome.moved = True
    if moved_to is None:
        log.info("fetch: %s is served from its own URL again", feed.url)
        return
    log.warning(
        "fetch: %s has moved permanently to %s; it is fetched from there from now on. "
        "Update the feeds file %s: replace the old URL with the new one (the feed keeps its "
        "id and items).",
        feed.url,
        moved_to,
        collector.settings.feeds_file,
    )


def next_fetch(
    collector: Collector,
    outcome: FeedOutcome,
    hints: ResponseHints,
    feed_ttl_seconds: int | None,
    stats: PostingStats | None,
) -> datetime:
    """After a 200 or 304: the feed's interval, not before the answer's cache floor."""
    feed, now = outcome.feed, outcome.now
    policy = collector.schedule_policy
    floor = cache_floor(policy, http_fresh=freshness(hints, now), feed_ttl_seconds=feed_ttl_seconds)
    return next_fetch_after_answer(
        now,
        feed_id=feed.id,
        policy=policy,
        pinned_seconds=feed.interval_seconds,
        stats=stats,
        floor=floor,
    )


def unchanged(
    collector: Collector, outcome: FeedOutcome, response: FetchedFeed, began: float
) -> FeedOutcome:
    """A 304, or a 200 with the body stored last time: only the feed's bookkeeping changes
    (written with the cycle's batch), its schedule from the stats its last stored body left.
    A 304 keeps the stored validators; a 200's replace them."""
    feed = outcome.feed
    outcome.next_fetch_at = next_fetch(
        collector, outcome, response.hints, feed.feed_ttl_seconds, stored_stats(feed)
    )
    if response.not_modified:
        outcome.state = "not_modified"
        etag, last_modified = feed.last_etag, feed.last_modified
    else:
        outcome.state = "unchanged"
        etag, last_modified = response.etag, response.last_modified
    outcome.bookkeeping = store.NotModified(
        feed.id, outcome.fetched_at, outcome.next_fetch_at, response.status, etag, last_modified
    )
    return outcome.finish(began)


def stored_stats(feed: Feed) -> PostingStats | None:
    newest = moment(feed.newest_item_at)
    if feed.post_gap_seconds is None or newest is None:
        return None
    return PostingStats(timedelta(seconds=feed.post_gap_seconds), newest)


def moment(stamp: str | None) -> datetime | None:
    return parse_timestamp(stamp) if stamp else None


def whole_seconds(duration: timedelta) -> int:
    return min(round(duration.total_seconds()), MAX_STORED_SECONDS)


async def fail(
    collector: Collector,
    outcome: FeedOutcome,
    exc: FetchError | ParseError,
    status: int | None,
    began: float,
) -> FeedOutcome:
    """Count a fetch/parse failure and back off (30 min · 2^(n-1), capped at 24 h), but not
    sooner than a 429/503's Retry-After; a 429 also makes the feed's host wait. From
    ``FAILURE_ALERT_THRESHOLD`` failures in a row the prominent warning is the feed's one line."""
    feed, now = outcome.feed, outcome.now
    failures = feed.consecutive_failures + 1
    asked = honour_refusal(collector, outcome, exc, status)
    outcome.state = "failed"
    outcome.error = str(exc)
    outcome.error_kind = exc.kind if isinstance(exc, FetchError) else "parse"
    outcome.http_status = status
    outcome.next_fetch_at = next_fetch_after_refusal(now, failures, asked)
    await store.record_failure(
        collector.db,
        feed.id,
        failures=failures,
        next_fetch_at=outcome.next_fetch_at,
        error=str(exc),
        status=status,
        retry_after_until=now + asked if asked else None,
        rate_limited_by=refused_by(feed, exc) if status == 429 else None,
    )
    alert_if_failing_long(outcome, failures)
    return outcome.finish(began)


def alert_if_failing_long(outcome: FeedOutcome, failures: int) -> None:
    """From ``FAILURE_ALERT_THRESHOLD`` failures in a row, the prominent WARNING instead of
    the feed's outcome line (which turns DEBUG: it is said once)."""
    if failures < FAILURE_ALERT_THRESHOLD:
        return
    outcome.warned = True
    log.warning(
        "!!! feed %s has failed %d times in a row (last: %s; will retry with backoff at %s)%s. "
        "Check whether it moved or died, and fix or remove it in the feeds file.",
        outcome.feed.url,
        failures,
        outcome.error,
        format_timestamp(outcome.next_fetch_at) if outcome.next_fetch_at else "the next cycle",
        f"; {outcome.host_waits}" if outcome.host_waits else "",
    )


async def fail_unexpected(
    collector: Collector, outcome: FeedOutcome, exc: Exception, began: float
) -> FeedOutcome:
    """Record a bug's exception as the feed's failure, so it backs off and shows in status."""
    error = ParseError(f"internal: {type(exc).__name__}: {exc}")
    try:
        failed = await fail(collector, outcome, error, outcome.http_status, began)
        failed.error_kind = "internal"
        return failed
    except Exception:
        log.exception("internal: could not record the failure of feed %s", outcome.feed.url)
        return await abort(collector, outcome, str(error), began)


async def refused_as_too_large(
    collector: Collector, outcome: FeedOutcome, exc: DatabaseError, began: float
) -> FeedOutcome:
    """The database refused the feed's data as too large (D1: a value or row over its size
    limit, or the batch over the Proxy Worker's body limit). Not an outage: the same body is
    refused on every try, so it is the feed's failure and backs off, like a body over
    ``[fetch] max_body_bytes``, instead of being fetched again every cycle forever."""
    error = ParseError(f"store: the database refused this feed's items as too large: {exc}")
    try:
        failed = await fail(collector, outcome, error, outcome.http_status, began)
    except StorageError as again:  # the failure itself could not be written: an outage
        log.error("%s; work on feed %s aborted for this cycle", again, outcome.feed.url)
        return await abort(collector, outcome, str(again), began)
    failed.error_kind = TOO_LARGE
    log.warning(
        "store: feed %s was refused by the database as too large; it is backed off like a "
        "failed fetch (%s)",
        outcome.feed.url,
        exc,
    )
    return failed


async def abort(
    collector: Collector, outcome: FeedOutcome, error: str, began: float
) -> FeedOutcome:
    """The feed's work ends here for this cycle, its row untouched (seed section 8): it is
    handed back at once and the next cycle tries again. The caller logs why."""
    outcome.state = "aborted"
    outcome.error = error
    await release(collector, outcome.feed)
    return outcome.finish(began)


async def release_unstarted(collector: Collector, feeds: list[Feed]) -> None:
    """Hand back claimed feeds the cycle did not start (a stop, or storage failing), in as few
    statements as fit; their rows are otherwise untouched, so they are due as they were."""
    if not feeds:
        return
    try:
        await store_schedule.release_feeds(collector.db, [f.id for f in feeds], collector.owner)
    except StorageError as exc:
        log.debug("storage: could not hand back %d feeds (leases expire): %s", len(feeds), exc)


async def release(collector: Collector, feed: Feed) -> None:
    """Hand a claimed feed back at once (its lease would otherwise hold it for minutes)."""
    try:
        await store.release_feed(collector.db, feed.id, collector.owner)
    except StorageError as exc:
        log.debug("%s; the lease of %s is left to expire", exc, feed.url)
