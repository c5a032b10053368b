"""What a cycle did, per feed and in total, as the logs and the CLI show it."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime

from .models import Feed

log = logging.getLogger("feedcollector")


@dataclass(slots=True)
class FeedOutcome:
    """One feed's refresh; ``state`` is stored, not_modified, failed, aborted, deferred (a
    Retry-After runs: not requested) or gone (410)."""

    feed: Feed
    fetched_at: datetime
    state: str = "failed"
    http_status: int | None = None
    items: int = 0
    new_items: int = 0
    bytes: int = 0
    elapsed_s: float = 0.0
    error: str | None = None
    next_fetch_at: datetime | None = None

    def finish(self, began: float) -> FeedOutcome:
        self.elapsed_s = time.monotonic() - began
        return self

    def describe(self) -> str:
        status = f"HTTP {self.http_status}" if self.http_status else "no response"
        if self.state == "stored":
            what = f"{self.new_items} new of {self.items} items"
        elif self.state == "not_modified":
            what = "not modified"
        else:
            what = f"{self.state}: {self.error}"
        size = f"{self.bytes / 1024:.1f} KiB" if self.bytes else "0 KiB"
        return f"feed {self.feed.url}: {status}, {what}, {size}, {self.elapsed_s:.2f} s"


@dataclass(slots=True)
class CycleReport:
    """Counters only (no per-feed lists), so memory stays flat however many feeds there are."""

    started: datetime
    feeds: int = 0
    stored: int = 0
    not_modified: int = 0
    failed: int = 0
    aborted: int = 0
    deferred: int = 0
    gone: int = 0
    new_items: int = 0
    bytes: int = 0
    images_stored: int = 0
    images_failed: int = 0
    images_retry_later: int = 0
    elapsed_s: float = 0.0
    failed_urls: list[str] = field(default_factory=list)

    def add(self, outcome: FeedOutcome) -> None:
        self.feeds += 1
        self.new_items += outcome.new_items
        self.bytes += outcome.bytes
        if outcome.state == "stored":
            self.stored += 1
        elif outcome.state == "not_modified":
            self.not_modified += 1
        elif outcome.state == "aborted":
            self.aborted += 1
        elif outcome.state == "deferred":
            self.deferred += 1
        elif outcome.state == "gone":
            self.gone += 1
        else:
            self.failed += 1
            if len(self.failed_urls) < 20:
                self.failed_urls.append(outcome.feed.url)
        quiet = ("stored", "not_modified", "deferred")
        level = logging.INFO if outcome.state in quiet else logging.WARNING
        log.log(level, "%s", outcome.describe())

    def summary(self) -> str:
        polite = "".join(
            f", {count} {what}"
            for count, what in ((self.deferred, "deferred by Retry-After"), (self.gone, "gone"))
            if count
        )
        return (
            f"{self.feeds} feeds ({self.stored} updated, {self.not_modified} not modified, "
            f"{self.failed} failed, {self.aborted} aborted by storage errors{polite}), "
            f"{self.new_items} new items, {self.bytes / 1024:.1f} KiB; images: "
            f"{self.images_stored} stored, {self.images_retry_later} to retry, "
            f"{self.images_failed} failed for good; {self.elapsed_s:.2f} s"
        )
