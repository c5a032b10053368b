"""Recovery's images: link a recovered item's image tasks to the objects already archived
under their keys, instead of downloading them anew (the source may be gone by now).

Objects are keyed by position only (``images/{feed_id}/{md5(guid)[:8]}/{index}.{ext}``; the
original URL was in the lost database), so a position names the right image only if the item's
row is as the one its images were downloaded for: see :func:`positions_trusted`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

from .database import Database, Statement
from .held_lease import Lease
from .images import object_key
from .models import ItemRecord
from .objectstore import ObjectStore
from .store import MAX_PARAMS, chunked, placeholders
from .timestamps import format_timestamp, parse_timestamp


class Archived(NamedTuple):
    key: str
    position: int
    written: datetime


class Uncertain(NamedTuple):
    """An item whose row may have been stored from an older version than its images were
    downloaded for, and when its row's version was stored (its ``created_at``)."""

    record: ItemRecord
    stored_at: datetime


async def stored_with_unlinked_images(
    db: Database, feed_id: str, records: Sequence[ItemRecord]
) -> list[Uncertain]:
    """Those of ``records`` already stored with image tasks not ``success``, with their stored
    ids: a restore stopped between an items batch and its relinking (or a download stored but
    not recorded) left archived images unlinked, which a second run now links instead of
    downloading them anew; a database copy put back after a loss has tasks ``failed`` whose
    images were archived after the copy was taken. Each GUID is looked at once a run (its
    first backup). An item stored under its earlier GUID (:attr:`.ItemRecord.earlier_guid`)
    comes with that one, which its images' keys derive from."""
    by_guid = {record.earlier_guid: record for record in records if record.earlier_guid}
    by_guid.update((record.guid, record) for record in records)
    found: list[Uncertain] = []
    for chunk in chunked(list(by_guid), MAX_PARAMS - 1):
        rows = await db.query(
            "SELECT i.id, i.guid, i.created_at FROM items i "  # noqa: S608 (placeholders)
            f"WHERE i.feed_id = ? AND i.guid IN ({placeholders(len(chunk))}) AND EXISTS "
            "(SELECT 1 FROM image_tasks t WHERE t.item_id = i.id AND t.status <> 'success')",
            (feed_id, *chunk),
        )
        found += [
            Uncertain(
                by_guid[row["guid"]]._replace(id=row["id"], guid=row["guid"]),
                parse_timestamp(row["created_at"]),
            )
            for row in rows
        ]
    return found


FIRST_DOWNLOAD_WINDOW = timedelta(hours=1)
"""How soon after a fetch its new items' images are downloaded: in the same cycle, minutes
later at most, while a failed image is tried again an hour later at the soonest."""


def positions_trusted(archived: Sequence[Archived], count: int, stored_at: datetime) -> bool:
    """Whether an uncertain item's archived objects sit at the positions of its row's ``count``
    images. Its row came from the first backup that lists it, but the item may have been
    stored at first from an older version whose backup has expired, and an image inserted
    before the others shifts every position. Trusted when the objects are exactly positions
    0..n-1 (the count is the same), or when every one of them is within the count and was
    written within :data:`FIRST_DOWNLOAD_WINDOW` after ``stored_at``: downloaded in the cycle
    that fetched that version, so for it (an image that failed for good, such as a dead
    tracking pixel, leaves a position out). Written later, they may be retries for an older
    version; written before, they were. An edit that keeps the count can still link an image
    to another image of the item."""
    positions = {entry.position for entry in archived}
    if positions == set(range(count)):
        return True
    window_ends = stored_at + FIRST_DOWNLOAD_WINDOW
    return positions <= set(range(count)) and all(
        stored_at <= entry.written < window_ends for entry in archived
    )


async def relink_images(
    db: Database,
    objects: ObjectStore,
    feed_id: str,
    certain: Sequence[ItemRecord],
    uncertain: Sequence[Uncertain],
    taken: datetime,
    lease: Lease,
) -> int:
    """Mark the tasks not ``success`` whose image is already archived as ``success`` with
    that key; how many were.

    ``certain`` items were absent from the previous backup replayed, so this very body was
    stored at fetch time: all their archived objects are linked. ``uncertain`` ones (from the
    first backup replayed, or stored before this run) are linked when
    :func:`positions_trusted`, else their tasks stay pending and are downloaded anew
    (overwriting the objects).

    The item's full-md5 folder (used when its short key belonged to another item, see
    :func:`.store_images.image_key`) is looked at first, then the short one; an object
    whose key another item's task already holds is not linked (that task stays pending and
    its image is downloaded anew), so two items never share an object.
    """
    statements: list[Statement] = []
    stamp = format_timestamp(taken)
    checks: list[tuple[ItemRecord, datetime | None]] = [(record, None) for record in certain]
    checks += uncertain
    for record, stored_at in checks:
        archived = await _archived_images(objects, feed_id, record)
        count = len(record.image_urls)
        if stored_at is not None and not positions_trusted(archived, count, stored_at):
            continue
        for key, position, _ in archived:
            if position >= count:
                continue
            statements.append(
                Statement(
                    "UPDATE image_tasks SET status = 'success', r2_key = ?, updated_at = ? "
                    "WHERE item_id = ? AND position = ? AND status <> 'success' "
                    "AND NOT EXISTS (SELECT 1 FROM image_tasks o WHERE o.r2_key = ? "
                    "AND o.item_id <> ?) RETURNING id",
                    (key, stamp, record.id, position, key, record.id),
                )
            )
    if not statements:
        return 0
    await lease.checkpoint()  # the orphan sweep deletes what no row names: not while we name it
    return sum(1 for rows in await db.batch(statements) if rows)


async def _archived_images(
    objects: ObjectStore, feed_id: str, record: ItemRecord
) -> list[Archived]:
    """The item's image objects with their positions, full-md5 folder first, then short."""
    archived: list[Archived] = []
    for full in (True, False):
        folder = object_key(feed_id, record.guid, 0, "x", full=full).rsplit("/", 1)[0] + "/"
        async for listed in objects.list_with_times(folder):
            position = listed.key[len(folder) :].split(".", 1)[0]
            if position.isdecimal():
                archived.append(Archived(listed.key, int(position), listed.last_modified))
    return archived
