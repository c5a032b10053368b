"""``feedcollector status``: every feed's health, worst first, with totals.

A feed is in one state: ``gone`` (``gone_at`` is set: it answered 410 Gone, the collector no
longer fetches it and the feeds file needs an edit), ``failing`` (``consecutive_failures`` >
0), ``new`` (in the feeds file, registered by the next cycle), ``active`` or ``removed`` (no
longer in the feeds file: history kept, not fetched). ``moved_to`` (a permanent redirect) is
shown whatever the state, as a hint to update the feeds file. The state is computed in SQL
(:data:`FEED_STATE_SQL`) so the listing, the totals and the metrics agree.

The whole report is four GROUP BY-style queries whatever the number of feeds (no query per
feed), so it stays fast at 10k feeds on SQLite and D1 alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .database import Database, Row
from .models import FeedSpec
from .schedule import KnownFeed, plan_feed_sync

FEED_STATE_SQL = (
    "CASE WHEN active = 0 THEN 'removed' WHEN gone_at IS NOT NULL THEN 'gone' "
    "WHEN consecutive_failures > 0 THEN 'failing' ELSE 'active' END"
)
STATES = ("gone", "failing", "new", "active", "removed")
"""Every state, worst first: the primary sort order of the listing."""
UNSCHEDULED = frozenset({"gone", "removed"})
"""States of feeds the collector does not fetch: they have no next fetch (the row keeps the
last one planned, a time long past)."""
IMAGE_STATUSES = ("pending", "success", "failed")


@dataclass(frozen=True, slots=True)
class FeedStatus:
    """One line of the status listing (also one object of ``status --json``)."""

    url: str
    state: str
    title: str | None = None
    last_fetched_at: str | None = None
    next_fetch_at: str | None = None
    consecutive_failures: int = 0
    last_error: str | None = None
    last_status: int | None = None
    items: int = 0
    images_pending: int = 0
    images_failed: int = 0
    images_retry_at: str | None = None
    """When the first of its pending images that failed (or whose host asked to wait) is
    tried again; None when none waits."""
    gone_at: str | None = None
    moved_to: str | None = None
    held_by: str | None = None
    """The collector whose lease on the feed runs now (fetching it, or stopped before it let
    go: a killed one's feeds are skipped until ``held_until``)."""
    held_until: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "title": self.title,
            "state": self.state,
            "last_fetched_at": self.last_fetched_at,
            "next_fetch_at": self.next_fetch_at,
            "consecutive_failures": self.consecutive_failures,
            "last_error": self.last_error,
            "last_status": self.last_status,
            "items": self.items,
            "images_pending": self.images_pending,
            "images_failed": self.images_failed,
            "images_retry_at": self.images_retry_at,
            "gone_at": self.gone_at,
            "moved_to": self.moved_to,
            "held_by": self.held_by,
            "held_until": self.held_until,
        }


@dataclass(frozen=True, slots=True)
class StatusTotals:
    """Counts over every feed, also when the listing is filtered or cut short."""

    feeds: Mapping[str, int] = field(default_factory=dict)
    items: int = 0
    image_tasks: Mapping[str, int] = field(default_factory=dict)

    @property
    def feed_count(self) -> int:
        return sum(self.feeds.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "feeds": self.feed_count,
            **{state: self.feeds.get(state, 0) for state in STATES},
            "items": self.items,
            "image_tasks": {status: self.image_tasks.get(status, 0) for status in IMAGE_STATUSES},
        }


@dataclass(frozen=True, slots=True)
class StatusReport:
    generated_at: str
    feeds: tuple[FeedStatus, ...]
    totals: StatusTotals
    feeds_file_error: str | None = None
    """Why the feeds file could not be read (then new and removed feeds are not shown, and a
    running collector keeps the feeds it knows): a script reads it here, not on stderr."""

    def to_json(self) -> dict[str, Any]:
        return {
            "generated_at": self.generated_at,
            "feeds_file_error": self.feeds_file_error,
            "totals": self.totals.to_json(),
            "feeds": [feed.to_json() for feed in self.feeds],
        }


# --- decisions (pure) ---------------------------------------------------------------------


def worst_first_key(feed: FeedStatus) -> tuple[int, int, str, str]:
    """State (gone, failing, new, active, removed), then more failures, then least recently
    fetched (never fetched first), then URL."""
    return (
        STATES.index(feed.state),
        -feed.consecutive_failures,
        feed.last_fetched_at or "",
        feed.url,
    )


def build_status(
    feed_rows: Iterable[Row],
    item_counts: Mapping[str, int],
    open_images: Mapping[tuple[str, str], int],
    image_totals: Mapping[str, int],
    specs: Sequence[FeedSpec] | None,
    *,
    generated_at: str,
    image_retries: Mapping[str, str] | None = None,
) -> StatusReport:
    """Join the query results into the sorted report. ``specs``: a feeds file the table has
    not followed yet (None: it has, or it cannot be read); its entries the database does not
    know, or knows as removed, are ``new`` (``failing`` when put back during its backoff), and
    the feeds it no longer lists ``removed``, as the next cycle's sync will make them (they
    showed ``active`` until then). Those coming are due at once (``generated_at``), but for
    the later time a feed put back keeps (a backoff, a Retry-After). Its
    titles are shown as the sync will store them (the file's, else the channel's).
    ``image_retries``: per feed id, when its first waiting image is tried again."""
    retries = image_retries or {}
    statuses: list[FeedStatus] = []
    known: dict[str, KnownFeed] = {}
    rows = list(feed_rows)
    for row in rows:
        known[row["url"]] = KnownFeed(
            row["id"], row["url"], row["state"] != "removed", None, None, row["moved_to"]
        )
    plan = plan_feed_sync(known, specs) if specs is not None else None
    leaving = {feed.url for feed in plan.removed} if plan else set()
    returning = {spec.url for spec in plan.reactivated} if plan else set()
    listed = {spec.url: spec for spec in specs or ()}
    for row in rows:
        feed_id = row["id"]
        state = row["state"]
        next_fetch_at = row["next_fetch_at"]
        title = row["title"]
        if row["url"] in listed:  # the file's title as the next sync will store it
            title = listed[row["url"]].title or row.get("channel_title") or title
        if row["url"] in leaving:
            state = "removed"
        elif row["url"] in returning:  # due at once, unless it keeps a later time it had
            failing = int(row["consecutive_failures"] or 0) > 0
            state = "failing" if failing else "new"
            next_fetch_at = max(next_fetch_at or generated_at, generated_at)
        statuses.append(
            FeedStatus(
                url=row["url"],
                state=state,
                title=title,
                last_fetched_at=row["last_fetched_at"],
                next_fetch_at=None if state in UNSCHEDULED else next_fetch_at,
                consecutive_failures=int(row["consecutive_failures"] or 0),
                last_error=row["last_error"],
                last_status=row["last_status"],
                items=item_counts.get(feed_id, 0),
                images_pending=open_images.get((feed_id, "pending"), 0),
                images_failed=open_images.get((feed_id, "failed"), 0),
                images_retry_at=retries.get(feed_id),
                gone_at=row["gone_at"],
                moved_to=row["moved_to"],
                held_by=row.get("held_by"),
                held_until=row.get("held_until"),
            )
        )
    for spec in plan.added if plan else ():
        statuses.append(
            FeedStatus(url=spec.url, state="new", title=spec.title, next_fetch_at=generated_at)
        )
    statuses.sort(key=worst_first_key)
    by_state = {state: 0 for state in STATES}
    for status in statuses:
        by_state[status.state] += 1
    totals = StatusTotals(by_state, sum(item_counts.values()), dict(image_totals))
    return StatusReport(generated_at, tuple(statuses), totals)


def select_feeds(
    report: StatusReport, states: Sequence[str] = (), limit: int | None = None
) -> StatusReport:
    """The report with only the given states (all when empty), at most ``limit`` feeds;
    the totals keep counting everything."""
    feeds = [feed for feed in report.feeds if not states or feed.state in states]
    return replace(report, feeds=tuple(feeds[:limit]))


# --- queries ------------------------------------------------------------------------------


async def read_status(
    db: Database, specs: Sequence[FeedSpec] | None, *, generated_at: str
) -> StatusReport:
    """The status of every feed of the database and the feeds file, in four queries."""
    feed_rows = await db.query(
        "SELECT id, url, COALESCE(config_title, title) AS title, channel_title, "
        f"{FEED_STATE_SQL} AS state, last_fetched_at, next_fetch_at, consecutive_failures, "
        "last_error, last_status, gone_at, moved_to, "
        "CASE WHEN lease_until > ? THEN lease_owner END AS held_by, "
        "CASE WHEN lease_until > ? THEN lease_until END AS held_until FROM feeds",
        (generated_at, generated_at),
    )
    item_rows = await db.query("SELECT feed_id, COUNT(*) AS n FROM items GROUP BY feed_id")
    open_rows = await db.query(
        "SELECT i.feed_id, t.status, COUNT(*) AS n, "
        "MIN(CASE WHEN t.status = 'pending' AND t.retry_at > ? THEN t.retry_at END) AS retry_at "
        "FROM image_tasks t "
        "JOIN items i ON i.id = t.item_id WHERE t.status IN ('pending', 'failed') "
        "GROUP BY i.feed_id, t.status",
        (generated_at,),
    )
    return build_status(
        feed_rows,
        {row["feed_id"]: int(row["n"]) for row in item_rows},
        {(row["feed_id"], row["status"]): int(row["n"]) for row in open_rows},
        await image_task_counts(db),
        specs,
        generated_at=generated_at,
        image_retries={row["feed_id"]: row["retry_at"] for row in open_rows if row["retry_at"]},
    )


async def image_task_counts(db: Database) -> dict[str, int]:
    """Image tasks by status (one pass over the status index)."""
    rows = await db.query("SELECT status, COUNT(*) AS n FROM image_tasks GROUP BY status")
    counts = {status: 0 for status in IMAGE_STATUSES}
    counts.update({row["status"]: int(row["n"]) for row in rows})
    return counts


async def feed_state_counts(db: Database) -> dict[str, int]:
    """Feeds of the database by state (``new`` ones are not in it yet)."""
    sql = f"SELECT {FEED_STATE_SQL} AS state, COUNT(*) AS n FROM feeds GROUP BY 1"
    rows = await db.query(sql)
    counts = {state: 0 for state in STATES if state != "new"}
    counts.update({row["state"]: int(row["n"]) for row in rows})
    return counts
