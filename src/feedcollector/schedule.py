"""Scheduling decisions as pure functions: time is always a parameter.

Feed registration is a diff of the feeds file against the ``feeds`` table; the next fetch time
follows the feed's interval after a success and an exponential backoff after a failure
(30 min, 1 h, 2 h ... capped at 24 h, seed section 8).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from .models import FeedSpec

BACKOFF_BASE = timedelta(minutes=30)
BACKOFF_CAP = timedelta(hours=24)
FAILURE_ALERT_THRESHOLD = 10
"""At this many consecutive failures the log carries a prominent warning."""


def feed_id_for(url: str) -> str:
    """A stable feed id derived from the URL, so object keys survive a lost database."""
    return hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]


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


def feed_interval(interval_seconds: int | None, default: timedelta) -> timedelta:
    """The feed's own interval from the feeds file, else the configured default."""
    return timedelta(seconds=interval_seconds) if interval_seconds else default


@dataclass(frozen=True, slots=True)
class KnownFeed:
    """What the registration diff needs to know of an existing ``feeds`` row."""

    id: str
    url: str
    active: bool
    interval_seconds: int | None
    config_title: str | None


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

    @property
    def is_empty(self) -> bool:
        return not (self.added or self.reactivated or self.changed or self.removed)


def plan_feed_sync(known: Mapping[str, KnownFeed], specs: Iterable[FeedSpec]) -> FeedSyncPlan:
    """Diff the feeds file against the table (keyed by URL)."""
    added: list[FeedSpec] = []
    reactivated: list[FeedSpec] = []
    changed: list[FeedSpec] = []
    listed: set[str] = set()
    for spec in specs:
        listed.add(spec.url)
        row = known.get(spec.url)
        if row is None:
            added.append(spec)
        elif not row.active:
            reactivated.append(spec)
        elif row.interval_seconds != interval_seconds_of(spec) or row.config_title != spec.title:
            changed.append(spec)
    removed = [row for url, row in known.items() if row.active and url not in listed]
    return FeedSyncPlan(tuple(added), tuple(reactivated), tuple(changed), tuple(removed))


def interval_seconds_of(spec: FeedSpec) -> int | None:
    return int(spec.interval.total_seconds()) if spec.interval else None
