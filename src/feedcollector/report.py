"""What a cycle did, per feed and in total, as the logs and the CLI show it.

A :class:`CycleObserver` attached to the report hears every finished feed and the image
stage's progress as they happen: progress bars and the Prometheus metrics are observers, so
the pipeline stays free of presentation and metrics libraries.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from .database import Database
from .models import Feed
from .store import NotModified
from .timestamps import format_timestamp, parse_timestamp

log = logging.getLogger("feedcollector")


def counted(count: int, noun: str) -> str:
    """``1 feed``, ``2 feeds``: the number and its noun, plural unless it is one."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


ANSWERED = frozenset({"stored", "not_modified", "unchanged"})
"""States of a feed whose server answered with its feed (new or not)."""


@dataclass(slots=True)
class FeedOutcome:
    """One feed's refresh; ``state`` is stored, not_modified (304), unchanged (a 200 with the
    body stored last time), failed, aborted, deferred (a Retry-After runs, or its host took no
    connection earlier in the cycle: not requested) or gone (410)."""

    feed: Feed
    fetched_at: datetime
    """The backup's key and ``last_fetched_at``: a second past the feed's last fetch at least,
    so after a clock stepped back it is ahead of :attr:`now`."""
    state: str = "failed"
    http_status: int | None = None
    items: int = 0
    new_items: int = 0
    bytes: int = 0
    elapsed_s: float = 0.0
    error: str | None = None
    error_kind: str | None = None
    """Why a failed feed failed: a FetchError kind (timeout, dns, http, ...) or parse."""
    backed_up: bool = False
    next_fetch_at: datetime | None = None
    bookkeeping: NotModified | None = None
    """The feed row's update when nothing but its bookkeeping changed (a 304, or a 200 with
    the body stored last time): written with the cycle's batch of those."""
    quiet: bool = False
    """Logged at DEBUG, counted in the cycle's summary: a feed not requested because its host
    took no connection earlier in the cycle (its first feed's failure is the WARNING)."""
    warned: bool = False
    """A WARNING of its own already said what happened and what to do (410 Gone the first
    time, failing 10 times in a row): the outcome line is DEBUG, so it is said once."""
    moved: bool = False
    """This fetch recorded a permanent move (or a return to the feed's own URL)."""
    cut_off: bool = False
    """The body ended inside an item, or between two without closing its channel: its whole
    items were stored (``state`` is stored), and the feed counts a failure all the same
    (:attr:`error` says so)."""
    host_waits: str | None = None
    """What a 429 does to the host that answered it (its feeds wait until when), said in the
    feed's own line rather than in a line of its own."""

    started: datetime | None = None
    """The clock when the refresh began (None: ``fetched_at``)."""

    @property
    def now(self) -> datetime:
        """When the refresh began by the clock: waits and the next fetch count from it."""
        return self.started or self.fetched_at

    def finish(self, began: float) -> FeedOutcome:
        self.elapsed_s = time.monotonic() - began
        return self

    @property
    def outcome_label(self) -> str:
        """A small, fixed set of names for metrics: ok, not_modified, http_5xx, timeout, ..."""
        fixed = {
            "stored": "ok",
            "not_modified": "not_modified",
            "unchanged": "unchanged",
            "aborted": "storage_error",
            "deferred": "deferred",
            "gone": "gone",
        }
        if self.cut_off:
            return "parse"
        if self.state in fixed:
            return fixed[self.state]
        if self.error_kind == "http" and self.http_status:
            return f"http_{self.http_status // 100}xx"
        return self.error_kind or "error"

    @property
    def failed(self) -> bool:
        """The refresh counted a failure (a cut-off body's too, though it stored items)."""
        return self.state == "failed" or self.cut_off

    @property
    def recovered(self) -> bool:
        """The feed answered after failing: its run of failures is over."""
        return self.state in ANSWERED and self.feed.consecutive_failures > 0 and not self.cut_off

    @property
    def changed(self) -> bool:
        """Whether this refresh changed what the operator follows: new items, a first fetch, a
        recovery, a move, a failure, 410 Gone, a Retry-After deferral, a storage abort. The
        steady state (a feed answering with nothing new) is not a change."""
        if self.quiet:
            return False
        if self.failed or self.state not in ANSWERED:
            return True
        first = self.state == "stored" and self.feed.last_fetched_at is None
        return bool(self.new_items) or first or self.recovered or self.moved

    @property
    def log_level(self) -> int:
        """WARNING for a failure (unless its own WARNING said it), INFO for a change, DEBUG
        for the steady state and for what another line said already."""
        if self.quiet or self.warned or self.state == "aborted":
            return logging.DEBUG  # an aborted feed's storage error was logged whole
        if self.failed:
            return logging.WARNING
        return logging.INFO if self.changed else logging.DEBUG

    def describe(self) -> str:
        status = f"HTTP {self.http_status}" if self.http_status else "no response"
        if self.state == "stored":
            what = f"{self.new_items} new of {counted(self.items, 'item')}"
            if self.cut_off:
                what += f"; failed: {self.error} ({self.retry_words()})"
        elif self.state == "not_modified":
            what = "not modified"
        elif self.state == "unchanged":
            what = "the body stored last time, not read again"
        elif self.state == "failed":
            what = f"failed: {self.error} ({self.retry_words()})"
            if self.host_waits:
                what += f"; {self.host_waits}"
        else:
            what = f"{self.state}: {self.error}"
        if self.recovered:
            failures = counted(self.feed.consecutive_failures, "failure")
            what += f", answering again after {failures} in a row"
        size = f"{self.bytes / 1024:.1f} KiB" if self.bytes else "0 KiB"
        return f"feed {self.feed.url}: {status}, {what}, {size}, {self.elapsed_s:.2f} s"

    def retry_words(self) -> str:
        """What happens after a failure, worded alike for every kind: when the next try is."""
        failures = self.feed.consecutive_failures + 1
        when = format_timestamp(self.next_fetch_at) if self.next_fetch_at else "the next cycle"
        return f"will retry with backoff at {when}, failure {failures} in a row"


class CycleObserver(Protocol):
    """Hears a cycle's progress as it happens (progress display, metrics)."""

    def feed_done(self, outcome: FeedOutcome, report: CycleReport) -> None:
        """A feed's refresh finished (``report`` already counts it)."""

    def images_done(self, report: CycleReport) -> None:
        """A page of image tasks finished (``report`` counts them)."""

    async def cycle_done(self, report: CycleReport, db: Database) -> None:
        """The cycle is over; ``db`` is there to sample gauges (image tasks by status...)."""


class CycleObservers:
    """Several observers heard as one (``run`` with metrics shows progress too)."""

    def __init__(self, *observers: CycleObserver) -> None:
        self._observers = observers

    def feed_done(self, outcome: FeedOutcome, report: CycleReport) -> None:
        for observer in self._observers:
            observer.feed_done(outcome, report)

    def images_done(self, report: CycleReport) -> None:
        for observer in self._observers:
            observer.images_done(report)

    async def cycle_done(self, report: CycleReport, db: Database) -> None:
        for observer in self._observers:
            await observer.cycle_done(report, db)


@dataclass(slots=True)
class CycleReport:
    """Counters only (no per-feed lists), so memory stays flat however many feeds there are."""

    started: datetime
    observer: CycleObserver | None = None
    feeds_due: int | None = None
    """How many feeds this cycle is going to refresh, when known (for progress)."""
    oldest_due: str | None = None
    """The earliest ``next_fetch_at`` among the refreshed feeds (for the cycle lag)."""
    feeds: int = 0
    stored: int = 0
    not_modified: int = 0
    unchanged: int = 0
    """200s with the body stored last time."""
    failed: int = 0
    aborted: int = 0
    deferred: int = 0
    gone: int = 0
    left: int = 0
    """Claimed feeds not started because storage was failing: handed back untouched."""
    storage_failing: str | None = None
    """The last storage error, when a run of them stopped the cycle from starting feeds
    (:mod:`.breaker`), or the one that kept it from claiming its due feeds."""
    new_items: int = 0
    bytes: int = 0
    images_stored: int = 0
    images_failed: int = 0
    images_retry_later: int = 0
    elapsed_s: float = 0.0
    changed: int = 0
    """Feeds whose refresh changed something (:attr:`FeedOutcome.changed`)."""

    def add(self, outcome: FeedOutcome) -> None:
        self.feeds += 1
        self.new_items += outcome.new_items
        self.bytes += outcome.bytes
        if outcome.state == "stored":
            self.stored += 1
        elif outcome.state == "not_modified":
            self.not_modified += 1
        elif outcome.state == "unchanged":
            self.unchanged += 1
        elif outcome.state == "aborted":
            self.aborted += 1
        elif outcome.state == "deferred":
            self.deferred += 1
        elif outcome.state == "gone":
            self.gone += 1
        if outcome.failed:  # a cut-off body's feed counts in both: its whole items were stored
            self.failed += 1
        due = outcome.feed.next_fetch_at
        if due and (self.oldest_due is None or due < self.oldest_due):
            self.oldest_due = due
        if outcome.changed:
            self.changed += 1
        level = outcome.log_level  # the steady state is DEBUG, counted in the summary line
        if log.isEnabledFor(level):
            log.log(level, "%s", outcome.describe())
        if self.observer is not None:
            self.observer.feed_done(outcome, self)

    def images_counted(self) -> None:
        """Called by the image stage after each page of tasks."""
        if self.observer is not None:
            self.observer.images_done(self)

    @property
    def lag_s(self) -> float:
        """How late the most overdue feed of the cycle was at its start (0 if none was)."""
        if self.oldest_due is None:
            return 0.0
        try:
            due = parse_timestamp(self.oldest_due)
        except ValueError:
            return 0.0
        return max((self.started - due).total_seconds(), 0.0)

    @property
    def eventful(self) -> bool:
        """Whether the cycle did anything worth an INFO line: a feed changed (new items, a
        failure, a recovery...), images were handled, or storage failed. A cycle of feeds that
        answered with nothing new is the steady state: its summary is DEBUG."""
        images = self.images_stored + self.images_failed + self.images_retry_later
        return bool(self.changed or images or self.storage_failing is not None)

    def summary_level(self, *, asked: bool) -> int:
        """INFO for an eventful cycle or one the operator asked for (``fetch``), else DEBUG:
        ``run`` polls every minute, and a steady cycle's INFO line, 1,440 a day, said nothing."""
        return logging.INFO if self.eventful or asked else logging.DEBUG

    def summary(self) -> str:
        polite = "".join(
            f", {count} {what}"
            for count, what in ((self.deferred, "deferred, not requested"), (self.gone, "gone"))
            if count
        )
        same = f", {self.unchanged} sent the same body again" if self.unchanged else ""
        left = ""
        if self.left:
            left = f", {counted(self.left, 'feed')} left for the next cycle (storage failing)"
        elif self.storage_failing is not None and not self.feeds:
            left = ", no feed claimed (storage failing, see above)"
        return (
            f"{counted(self.feeds, 'feed')} ({self.stored} updated, {self.not_modified} not "
            f"modified{same}, {self.failed} failed, {self.aborted} aborted by storage "
            f"errors{polite}){left}, {counted(self.new_items, 'new item')}, "
            f"{self.bytes / 1024:.1f} KiB; images: "
            f"{self.images_stored} stored, {self.images_retry_later} to retry, "
            f"{self.images_failed} failed for good; {self.elapsed_s:.2f} s"
        )
