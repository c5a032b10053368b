"""Stored images whose object is gone (``retry-images --missing``): a folder deleted by hand,
a volume or bucket lost or replaced by an older copy. Their tasks say ``success`` and name a
key that leads nowhere, which no other check notices; readers get a broken image.

One pass finds them: the ``success`` tasks' keys, a page at a time in key order (the partial
index on ``r2_key``), beside the object store's listing of the same prefix, which comes in the
same order (:meth:`.ObjectStore.list`); a key the listing skips is missing. Memory holds a
page, whatever the number of images. The tasks of a missing key are queued again like a failed
one (``pending``, no attempt counted, due at once, ``r2_key`` cleared): the next cycle downloads
the image again from its source, while the source still has it; otherwise the task fails for
good after its three attempts, which is then the truth.

A task recorded after the check began is left alone: its object was put just before its row,
maybe after the listing had passed its key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from .database import Database, Statement
from .images import IMAGE_PREFIX
from .objectstore import ObjectStore
from .retention import keep_samples
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
        await _check(db, objects.list(prefix), prefix, began, report, page)
    return report


async def _check(
    db: Database,
    listing: AsyncIterator[str],
    prefix: str,
    began: str,
    report: MissingReport,
    page: int,
) -> None:
    """Walk the stored keys starting with ``prefix`` (above it, below the successor of its
    last character) beside the listing of that prefix."""
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    listed: str | None = await anext(listing, None)
    after = prefix
    while True:
        rows = await db.query(_STORED_KEYS, (after, end, began, page))
        missing: list[str] = []
        for row in rows:
            key: str = row["k"]
            while listed is not None and listed < key:
                listed = await anext(listing, None)
            report.checked += 1
            if listed != key:
                missing.append(key)
        if missing:
            report.missing += len(missing)
            keep_samples(report.samples, missing)
            report.requeued += await _requeue(db, missing, began)
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
