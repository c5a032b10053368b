"""Item content too big for a D1 row goes to the object store instead ("spilling").

D1 refuses a string over about 2 MB (``SQLITE_TOOBIG``) and the Proxy Worker refuses a request
body over 16 MiB, while all of a feed's items travel as ONE all-or-nothing batch. Without this
step a single huge item would fail its feed's batch on every cycle, forever. So before the
batch:

- an item whose ``content_html`` is over :data:`INLINE_CONTENT_LIMIT` bytes of UTF-8 is stored
  with ``content_html = NULL`` and ``content_key`` naming the object
  ``content/{feed_id}/{md5(guid)[:8]}.html``, which holds the HTML byte for byte;
- if the content still inline adds up to more than :data:`BATCH_CONTENT_BUDGET`, the largest
  items are spilled too until it fits, so the batch stays one request well under 16 MiB.

The object is written before the batch, so a stored row never points at a missing object. An
existing object is never overwritten: content is immutable once stored, and a re-fetch of a
feed without validators does not upload the same megabytes again. A spilled item's images are
still extracted (from the full HTML, before spilling).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from .database import Database
from .models import ItemRecord
from .objectstore import ObjectStore
from .safe_text import QUOTED_CHARS, one_line
from .store_items import tombstoned_guids

log = logging.getLogger("feedcollector")

INLINE_CONTENT_LIMIT = 900 * 1024
"""Largest ``content_html`` (bytes of UTF-8) stored in the row; D1's limit is about 2 MB."""
BATCH_CONTENT_BUDGET = 8 * 2**20
"""Most inline ``content_html`` (bytes of UTF-8) one feed's batch may carry: half the Worker's
16 MiB request limit, leaving room for JSON escaping and the other columns."""
CONTENT_PREFIX = "content/"
CONTENT_TYPE = "text/html; charset=utf-8"


def content_key(feed_id: str, guid: str) -> str:
    """``content/{feed_id}/{md5(guid)[:8]}.html``, named like the item's images."""
    digest = hashlib.md5(guid.encode("utf-8"), usedforsecurity=False).hexdigest()[:8]
    return f"{CONTENT_PREFIX}{feed_id}/{digest}.html"


@dataclass(frozen=True, slots=True)
class SpilledContent:
    """One item's HTML on its way to the object store."""

    key: str
    guid: str
    title: str | None
    data: bytes
    reason: str


@dataclass(frozen=True, slots=True)
class SpillPlan:
    """The records to store (spilled ones without inline HTML) and the objects to write first."""

    records: tuple[ItemRecord, ...]
    spilled: tuple[SpilledContent, ...]


def plan_spill(
    feed_id: str,
    records: Sequence[ItemRecord],
    *,
    inline_limit: int = INLINE_CONTENT_LIMIT,
    batch_budget: int = BATCH_CONTENT_BUDGET,
) -> SpillPlan:
    """Decide which items' HTML leaves the batch: every oversized one, then largest first."""
    lengths = [len(record.content_html) for record in records if record.content_html]
    if max(lengths, default=0) * 4 <= inline_limit and sum(lengths) * 4 <= batch_budget:
        return SpillPlan(tuple(records), ())  # UTF-8 takes at most 4 bytes a character
    encoded = {
        index: record.content_html.encode("utf-8")
        for index, record in enumerate(records)
        if record.content_html
    }
    reasons = {
        index: f"{len(data)} bytes, over the {inline_limit}-byte per-item limit"
        for index, data in encoded.items()
        if len(data) > inline_limit
    }
    inline = sorted(
        ((len(data), index) for index, data in encoded.items() if index not in reasons),
        reverse=True,
    )
    total = sum(size for size, _ in inline)
    for size, index in inline:
        if total <= batch_budget:
            break
        reasons[index] = (
            f"{size} bytes; the feed's batch carried {total} bytes of content, over its "
            f"{batch_budget}-byte budget"
        )
        total -= size
    kept: list[ItemRecord] = []
    spilled: list[SpilledContent] = []
    for index, record in enumerate(records):
        if index not in reasons:
            kept.append(record)
            continue
        key = content_key(feed_id, record.guid)
        kept.append(record._replace(content_html=None, content_key=key))
        spilled.append(
            SpilledContent(key, record.guid, record.title, encoded[index], reasons[index])
        )
    return SpillPlan(tuple(kept), tuple(spilled))


async def write_spilled(
    objects: ObjectStore,
    db: Database,
    feed_id: str,
    feed_url: str,
    spilled: Sequence[SpilledContent],
) -> None:
    """Put each spilled HTML under its key unless an object is already there (never replaced).

    An item whose GUID has a tombstone is skipped: the batch will not insert it, so its object
    would belong to no row (retention deleted the item and its object; the feed still lists it).
    """
    if not spilled:
        return
    buried = await tombstoned_guids(db, feed_id, [content.guid for content in spilled])
    for content in spilled:
        if content.guid in buried:
            continue
        if await _exists(objects, content.key):
            log.info(
                "store: item %r of feed %s is too big to store inline (%s); its HTML is "
                "already at %s",
                one_line(content.title or content.guid, QUOTED_CHARS),
                feed_url,
                content.reason,
                content.key,
            )
            continue
        await objects.put(content.key, content.data, CONTENT_TYPE)
        log.info(
            "store: item %r of feed %s is too big to store inline (%s); HTML spilled to %s "
            "(content_html NULL, content_key set)",
            one_line(content.title or content.guid, QUOTED_CHARS),
            feed_url,
            content.reason,
            content.key,
        )


async def _exists(objects: ObjectStore, key: str) -> bool:
    found = False
    async for listed in objects.list(key):
        found = found or listed == key
    return found
