"""The image-task queries: lease pending downloads, record each attempt, hand back aborted ones.

Tasks are created by :func:`feedcollector.store_items.save_items` in the feed's own batch; here they
are claimed with a lease (``UPDATE ... RETURNING``) so several collectors never download the
same image twice, and every attempt is counted: the third failure marks a task ``failed``. A
failed attempt that leaves its task pending sets its ``retry_at`` (:data:`RETRY_DELAYS`), and
no claim takes it before then; ``retry-images`` queues ``failed`` tasks again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from .database import Database, SqlValue, Statement
from .images import object_key
from .models import ImageTask
from .safe_text import stored_error
from .store import chunked, placeholders
from .store_items import CHANGES_SO_FAR
from .timestamps import format_timestamp

# The SQL here interpolates only "?" placeholder lists and fixed text (``noqa: S608``), never
# values.

MAX_IMAGE_ATTEMPTS = 3
"""The seed's rule (section 6): the third failed attempt marks a task ``failed``."""
RETRY_DELAYS = (timedelta(hours=1), timedelta(days=1))
"""How long a task waits after its first and its second failed attempt before a cycle may
try it again. Cycles come a minute apart at most, and retrying in each spent all three
attempts within seconds: an image host's short outage (a restart, a burst of 503s, a rate
limit) failed its images for good. An hour outlasts those; a day outlasts a host down for the
night or a daily quota. So a task fails for good 25 hours after its first failure at the
soonest."""
MAX_RETRY_AFTER = timedelta(days=7)
"""An image server's ``Retry-After`` (429/503) delays the next attempt past the schedule, up to
this much: a header asking for months would keep the task pending (and unreported) as long."""


@dataclass(frozen=True, slots=True)
class TaskCursor:
    """Where the next page starts: a row value of ``image_tasks_status``."""

    created_at: str = ""
    id: str = ""
    retry_at: str = ""

    @classmethod
    def past(cls, task: ImageTask) -> TaskCursor:
        return cls(task.created_at, task.id, task.retry_at)


async def claim_image_tasks(
    db: Database, *, now: datetime, lease: timedelta, limit: int, after: TaskCursor, owner: str
) -> list[ImageTask]:
    """Lease up to ``limit`` pending tasks past ``after`` whose ``retry_at`` has come: new ones
    (``''``) first, then the retries due, oldest due first.

    The cursor is a row value, one range of ``image_tasks_status (status, retry_at,
    created_at, id)`` bounded by ``retry_at <= now``: a feed's tasks share its batch's second,
    and a page found its start among them by reading (and sorting) all of them; the tasks
    waiting for a later retry lie beyond the range's end, and no claim reads them. A task that
    fails in this cycle moves past ``now`` too, so a later page does not take it again.
    ``owner`` (:mod:`.owners`) is kept with the lease: :func:`release_owned_image_tasks`."""
    stamp = format_timestamp(now)
    claimed = await db.query(
        "UPDATE image_tasks SET lease_until = ?, lease_owner = ? WHERE id IN ("
        " SELECT id FROM image_tasks WHERE status = 'pending'"
        " AND (retry_at, created_at, id) > (?, ?, ?) AND retry_at <= ?"  # one range of the index
        " AND (lease_until IS NULL OR lease_until <= ?)"
        " ORDER BY retry_at, created_at, id LIMIT ?) RETURNING id",
        (
            format_timestamp(now + lease),
            owner,
            after.retry_at,
            after.created_at,
            after.id,
            stamp,
            stamp,
            limit,
        ),
    )
    tasks: list[ImageTask] = []
    for chunk in chunked([row["id"] for row in claimed]):
        marks = placeholders(len(chunk))
        rows = await db.query(
            "SELECT t.id, t.item_id, t.original_url, t.position, t.attempts, t.created_at, "  # noqa: S608
            "t.retry_at, i.feed_id, i.guid, f.url AS feed_url FROM image_tasks t "
            "JOIN items i ON i.id = t.item_id JOIN feeds f ON f.id = i.feed_id "
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
                retry_at=row["retry_at"],
                feed_url=row["feed_url"],
            )
            for row in rows
        ]
    tasks.sort(key=lambda t: (t.retry_at, t.created_at, t.id))
    return tasks


async def image_lease_owners_of_host(db: Database, host: str, now: datetime) -> list[str]:
    """The collectors of host name ``host`` (see :func:`.store_schedule.lease_owners_of_host`)
    that hold the lease of an image task now; read from the leased tasks alone
    (``image_tasks_leased``), not from every task."""
    stamp = format_timestamp(now)
    rows = await db.query(
        "SELECT DISTINCT lease_owner FROM image_tasks WHERE lease_until IS NOT NULL "
        "AND lease_owner >= ? AND lease_owner < ? AND lease_until > ?",
        (f"{host}:", f"{host};", stamp),  # ";" is the character after ":"
    )
    return [row["lease_owner"] for row in rows]


async def release_owned_image_tasks(db: Database, owner: str) -> int:
    """Let go of the image tasks ``owner`` leased (a collector that stopped without handing
    them back): due again at once, no attempt counted. How many."""
    rows = await db.query(
        "UPDATE image_tasks SET lease_until = NULL, lease_owner = NULL "
        "WHERE lease_owner = ? AND lease_until IS NOT NULL RETURNING id",
        (owner,),
    )
    return len(rows)


@dataclass(frozen=True, slots=True)
class ImageResult:
    task_id: str
    r2_key: str | None
    error: str | None
    not_before: datetime | None = None
    """A failure's ``Retry-After`` as a moment: no attempt before it (capped when recorded)."""


@dataclass(frozen=True, slots=True)
class Counted:
    """A failed attempt the database counted: the task now ``failed`` for good, or pending
    with the moment it is tried again."""

    task_id: str
    failed: bool
    retry_at: str


@dataclass(frozen=True, slots=True)
class Recorded:
    """What a write of results did besides storing them."""

    orphans: list[str]
    """Keys of successes whose task row is gone: the caller deletes those objects."""
    failures: list[Counted]
    """The failures counted now (none for a batch sent again: they counted the first time)."""


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


@dataclass(frozen=True, slots=True)
class HandBack:
    """Tasks a page hands back uncharged, task id -> None: due again at once (their
    ``retry_at`` had passed when they were claimed), or -> until when their host asked them to
    wait (429 with Retry-After). Only while they hold the page's lease (``leased_until``): a
    task another process took over once the lease ran out is its own (it may have failed for
    good since)."""

    tasks: Mapping[str, datetime | None]
    leased_until: datetime

    def statements(self, now: datetime) -> list[Statement]:
        """Grouped by the second they wait until (a host's tasks are deferred moments apart)."""
        groups: dict[str, list[str]] = {}
        for task_id, wait in self.tasks.items():
            retry_at = "" if wait is None else format_timestamp(min(wait, now + MAX_RETRY_AFTER))
            groups.setdefault(retry_at, []).append(task_id)
        lease = format_timestamp(self.leased_until)
        return [
            Statement(
                "UPDATE image_tasks SET lease_until = NULL, retry_at = max(retry_at, ?) "  # noqa: S608
                f"WHERE id IN ({placeholders(len(chunk))}) AND status = 'pending' "
                "AND lease_until = ?",
                (retry_at, *chunk, lease),
            )
            for retry_at, task_ids in groups.items()
            for chunk in chunked(task_ids)
        ]


async def record_image_results(
    db: Database,
    results: Sequence[ImageResult],
    now: datetime,
    *,
    release: HandBack | None = None,
) -> Recorded:
    """Every attempt counts, once: only while its task is leased (recording clears the lease,
    so a batch sent again after its answer was lost, on D1, does not count the same attempts
    twice: a failing image reached ``failed`` a try early). A success sets ``r2_key``, the
    third failure marks ``failed``, an earlier one sets ``retry_at`` to ``now`` plus its
    :data:`RETRY_DELAYS`, or to the result's ``not_before`` (at most :data:`MAX_RETRY_AFTER`
    away) when that is later. Each failure's ``UPDATE`` returns what it made of the task.

    ``orphans``: the keys of the successes whose task row is gone (retention deleted the item
    while its image was downloading): no row names those objects, so the caller deletes them.
    Each success's ``UPDATE`` says so by ``RETURNING id``, in the same one batch.

    ``release``: tasks handed back uncharged in that batch too (the end of a page: its last
    results and its tasks not done are written together, one round trip and one wait for a
    locked database, all or nothing); a wait their host asked for is capped at
    :data:`MAX_RETRY_AFTER`.
    """
    if not results and (release is None or not release.tasks):
        return Recorded([], [])
    stamp = format_timestamp(now)
    schedule = " ".join(f"WHEN {n} THEN ?" for n in range(len(RETRY_DELAYS) - 1))
    delays = tuple(format_timestamp(now + delay) for delay in RETRY_DELAYS)
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
            pushed = result.not_before
            asked = "" if pushed is None else format_timestamp(min(pushed, now + MAX_RETRY_AFTER))
            params: tuple[SqlValue, ...] = (
                MAX_IMAGE_ATTEMPTS,
                MAX_IMAGE_ATTEMPTS,
                *delays,
                asked,
                stored_error(result.error or "unknown error"),
                stamp,
                result.task_id,
            )
            statements.append(
                Statement(
                    "UPDATE image_tasks SET attempts = attempts + 1, "  # noqa: S608
                    "status = CASE WHEN attempts + 1 >= ? THEN 'failed' ELSE 'pending' END, "
                    "retry_at = CASE WHEN attempts + 1 >= ? THEN '' "
                    f"ELSE max(CASE attempts {schedule} ELSE ? END, ?) END, "
                    "last_error = ?, updated_at = ?, lease_until = NULL "
                    "WHERE id = ? AND lease_until IS NOT NULL RETURNING id, status, retry_at",
                    params,
                )
            )
    if release is not None:
        statements += release.statements(now)
    updated = await db.batch(statements)
    answers = list(zip(results, updated[: len(results)], strict=True))
    return Recorded(
        orphans=[
            result.r2_key for result, rows in answers if result.r2_key is not None and not rows
        ],
        failures=[
            Counted(row["id"], row["status"] == "failed", row["retry_at"])
            for result, rows in answers
            if result.r2_key is None
            for row in rows
        ],
    )


async def requeue_failed_images(
    db: Database, *, now: datetime, feed_urls: Sequence[str] | None = None
) -> int:
    """Queue the ``failed`` tasks (of the feeds with these URLs as stored, or of all) again:
    ``pending``, no attempt counted, due at once, as a new task is; the next cycle downloads
    them. Returns how many."""
    return await _changed(
        db,
        "UPDATE image_tasks SET status = 'pending', attempts = 0, retry_at = '', "
        "last_error = NULL, lease_until = NULL, updated_at = ? WHERE status = 'failed'",
        (format_timestamp(now),),
        feed_urls,
    )


async def hasten_waiting_images(
    db: Database, *, now: datetime, feed_urls: Sequence[str] | None = None
) -> int:
    """Make the ``pending`` tasks that wait for their next try (an hour or a day after a
    failed attempt, or their host's Retry-After) due at once, their attempts kept: for a host
    known to be back. Returns how many."""
    stamp = format_timestamp(now)
    return await _changed(
        db,
        "UPDATE image_tasks SET retry_at = '', updated_at = ? "
        "WHERE status = 'pending' AND retry_at > ?",
        (stamp, stamp),
        feed_urls,
    )


async def _changed(
    db: Database, update: str, params: tuple[SqlValue, ...], feed_urls: Sequence[str] | None
) -> int:
    """Run ``update`` on the tasks of the feeds with these URLs as stored (or of all); how
    many it changed, by ``total_changes()`` around it (returning a row per task would send
    back thousands from D1)."""
    if feed_urls is not None:
        if not feed_urls:
            return 0
        update += (
            " AND item_id IN (SELECT i.id FROM items i JOIN feeds f ON f.id = i.feed_id "  # noqa: S608 (placeholders)
            f"WHERE f.url IN ({placeholders(len(feed_urls))}))"
        )
        params += tuple(feed_urls)
    statement = Statement(update, params)
    before, _, after = await db.batch([CHANGES_SO_FAR, statement, CHANGES_SO_FAR])
    return int(after[0]["changes_so_far"]) - int(before[0]["changes_so_far"])
