"""Objects the database names but the object store no longer holds: a folder deleted by
hand, a volume or bucket lost or replaced by an older copy. Rows that name a key leading
nowhere are noticed by no other check; readers get a broken image or an item without HTML.

One pass finds them: the keys rows name, a page at a time in key order (the partial indexes on
``image_tasks.r2_key`` and ``items.content_key``), beside the object store's listing of the
same prefix, which comes in the same order (:meth:`.ObjectStore.list_with_times`); a key the
listing skips is missing, and so is an empty object (no image or spilled HTML is ever empty:
one is what a power cut leaves of a file written just before it). Memory holds a page,
whatever the number of objects.

- Images (``retry-images --missing``): the tasks of a missing key are queued again like a
  failed one (``pending``, no attempt counted, due at once, ``r2_key`` cleared): the next cycle
  downloads the image again from its source, while the source still has it; otherwise the task
  fails for good after its three attempts, which is then the truth. A task recorded after the
  check began is left alone: its object was put just before its row, maybe after the listing
  had passed its key.
- Spilled HTML (``restore``): :func:`missing_content` tells a restore which of a feed's items
  lack their object, which it writes again from the backups it replays.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from .database import Database, Row, SqlValue, Statement
from .images import IMAGE_PREFIX
from .objectstore import ListedObject, ObjectStore
from .retention import keep_samples
from .spill import CONTENT_PREFIX
from .store import chunked, keys_found, placeholders
from .store_items import CHANGES_SO_FAR
from .timestamps import format_timestamp

PAGE = 500
"""Keys of stored images read per round trip."""

# The SQL here interpolates only "?" placeholder lists and fixed text (``noqa: S608``).
_STORED_KEYS = (
    "SELECT DISTINCT r2_key AS k FROM image_tasks WHERE r2_key IS NOT NULL AND r2_key > ? "
    "AND r2_key < ? AND status = 'success' AND updated_at < ? ORDER BY r2_key LIMIT ?"
)
_SPILLED = (
    "SELECT content_key AS k, guid FROM items WHERE content_key IS NOT NULL AND content_key > ? "
    "AND content_key < ? AND created_at < ? ORDER BY content_key LIMIT ?"
)
_REQUEUE = (
    "UPDATE image_tasks SET status = 'pending', attempts = 0, retry_at = '', r2_key = NULL, "
    "last_error = NULL, lease_until = NULL, updated_at = ? "
    "WHERE status = 'success' AND updated_at < ? AND r2_key IN "
)


@dataclass(slots=True)
class MissingReport:
    """Counters and a few sample keys (never whole lists)."""

    checked: int = 0
    """Distinct keys of stored images looked for."""
    missing: int = 0
    """Of those, the keys the object store does not hold."""
    requeued: int = 0
    """Tasks queued again (several tasks may name one key)."""
    samples: list[str] = field(default_factory=list)


async def requeue_missing_images(
    db: Database,
    objects: ObjectStore,
    *,
    now: datetime,
    feed_urls: Sequence[str] | None = None,
    page: int = PAGE,
) -> MissingReport:
    """Queue again the ``success`` tasks (of the feeds with these URLs as stored, or of all)
    whose object the store does not hold. ``now`` must be the present: tasks recorded since
    are not looked at."""
    if not 1 <= page <= 10_000:
        raise ValueError("retry-images: page must be 1..10000")
    began = format_timestamp(now)
    report = MissingReport()
    prefixes = [IMAGE_PREFIX]
    if feed_urls is not None:
        rows = await keys_found(db, "SELECT id AS k FROM feeds WHERE url IN", feed_urls)
        prefixes = [f"{IMAGE_PREFIX}{feed_id}/" for feed_id in rows]
    for prefix in sorted(prefixes):
        await _check(db, objects, prefix, began, report, page)
    return report


async def _check(
    db: Database, objects: ObjectStore, prefix: str, began: str, report: MissingReport, page: int
) -> None:
    async for checked, missing in _missing_pages(db, objects, prefix, _STORED_KEYS, (began,), page):
        report.checked += checked
        if missing:
            keys = [row["k"] for row in missing]
            report.missing += len(keys)
            keep_samples(report.samples, keys)
            report.requeued += await _requeue(db, keys, began)


async def missing_content(
    db: Database, objects: ObjectStore, feed_id: str, *, stored_before: datetime
) -> dict[str, str]:
    """The feed's items stored before ``stored_before`` (the present) whose spilled HTML the
    store does not hold: GUID -> ``content_key``. A younger item's object was put just before
    its row, maybe after the listing had passed its key."""
    stamp = format_timestamp(stored_before)
    pages = _missing_pages(db, objects, f"{CONTENT_PREFIX}{feed_id}/", _SPILLED, (stamp,), PAGE)
    return {row["guid"]: row["k"] async for _, missing in pages for row in missing}


async def _missing_pages(
    db: Database,
    objects: ObjectStore,
    prefix: str,
    select: str,
    extra: tuple[SqlValue, ...],
    page: int,
) -> AsyncIterator[tuple[int, list[Row]]]:
    """The rows ``select`` finds whose key (column ``k``, starting with ``prefix``: above it,
    below the successor of its last character) the listing of that prefix skips: per page,
    how many rows it read and those. ``select`` takes the bounds, ``extra``, the page size."""
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    listing = objects.list_with_times(prefix)
    listed: ListedObject | None = await anext(listing, None)
    after = prefix
    while True:
        rows = await db.query(select, (after, end, *extra, page))
        missing: list[Row] = []
        for row in rows:
            while listed is not None and listed.key < row["k"]:
                listed = await anext(listing, None)
            if listed is None or listed.key != row["k"] or listed.size == 0:
                missing.append(row)
        yield len(rows), missing
        if len(rows) < page:
            return
        after = rows[-1]["k"]


async def _requeue(db: Database, keys: Sequence[str], began: str) -> int:
    """Queue the tasks naming ``keys`` again, in one batch; how many it changed."""
    updates = [
        Statement(f"{_REQUEUE}({placeholders(len(part))})", (began, began, *part))
        for part in chunked(keys)
    ]
    answers = await db.batch([CHANGES_SO_FAR, *updates, CHANGES_SO_FAR])
    return int(answers[-1][0]["changes_so_far"]) - int(answers[0][0]["changes_so_far"])
