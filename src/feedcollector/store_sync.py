"""The ``feeds`` table following the feeds file: one batch per sync, only when something
changed (the plan is :func:`.schedule.plan_feed_sync`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from .database import Database, Statement
from .models import FeedSpec
from .schedule import (
    KnownFeed,
    feed_id_for,
    interval_seconds_of,
    plan_feed_sync,
    unused_feed_id,
)
from .timestamps import format_timestamp


@dataclass(frozen=True, slots=True)
class SyncReport:
    added: int
    reactivated: int
    changed: int
    removed: int
    renamed: tuple[tuple[str, str], ...] = ()
    """``(old URL, new URL)`` of moved feeds now listed at their new URL (ids carried over)."""
    kept: int = 0
    """Feeds the file no longer lists, left scheduled (``keep_unlisted``)."""
    twins: tuple[tuple[str, str], ...] = ()
    """``(URL added, URL of the row that holds its id)``: a feed listed again at the address
    it moved from, beside its new one (two feeds now, fetching the same document)."""


_TITLES = "config_title = ?, title = COALESCE(?, channel_title, title)"
"""A feeds-file title (given twice) wins; without one, the channel's own title is back."""

_READ_AGAIN_FOR_ITS_TITLE = (
    "UPDATE feeds SET last_etag = NULL, last_modified = NULL, body_digest = NULL "
    "WHERE url = ? AND channel_title IS NULL"
)
"""A feed whose feeds-file title was deleted and whose own title is not known (stored before
``channel_title`` was): its next fetch reads a whole body again, which names it."""


_SOONER_FOR_A_SHORTER_INTERVAL = (
    "next_fetch_at = CASE WHEN ? IS NULL OR last_fetched_at IS NULL OR consecutive_failures > 0"
    " OR ? >= COALESCE(interval_seconds, ? + 1) THEN next_fetch_at"
    " ELSE MIN(next_fetch_at, MAX(strftime('%Y-%m-%dT%H:%M:%SZ', last_fetched_at, ?),"
    " COALESCE(strftime('%Y-%m-%dT%H:%M:%SZ', last_fetched_at,"
    " '+' || feed_ttl_seconds || ' seconds'), ''), COALESCE(retry_after_until, ''))) END"
)
"""A feed given a shorter interval than it had (or a first pinned one) is due that long after
its last fetch, not when the old interval said (24h cut to 15m waited up to a day); never
sooner than the feed's own ``<ttl>`` or a Retry-After, and a feed in backoff keeps it. A
title changed alone, or a longer interval, leaves the next fetch where it is. (Compared
before the row's ``interval_seconds`` is set: SQLite reads a row's old values in SET.)"""


def new_feed_row(feed_id: str, spec: FeedSpec, stamp: str, *, returning: bool = False) -> Statement:
    """Insert a feeds-file feed's row, due at once (``RETURNING id`` tells whether it was new)."""
    return Statement(
        "INSERT OR IGNORE INTO feeds (id, url, config_title, title, interval_seconds, "
        "next_fetch_at, created_at, active) VALUES (?, ?, ?, ?, ?, ?, ?, 1)"
        + (" RETURNING id" if returning else ""),
        (feed_id, spec.url, spec.title, spec.title, interval_seconds_of(spec), stamp, stamp),
    )


async def sync_feeds(
    db: Database, specs: Sequence[FeedSpec], now: datetime, *, keep_unlisted: bool = False
) -> SyncReport:
    """Make the ``feeds`` table follow the feeds file (one batch, only when something changed).
    ``keep_unlisted``: feeds the file does not list stay scheduled (another collector's file
    lists them, see :func:`.claims.sync_feeds_file`)."""
    rows = await db.query(
        "SELECT id, url, active, interval_seconds, config_title, moved_to FROM feeds"
    )
    known = {
        row["url"]: KnownFeed(
            row["id"],
            row["url"],
            bool(row["active"]),
            row["interval_seconds"],
            row["config_title"],
            row["moved_to"],
        )
        for row in rows
    }
    plan = plan_feed_sync(known, specs)
    if plan.is_empty:
        return SyncReport(0, 0, 0, 0)
    stamp = format_timestamp(now)
    by_id = {row.id: row.url for row in known.values()}
    twins: list[tuple[str, str]] = []
    statements: list[Statement] = []
    for spec in plan.added:
        natural, feed_id = feed_id_for(spec.url), unused_feed_id(spec.url, by_id)
        if feed_id != natural:
            twins.append((spec.url, by_id[natural]))
        by_id[feed_id] = spec.url
        statements.append(new_feed_row(feed_id, spec, stamp))
    statements += [
        Statement(
            f"UPDATE feeds SET active = 1, {_TITLES}, interval_seconds = ?, "
            "next_fetch_at = MAX(next_fetch_at, ?), gone_at = NULL, moved_to = NULL WHERE url = ?",
            (s.title, s.title, interval_seconds_of(s), stamp, s.url),
        )
        for s in plan.reactivated
    ]
    statements += [
        Statement(
            "UPDATE feeds SET url = ?, moved_to = NULL, active = 1, gone_at = NULL, "
            f"{_TITLES}, interval_seconds = ? WHERE id = ?",
            (s.url, s.title, s.title, interval_seconds_of(s), row.id),
        )
        for row, s in plan.renamed
    ]
    statements += [
        Statement(
            f"UPDATE feeds SET {_TITLES}, interval_seconds = ?, "
            f"{_SOONER_FOR_A_SHORTER_INTERVAL} WHERE url = ?",
            (s.title, s.title, *[seconds] * 4, f"+{seconds} seconds", s.url),
        )
        for s in plan.changed
        for seconds in [interval_seconds_of(s)]
    ]
    statements += [
        Statement(_READ_AGAIN_FOR_ITS_TITLE, (s.url,))
        for s in (*plan.reactivated, *plan.changed)
        if s.title is None and known[s.url].config_title is not None
    ]
    if not keep_unlisted:
        statements += [
            Statement("UPDATE feeds SET active = 0 WHERE id = ?", (row.id,)) for row in plan.removed
        ]
    if statements:
        await db.batch(statements)
    return SyncReport(
        len(plan.added),
        len(plan.reactivated),
        len(plan.changed),
        0 if keep_unlisted else len(plan.removed),
        tuple((row.url, s.url) for row, s in plan.renamed),
        len(plan.removed) if keep_unlisted else 0,
        tuple(twins),
    )
