"""Scheduling decisions as pure functions: time is always a parameter.

Feed registration is a diff of the feeds file against the ``feeds`` table. After a success the
next fetch follows the feed's interval (pinned in the feeds file, else learned from how often
it posts, within bounds), never earlier than the server's own hints (Cache-Control/Expires,
``<ttl>``), spread by a per-feed jitter; after a failure an exponential backoff (30 min, 1 h,
2 h ... capped at 24 h, seed section 8), never earlier than a Retry-After.
"""

from __future__ import annotations

import hashlib
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .feed_urls import feed_url_key, password_free_key
from .models import FeedSpec

BACKOFF_BASE = timedelta(minutes=30)
BACKOFF_CAP = timedelta(hours=24)
FAILURE_ALERT_THRESHOLD = 10
"""At this many consecutive failures the log carries a prominent warning."""


def feed_id_for(url: str) -> str:
    """A stable feed id derived from the URL, so object keys survive a lost database."""
    return hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]


def unused_feed_id(url: str, taken: Container[str]) -> str:
    """:func:`feed_id_for`, or, when a row holds that id under another URL (the feed moved
    and was renamed, and the file lists its old address again), the first free id of
    ``url#2``, ``url#3``...: a feed of its own, whose objects a restore without the database
    does not find under its URL (as a renamed feed's)."""
    feed_id, copy = feed_id_for(url), 2
    while feed_id in taken:
        feed_id, copy = feed_id_for(f"{url}#{copy}"), copy + 1
    return feed_id


def backoff_delay(consecutive_failures: int) -> timedelta:
    """30 min · 2^(failures-1), capped at 24 h."""
    if consecutive_failures <= 0:
        return timedelta(0)
    exponent = min(consecutive_failures - 1, 16)
    delay: timedelta = BACKOFF_BASE * (1 << exponent)
    return min(delay, BACKOFF_CAP)


def next_fetch_after_success(now: datetime, interval: timedelta) -> datetime:
    return now + interval


def next_fetch_after_failure(now: datetime, consecutive_failures: int) -> datetime:
    return now + backoff_delay(consecutive_failures)


IMAGES_AT_LEAST = timedelta(seconds=30)


def images_share(feeds_took: timedelta) -> timedelta:
    """How long a running service's image stage goes on once a feed has fallen due: as long
    as the cycle's feeds took, 30 s at least. Thousands of slow images no longer hold the
    feeds back for an hour, and a cycle a minute of due feeds does not starve the images."""
    return max(IMAGES_AT_LEAST, feeds_took)


def feed_interval(interval_seconds: int | None, default: timedelta) -> timedelta:
    """The feed's own interval from the feeds file, else the configured default."""
    return timedelta(seconds=interval_seconds) if interval_seconds else default


# --- the next fetch after an answer --------------------------------------------------------

RECENT_ITEMS = 20
"""How many of a feed's newest dated items tell its posting rate."""
FUTURE_TOLERANCE = timedelta(hours=1)
"""Items dated further ahead than this (clock skew aside) are ignored: the date is wrong."""
EARLIEST_DATE = datetime(1970, 1, 2, tzinfo=UTC)
MAX_STORED_SECONDS = 3650 * 86400
"""Durations are stored as whole seconds up to ten years (a header may hold any number)."""
RATE_LIMIT_PAUSE = timedelta(minutes=1)
"""How long a host that answered 429 without Retry-After is left alone (in this process)."""


@dataclass(frozen=True, slots=True)
class SchedulePolicy:
    """The ``[schedule]`` settings and the default interval, as the decisions need them."""

    default_interval: timedelta = timedelta(minutes=30)
    adaptive: bool = True
    min_interval: timedelta = timedelta(minutes=15)
    max_interval: timedelta = timedelta(hours=2)
    jitter: float = 0.1
    max_cache_floor: timedelta = timedelta(hours=24)
    max_retry_after: timedelta = timedelta(hours=24)


@dataclass(frozen=True, slots=True)
class PostingStats:
    """How often a feed posts: the average gap of its newest dated items, and the newest."""

    gap: timedelta
    newest: datetime


def posting_stats(pub_dates: Iterable[datetime], now: datetime) -> PostingStats | None:
    """From the items' publication times (None with fewer than two distinct usable dates).

    The newest ``RECENT_ITEMS`` dates count; the gap is their span over the number of gaps, so
    a burst of posts once a day averages out to a day's worth rather than to zero.
    """
    latest = now + FUTURE_TOLERANCE
    usable = sorted({d for d in pub_dates if EARLIEST_DATE <= d <= latest}, reverse=True)[
        :RECENT_ITEMS
    ]
    if len(usable) < 2:
        return None
    span = usable[0] - usable[-1]
    return PostingStats(gap=span / (len(usable) - 1), newest=usable[0])


def base_interval(
    policy: SchedulePolicy,
    *,
    pinned_seconds: int | None,
    stats: PostingStats | None,
    now: datetime,
) -> timedelta:
    """A pinned interval as given; else, adaptive, the posting gap (at least half the time the
    feed has been quiet) within ``[min_interval, max_interval]``; else the default."""
    if pinned_seconds:
        return timedelta(seconds=pinned_seconds)
    if not policy.adaptive or stats is None:
        return policy.default_interval
    learned = max(stats.gap, (now - stats.newest) / 2)
    return min(max(learned, policy.min_interval), policy.max_interval)


def jitter_share(feed_id: str) -> float:
    """A fixed number in [-1, 1] per feed, so equal intervals do not stay in lockstep."""
    digest = hashlib.sha256(f"jitter:{feed_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / float(2**64 - 1) * 2 - 1


def jittered(interval: timedelta, feed_id: str, fraction: float) -> timedelta:
    """``interval`` stretched or shrunk by the feed's share of ``fraction``, whole seconds."""
    seconds = interval.total_seconds() * (1 + fraction * jitter_share(feed_id))
    return timedelta(seconds=max(1, round(seconds)))


def cache_floor(
    policy: SchedulePolicy, *, http_fresh: timedelta, feed_ttl_seconds: int | None
) -> timedelta:
    """The longest of the HTTP freshness and the feed's own ttl, capped by policy."""
    ttl = timedelta(seconds=min(feed_ttl_seconds or 0, MAX_STORED_SECONDS))
    return min(max(http_fresh, ttl), policy.max_cache_floor)


def next_fetch_after_answer(
    now: datetime,
    *,
    feed_id: str,
    policy: SchedulePolicy,
    pinned_seconds: int | None,
    stats: PostingStats | None,
    floor: timedelta,
) -> datetime:
    """After a 200 or 304: the interval, jittered; within the bounds when it was learned; and
    never before the cache floor (the publisher's wish beats our guess and a pinned interval).
    """
    interval = base_interval(policy, pinned_seconds=pinned_seconds, stats=stats, now=now)
    delay = jittered(interval, feed_id, policy.jitter)
    if not pinned_seconds and policy.adaptive and stats is not None:
        delay = min(max(delay, policy.min_interval), policy.max_interval)
    return now + max(delay, floor)


def capped_retry_after(policy: SchedulePolicy, asked: timedelta | None) -> timedelta | None:
    return None if asked is None else min(asked, policy.max_retry_after)


def next_fetch_after_refusal(
    now: datetime, consecutive_failures: int, retry_after: timedelta | None
) -> datetime:
    """A failure backs off as usual, but never comes back before the server's Retry-After."""
    backoff = next_fetch_after_failure(now, consecutive_failures)
    return backoff if retry_after is None else max(backoff, now + retry_after)


def deferred_until(
    own_retry_after: datetime | None, host_deferred: datetime | None, now: datetime
) -> datetime | None:
    """The time before which a feed must not be requested (its own or its host's
    Retry-After), or None when it may go now."""
    waits = [moment for moment in (own_retry_after, host_deferred) if moment and moment > now]
    return max(waits) if waits else None


@dataclass(frozen=True, slots=True)
class KnownFeed:
    """What the registration diff needs to know of an existing ``feeds`` row."""

    id: str
    url: str
    active: bool
    interval_seconds: int | None
    config_title: str | None
    moved_to: str | None = None


@dataclass(frozen=True, slots=True)
class FeedSyncPlan:
    """What to change so the ``feeds`` table matches the feeds file."""

    added: tuple[FeedSpec, ...]
    """New URLs: inserted with ``next_fetch_at = now``."""
    reactivated: tuple[FeedSpec, ...]
    """URLs back in the file after removal: scheduled again, due now."""
    changed: tuple[FeedSpec, ...]
    """Active feeds whose interval or title changed in the file."""
    removed: tuple[KnownFeed, ...]
    """URLs no longer in the file: rows and history kept, no longer scheduled."""
    renamed: tuple[tuple[KnownFeed, FeedSpec], ...] = ()
    """A feed that had moved, now listed at its new URL in place of the old one: the row takes
    the new URL and keeps its id, items and history (instead of a new feed storing them again).
    """

    @property
    def is_empty(self) -> bool:
        return not (self.added or self.reactivated or self.changed or self.removed or self.renamed)


def plan_feed_sync(known: Mapping[str, KnownFeed], specs: Iterable[FeedSpec]) -> FeedSyncPlan:
    """Diff the feeds file against the table (keyed by URL).

    A URL the table does not hold is a row renamed when the file no longer lists that row's
    URL and the new one is where it moved to, its URL spelled otherwise (the same request:
    :func:`.feed_urls.feed_url_key`) or with another password (:func:`.feed_urls.
    password_free_key`): the same feed, its id and items kept. Otherwise it is added."""
    specs = list(specs)
    listed_urls = {spec.url for spec in specs}
    unlisted = sorted(
        (row for row in known.values() if row.url not in listed_urls),
        key=lambda r: r.url,
        reverse=True,
    )
    movers = {row.moved_to: row for row in unlisted if row.moved_to}
    respelled = {feed_url_key(row.url): row for row in unlisted}
    repassworded = {key: row for row in unlisted if (key := password_free_key(row.url))}
    renamed: list[tuple[KnownFeed, FeedSpec]] = []
    added: list[FeedSpec] = []
    reactivated: list[FeedSpec] = []
    changed: list[FeedSpec] = []
    listed: set[str] = set()
    moved_away: set[str] = set()  # rows renamed: one both a mover and respelled goes once
    for spec in specs:
        listed.add(spec.url)
        row = known.get(spec.url)
        if row is None:
            row = (
                movers.pop(spec.url, None)
                or respelled.pop(feed_url_key(spec.url), None)
                or repassworded.pop(password_free_key(spec.url) or "", None)
            )
            if row is not None and row.url not in moved_away:
                moved_away.add(row.url)
                renamed.append((row, spec))
            else:
                added.append(spec)
        elif not row.active:
            reactivated.append(spec)
        elif row.interval_seconds != interval_seconds_of(spec) or row.config_title != spec.title:
            changed.append(spec)
    removed = [
        row
        for url, row in known.items()
        if row.active and url not in listed and url not in moved_away
    ]
    return FeedSyncPlan(
        tuple(added), tuple(reactivated), tuple(changed), tuple(removed), tuple(renamed)
    )


def interval_seconds_of(spec: FeedSpec) -> int | None:
    return int(spec.interval.total_seconds()) if spec.interval else None
