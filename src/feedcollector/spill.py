"""Item content too big for a D1 row goes to the object store instead ("spilling").

D1 refuses a string over about 2 MB (``SQLITE_TOOBIG``) and the Proxy Worker refuses a request
body over 16 MiB, while all of a feed's items travel as ONE all-or-nothing batch. Without this
step a single huge item would fail its feed's batch on every cycle, forever. So before the
batch:

- an item whose ``content_html`` is over :data:`INLINE_CONTENT_LIMIT` bytes of UTF-8 is stored
  with ``content_html = NULL`` and ``content_key`` naming the object
  ``content/{feed_id}/{md5(guid)[:8]}.html``, which holds the HTML byte for byte;
- if the content still inline, with the rest of the batch's text, adds up to more than
  :data:`BATCH_TEXT_BUDGET`, the largest items are spilled too until it fits, so the batch
  stays one request well under 16 MiB.

Only an item the batch will insert is ever spilled: ``INSERT OR IGNORE`` keeps a row already
stored for its GUID (inline HTML, no ``content_key``), so an object written for it would belong
to no row and outlive every cleanup (see :func:`plan_batch_spill`).

The object is written before the batch, so a stored row never points at a missing object; a
batch the database refuses as too large (it stores nothing, and refuses the same on every try)
has the objects written for it deleted again (:func:`spilled_records`). An
existing object is never overwritten: content is immutable once stored, and a re-fetch of a
feed without validators does not upload the same megabytes again. Two GUIDs of a feed may share
their md5's first 8 hex digits: when the key is held by ANOTHER item (its row names it, an
item earlier in the same batch takes it, or an object no row names holds other bytes: an item
whose row was lost with the database), the item's HTML goes to
``content/{feed_id}/{md5(guid)}.html`` (all 32 digits) instead, so no object is ever shared;
readers and retention follow ``items.content_key``. A spilled item's images are
still extracted (from the full HTML, before spilling).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from .database import Database
from .errors import TOO_LARGE, DatabaseError, ObjectNotFoundError, StorageError
from .images import guid_digest
from .models import ItemRecord
from .objectstore import ObjectStore, object_exists
from .safe_text import QUOTED_CHARS, one_line
from .store import MAX_PARAMS, chunked, keys_found, placeholders

log = logging.getLogger("feedcollector")

INLINE_CONTENT_LIMIT = 900 * 1024
"""Largest ``content_html`` (bytes of UTF-8) stored in the row; D1's limit is about 2 MB."""
BATCH_TEXT_BUDGET = 8 * 2**20
"""Most text (bytes of UTF-8) one feed's batch may carry: the inline ``content_html``, and the
items' GUIDs, links, titles and image URLs with :data:`IMAGE_ROW_BYTES` for each image task.
Half the Worker's 16 MiB request limit, leaving room for JSON escaping and the fixed columns
(ids, timestamps: a few hundred bytes an item, at most 10,000 items)."""
IMAGE_ROW_BYTES = 160
"""What an image task's row adds to the request besides its URL (id, item id, timestamps,
JSON): a feed of 2,300 items with twelve images each, whose HTML alone fit the budget,
was refused by the Worker (27,600 image rows) on every fetch."""
MAX_GUIDS_PER_QUERY = (MAX_PARAMS - 2) // 2
"""GUIDs per :func:`present_guids` query: each is bound twice, with the feed id twice."""
CONTENT_PREFIX = "content/"
CONTENT_NAMED_BY = "SELECT content_key AS k FROM items WHERE content_key IN"
"""The rows that name a spilled object (an indexed lookup, see :func:`.store.keys_found`)."""
CONTENT_TYPE = "text/html; charset=utf-8"


def content_key(feed_id: str, guid: str, *, full: bool = False) -> str:
    """``content/{feed_id}/{md5(guid)[:8]}.html``, named like the item's images.

    ``full``: the whole md5 (32 hex digits), for an item whose short key another item holds.
    """
    return f"{CONTENT_PREFIX}{feed_id}/{guid_digest(guid, full=full)}.html"


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
    batch_budget: int = BATCH_TEXT_BUDGET,
    ignored: Collection[str] = frozenset(),
) -> SpillPlan:
    """Decide which items' HTML leaves the batch: every oversized one, then largest first.

    ``ignored`` names GUIDs the batch will not insert (already stored for the feed, or
    tombstoned; :func:`plan_batch_spill` finds them). Such an item, and a GUID repeated later
    in the feed (the batch keeps its first item), is never spilled: its object would belong to
    no row. Its row is still sent, for ``INSERT OR IGNORE`` to skip, but without its HTML, which
    that statement never stores: so it does not count against the budget either, which is
    about the bytes the request carries. (When nothing could cross a limit, the records are
    returned as they are, repeats included.)
    """
    content = longest = other = 0
    for record in records:  # characters: UTF-8 takes at most 4 bytes a character
        if record.content_html:
            length = len(record.content_html)
            content += length
            longest = length if length > longest else longest
        other += _other_size(record)
    if longest * 4 <= inline_limit and (content + other) * 4 <= batch_budget:
        return SpillPlan(tuple(records), ())
    skipped: set[int] = set()
    seen: set[str] = set()
    for index, record in enumerate(records):
        if record.guid in ignored or record.guid in seen:
            skipped.add(index)
        seen.add(record.guid)
    encoded = {
        index: record.content_html.encode("utf-8")
        for index, record in enumerate(records)
        if record.content_html and index not in skipped
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
    other_bytes = sum(_other_size(record, _utf8_size) for record in records)
    total = sum(size for size, _ in inline) + other_bytes
    for size, index in inline:
        if total <= batch_budget:
            break
        reasons[index] = (
            f"{size} bytes; the feed's batch carried {total} bytes of text ({other_bytes} of "
            f"them besides the HTML), over its {batch_budget}-byte budget"
        )
        total -= size
    kept: list[ItemRecord] = []
    spilled: list[SpilledContent] = []
    for index, record in enumerate(records):
        if index in skipped and record.content_html:
            kept.append(record._replace(content_html=None))  # never stored: not sent either
            continue
        if index not in reasons:
            kept.append(record)
            continue
        key = content_key(feed_id, record.guid)
        kept.append(record._replace(content_html=None, content_key=key))
        spilled.append(
            SpilledContent(key, record.guid, record.title, encoded[index], reasons[index])
        )
    return SpillPlan(tuple(kept), tuple(spilled))


def _other_size(record: ItemRecord, size: Callable[[str], int] = len) -> int:
    """The size of a row's text besides its HTML, with each image task's row: in characters
    (``len``, a bound at 4 bytes each) or in bytes (:func:`_utf8_size`)."""
    texts = (
        record.guid,
        record.earlier_guid or "",
        record.link or "",
        record.title or "",
        *record.image_urls,
    )
    return sum(map(size, texts)) + IMAGE_ROW_BYTES * len(record.image_urls)


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


async def plan_batch_spill(
    db: Database,
    feed_id: str,
    records: Sequence[ItemRecord],
    *,
    inline_limit: int = INLINE_CONTENT_LIMIT,
    batch_budget: int = BATCH_TEXT_BUDGET,
) -> SpillPlan:
    """:func:`plan_spill` for a batch about to be stored, spilling only items it will insert.

    The plan is made first without the database; only if it would spill anything (rare) does
    one query per chunk of GUIDs ask which of the feed's items are already stored or
    tombstoned (under their GUID or their earlier one, :attr:`.ItemRecord.earlier_guid`), and
    the plan is made again without them as candidates. Those rows are sent without HTML:
    ``INSERT OR IGNORE`` skips them, and sending nothing for them is safe because a stored
    item is only ever deleted by retention, in the same transaction as its tombstone, which
    keeps the row out just the same.
    """
    plan = plan_spill(feed_id, records, inline_limit=inline_limit, batch_budget=batch_budget)
    if not plan.spilled:
        return plan
    with_html = [r for r in records if r.content_html]
    asked = [r.guid for r in with_html] + [r.earlier_guid for r in with_html if r.earlier_guid]
    present = await present_guids(db, feed_id, list(dict.fromkeys(asked)))
    if not present:
        return plan
    ignored = present | {r.guid for r in records if r.earlier_guid in present}
    return plan_spill(
        feed_id, records, inline_limit=inline_limit, batch_budget=batch_budget, ignored=ignored
    )


async def present_guids(db: Database, feed_id: str, guids: Sequence[str]) -> set[str]:
    """Those of ``guids`` the feed already has an item or a tombstone for."""
    found: set[str] = set()
    for chunk in chunked(guids, MAX_GUIDS_PER_QUERY):
        marks = placeholders(len(chunk))
        rows = await db.query(
            f"SELECT guid FROM items WHERE feed_id = ? AND guid IN ({marks}) "  # noqa: S608
            f"UNION SELECT guid FROM item_tombstones WHERE feed_id = ? AND guid IN ({marks})",
            (feed_id, *chunk, feed_id, *chunk),
        )
        found.update(row["guid"] for row in rows)
    return found


@asynccontextmanager
async def spilled_records(
    objects: ObjectStore,
    db: Database,
    feed_id: str,
    feed_url: str,
    plan: SpillPlan,
) -> AsyncIterator[tuple[ItemRecord, ...]]:
    """Write the plan's objects (:func:`_write_objects`) and yield the records to store.

    Should storing them raise a :class:`.DatabaseError` of kind ``too_large`` (nothing was
    stored, and every retry is refused alike), the objects written just now are deleted
    before the error goes on: a feed refused cycle after cycle, or a backup that restore
    skips, would otherwise leave objects no row names, which no cleanup finds. Any other
    failure keeps them: the batch may have been stored after all, and a retry reuses them.
    """
    records, written = await _write_objects(objects, db, feed_id, feed_url, plan)
    try:
        yield records
    except DatabaseError as exc:
        if exc.kind == TOO_LARGE and written:
            await _discard(objects, db, feed_url, written)
        raise


async def _write_objects(
    objects: ObjectStore,
    db: Database,
    feed_id: str,
    feed_url: str,
    plan: SpillPlan,
) -> tuple[tuple[ItemRecord, ...], list[str]]:
    """Put each spilled HTML of a :func:`plan_batch_spill` plan under its key unless an object
    is already there (never replaced).

    Returns the plan's records to store: an item whose short key is held by another item of
    the feed (a row with another GUID names it, or an item earlier in this plan took it) gets
    the full-md5 key instead; an item whose row already exists keeps the key that row names.
    That costs one indexed query per spilled item; an object left by this same item (a retry,
    a replay) is reused. No tombstoned item is in such a plan: the batch would not insert it,
    so its object would belong to no row (retention deleted the item and its object; the feed
    still lists it). Also returns the keys of the objects it created (not those it reused).
    """
    if not plan.spilled:
        return plan.records, []
    taken: set[str] = set()
    moved: dict[str, str] = {}
    written: list[str] = []
    for content in plan.spilled:
        key, present = await _owned_key(db, objects, feed_id, content, taken)
        taken.add(key)
        if key != content.key:
            moved[content.guid] = key
        if present:
            log.info(
                "store: item %r of feed %s is too big to store inline (%s); its HTML is "
                "already at %s",
                one_line(content.title or content.guid, QUOTED_CHARS),
                feed_url,
                content.reason,
                key,
            )
            continue
        await objects.put(key, content.data, CONTENT_TYPE)
        written.append(key)
        log.info(
            "store: item %r of feed %s is too big to store inline (%s); HTML spilled to %s "
            "(content_html NULL, content_key set)",
            one_line(content.title or content.guid, QUOTED_CHARS),
            feed_url,
            content.reason,
            key,
        )
    records = tuple(
        record._replace(content_key=moved[record.guid]) if record.guid in moved else record
        for record in plan.records
    )
    return records, written


async def _discard(objects: ObjectStore, db: Database, feed_url: str, keys: list[str]) -> None:
    """Delete the objects of a refused batch that no row names (another collector's restore
    of the same item may have stored a row naming one meanwhile). Failing to is logged, not
    raised: the refusal is what the caller acts on."""
    try:
        named = await keys_found(db, CONTENT_NAMED_BY, keys)
        await objects.delete_many([key for key in keys if key not in named])
    except StorageError as exc:
        log.warning(
            "store: the spilled HTML of feed %s written for its refused items could not be "
            "deleted (%s); these objects belong to no item: %s",
            feed_url,
            exc,
            ", ".join(keys),
        )


async def _owned_key(
    db: Database, objects: ObjectStore, feed_id: str, content: SpilledContent, taken: set[str]
) -> tuple[str, bool]:
    """The key this item's HTML may use, and whether an object is there already: its own
    row's key; else the full-md5 one when another item holds the short one, or when the
    full-md5 object exists (this GUID's, written while another item held the short key: after
    a database loss no row says so); else the short one, unless an object there that no row
    names holds other bytes (another item's, whose row was lost with the database, or this
    item's older version: the full-md5 key then holds the one replayed now)."""
    rows = await db.query(
        "SELECT guid, content_key FROM items WHERE (content_key = ? AND feed_id = ?) "
        "OR (feed_id = ? AND guid = ?)",
        (content.key, feed_id, feed_id, content.guid),
    )
    for row in rows:
        if row["guid"] == content.guid and row["content_key"]:
            own = str(row["content_key"])
            return own, await object_exists(objects, own)
    full = content_key(feed_id, content.guid, full=True)
    if content.key in taken or any(row["guid"] != content.guid for row in rows):
        return full, await object_exists(objects, full)
    if await object_exists(objects, full):
        return full, True
    if not await object_exists(objects, content.key):
        return content.key, False
    try:
        same = await objects.get(content.key) == content.data
    except ObjectNotFoundError:  # deleted meanwhile (a cleanup's orphan sweep)
        return content.key, False
    return (content.key, True) if same else (full, False)
