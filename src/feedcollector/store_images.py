"""The image-task queries: lease pending downloads, record each attempt, hand back aborted ones.

Tasks are created by :func:`feedcollector.store_items.save_items` in the feed's own batch; here they
are claimed with a lease (``UPDATE ... RETURNING``) so several collectors never download the
same image twice, and every attempt is counted: the third failure marks a task ``failed``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from .database import Database, SqlValue, Statement
from .images import object_key
from .models import ImageTask
from .store import chunked, placeholders
from .timestamps import format_timestamp

# The SQL here interpolates only "?" placeholder lists (``noqa: S608``), never values.


@dataclass(frozen=True, slots=True)
class TaskCursor:
    created_at: str = ""
    id: str = ""


async def claim_image_tasks(
    db: Database, *, now: datetime, lease: timedelta, limit: int, after: TaskCursor
) -> list[ImageTask]:
    """Lease up to ``limit`` pending tasks past ``after`` (new ones and retries alike).

    The cursor is a row value, one range of ``image_tasks_status (status, created_at, id)``:
    a feed's tasks share its batch's second, and a page found its start among them by
    reading (and sorting) all of them."""
    claimed = await db.query(
        "UPDATE image_tasks SET lease_until = ? WHERE id IN ("
        " SELECT id FROM image_tasks WHERE status = 'pending'"
        " AND (lease_until IS NULL OR lease_until <= ?)"
        " AND (created_at, id) > (?, ?)"  # one range of image_tasks_status
        " ORDER BY created_at, id LIMIT ?) RETURNING id",
        (
            format_timestamp(now + lease),
            format_timestamp(now),
            after.created_at,
            after.id,
            limit,
        ),
    )
    tasks: list[ImageTask] = []
    for chunk in chunked([row["id"] for row in claimed]):
        marks = placeholders(len(chunk))
        rows = await db.query(
            "SELECT t.id, t.item_id, t.original_url, t.position, t.attempts, t.created_at, "  # noqa: S608
            "i.feed_id, i.guid FROM image_tasks t JOIN items i ON i.id = t.item_id "
            f"WHERE t.id IN ({marks})",
            tuple(chunk),
        )
        tasks += [
            ImageTask(
                id=row["id"],
                item_id=row["item_id"],
                feed_id=row["feed_id"],
                guid=row["guid"],
                original_url=row["original_url"],
                position=int(row["position"]),
                attempts=int(row["attempts"]),
                created_at=row["created_at"],
            )
            for row in rows
        ]
    tasks.sort(key=lambda t: (t.created_at, t.id))
    return tasks


@dataclass(frozen=True, slots=True)
class ImageResult:
    task_id: str
    r2_key: str | None
    error: str | None


MAX_IMAGE_ATTEMPTS = 3


async def image_key(db: Database, task: ImageTask, ext: str, reserved: dict[str, str]) -> str:
    """The key to put this task's image under, checked against the database before the put.

    Normally :func:`~feedcollector.images.object_key`; but when that key already belongs to
    ANOTHER item (a ``success`` task of another item names it: two GUIDs of the feed whose md5
    share their first 8 hex digits), or another item took it earlier in this stage
    (``reserved``: key -> item id, shared by the stage's concurrent attempts), the key with the
    full md5 instead, so no object is ever shared. The task's own key from an earlier attempt
    (a retry) does not count: it is overwritten as before. One indexed query per image;
    ``r2_key`` itself is still set only on success.
    """
    short = object_key(task.feed_id, task.guid, task.position, ext)
    rows = await db.query(
        "SELECT 1 FROM image_tasks WHERE r2_key = ? AND item_id <> ? LIMIT 1",
        (short, task.item_id),
    )
    if not rows and reserved.setdefault(short, task.item_id) == task.item_id:
        return short
    full = object_key(task.feed_id, task.guid, task.position, ext, full=True)
    reserved[full] = task.item_id
    return full


async def record_image_results(
    db: Database, results: Sequence[ImageResult], now: datetime, *, release: Sequence[str] = ()
) -> list[str]:
    """Every attempt counts, once: only while its task is leased (recording clears the lease,
    so a batch sent again after its answer was lost, on D1, does not count the same attempts
    twice: a failing image reached ``failed`` a try early). A success sets ``r2_key``, the
    third failure marks ``failed``.

    Returns the keys of the successes whose task row is gone (retention deleted the item while
    its image was downloading): no row names those objects, so the caller deletes them. Each
    success's ``UPDATE`` says so by ``RETURNING id``, in the same one batch.

    ``release``: tasks handed back uncharged in that batch too (the end of a page: its last
    results and its tasks not done are written together, one round trip and one wait for a
    locked database, all or nothing).
    """
    if not results and not release:
        return []
    stamp = format_timestamp(now)
    statements: list[Statement] = []
    for result in results:
        if result.r2_key is not None:
            statements.append(
                Statement(
                    "UPDATE image_tasks SET status = 'success', r2_key = ?, "
                    "attempts = attempts + CASE WHEN lease_until IS NULL THEN 0 ELSE 1 END, "
                    "last_error = NULL, updated_at = ?, lease_until = NULL WHERE id = ? "
                    "RETURNING id",
                    (result.r2_key, stamp, result.task_id),
                )
            )
        else:
            params: tuple[SqlValue, ...] = (
                MAX_IMAGE_ATTEMPTS,
                (result.error or "unknown error")[:2000],
                stamp,
                result.task_id,
            )
            statements.append(
                Statement(
                    "UPDATE image_tasks SET attempts = attempts + 1, "
                    "status = CASE WHEN attempts + 1 >= ? THEN 'failed' ELSE 'pending' END, "
                    "last_error = ?, updated_at = ?, lease_until = NULL "
                    "WHERE id = ? AND lease_until IS NOT NULL",
                    params,
                )
            )
    statements += [
        Statement(
            f"UPDATE image_tasks SET lease_until = NULL WHERE id IN ({placeholders(len(chunk))})",  # noqa: S608
            tuple(chunk),
        )
        for chunk in chunked(release)
    ]
    updated = await db.batch(statements)
    return [
        result.r2_key
        for result, rows in zip(results, updated[: len(results)], strict=True)
        if result.r2_key is not None and not rows
    ]
