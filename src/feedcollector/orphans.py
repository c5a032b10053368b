"""Orphaned objects: images and spilled HTML that no database row names (``cleanup --orphans``).

Retention deletes objects only by the keys rows name (``image_tasks.r2_key``,
``items.content_key``), so an object whose row never came, or went without it, would stay
forever: an image uploaded by a process killed before it recorded the key (when its retries
then fail, use another extension, or its item expires first), HTML spilled before a feed's
batch that then failed and whose item the feed later dropped, the objects of items a
``restore`` after a database loss could not bring back. This sweep lists ``images/`` and
``content/`` and deletes every object that no row names and that is older than
:data:`ORPHAN_MIN_AGE`. Backups are never listed. An image in the folder of an item the
database still holds is kept all the same: it is that item's, archived before a restore that
could not place it (the item's images changed since its first backup, which has expired), or
left by a retry under another extension; once its source is gone it is the only copy. It goes
with its item.

The listing streams, a chunk of at most :data:`MAX_KEYS_PER_DELETE` objects at a time: one
database round trip asks which of the chunk's keys a row names (statements of at most
:data:`~.store.MAX_PARAMS` keys, D1's bound, on the partial indexes of migration 8), then one
delete removes the others. Memory holds one chunk at a million objects as at ten, and only a
round trip separates the question from the delete.

A ``restore`` names archived objects of any age again, so a sweep beside one deleted images
the restore was about to link (rows of ``success`` pointing at nothing). The sweep therefore
holds the ``orphans`` lease of :mod:`.maintenance_leases`, which no restore shares: it is
refused while a restore runs, and a restore is refused while it runs. A dry run deletes
nothing and takes no lease; it warns that a running restore's images count as orphans. A
restore that stopped before its end leaves its images to link too: the sweep is refused
until a restore finishes. A database without items names no object at all: the sweep
refuses to delete, and a dry run says that it would, and why (:attr:`OrphanReport.refusal`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from . import maintenance_leases as leases
from .config import command_line
from .config_values import format_duration
from .database import Database
from .errors import ConfigError, StorageError
from .held_lease import Lease, checkpoint, holding
from .images import IMAGE_PREFIX, guid_digest
from .objectstore import MAX_KEYS_PER_DELETE, ListedObject, ObjectStore
from .report import counted
from .retention import keep_samples
from .spill import CONTENT_NAMED_BY, CONTENT_PREFIX
from .store import keys_found

log = logging.getLogger("feedcollector")

GUID_PAGE = 5000
"""GUIDs read per round trip while the sweep learns a feed's items."""
ORPHAN_MIN_AGE = timedelta(days=1)
"""An unnamed object younger than this is left alone. Every writer puts its object before the
row that names it (an image before its task's ``r2_key``, spilled HTML before its item's
batch), minutes apart at most: a young object may be about to be named."""
NAMING_COLUMNS = {
    IMAGE_PREFIX: "SELECT r2_key AS k FROM image_tasks WHERE r2_key IN",
    CONTENT_PREFIX: CONTENT_NAMED_BY,
}
"""Per swept prefix, the rows that may name its objects (the start of an indexed lookup)."""


def empty_database(command: Callable[..., str]) -> str:
    """Why the sweep deletes nothing: a database lost (or the wrong one), whose objects a
    ``restore`` would link again. Given by the refusal and by a dry run alike."""
    return (
        "the database holds no items, so every image and content object would count as an "
        f"orphan. After a database loss run `{command('restore')}` first (it links the images "
        f"still stored), then `{command('cleanup', '--orphans')}`; check that [database] and "
        "[storage] belong together."
    )


@dataclass(slots=True)
class OrphanReport:
    """Counters and a few sample keys (never whole lists: memory stays flat)."""

    now: datetime
    min_age: timedelta
    dry_run: bool = False
    objects: int = 0
    """Objects listed under the swept prefixes."""
    young: int = 0
    """Objects younger than ``min_age``, left alone whether named or not."""
    images: int = 0
    """Orphaned image objects (deleted, or to delete in a dry run)."""
    content: int = 0
    """Orphaned spilled-HTML objects."""
    orphan_bytes: int = 0
    owned: int = 0
    """Unnamed image objects kept in the folder of an item still stored: its own archive,
    which a restore could not place (the item's images changed since) or a retry left under
    another extension; they go once the item does."""
    progress: Callable[[OrphanReport], None] | None = None
    samples: list[str] = field(default_factory=list)
    refusal: str | None = None
    """Set by a dry run that found orphans the sweep would refuse to delete, to the reason the
    refusal gives: the refusal points at the dry run, which must not promise deletes."""

    def summary(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        refused = ""
        if self.refusal is not None:
            verb = "found"
            refused = f". `cleanup --orphans` would refuse (exit 2) and delete none: {self.refusal}"
        owned = ""
        if self.owned:
            owned = (
                f"; {counted(self.owned, 'unnamed image object')} kept in the folders of items "
                "still stored (their own images; they go with the item)"
            )
        return (
            f"cleanup{' (dry run)' if self.dry_run else ''}: orphans: {verb} "
            f"{counted(self.images, 'image object')} and {counted(self.content, 'content object')} "
            "that no row names "
            f"({self.orphan_bytes / 2**20:.1f} MiB), of {counted(self.objects, 'object')} under "
            f"{IMAGE_PREFIX} and {CONTENT_PREFIX}; {self.young} younger than "
            f"{format_duration(self.min_age)} "
            f"left alone (their rows may be on the way){owned}{refused}"
        )


async def sweep_orphans(
    db: Database,
    objects: ObjectStore,
    *,
    now: datetime,
    owner: str,
    min_age: timedelta = ORPHAN_MIN_AGE,
    dry_run: bool = False,
    chunk_size: int = MAX_KEYS_PER_DELETE,
    progress: Callable[[OrphanReport], None] | None = None,
    command: Callable[..., str] = command_line,
) -> OrphanReport:
    """Delete the objects under ``images/`` and ``content/`` no row names, once ``min_age``
    old; ``dry_run`` only counts. ``progress`` hears the report after every chunk; the
    commands a refusal suggests are worded by ``command`` (:meth:`.Settings.command`).

    ``owner`` holds the ``orphans`` lease meanwhile (a ConfigError names the restore in the
    way), timed from ``now``, which must be the present. A storage error stops the sweep:
    what it deleted so far was unnamed, so nothing is left half done, and a second run goes
    on from what is left."""
    if not 1 <= chunk_size <= MAX_KEYS_PER_DELETE:
        raise ValueError(f"cleanup: orphan chunk size must be 1..{MAX_KEYS_PER_DELETE}")
    held: AbstractAsyncContextManager[Lease | None] = nullcontext()
    if dry_run:
        await _warn_of_a_restore(db, now)
    else:
        held = holding(db, leases.ORPHANS, owner=owner, now=now, command="cleanup")
    async with held as lease:
        await _mind_an_unfinished_restore(db, refuse=lease is not None, command=command)
        report = OrphanReport(now, min_age, dry_run=dry_run, progress=progress)
        await _sweep_all(_Sweep(db, objects, report, lease, command), chunk_size)
    return report


async def _warn_of_a_restore(db: Database, now: datetime) -> None:
    for holder in await leases.live_leases(db, [leases.RESTORE], now):
        log.warning(
            "cleanup: %s: the images it has not linked again yet count as orphans in this dry run",
            leases.describe(holder),
        )


async def _mind_an_unfinished_restore(
    db: Database, *, refuse: bool, command: Callable[..., str]
) -> None:
    """A restore stopped before its end left images to link again, which no row names yet:
    the sweep refuses to delete them (a dry run says its count holds them)."""
    began = await leases.unfinished_restore(db)
    if began is None:
        return
    what = (
        f"a restore begun at {began} did not finish (stopped or failed), and the archived "
        "images it has not linked again yet look like orphans"
    )
    if not refuse:
        log.warning("cleanup: %s: they count as orphans in this dry run", what)
        return
    raise ConfigError(
        f"cleanup: refused, {what}. Run `{command('restore')}` again first (it goes on "
        "where it stopped), then the sweep."
    )


async def _sweep_all(sweep: _Sweep, chunk_size: int) -> None:
    try:
        for prefix in NAMING_COLUMNS:
            await sweep.prefix(prefix, chunk_size)
    except StorageError as exc:
        done = 0 if sweep.report.dry_run else sweep.report.images + sweep.report.content
        raise StorageError(
            f"cleanup: the orphan sweep stopped after {sweep.report.objects} objects "
            f"({done} orphans deleted, none of them named by a row; run it again to go on): "
            f"{exc}"
        ) from exc


@dataclass(slots=True)
class _Sweep:
    db: Database
    objects: ObjectStore
    report: OrphanReport
    lease: Lease | None
    """The ``orphans`` lease, checked before every delete (None: a dry run)."""
    command: Callable[..., str]
    database_checked: bool = False
    digests_of: str | None = None
    """The feed whose items' GUID digests :attr:`digests` holds."""
    digests: set[str] = field(default_factory=set)

    async def prefix(self, prefix: str, chunk_size: int) -> None:
        born_before = self.report.now - self.report.min_age
        chunk: list[ListedObject] = []
        async for listed in self.objects.list_with_times(prefix):
            self.report.objects += 1
            if listed.last_modified > born_before:
                self.report.young += 1
                continue
            chunk.append(listed)
            if len(chunk) >= chunk_size:
                await self._delete_unnamed(prefix, chunk)
                chunk = []
        await self._delete_unnamed(prefix, chunk)

    async def _delete_unnamed(self, prefix: str, chunk: Sequence[ListedObject]) -> None:
        if not chunk:
            return
        # Every chunk lets the event loop run (a Ctrl-C, the lease's renewal: on SQLite and a
        # folder nothing here waits) and makes sure the lease is ours before it names keys.
        await checkpoint(self.lease)
        named = await keys_found(self.db, NAMING_COLUMNS[prefix], [listed.key for listed in chunk])
        orphans = [listed for listed in chunk if listed.key not in named]
        report = self.report
        if prefix == IMAGE_PREFIX:
            owned = {listed.key for listed in orphans if await self._item_folder(listed.key)}
            report.owned += len(owned)
            orphans = [listed for listed in orphans if listed.key not in owned]
        if orphans:
            await self._mind_an_empty_database()
        if orphans and not report.dry_run:
            await self.objects.delete_many([listed.key for listed in orphans])
        if prefix == IMAGE_PREFIX:
            report.images += len(orphans)
        else:
            report.content += len(orphans)
        report.orphan_bytes += sum(listed.size for listed in orphans)
        keep_samples(report.samples, [listed.key for listed in orphans])
        if report.progress is not None:
            report.progress(report)

    async def _item_folder(self, key: str) -> bool:
        """Whether ``key`` lies in the folder of an item the database holds
        (``images/{feed_id}/{md5(guid)[:8] or all 32}/``). The GUID digests of one feed are
        kept at a time: the listing comes feed by feed."""
        parts = key.split("/")
        if len(parts) != 4:
            return False
        if parts[1] != self.digests_of:
            self.digests_of = parts[1]
            self.digests = set()
            after = ""
            while True:
                rows = await self.db.query(
                    "SELECT guid FROM items WHERE feed_id = ? AND guid > ? ORDER BY guid LIMIT ?",
                    (parts[1], after, GUID_PAGE),
                )
                for row in rows:
                    full = guid_digest(row["guid"], full=True)
                    self.digests.update((full, full[:8]))
                if len(rows) < GUID_PAGE:
                    break
                after = rows[-1]["guid"]
        return parts[2] in self.digests

    async def _mind_an_empty_database(self) -> None:
        """A database without items names no object, so every image and HTML would go
        (:func:`empty_database`): the sweep refuses, a dry run notes that it would. Asked
        once, at the first orphan (before the first delete)."""
        if self.database_checked:
            return
        if not await self.db.query("SELECT 1 AS found FROM items LIMIT 1"):
            why = empty_database(self.command)
            if not self.report.dry_run:
                dry = self.command("cleanup", "--orphans", "--dry-run")
                raise ConfigError(f"cleanup: {why} `{dry}` shows what would go.")
            self.report.refusal = why
        self.database_checked = True
