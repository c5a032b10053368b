"""Storing a feed's items and their image tasks: the seed's one batch per changed feed.

``INSERT OR IGNORE`` on ``UNIQUE(feed_id, guid)`` with no pre-query; image tasks only for the
items that were new in that batch; the feed's new state in the same batch. Shared by the cycle
and by recovery from backups (:mod:`.restore`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from .database import Database, Row, SqlValue, Statement
from .models import Feed, ItemRecord
from .store import MAX_PARAMS, FetchSuccess, chunked, placeholders
from .timestamps import format_timestamp

ITEM_ROWS_PER_STATEMENT = (MAX_PARAMS - 3) // 7
"""Items per multi-row INSERT: 7 parameters each, plus the feed id (twice) and the time."""
RENAMED_ROWS_PER_STATEMENT = (MAX_PARAMS - 5) // 8
"""The same with an earlier GUID each (:attr:`.ItemRecord.earlier_guid`), looked for under
the feed id twice more."""
_NOT_UNDER_EARLIER_GUID = (
    " AND (v.column8 IS NULL OR (NOT EXISTS (SELECT 1 FROM items AS e WHERE e.feed_id = ? "
    "AND e.guid = v.column8) AND NOT EXISTS (SELECT 1 FROM item_tombstones AS et "
    "WHERE et.feed_id = ? AND et.guid = v.column8)))"
)
IMAGE_ROWS_PER_STATEMENT = (MAX_PARAMS - 2) // 4
"""Image tasks per multi-row INSERT: 4 parameters each, plus the time (twice)."""


CHANGES_SO_FAR = Statement("SELECT total_changes() AS changes_so_far")
"""Rows the connection has changed so far: read before and after a batch's item inserts, the
difference is how many items were new (the batch is one transaction, nothing interleaves)."""


STORED_AT_KEY = "items_stored_at"
"""``collector_state`` key: the ``created_at`` of the items of the batch being written."""


def stored_at_statement(stamp: str) -> Statement:
    """Date a batch's items inside its transaction: ``stamp``, or the latest ``created_at``
    already stored if that is later. Batches are written one at a time, so items are never
    dated before those of a batch written earlier, however long a batch waited (another
    process's lock, a busy event loop, a slow D1 answer): a consumer resuming from the last
    ``created_at`` it saw misses none. Dated before the transaction, one waited 11 s with a
    timeout of 2 s, and a consumer missed its 8,000 items."""
    return Statement(
        "INSERT INTO collector_state (key, value, updated_at) VALUES (?, "
        "MAX(?, COALESCE((SELECT MAX(created_at) FROM items), '')), ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        (STORED_AT_KEY, stamp, stamp),
    )


def item_statements(
    feed_id: str,
    items: Sequence[ItemRecord],
    stamp: str,
    *,
    return_ids: bool = False,
    dated_in_batch: bool = False,
) -> list[Statement]:
    """Multi-row ``INSERT OR IGNORE`` statements for items and their image tasks.

    A few statements per feed instead of one per item and one per image keep the batch cheap
    on SQLite and small on D1 (its 100-parameter limit sets the rows per statement). An item
    whose GUID has a tombstone is not inserted, nor one stored or tombstoned under its earlier
    GUID (a feed's text repaired since: :attr:`.ItemRecord.earlier_guid`; the statements take
    that column only for a feed that has such an item); an image task is created only when its item
    row exists (so a re-fetched GUID with another id makes none). Rows go in feed order, so a
    GUID repeated within the feed keeps its first item, as one statement per item did.

    The new items are told by ``RETURNING id`` when ``return_ids`` (:func:`inserted_ids`),
    else counted by :data:`CHANGES_SO_FAR` around the item inserts (:func:`new_item_count`):
    returning a row per new item cost an eighth of the batch's CPU on SQLite.

    Items are dated ``stamp`` (a replay: its backup's time), or with ``dated_in_batch`` by
    :func:`stored_at_statement`, which must come first in the batch.
    """
    created_at = (
        f"COALESCE((SELECT value FROM collector_state WHERE key = '{STORED_AT_KEY}'), ?)"
        if dated_in_batch
        else "?"
    )
    renamed = any(item.earlier_guid is not None for item in items)
    width = 8 if renamed else 7
    statements: list[Statement] = [] if return_ids else [CHANGES_SO_FAR]
    for chunk in chunked(items, RENAMED_ROWS_PER_STATEMENT if renamed else ITEM_ROWS_PER_STATEMENT):
        params: list[SqlValue] = [feed_id, stamp]
        for item in chunk:
            params += (
                item.id,
                item.guid,
                item.link,
                item.title,
                item.pub_date,
                item.content_html,
                item.content_key,
            )
            if renamed:
                params.append(item.earlier_guid)
        params += (feed_id, feed_id, feed_id) if renamed else (feed_id,)
        statements.append(
            Statement(
                "INSERT OR IGNORE INTO items (id, feed_id, guid, link, title, pub_date, "
                "content_html, content_key, created_at) SELECT v.column1, ?, v.column2, "
                f"v.column3, v.column4, v.column5, v.column6, v.column7, {created_at} "
                f"FROM (VALUES {_rows(len(chunk), width)}) AS v WHERE NOT EXISTS "
                "(SELECT 1 FROM item_tombstones AS t WHERE t.feed_id = ? AND t.guid = v.column2)"
                + (_NOT_UNDER_EARLIER_GUID if renamed else "")
                + (" RETURNING id" if return_ids else ""),
                tuple(params),
            )
        )
    if not return_ids:
        statements.append(CHANGES_SO_FAR)
    tasks = [
        (f"{item.id}-{position}", item.id, url, position)
        for item in items
        for position, url in enumerate(item.image_urls)
    ]
    for task_chunk in chunked(tasks, IMAGE_ROWS_PER_STATEMENT):
        task_params: list[SqlValue] = [stamp, stamp]
        for task in task_chunk:
            task_params += task
        statements.append(
            Statement(
                "INSERT OR IGNORE INTO image_tasks (id, item_id, original_url, status, attempts, "
                "created_at, updated_at, position) SELECT v.column1, v.column2, v.column3, "
                "'pending', 0, ?, ?, v.column4 "
                f"FROM (VALUES {_rows(len(task_chunk), 4)}) AS v "
                "WHERE EXISTS (SELECT 1 FROM items WHERE id = v.column2)",
                tuple(task_params),
            )
        )
    return statements


def inserted_ids(results: Sequence[Sequence[Row]]) -> list[str]:
    """The ids the item statements of a batch returned: the items that were new."""
    return [row["id"] for rows in results for row in rows if "id" in row]


def new_item_count(results: Sequence[Sequence[Row]]) -> int:
    """How many items the item statements of a batch inserted (:data:`CHANGES_SO_FAR`)."""
    before, after = (
        int(row["changes_so_far"]) for rows in results for row in rows if "changes_so_far" in row
    )
    return after - before


def _rows(count: int, width: int) -> str:
    row = f"({placeholders(width)})"
    return ", ".join([row] * count)


async def save_items(
    db: Database,
    feed: Feed,
    items: Sequence[ItemRecord],
    outcome: FetchSuccess,
    *,
    stored_at: datetime | None = None,
) -> int:
    """Store a feed's items, their image tasks and its new state in ONE batch; return how many
    items were new.

    The new items are dated ``stored_at``, the moment the batch is sent (the seed's 入库时间;
    never before the fetch's time, which stands in when not given), not when the fetch began
    (a consumer resuming from the last ``created_at`` it saw missed the items of a slow feed,
    fetched before and stored after a quick one it had read), and never before a batch written
    earlier (:func:`stored_at_statement`)."""
    stamp = format_timestamp(outcome.fetched_at)
    created = format_timestamp(max(stored_at or outcome.fetched_at, outcome.fetched_at))
    statements = [
        stored_at_statement(created),
        *item_statements(feed.id, items, created, dated_in_batch=True),
    ]
    statements.append(
        Statement(
            "UPDATE feeds SET title = COALESCE(config_title, ?, title), "
            "channel_title = COALESCE(?, channel_title), last_etag = ?, "
            "last_modified = ?, last_fetched_at = ?, next_fetch_at = ?, "
            "consecutive_failures = CASE WHEN ? IS NULL THEN 0 ELSE consecutive_failures + 1 "
            "END, last_error = ?, last_status = ?, "
            "feed_ttl_seconds = ?, post_gap_seconds = ?, newest_item_at = ?, "
            "gone_at = NULL, retry_after_until = NULL, body_digest = ?, "
            "lease_owner = NULL, lease_until = NULL WHERE id = ?",
            (
                outcome.title,
                outcome.title,
                outcome.etag,
                outcome.last_modified,
                stamp,
                format_timestamp(outcome.next_fetch_at),
                outcome.failure,
                outcome.failure,
                outcome.status,
                outcome.feed_ttl_seconds,
                outcome.post_gap_seconds,
                outcome.newest_item_at,
                outcome.body_digest,
                feed.id,
            ),
        )
    )
    return new_item_count(await db.batch(statements))
