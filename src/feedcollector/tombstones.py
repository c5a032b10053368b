"""Tombstones: an expired item that its feed still lists is not stored (or downloaded) again.

Retention deletes an item after ``item_days``, but many feeds (podcasts, full-archive blogs)
list old entries for years; without a memory of the deletion the next fetch would insert the
item again as new and download its images again. So retention leaves a tombstone
``(feed_id, guid, deleted_at)`` per deleted item, and the items ``INSERT`` skips a GUID with a
tombstone (``store_items.item_statements``). This goes beyond the seed.

Tombstones expire too, or they would grow forever. One that is older than ``item_days`` is
checked against its feed's newest raw backup (the feed's current content, also when it has
answered 304 since) and its oldest backup of the last ``item_days``: it is dropped unless one
of them still lists the GUID. The oldest one counts because ``restore`` replays the backups of
the last ``item_days``: a tombstone dropped the day its feed stopped listing the item let a
restore bring the expired item back from the days before (an item listed, dropped and listed
again in between is not looked for). When the feed has
no readable backup (failing or unchanged for longer than the backups are kept) it is kept,
since we cannot tell. A feed removed from the feeds file (or unknown) cannot re-ingest, but
``restore`` replays its backups all the same: its old tombstones are checked against them the
same way, and dropped once it has no backup left (``backup_days`` after its removal); putting
it back may bring back items it still lists.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from .backups import StoredBackup, feed_backups, read_backup
from .database import Database, Statement
from .decode import decode_feed
from .errors import ObjectStoreError, ParseError
from .objectstore import ObjectStore
from .parse import parse_feed
from .store import chunked, placeholders
from .timestamps import parse_timestamp

log = logging.getLogger("feedcollector")

TOMBSTONE_PAGE_SIZE = 500
FEED_PAGE_SIZE = 100


@dataclass(frozen=True, slots=True)
class FeedListing:
    """What we know of a feed when deciding about its old tombstones."""

    subscribed: bool
    """The feed is active in the feeds file, so it is fetched and could re-ingest."""
    listed: frozenset[str] | None
    """GUIDs of its newest backup and of its oldest one since the items cutoff; None when
    there is none or one cannot be read (then keep everything)."""
    has_backup: bool = True
    """It has a backup (taken by now), which a restore would replay, readable or not."""


def tombstones_to_drop(guids: Sequence[str], listing: FeedListing) -> list[str]:
    """The old tombstones of one feed that can go (pure).

    A removed feed is not fetched, but a restore replays its backups: only one without any
    can lose them all (one with a backup it could not read keeps them, like a subscribed one)."""
    if listing.listed is None:
        return [] if listing.subscribed or listing.has_backup else list(guids)
    return [guid for guid in guids if guid not in listing.listed]


@dataclass(frozen=True, slots=True)
class TombstoneSweep:
    dropped: int = 0
    kept: int = 0


async def expire_tombstones(
    db: Database,
    objects: ObjectStore,
    *,
    before: str,
    now: datetime,
    dry_run: bool,
    page_size: int = TOMBSTONE_PAGE_SIZE,
) -> TombstoneSweep:
    """Drop tombstones deleted before ``before`` that their feed no longer lists."""
    dropped = kept = 0
    feed_cursor = ""
    while True:
        rows = await db.query(
            "SELECT DISTINCT feed_id FROM item_tombstones WHERE deleted_at < ? AND feed_id > ? "
            "ORDER BY feed_id LIMIT ?",
            (before, feed_cursor, FEED_PAGE_SIZE),
        )
        if not rows:
            return TombstoneSweep(dropped, kept)
        for row in rows:
            listing = await feed_listing(db, objects, row["feed_id"], now, since=before)
            sweep = await _sweep_feed(
                db, row["feed_id"], listing, before=before, dry_run=dry_run, page_size=page_size
            )
            dropped += sweep.dropped
            kept += sweep.kept
        feed_cursor = rows[-1]["feed_id"]


async def feed_listing(
    db: Database, objects: ObjectStore, feed_id: str, now: datetime, *, since: str
) -> FeedListing:
    """Whether the feed is subscribed, and the GUIDs its newest backup lists, with those of
    its oldest backup taken at or after ``since`` (if readable).

    Backups stamped after ``now`` (written while the clock was ahead) are not the newest: one
    that no longer listed an item dropped its tombstone while today's copy still lists it."""
    rows = await db.query("SELECT url, active FROM feeds WHERE id = ?", (feed_id,))
    if not rows:  # no URL to replay its backups under
        return FeedListing(subscribed=False, listed=None, has_backup=False)
    url, subscribed = rows[0]["url"], bool(rows[0]["active"])
    oldest: StoredBackup | None = None
    newest: StoredBackup | None = None
    start = parse_timestamp(since)
    async for backup in feed_backups(objects, feed_id):
        if backup.taken <= now:
            newest = backup
            if oldest is None and backup.taken >= start:
                oldest = backup
    if newest is None:
        return FeedListing(subscribed=subscribed, listed=None, has_backup=False)
    listed: set[str] = set()
    for backup in {newest.key: newest, **({oldest.key: oldest} if oldest else {})}.values():
        try:
            body, content_type = await read_backup(objects, backup)
            parsed = parse_feed(decode_feed(body, content_type).data, url)
        except (ObjectStoreError, ParseError) as exc:  # one unreadable file: nothing dropped
            log.info(
                "cleanup: cannot read %s (%s); the tombstones of %s are kept", backup.key, exc, url
            )
            return FeedListing(subscribed=subscribed, listed=None)
        for item in parsed.items:  # and the GUID as written, as versions before the text
            listed.add(item.guid)  # repair stored it (and its tombstone)
            if item.earlier_guid is not None:
                listed.add(item.earlier_guid)
    return FeedListing(subscribed=subscribed, listed=frozenset(listed))


async def _sweep_feed(
    db: Database,
    feed_id: str,
    listing: FeedListing,
    *,
    before: str,
    dry_run: bool,
    page_size: int,
) -> TombstoneSweep:
    dropped = kept = 0
    cursor = ""
    while True:
        rows = await db.query(
            "SELECT guid FROM item_tombstones WHERE feed_id = ? AND deleted_at < ? AND guid > ? "
            "ORDER BY guid LIMIT ?",
            (feed_id, before, cursor, page_size),
        )
        if not rows:
            return TombstoneSweep(dropped, kept)
        guids = [row["guid"] for row in rows]
        drop = tombstones_to_drop(guids, listing)
        dropped += len(drop)
        kept += len(guids) - len(drop)
        if drop and not dry_run:
            await db.batch(
                [
                    Statement(
                        "DELETE FROM item_tombstones WHERE feed_id = ? "  # noqa: S608
                        f"AND guid IN ({placeholders(len(chunk))})",
                        (feed_id, *chunk),
                    )
                    for chunk in chunked(drop)
                ]
            )
        cursor = guids[-1]
