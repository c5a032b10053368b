"""Recovery: replay the raw XML backups through the normal decode -> parse -> store path.

Every non-304 body was kept at ``backups/{feed_id}/{fetched_at}.xml`` and feed ids derive from
URLs (``schedule.feed_id_for``), so a lost or damaged database can be rebuilt from the object
store (seed section 7). For each feed of the feeds file and of the database (or one, ``--feed``)
the backups are replayed oldest first with the same functions a fetch uses
(:func:`.read_body.read_feed_body`, spilling, and the items ``INSERT OR IGNORE`` of the store),
dated by the timestamp in their key: an item gets the ``created_at`` of the first backup that
lists it, and an undated item that backup's time, as on the original fetch.

Restore never touches a feed's schedule or validators (``last_fetched_at``, ETag, ...); it only
creates the row of a feeds-file feed the database lacks, and fills in a missing title. It is
idempotent: the insert ignores known GUIDs, so a second run recovers nothing. Tombstoned items
stay deleted. A recovered item's images that are already archived under their deterministic
keys are linked to those objects again instead of being downloaded anew, when the positions can
be trusted (see :mod:`.restore_images`). Within a feed, a backup identical to the previous one
is skipped, and GUIDs already replayed are not sent again.

Relinking names archived objects of any age again, which the orphan sweep (``cleanup
--orphans``) deletes while no row names them, and the retention cleanup deletes backups a
restore replays. A restore therefore holds the ``restore`` lease of :mod:`.maintenance_leases`
(renewed every minute, let go at the end whatever happened): it is refused while a sweep or
a cleanup runs, and they are refused (the daily cleanup waits) while it runs. A restore that
stopped before its end (Ctrl-C, a failure) leaves a mark the sweep refuses to run beside,
until a whole restore (or the same one again) finishes: its images wait to be linked.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from . import maintenance_leases as leases
from .backups import PREFIX as BACKUP_PREFIX
from .backups import backup_time, feed_backups, read_backup
from .database import Database, Statement
from .errors import TOO_LARGE, ConfigError, DatabaseError, ObjectStoreError, ParseError
from .feed_urls import feed_url_key
from .held_lease import Lease, holding
from .missing_objects import missing_content
from .models import FeedSpec, ItemRecord
from .objectstore import ObjectStore
from .read_body import read_feed_body
from .report import counted
from .restore_images import Uncertain, relink_images, stored_with_unlinked_images
from .safe_text import QUOTED_CHARS, one_line
from .schedule import feed_id_for
from .spill import CONTENT_TYPE, plan_batch_spill, spilled_records
from .store_items import inserted_ids, item_statements
from .store_sync import new_feed_row
from .timestamps import format_timestamp

log = logging.getLogger("feedcollector")


@dataclass(frozen=True, slots=True)
class RestoreTarget:
    """A feed whose backups are replayed; ``spec`` is its feeds-file entry, if it has one."""

    feed_id: str
    url: str
    spec: FeedSpec | None
    in_database: bool


@dataclass(slots=True)
class RestoreReport:
    feeds: int = 0
    feeds_created: int = 0
    backups: int = 0
    backups_unchanged: int = 0
    backups_unreadable: int = 0
    items_recovered: int = 0
    images_relinked: int = 0
    contents_rewritten: int = 0
    """Spilled HTML objects gone from the store, written again from a backup."""
    unknown_feed_folders: int = 0
    backups_before: int = 0
    """Backups taken before ``replayed_from``, not replayed."""
    replayed_from: str | None = None
    why_not_older: str = ""

    def summary(self) -> str:
        text = (
            f"restore: {counted(self.items_recovered, 'item')} recovered from "
            f"{counted(self.backups, 'backup')} of {counted(self.feeds, 'feed')} "
            f"({self.backups_unchanged} identical to the previous one, "
            f"{self.backups_unreadable} unreadable); {counted(self.images_relinked, 'image')} "
            f"linked to their archived objects; {counted(self.feeds_created, 'feed row')} created"
        )
        if self.contents_rewritten:
            text += (
                f"; the spilled HTML of {counted(self.contents_rewritten, 'item')}, gone from "
                "the object store, written again from the backups"
            )
        if self.backups_before:
            text += (
                f"; {self.backups_before} backups taken before {self.replayed_from} were not "
                f"replayed ({self.why_not_older})"
            )
        if self.unknown_feed_folders:
            text += (
                f"; {counted(self.unknown_feed_folders, 'backup folder')} of feeds in neither the "
                "feeds file nor the database (their URLs are unknown): not replayed "
                "(feeds removed from the file: put their URLs back, restore again, then "
                "remove them once more)"
            )
        return text


@dataclass(frozen=True, slots=True)
class RestoreProgress:
    """Reported after every backup (``feed_done`` False) and after every feed (True)."""

    feed_url: str
    feeds_done: int
    feeds_total: int
    items_recovered: int
    feed_done: bool


ProgressCallback = Callable[[RestoreProgress], None]


def restore_targets(
    specs: Sequence[FeedSpec], known: Mapping[str, str], feed_url: str | None = None
) -> list[RestoreTarget]:
    """The feeds to replay: feeds file and database (``known``: url -> id), or just one (pure).

    Feeds are told apart by their id, as their backups are: a URL respelled in the feeds file
    (``HTTP://`` for ``http://``) is a new feed to the collector, and the old one's backups
    must be replayed too. ``feed_url`` picks the feed of exactly that URL, else those spelled
    alike; raises ConfigError when it is in neither.
    """
    targets: dict[str, RestoreTarget] = {}
    for spec in specs:
        feed_id = known.get(spec.url, feed_id_for(spec.url))
        targets[feed_id] = RestoreTarget(feed_id, spec.url, spec, spec.url in known)
    for url, feed_id in known.items():
        targets.setdefault(feed_id, RestoreTarget(feed_id, url, None, True))
    ordered = sorted(targets.values(), key=lambda t: (t.url, t.feed_id))
    if feed_url is None:
        return ordered
    wanted = feed_url.strip()
    chosen = [t for t in ordered if t.url == wanted] or [
        t for t in ordered if feed_url_key(t.url) == feed_url_key(wanted)
    ]
    if not chosen:
        raise ConfigError(
            f"restore: {feed_url} is neither in the feeds file nor in the database, so its "
            "backups cannot be found. Give the feed's URL exactly as it is subscribed; a feed "
            "removed from the feeds file before the database was lost is found once its URL "
            "is back in the file (its backups are kept under it; it is then fetched again "
            "until you remove it once more)."
        )
    return chosen


async def restore_from_backups(
    db: Database,
    objects: ObjectStore,
    specs: Sequence[FeedSpec],
    *,
    now: datetime,
    owner: str,
    feed_url: str | None = None,
    since: datetime | None = None,
    item_days: int | None = None,
    progress: ProgressCallback | None = None,
) -> RestoreReport:
    """Replay the backups (taken at or after ``since``) of every feed, or of ``feed_url``.

    With ``item_days`` (retention), backups older than that are not replayed: their items
    have expired, and once their tombstones are gone (backups are kept longer than items
    when ``backup_days`` is larger) a replay brought them back, images downloaded anew, for
    the next cleanup to delete again. ``owner`` holds the restore lease meanwhile (a
    ConfigError names the sweep or cleanup in the way), timed from ``now``, the present."""
    why = "--since"
    if item_days is not None:
        kept_from = now - timedelta(days=item_days)
        if since is None or kept_from > since:
            since = kept_from
            why = f"what they hold is older than item_days ({item_days}) and has expired"
    rows = await db.query("SELECT id, url FROM feeds")
    targets = restore_targets(specs, {row["url"]: row["id"] for row in rows}, feed_url)
    report = RestoreReport(
        feeds=len(targets),
        replayed_from=format_timestamp(since) if since is not None else None,
        why_not_older=why,
    )
    async with holding(db, leases.RESTORE, owner=owner, now=now, command="restore") as lease:
        marked = await leases.restore_began(db, now)
        for done, target in enumerate(targets, start=1):

            def tick(feed_done: bool = False, url: str = target.url, done: int = done) -> None:
                if progress is not None:
                    total = len(targets)
                    progress(RestoreProgress(url, done, total, report.items_recovered, feed_done))

            if not target.in_database and target.spec is not None:
                report.feeds_created += await _create_feed(db, target.spec, now)
            await _restore_feed(db, objects, target, since, report, tick, lease, now)
            tick(feed_done=True)
        if feed_url is None:
            known_ids = {target.feed_id for target in targets}
            report.unknown_feed_folders = len(await _backup_feed_ids(objects) - known_ids)
        if marked or feed_url is None:  # one feed's restore does not finish another's
            await leases.restore_finished(db)
    return report


async def _create_feed(db: Database, spec: FeedSpec, now: datetime) -> int:
    """The feeds-file feed's row, as registration would insert it (due at once)."""
    stamp = format_timestamp(now)
    row = new_feed_row(feed_id_for(spec.url), spec, stamp, returning=True)
    return len(await db.query(row.sql, row.params))


async def _restore_feed(
    db: Database,
    objects: ObjectStore,
    target: RestoreTarget,
    since: datetime | None,
    report: RestoreReport,
    tick: Callable[[], None],
    lease: Lease,
    began: datetime,
) -> None:
    previous: bytes | None = None
    replayed: set[str] = set()
    # The backup before this one was replayed here: an item it lacked was first stored from
    # this body, so its archived images sit at this body's positions (see restore_images).
    follows_replayed = False
    lost_html = {}
    if target.in_database:
        lost_html = await missing_content(db, objects, target.feed_id, stored_before=began)
    async for backup in feed_backups(objects, target.feed_id):
        taken, key = backup.taken, backup.key
        if since is not None and taken < since:
            report.backups_before += 1
            continue
        await lease.checkpoint()
        try:
            body, content_type = await read_backup(objects, backup)
        except ObjectStoreError as exc:  # this file (expired meanwhile, a broken link...)
            follows_replayed = False
            report.backups += 1
            report.backups_unreadable += 1
            log.warning("restore: %s of %s cannot be read, skipped: %s", key, target.url, exc)
            tick()
            continue
        report.backups += 1
        hashed = hashlib.sha256(body)
        hashed.update(f"\0{content_type}".encode())
        digest = hashed.digest()
        if digest == previous:
            report.backups_unchanged += 1
            tick()
            continue
        previous = digest
        try:
            parsed, records = read_feed_body(
                body, content_type, target.url, target.url, taken, warn=False
            )
        except ParseError as exc:
            follows_replayed = False
            report.backups_unreadable += 1
            log.warning("restore: %s of %s is not readable, skipped: %s", key, target.url, exc)
            tick()
            continue
        fresh = [record for record in records if record.guid not in replayed]
        if lost_html:
            report.contents_rewritten += await _write_lost_html(objects, fresh, lost_html, key)
        plan = await plan_batch_spill(db, target.feed_id, fresh)
        try:
            async with spilled_records(objects, db, target.feed_id, target.url, plan) as stored:
                statements = item_statements(
                    target.feed_id, stored, format_timestamp(taken), return_ids=True
                )
                statements.append(
                    Statement(
                        "UPDATE feeds SET title = COALESCE(title, ?), "
                        "channel_title = COALESCE(channel_title, ?) WHERE id = ?",
                        (parsed.title, parsed.title, target.feed_id),
                    )
                )
                results = await db.batch(statements)
        except DatabaseError as exc:
            if exc.kind != TOO_LARGE:
                raise
            follows_replayed = False
            report.backups_unreadable += 1  # refused on every run: not an outage to stop at
            log.warning(
                "restore: %s of %s holds items the database refuses as too large, skipped: %s",
                key,
                target.url,
                exc,
            )
            tick()
            continue
        replayed.update(record.guid for record in records)
        new_ids = set(inserted_ids(results))
        report.items_recovered += len(new_ids)
        recovered = [r for r in stored if r.id in new_ids and r.image_urls]
        earlier = [r for r in stored if r.id not in new_ids and r.image_urls]
        certain = recovered if follows_replayed else []
        uncertain = [] if follows_replayed else [Uncertain(r, taken) for r in recovered]
        if earlier:  # stored before this run (an interrupted restore, a database copy put back)
            uncertain += await stored_with_unlinked_images(db, target.feed_id, earlier)
        report.images_relinked += await relink_images(
            db, objects, target.feed_id, certain, uncertain, taken, lease
        )
        follows_replayed = True
        tick()


async def _write_lost_html(
    objects: ObjectStore, records: Sequence[ItemRecord], lost: dict[str, str], backup: str
) -> int:
    """Put the HTML of the stored items among ``records`` whose spilled object is gone
    (``lost``: stored GUID, maybe a record's earlier one, -> key) under that key again, from
    this backup, the first replayed that lists them (the item's stored version, unless the
    publisher edited it before then)."""
    written = 0
    for record in records:
        stored_as = record.guid if record.guid in lost else record.earlier_guid
        key = lost.get(stored_as or "")
        if stored_as is None or key is None or not record.content_html:
            continue
        await objects.put(key, record.content_html.encode("utf-8"), CONTENT_TYPE)
        del lost[stored_as]
        written += 1
        log.warning(
            "restore: the HTML of item %r was gone from the object store; written again to %s "
            "from %s",
            one_line(record.title or record.guid, QUOTED_CHARS),
            key,
            backup,
        )
    return written


async def _backup_feed_ids(objects: ObjectStore) -> set[str]:
    """The feed ids that have a backup folder (a set of ids only: one per feed)."""
    ids: set[str] = set()
    async for key in objects.list(BACKUP_PREFIX):
        if backup_time(key) is not None:
            ids.add(key[len(BACKUP_PREFIX) :].split("/", 1)[0])
    return ids
