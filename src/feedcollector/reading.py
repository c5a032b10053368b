"""Reading items back: the way in for downstream tools (a reader, AI dedup, pipelines).

:func:`open_stores` opens what the collector stored; items are listed a page at a time in
``created_at`` order (:func:`iter_items`), or read one by one with their images and their HTML
rendered for display (:func:`read_item`; the rendering is :mod:`.rendering`, whose functions
are part of this API too). ``content_html`` spilled to the object store is loaded back.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, fields
from datetime import UTC, datetime

from .backends import open_database, open_object_store, require_database_file
from .config import Settings, command_line
from .config_values import parse_duration
from .database import Database, Row, SqlValue
from .errors import ConfigError, ObjectNotFoundError
from .feed_urls import feed_url_key
from .objectstore import ObjectStore
from .rendering import (
    StoredImage,
    public_image_urls,
    render_item_html,
    replace_image_sources,
    sanitize_html,
)
from .schema import migrate_existing
from .store import MAX_PARAMS, chunked, placeholders
from .timestamps import format_timestamp

log = logging.getLogger("feedcollector")

PAGE_SIZE = 200
PAGE_CONTENT_CHARS = 16 * 1024
"""A listing page carries an item's ``content_html`` only up to this many characters; longer
ones are read after it, grouped up to :data:`CONTENT_GROUP_CHARS`. A page of 200 items of up to
900 KiB inline each could be 180 MB, past D1's 50 MB query result limit (and the Worker's
memory); this way no answer of a listing is over about 16 MB."""
CONTENT_GROUP_CHARS = 4 * 2**20


@dataclass(frozen=True, slots=True)
class Stores:
    """What the collector stored: the database and the object store this module reads."""

    db: Database
    objects: ObjectStore


@asynccontextmanager
async def open_stores(settings: Settings, *, command: str = "reading") -> AsyncIterator[Stores]:
    """Open the database (migrations applied, as the collector's next start would) and the
    object store the settings name, for reading; close them on exit. ``command`` names the
    errors (a CLI command's name).

    Unlike :func:`.open_collector` it makes no HTTP client and never claims a feed. A SQLite
    file that does not exist, or a database no collector ever opened (an empty D1, a wrong
    ``[database] url``), is a ConfigError: a reader pointed at the wrong place would otherwise
    see "nothing collected", and leave an empty database there.
    """
    require_database_file(settings, command)
    db = open_database(settings)
    try:
        if not await migrate_existing(db):
            d1 = settings.database.backend == "d1"
            named = settings.database.url if d1 else settings.database.path
            raise ConfigError(
                f"{command}: the database {named} holds no feedcollector "
                "tables, so nothing was collected there. The first `feedcollector run` "
                "creates them; if the collector's database is elsewhere, correct [database] "
                "in the config or name the collector's config with --config."
            )
        objects = open_object_store(settings)
        try:
            yield Stores(db, objects)
        finally:
            await objects.close()
    finally:
        await db.close()


@dataclass(frozen=True, slots=True)
class StoredItem:
    """An ``items`` row with its feed's URL (``content_html`` may live in the object store)."""

    id: str
    feed_id: str
    feed_url: str
    guid: str
    link: str | None
    title: str | None
    pub_date: str | None
    created_at: str
    content_html: str | None
    content_key: str | None


@dataclass(frozen=True, slots=True)
class ReadItem:
    """An item ready to show: its HTML loaded, images listed, and rendered for display."""

    item: StoredItem
    content_html: str | None
    """The stored HTML, unchanged (loaded from the object store when it was spilled)."""
    images: tuple[StoredImage, ...]
    rendered_html: str | None
    """``content_html`` with archived images pointing at their public object URLs."""


def parse_since(text: str, now: datetime) -> datetime:
    """``2026-03-01``, ``2026-03-01T08:00:00Z`` (any ISO 8601; naive means UTC) or a duration
    back from ``now`` (``7d``, ``12h``); raises ValueError with what is accepted."""
    value = text.strip()
    if value.isdigit():  # parse_duration reads a bare number as seconds: "2025" was 34 min
        raise ValueError(
            "--since needs a unit for a duration (7d, 12h) or a whole date (2025-01-01), "
            f'got "{value}"'
        )
    if value[-1:] == "z":  # a lowercase Z, as some tools write UTC
        value = value[:-1] + "Z"
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        try:
            return now - parse_duration(value)
        except ValueError:
            raise ValueError(
                f"--since must be a date (2026-03-01), a UTC time (2026-03-01T08:00:00Z) or a "
                f'duration back from now (7d, 12h; at most 3650d), got "{value}"'
            ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        moment = moment.astimezone(UTC)
    except OverflowError:  # 9999-12-31 at -05:00 is past the calendar in UTC: nothing is later
        return datetime.max.replace(tzinfo=UTC) if moment.year > 1 else EARLIEST_SINCE
    return max(moment, EARLIEST_SINCE)


EARLIEST_SINCE = datetime(1000, 1, 1, tzinfo=UTC)
"""An earlier ``--since`` means everything: ``created_at`` is a time of storing, never that
early (the bound keeps the comparison's text in four-digit years)."""


# --- reading from the database ------------------------------------------------------------

_ITEM_COLUMNS = (
    "i.id, i.feed_id, f.url AS feed_url, i.guid, i.link, i.title, i.pub_date, i.created_at, "
    "i.content_html, i.content_key"
)


_LISTED_COLUMNS = (
    "i.id, i.feed_id, f.url AS feed_url, i.guid, i.link, i.title, i.pub_date, i.created_at, "
    "CASE WHEN length(i.content_html) <= ? THEN i.content_html END AS content_html, "
    "length(i.content_html) AS content_chars, i.content_key"
)
""":data:`_ITEM_COLUMNS` for a listing page: a long ``content_html`` is left for
:func:`_long_contents`."""


async def _long_contents(db: Database, rows: Sequence[Row]) -> dict[str, str]:
    """The ``content_html`` a listing page left out (over :data:`PAGE_CONTENT_CHARS`), by item
    id, read in groups of at most :data:`CONTENT_GROUP_CHARS` (one item at least)."""
    groups: list[list[str]] = []
    total = 0
    for row in rows:
        chars = row["content_chars"] or 0
        if row["content_html"] is not None or not chars:
            continue
        if not groups or total + chars > CONTENT_GROUP_CHARS or len(groups[-1]) >= MAX_PARAMS:
            groups.append([])
            total = 0
        groups[-1].append(row["id"])
        total += chars
    contents: dict[str, str] = {}
    for ids in groups:
        found = await db.query(
            f"SELECT id, content_html FROM items WHERE id IN ({placeholders(len(ids))})",  # noqa: S608
            tuple(ids),
        )
        contents.update((row["id"], row["content_html"]) for row in found)
    return contents


def _item(row: Row) -> StoredItem:
    return StoredItem(**{field.name: row[field.name] for field in fields(StoredItem)})


async def stored_feed_urls(db: Database, feed_url: str) -> list[str]:
    """The database's spellings of ``feed_url``: itself when stored as written, else those
    alike as the feeds file compares URLs (scheme and host in any case). The database keeps
    every spelling a feeds file used, so there may be several: a caller asks for one."""
    if await db.query("SELECT 1 AS found FROM feeds WHERE url = ?", (feed_url,)):
        return [feed_url]
    key = feed_url_key(feed_url)
    rows = await db.query("SELECT url FROM feeds")
    return sorted(str(row["url"]) for row in rows if feed_url_key(str(row["url"])) == key)


async def _cursor_of(db: Database, item_id: str) -> tuple[str, str]:
    rows = await db.query("SELECT created_at FROM items WHERE id = ?", (item_id,))
    if not rows:
        raise ConfigError(
            f"items: no item has the id {item_id!r} (expired, or mistyped); resume with "
            "--since and the last created_at seen instead"
        )
    return str(rows[0]["created_at"]), item_id


async def iter_items(
    db: Database,
    *,
    feed_url: str | None = None,
    since: datetime | None = None,
    limit: int | None = None,
    newest_first: bool = False,
    page_size: int = PAGE_SIZE,
    after: str | None = None,
) -> AsyncIterator[StoredItem]:
    """Items in ``(created_at, id)`` order, page by page (keyset), so memory stays flat.

    ``since`` keeps items with ``created_at >= since`` (inclusive: a consumer resuming from the
    last ``created_at`` it saw skips the ids it already has). ``after``, the id of the last
    item a consumer took, starts past it in that order: one reading in batches of ``limit``
    from ``since`` alone got the same batch back forever once more items than that shared one
    second (a first cycle stores thousands in one). ConfigError when no item has that id (it
    expired: resume with ``since``). An unknown ``feed_url`` yields nothing.
    """
    order = "DESC" if newest_first else "ASC"
    beyond = "<" if newest_first else ">"
    filters = ["1 = 1"]
    params: list[SqlValue] = []
    if feed_url is not None:
        filters.append("f.url = ?")
        params.append(feed_url)
    if since is not None:
        filters.append("i.created_at >= ?")
        params.append(format_timestamp(since))
    first_sql = _page_sql(filters, order)
    # The cursor as a row value: one range of the (created_at, id) index, also among the rows
    # of one second. An OR (created_at beyond, or equal and id beyond) made SQLite read the
    # index from the start, or the whole second, on every page (quadratic).
    next_sql = _page_sql([*filters, f"(i.created_at, i.id) {beyond} (?, ?)"], order)
    remaining = limit
    cursor = None if after is None else await _cursor_of(db, after)
    while remaining is None or remaining > 0:
        size = page_size if remaining is None else min(page_size, remaining)
        if cursor is None:
            rows = await db.query(first_sql, (PAGE_CONTENT_CHARS, *params, size))
        else:
            rows = await db.query(next_sql, (PAGE_CONTENT_CHARS, *params, *cursor, size))
        contents = await _long_contents(db, rows)
        for row in rows:
            html = row["content_html"]
            if html is None and row["content_chars"]:
                if row["id"] not in contents:  # expired between the two reads: not an item
                    continue  # without its HTML, which a consumer would keep as such
                html = contents[row["id"]]
            yield _item({**row, "content_html": html})
        if len(rows) < size:
            return
        cursor = (rows[-1]["created_at"], rows[-1]["id"])
        if remaining is not None:
            remaining -= len(rows)


def _page_sql(filters: Sequence[str], order: str) -> str:
    return (
        f"SELECT {_LISTED_COLUMNS} FROM items i JOIN feeds f ON f.id = i.feed_id "  # noqa: S608
        f"WHERE {' AND '.join(filters)} ORDER BY i.created_at {order}, i.id {order} LIMIT ?"
    )


async def item_images(db: Database, item_id: str) -> tuple[StoredImage, ...]:
    return (await items_images(db, [item_id])).get(item_id, ())


async def items_images(db: Database, item_ids: Sequence[str]) -> dict[str, tuple[StoredImage, ...]]:
    """The images of several items (one query per :data:`.store.MAX_PARAMS` ids), by item."""
    found: dict[str, list[StoredImage]] = {}
    for chunk in chunked(item_ids, MAX_PARAMS):
        rows = await db.query(
            "SELECT item_id, position, original_url, status, r2_key, attempts, last_error, "  # noqa: S608
            "retry_at FROM image_tasks "
            f"WHERE item_id IN ({placeholders(len(chunk))}) ORDER BY item_id, position",
            tuple(chunk),
        )
        for row in rows:
            found.setdefault(row["item_id"], []).append(
                StoredImage(
                    row["position"],
                    row["original_url"],
                    row["status"],
                    row["r2_key"],
                    row["attempts"],
                    row["last_error"],
                    row["retry_at"],
                )
            )
    return {item_id: tuple(images) for item_id, images in found.items()}


async def load_content(
    objects: ObjectStore, item: StoredItem, *, command: Callable[..., str] = command_line
) -> str | None:
    """The item's HTML: inline, or from the object store when it was too big for the row.

    One item's missing object (a crash between cleanup's deletes and its batch, a database
    copied back from before a cleanup) is that item's content missing, logged with its key
    and the ``restore`` that writes it again (``command``: :meth:`.Settings.command`, so it
    names the collector's ``--config``): the other items still read. An unreachable store is
    still an error."""
    if item.content_html is not None or item.content_key is None:
        return item.content_html
    try:
        data = await objects.get(item.content_key)
    except ObjectNotFoundError:
        log.warning(
            "storage: item %s: its content object %s is missing; shown without content "
            "(`%s` writes it again while a backup lists the item)",
            item.id,
            item.content_key,
            command("restore", "--feed", item.feed_url),
        )
        return None
    return data.decode("utf-8", "replace")


async def read_item(
    db: Database,
    objects: ObjectStore,
    item_id: str,
    *,
    sanitize: bool = False,
    command: Callable[..., str] = command_line,
) -> ReadItem | None:
    """One item with its HTML rendered for display, or None when there is no such item
    (``command``: see :func:`load_content`)."""
    rows = await db.query(
        f"SELECT {_ITEM_COLUMNS} FROM items i JOIN feeds f ON f.id = i.feed_id "  # noqa: S608
        "WHERE i.id = ?",
        (item_id,),
    )
    if not rows:
        return None
    item = _item(rows[0])
    content = await load_content(objects, item, command=command)
    images = await item_images(db, item.id)
    rendered = (
        render_item_html(content, images, objects, sanitize=sanitize)
        if content is not None
        else None
    )
    return ReadItem(item, content, images, rendered)


__all__ = [
    "EARLIEST_SINCE",
    "PAGE_SIZE",
    "ReadItem",
    "StoredImage",
    "StoredItem",
    "Stores",
    "item_images",
    "items_images",
    "iter_items",
    "load_content",
    "open_stores",
    "parse_since",
    "public_image_urls",
    "read_item",
    "render_item_html",
    "replace_image_sources",
    "sanitize_html",
    "stored_feed_urls",
]
