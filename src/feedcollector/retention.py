"""Retention: delete raw XML backups and old items (with their images) on time, daily.

Seed section 9: items older than ``item_days`` by ``created_at`` go with their images, objects
first (``DeleteObjects``, at most 1000 keys a call), then the ``image_tasks`` and ``items``
rows in one batch. Backups older than ``backup_days`` by the timestamp in their key go too; on
R2 a bucket lifecycle rule does that better (README), and this sweep stays as the safety net.

Items are handled a page at a time (keyset on ``(created_at, id)``), and each page is one
range of the ``items_created_at`` index, so every statement stays within D1's 100 parameters
and memory holds one page's object keys, whatever the volume. The objects deleted are exactly
the keys the expired rows name (never a prefix), less any a living row names too. Each page's batch
also writes a tombstone ``(feed_id, guid, deleted_at)`` per item: a feed that still lists an
expired item must not bring it back (see :mod:`.tombstones`). Decisions are pure functions of
their inputs; the clock is a parameter.

One cleanup runs at a time, and never beside a restore (it would delete backups the restore
replays): the daily run and ``cleanup`` by hand both hold the ``cleanup`` lease of
:mod:`.maintenance_leases`, renewed while they run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from .backups import CONTENT_TYPE_SUFFIX, stored_time
from .backups import PREFIX as BACKUP_PREFIX
from .database import Database, SqlValue, Statement
from .held_lease import Lease, checkpoint, clock_from, renewed
from .objectstore import MAX_KEYS_PER_DELETE, ObjectStore
from .report import counted
from .retention_daily import CLEANUP_LEASE, CLEANUP_TASK
from .store import MAX_PARAMS, chunked, placeholders
from .timestamps import format_timestamp
from .tombstones import expire_tombstones

ITEM_PAGE_SIZE = 500
"""Expired items handled per page (one key query, one object delete pass, one batch)."""
SAMPLE_SIZE = 5
"""Keys of each kind shown by ``cleanup --dry-run``."""
DAILY_AGAIN = (
    "The daily cleanup is tried again by itself once its lease is free (within the hour), "
    "unless the process that holds it now finishes it; nothing needs doing by hand"
)
"""What a daily cleanup that lost its lease says happens next."""


# --- decisions (pure) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetentionCutoffs:
    """What is old enough to go, as of ``now``."""

    now: datetime
    items_before: str
    """Items whose ``created_at`` is earlier than this expire."""
    backups_before: datetime
    """Backups whose key timestamp is earlier than this expire."""


def retention_cutoffs(now: datetime, *, item_days: int, backup_days: int) -> RetentionCutoffs:
    return RetentionCutoffs(
        now=now,
        items_before=format_timestamp(now - timedelta(days=item_days)),
        backups_before=now - timedelta(days=backup_days),
    )


def is_expired_backup(key: str, before: datetime) -> bool:
    """True for a backup key (or the Content-Type kept beside one) whose timestamp is before
    ``before``; other keys never expire."""
    taken = stored_time(key)
    return taken is not None and taken < before


def delete_chunks(keys: Sequence[str], size: int = MAX_KEYS_PER_DELETE) -> list[Sequence[str]]:
    """Slices of at most ``size`` keys: S3 and R2 refuse a DeleteObjects of more than 1000."""
    if not 1 <= size <= MAX_KEYS_PER_DELETE:
        raise ValueError(f"retention: delete chunk size must be 1..{MAX_KEYS_PER_DELETE}")
    return [keys[i : i + size] for i in range(0, len(keys), size)]


@dataclass(frozen=True, slots=True)
class ItemCursor:
    """A keyset position in ``(created_at, id)`` order; the empty cursor is before everything."""

    created_at: str = ""
    id: str = ""


@dataclass(frozen=True, slots=True)
class ItemPage:
    """The expired items after ``after`` up to and including ``last``."""

    after: ItemCursor
    last: ItemCursor
    count: int

    def where(self, before: str, alias: str = "") -> tuple[str, tuple[SqlValue, ...]]:
        """A WHERE condition (with its parameters) selecting exactly this page's items.

        The page's bounds are row values, which SQLite reads as one range of the
        ``(created_at, id)`` index, also among the rows of one second; with only ORs around
        them it read every expired item (or the whole second) for each page."""
        c, i = f"{alias}created_at", f"{alias}id"
        sql = f"({c}, {i}) > (?, ?) AND ({c}, {i}) <= (?, ?) AND {c} < ?"
        params: tuple[SqlValue, ...] = (
            self.after.created_at,
            self.after.id,
            self.last.created_at,
            self.last.id,
            before,
        )
        return sql, params


def item_page_statements(page: ItemPage, before: str, deleted_at: str) -> list[Statement]:
    """The page's one batch: tombstones first, then image tasks, then the items (FK order)."""
    where, params = page.where(before)
    return [
        Statement(
            "INSERT OR IGNORE INTO item_tombstones (feed_id, guid, deleted_at) "  # noqa: S608
            f"SELECT feed_id, guid, ? FROM items WHERE {where}",
            (deleted_at, *params),
        ),
        Statement(
            f"DELETE FROM image_tasks WHERE item_id IN (SELECT id FROM items WHERE {where})",  # noqa: S608 (fixed text)
            params,
        ),
        Statement(f"DELETE FROM items WHERE {where}", params),  # noqa: S608 (fixed text)
    ]


# --- the report ---------------------------------------------------------------------------


@dataclass(slots=True)
class CleanupReport:
    """Counters and a few sample keys (never whole lists: memory stays flat)."""

    cutoffs: RetentionCutoffs
    dry_run: bool = False
    backups: int = 0
    items: int = 0
    image_objects: int = 0
    content_objects: int = 0
    tombstones_dropped: int = 0
    tombstones_kept: int = 0
    items_expiring: int | None = None
    """How many items are past the cutoff, counted up front only for a progress display."""
    progress: Callable[[CleanupReport], None] | None = None
    lease: Lease | None = None
    """The cleanup lease this run holds, checked after every chunk (None: a dry run)."""
    sample_backups: list[str] = field(default_factory=list)
    sample_items: list[str] = field(default_factory=list)
    sample_objects: list[str] = field(default_factory=list)

    def summary(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        cut = self.cutoffs
        return (
            f"cleanup{' (dry run)' if self.dry_run else ''}: {verb} "
            f"{counted(self.backups, 'backup')} older than "
            f"{format_timestamp(cut.backups_before)}, {counted(self.items, 'item')} created "
            f"before {cut.items_before} with {counted(self.image_objects, 'image object')} and "
            f"{counted(self.content_objects, 'content object')}; tombstones: "
            f"{self.tombstones_dropped} "
            f"{'to drop' if self.dry_run else 'dropped'}, {self.tombstones_kept} kept "
            "(their feed may still list the item)"
        )

    def samples(self) -> list[tuple[str, list[str]]]:
        return [
            ("backups", self.sample_backups),
            ("items (feed_id guid)", self.sample_items),
            ("image and content objects", self.sample_objects),
        ]

    async def tick(self) -> None:
        """After each chunk: let the event loop run first (on SQLite and a local folder
        nothing here waits, so a SIGTERM's handler never ran and ``run`` ignored it until
        the whole cleanup was over), make sure the lease is still ours before the next
        chunk's deletes (the lease's checkpoint does both), then report, where a stop request
        ends the cleanup."""
        await checkpoint(self.lease)
        if self.progress is not None:
            self.progress(self)


def keep_samples(target: list[str], values: Sequence[str]) -> None:
    """Add ``values`` to ``target`` up to :data:`SAMPLE_SIZE` keys (a dry run's examples)."""
    target.extend(values[: max(0, SAMPLE_SIZE - len(target))])


# --- backups ------------------------------------------------------------------------------


async def sweep_backups(
    objects: ObjectStore,
    report: CleanupReport,
    *,
    delete_chunk: int = MAX_KEYS_PER_DELETE,
) -> None:
    """Delete every backup older than the cutoff, streaming the listing in delete-sized chunks."""
    before = report.cutoffs.backups_before
    pending: list[str] = []
    async for key in objects.list(BACKUP_PREFIX):
        if not is_expired_backup(key, before):
            continue
        if not key.endswith(CONTENT_TYPE_SUFFIX):  # the Content-Type beside one: uncounted
            report.backups += 1
            keep_samples(report.sample_backups, [key])
        pending.append(key)
        if len(pending) >= delete_chunk:
            await _delete_objects(objects, pending, report.dry_run, delete_chunk)
            pending = []
            await report.tick()
    await _delete_objects(objects, pending, report.dry_run, delete_chunk)
    await report.tick()


async def _delete_objects(
    objects: ObjectStore, keys: Sequence[str], dry_run: bool, chunk: int
) -> None:
    if dry_run:
        return
    for part in delete_chunks(keys, chunk):
        await objects.delete_many(part)


# --- items --------------------------------------------------------------------------------


async def expire_items(
    db: Database,
    objects: ObjectStore,
    report: CleanupReport,
    *,
    page_size: int = ITEM_PAGE_SIZE,
    delete_chunk: int = MAX_KEYS_PER_DELETE,
) -> None:
    """Delete expired items page by page: objects first, then one batch of rows per page."""
    before = report.cutoffs.items_before
    deleted_at = format_timestamp(report.cutoffs.now)
    cursor = ItemCursor()
    if report.progress is not None:
        rows = await db.query("SELECT COUNT(*) AS n FROM items WHERE created_at < ?", (before,))
        report.items_expiring = int(rows[0]["n"])
        await report.tick()
    while True:
        page = await _next_item_page(db, before, cursor, page_size, report)
        if page is None:
            return
        image_keys, content_keys = await _page_object_keys(db, page, before)
        report.items += page.count
        report.image_objects += len(image_keys)
        report.content_objects += len(content_keys)
        keep_samples(report.sample_objects, [*image_keys, *content_keys])
        if not report.dry_run:
            await _delete_objects(objects, [*image_keys, *content_keys], False, delete_chunk)
            await db.batch(item_page_statements(page, before, deleted_at))
        cursor = page.last
        await report.tick()


async def _next_item_page(
    db: Database, before: str, after: ItemCursor, size: int, report: CleanupReport
) -> ItemPage | None:
    rows = await db.query(
        "SELECT created_at, id, feed_id, guid FROM items WHERE (created_at, id) > (?, ?) "
        "AND created_at < ? ORDER BY created_at, id LIMIT ?",
        (after.created_at, after.id, before, size),
    )
    if not rows:
        return None
    keep_samples(report.sample_items, [f"{row['feed_id']} {row['guid']}" for row in rows])
    last = ItemCursor(rows[-1]["created_at"], rows[-1]["id"])
    return ItemPage(after=after, last=last, count=len(rows))


async def _page_object_keys(
    db: Database, page: ItemPage, before: str
) -> tuple[list[str], list[str]]:
    """The r2_keys of the page's ``success`` image tasks, and its spilled content objects.

    Exactly the keys these rows name (never a prefix), less any key a row outside the page
    still names: keys are per item (see :func:`.store_images.image_key` and
    :func:`.spill.write_spilled`), but rows written before that rule may share an object.
    """
    where, params = page.where(before, "i.")
    image_rows = await db.query(  # the page's items first: not every success task's item
        "SELECT t.r2_key FROM items i CROSS JOIN image_tasks t ON t.item_id = i.id "  # noqa: S608
        f"WHERE t.status = 'success' AND t.r2_key IS NOT NULL AND {where}",
        params,
    )
    content_rows = await db.query(
        f"SELECT i.content_key FROM items i WHERE i.content_key IS NOT NULL AND {where}",  # noqa: S608
        params,
    )
    image_keys = [r["r2_key"] for r in image_rows]
    content_keys = [r["content_key"] for r in content_rows]
    named = (
        "SELECT t.r2_key AS k FROM image_tasks t JOIN items i ON i.id = t.item_id WHERE t.r2_key"
    )
    kept = await _named_elsewhere(db, named, image_keys, where, params)
    named = "SELECT i.content_key AS k FROM items i WHERE i.content_key"
    kept |= await _named_elsewhere(db, named, content_keys, where, params)
    return [k for k in image_keys if k not in kept], [k for k in content_keys if k not in kept]


async def _named_elsewhere(
    db: Database, select: str, keys: Sequence[str], where: str, params: tuple[SqlValue, ...]
) -> set[str]:
    """The ``keys`` a row outside the page (``NOT where``) names too (one indexed lookup)."""
    found: set[str] = set()
    for chunk in chunked(keys, MAX_PARAMS - len(params)):
        rows = await db.query(
            f"{select} IN ({placeholders(len(chunk))}) AND NOT ({where})",
            (*chunk, *params),
        )
        found.update(row["k"] for row in rows)
    return found


# --- the whole cleanup --------------------------------------------------------------------


async def run_cleanup(
    db: Database,
    objects: ObjectStore,
    *,
    now: datetime,
    item_days: int,
    backup_days: int,
    dry_run: bool = False,
    progress: Callable[[CleanupReport], None] | None = None,
    owner: str | None = None,
    daily: bool = False,
) -> CleanupReport:
    """Backups, then items with their objects, then old tombstones; ``dry_run`` only counts.

    ``progress`` hears the report after every chunk of backups and every page of items.
    ``owner`` holds the cleanup lease (:mod:`.retention_daily`): it is renewed while the
    cleanup runs, and let go of as soon as it ends, however it ends, keeping its time as the
    daily run's wait before it is tried again (a restore or a cleanup by hand need not wait
    for that), which :func:`.retention_daily.record_cleanup` clears: the deletes are over, so
    a record the database does not take leaves no live lease behind. ``daily``: the daily run
    of ``run`` (which tries again by itself), not ``cleanup`` by hand."""
    report = CleanupReport(
        retention_cutoffs(now, item_days=item_days, backup_days=backup_days),
        dry_run=dry_run,
        progress=progress,
    )
    if owner is None or dry_run:
        await _clean(db, objects, report, now)
        return report
    lease = Lease(
        db,
        CLEANUP_TASK,
        owner,
        length=CLEANUP_LEASE,
        clock=clock_from(now),
        command="cleanup",
        again=DAILY_AGAIN if daily else None,
    )
    report.lease = lease
    try:
        await lease.renew()  # also makes sure the lease is ours
        await lease.checkpoint()
        async with renewed(lease):
            await _clean(db, objects, report, now)
    finally:
        await lease.release(backoff=True)
    return report


async def _clean(db: Database, objects: ObjectStore, report: CleanupReport, now: datetime) -> None:
    await sweep_backups(objects, report)
    await expire_items(db, objects, report)
    sweep = await expire_tombstones(
        db, objects, before=report.cutoffs.items_before, now=now, dry_run=report.dry_run
    )
    report.tombstones_dropped, report.tombstones_kept = sweep.dropped, sweep.kept
