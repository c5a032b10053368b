"""The queries behind the scheduler's courtesies: 410 Gone, permanent moves, Retry-After
deferrals, and the leases of feeds that wait their turn for a busy host.

Each is one statement (a rare event, or a small batch), on SQLite and D1 alike; the common
paths (claims, stored items, 304s, failures) stay in :mod:`.store`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from .database import Database
from .safe_text import stored_error
from .store import chunked, placeholders
from .timestamps import format_timestamp


async def record_gone(db: Database, feed_id: str, *, at: datetime, error: str) -> bool:
    """410 Gone: stop scheduling the feed (its items stay). True if it was not gone before."""
    rows = await db.query(
        "UPDATE feeds SET gone_at = COALESCE(gone_at, ?), last_status = 410, last_error = ?, "
        "lease_owner = NULL, lease_until = NULL WHERE id = ? RETURNING gone_at",
        (format_timestamp(at), stored_error(error), feed_id),
    )
    return bool(rows) and rows[0]["gone_at"] == format_timestamp(at)


async def record_move(db: Database, feed_id: str, moved_to: str | None) -> None:
    """Where a permanent redirect led (None: back at the feeds-file URL)."""
    await db.query("UPDATE feeds SET moved_to = ? WHERE id = ?", (moved_to, feed_id))


async def defer_feed(db: Database, feed_id: str, *, until: datetime, owner: str) -> None:
    """Not before ``until`` (a Retry-After): never earlier than already planned; lease dropped.

    Not a failure: nothing was asked of the server."""
    stamp = format_timestamp(until)
    await db.query(
        "UPDATE feeds SET next_fetch_at = CASE WHEN next_fetch_at IS NULL OR next_fetch_at < ? "
        "THEN ? ELSE next_fetch_at END, lease_owner = NULL, lease_until = NULL "
        "WHERE id = ? AND lease_owner = ?",
        (stamp, stamp, feed_id, owner),
    )


async def renew_lease(db: Database, feed_id: str, *, owner: str, until: datetime) -> bool:
    """Extend our lease of a feed still waiting for its host; False if it is no longer ours."""
    rows = await db.query(
        "UPDATE feeds SET lease_until = ? WHERE id = ? AND lease_owner = ? RETURNING id",
        (format_timestamp(until), feed_id, owner),
    )
    return bool(rows)


async def release_feeds(db: Database, feed_ids: Sequence[str], owner: str) -> None:
    """Hand back claimed feeds that were not started (shutdown), in as few statements as fit."""
    for chunk in chunked(feed_ids):
        await db.query(
            "UPDATE feeds SET lease_owner = NULL, lease_until = NULL "  # noqa: S608 (placeholders)
            f"WHERE lease_owner = ? AND id IN ({placeholders(len(chunk))})",
            (owner, *chunk),
        )


async def release_owned_feeds(db: Database, owner: str) -> int:
    """Hand back every feed ``owner`` holds (a collector leaving, or one that left without
    doing so); how many it held."""
    rows = await db.query(
        "UPDATE feeds SET lease_owner = NULL, lease_until = NULL WHERE lease_owner = ? "
        "RETURNING id",
        (owner,),
    )
    return len(rows)


async def lease_owners_of_host(db: Database, host: str, now: datetime) -> list[str]:
    """The collectors of host name ``host`` (owners ``host:...``, see :mod:`.owners`; of any
    boot or pid namespace, which :func:`.owners.owner_has_stopped` tells apart) that hold the
    lease of a due feed now. A feed whose work did not end is still due (its row was not written),
    so the due range of ``feeds_due`` is all that is read, as a claim reads it: not every
    feed's row, which D1 bills by the row, at every start of a ``run --once``."""
    stamp = format_timestamp(now)
    rows = await db.query(
        "SELECT DISTINCT lease_owner FROM feeds WHERE active = 1 AND next_fetch_at <= ? "
        "AND lease_owner >= ? AND lease_owner < ? AND lease_until > ?",
        (stamp, f"{host}:", f"{host};", stamp),  # ";" is the character after ":"
    )
    return [row["lease_owner"] for row in rows]


@dataclass(frozen=True, slots=True)
class HostDeferral:
    """A 429 whose Retry-After has not run out."""

    asked_by: str
    """The URL that answered it (a redirect's target may be on another host than the feed's;
    for a 429 recorded before that was kept, where the feed is fetched from)."""
    until: str


async def live_rate_limits(db: Database, now: datetime) -> list[HostDeferral]:
    """The 429 Retry-Afters still running, so a new process keeps honouring them per host."""
    rows = await db.query(
        "SELECT COALESCE(rate_limited_by, moved_to, url) AS asked_by, retry_after_until "
        "FROM feeds WHERE last_status = 429 AND retry_after_until > ?",
        (format_timestamp(now),),
    )
    return [HostDeferral(row["asked_by"], row["retry_after_until"]) for row in rows]


@dataclass(frozen=True, slots=True)
class HeldFeed:
    """A feed another collector holds: who (an owner, see :mod:`.owners`) and until when."""

    id: str
    url: str
    owner: str | None
    until: str | None


async def held_feeds(db: Database, feed_ids: Sequence[str]) -> list[HeldFeed]:
    """Who holds these feeds (to name the ones a manual fetch could not take)."""
    held: list[HeldFeed] = []
    for chunk in chunked(feed_ids):
        rows = await db.query(
            "SELECT id, url, lease_owner, lease_until FROM feeds "  # noqa: S608
            f"WHERE id IN ({placeholders(len(chunk))}) ORDER BY url",
            tuple(chunk),
        )
        held += [
            HeldFeed(row["id"], row["url"], row["lease_owner"], row["lease_until"]) for row in rows
        ]
    return held
