"""Every query the collector runs, against the Database protocol (SQLite or D1 alike).

The rules of the seed live here: ``INSERT OR IGNORE`` on ``UNIQUE(feed_id, guid)`` with no
pre-query, all of a feed's writes in one transactional batch, and image tasks created only for
items that were new in that batch. Claims use a lease (``UPDATE ... RETURNING``) so several
collectors can share one database without fetching a feed twice.

An item's ``content_html`` is stored inline unless it is too big for a D1 row or for the batch
(see :mod:`feedcollector.spill`): then it is NULL and ``content_key`` names the object holding
the HTML, written before the batch. A feed's items are written by :mod:`.store_items`, the
image-task queries live in :mod:`.store_images`, the feeds file's registration in
:mod:`.store_sync`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

from .database import Database, Row, Statement
from .models import Feed
from .safe_text import stored_error
from .timestamps import format_timestamp

MAX_PARAMS = 100
"""D1 binds at most 100 parameters per statement."""

_FEED_COLUMNS = (
    "id, url, title, last_etag, last_modified, last_fetched_at, consecutive_failures, "
    "next_fetch_at, interval_seconds, moved_to, gone_at, retry_after_until, feed_ttl_seconds, "
    "post_gap_seconds, newest_item_at, body_digest"
)


T = TypeVar("T")


def chunked(values: Sequence[T], size: int = MAX_PARAMS - 4) -> list[Sequence[T]]:
    """Slices small enough to bind, with room for a few other parameters."""
    return [values[i : i + size] for i in range(0, len(values), size)]


def placeholders(count: int) -> str:
    """``?, ?, ?`` for an ``IN (...)`` list."""
    return ", ".join("?" * count)


async def keys_found(db: Database, select: str, keys: Sequence[str]) -> set[str]:
    """Those of ``keys`` that ``select`` (``SELECT column AS k FROM table WHERE column IN``)
    finds: one batch, one round trip, of ``IN`` lookups of at most :data:`MAX_PARAMS` keys."""
    if not keys:
        return set()
    statements = [
        Statement(f"{select} ({placeholders(len(part))})", tuple(part))
        for part in chunked(keys, MAX_PARAMS)
    ]
    return {row["k"] for rows in await db.batch(statements) for row in rows}


def _feed(row: Row) -> Feed:
    return Feed(
        id=row["id"],
        url=row["url"],
        title=row["title"],
        last_etag=row["last_etag"],
        last_modified=row["last_modified"],
        last_fetched_at=row["last_fetched_at"],
        consecutive_failures=int(row["consecutive_failures"] or 0),
        next_fetch_at=row["next_fetch_at"],
        interval_seconds=row["interval_seconds"],
        moved_to=row["moved_to"],
        gone_at=row["gone_at"],
        retry_after_until=row["retry_after_until"],
        feed_ttl_seconds=row["feed_ttl_seconds"],
        post_gap_seconds=row["post_gap_seconds"],
        newest_item_at=row["newest_item_at"],
        body_digest=row["body_digest"],
    )


# --- claiming feeds -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimCursor:
    """Keyset position within one cycle, so a feed is claimed at most once per cycle."""

    next_fetch_at: str = ""
    id: str = ""


async def claim_due_feeds(
    db: Database,
    *,
    due_by: datetime,
    now: datetime,
    owner: str,
    lease: timedelta,
    limit: int,
    after: ClaimCursor,
) -> list[Feed]:
    """Lease up to ``limit`` active feeds due by ``due_by``, in due order, past ``after``.

    A feed this collector holds already is its own to take again: its work was aborted and
    the release did not reach the database (a Worker restarting), and it waited out the
    whole lease, 15 minutes, skipped by the very process that held it.

    A feed that answered 410 Gone (``gone_at``) is not scheduled any more. The cursor is a
    row value, which SQLite reads as one range of ``feeds_due (active, next_fetch_at, id)``:
    every feed registered by one sync is due at the same second, and a page found its start
    among them by reading (and sorting) all of them."""
    rows = await db.query(
        "UPDATE feeds SET lease_owner = ?, lease_until = ? WHERE id IN ("
        " SELECT id FROM feeds WHERE active = 1 AND gone_at IS NULL AND next_fetch_at <= ?"
        " AND (lease_until IS NULL OR lease_until <= ? OR lease_owner = ?)"
        " AND (next_fetch_at, id) > (?, ?)"
        " ORDER BY next_fetch_at, id LIMIT ?)"
        f" RETURNING {_FEED_COLUMNS}",
        (
            owner,
            format_timestamp(now + lease),
            format_timestamp(due_by),
            format_timestamp(now),
            owner,
            after.next_fetch_at,
            after.id,
            limit,
        ),
    )
    feeds = [_feed(row) for row in rows]
    feeds.sort(key=lambda f: (f.next_fetch_at or "", f.id))
    return feeds


async def active_feed_ids(db: Database, urls: Sequence[str] | None = None) -> list[str]:
    """Ids of the active feeds (all, or those with the given URLs), for a manual fetch."""
    if urls is None:
        rows = await db.query("SELECT id FROM feeds WHERE active = 1 ORDER BY url")
        return [row["id"] for row in rows]
    ids: list[str] = []
    for chunk in chunked(urls):
        rows = await db.query(
            f"SELECT id FROM feeds WHERE active = 1 AND url IN ({placeholders(len(chunk))})",
            tuple(chunk),
        )
        ids += [row["id"] for row in rows]
    return ids


async def claim_feeds_by_id(
    db: Database, ids: Sequence[str], *, now: datetime, owner: str, lease: timedelta
) -> list[Feed]:
    """Lease the given feeds regardless of schedule (skipping ones another collector holds).

    However many ``ids`` (a claim page grows with ``[fetch] concurrency``), each statement
    binds at most :data:`MAX_PARAMS`."""
    rows: list[Row] = []
    for chunk in chunked(ids):
        rows += await db.query(
            "UPDATE feeds SET lease_owner = ?, lease_until = ? "
            f"WHERE id IN ({placeholders(len(chunk))}) "
            "AND (lease_until IS NULL OR lease_until <= ? OR lease_owner = ?) "
            f"RETURNING {_FEED_COLUMNS}",
            (owner, format_timestamp(now + lease), *chunk, format_timestamp(now), owner),
        )
    return sorted((_feed(row) for row in rows), key=lambda f: f.url)


async def release_feed(db: Database, feed_id: str, owner: str) -> None:
    """Give a feed back after aborted work, so the next cycle can take it at once."""
    await db.query(
        "UPDATE feeds SET lease_owner = NULL, lease_until = NULL WHERE id = ? AND lease_owner = ?",
        (feed_id, owner),
    )


async def count_due_feeds(db: Database, due_by: datetime) -> int:
    """How many active feeds are due by ``due_by`` (for progress displays; one index range)."""
    rows = await db.query(
        "SELECT COUNT(*) AS n FROM feeds"
        " WHERE active = 1 AND gone_at IS NULL AND next_fetch_at <= ?",
        (format_timestamp(due_by),),
    )
    return int(rows[0]["n"]) if rows else 0


async def next_due_at(db: Database, after: datetime) -> str | None:
    """When the first active feed due later than ``after`` falls due.

    The scheduler asks for the first due after its last cycle started: a feed due before then
    was that cycle's to take, and is still due only because its work was aborted (a storage
    error) or another collector holds its lease, so it must not wake the next cycle at once."""
    rows = await db.query(
        "SELECT MIN(next_fetch_at) AS due FROM feeds"
        " WHERE active = 1 AND gone_at IS NULL AND next_fetch_at > ?",
        (format_timestamp(after),),
    )
    return rows[0]["due"] if rows else None


# --- recording outcomes -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FetchSuccess:
    """What a successful 200 changes on the feed row."""

    title: str | None
    etag: str | None
    last_modified: str | None
    fetched_at: datetime
    next_fetch_at: datetime
    status: int
    feed_ttl_seconds: int | None = None
    post_gap_seconds: int | None = None
    newest_item_at: str | None = None
    body_digest: str | None = None
    failure: str | None = None
    """Set for a body read in part (cut inside an item): its items are stored, and the feed
    counts one failure more, with this as its ``last_error``."""


@dataclass(frozen=True, slots=True)
class NotModified:
    """A fetch that changed nothing but the feed's bookkeeping: a 304, or a 200 with the body
    stored last time (the validators are then the new answer's)."""

    feed_id: str
    fetched_at: datetime
    next_fetch_at: datetime
    status: int
    etag: str | None
    last_modified: str | None


async def record_not_modified(db: Database, updates: Sequence[NotModified]) -> None:
    """The bookkeeping of many unchanged feeds in one batch: timestamps, status, validators
    (and the failure count reset)."""
    if not updates:
        return
    await db.batch(
        [
            Statement(
                "UPDATE feeds SET last_fetched_at = ?, next_fetch_at = ?, "
                "consecutive_failures = 0, last_error = NULL, last_status = ?, "
                "last_etag = ?, last_modified = ?, gone_at = NULL, retry_after_until = NULL, "
                "lease_owner = NULL, lease_until = NULL WHERE id = ?",
                (
                    format_timestamp(u.fetched_at),
                    format_timestamp(u.next_fetch_at),
                    u.status,
                    u.etag,
                    u.last_modified,
                    u.feed_id,
                ),
            )
            for u in updates
        ]
    )


async def record_failure(
    db: Database,
    feed_id: str,
    *,
    failures: int,
    next_fetch_at: datetime,
    error: str,
    status: int | None,
    retry_after_until: datetime | None = None,
    rate_limited_by: str | None = None,
) -> None:
    """A fetch or parse failure: count it, back off; ``last_fetched_at`` is left alone.

    ``retry_after_until`` is when a 429/503's Retry-After ends (even a manual fetch waits);
    ``rate_limited_by`` the URL that answered a 429, whose host waits (after a redirect, not
    the feed's own; read only while ``last_status`` is 429)."""
    await db.query(
        "UPDATE feeds SET consecutive_failures = ?, next_fetch_at = ?, last_error = ?, "
        "last_status = ?, retry_after_until = ?, rate_limited_by = ?, lease_owner = NULL, "
        "lease_until = NULL WHERE id = ?",
        (
            failures,
            format_timestamp(next_fetch_at),
            stored_error(error),
            status,
            format_timestamp(retry_after_until) if retry_after_until else None,
            rate_limited_by,
            feed_id,
        ),
    )
