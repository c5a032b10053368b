"""Retention against both backend pairs (SQLite + folder, D1 Proxy Worker + S3) with fixed
clocks: items and backups just inside and just outside their windows, image and spilled-content
objects, tombstones, dry runs, paging, and the daily claim shared by several collectors."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest

from feedcollector import held_lease, store, store_items, store_sync
from feedcollector import maintenance_leases as leases
from feedcollector.backends.local import LocalObjectStore
from feedcollector.backends.sqlite import SQLiteDatabase
from feedcollector.backups import backup_key, content_type_key
from feedcollector.database import Database
from feedcollector.errors import ConfigError, ObjectStoreError
from feedcollector.images import object_key
from feedcollector.models import Feed, FeedSpec, ItemRecord
from feedcollector.objectstore import ListedObject, ObjectStore
from feedcollector.restore import restore_from_backups
from feedcollector.retention import (
    CleanupReport,
    ItemCursor,
    ItemPage,
    delete_chunks,
    expire_items,
    is_expired_backup,
    retention_cutoffs,
    run_cleanup,
    sweep_backups,
)
from feedcollector.retention_daily import (
    DailyClaim,
    claim_cleanup,
    last_cleanup_at,
    record_cleanup,
)
from feedcollector.schedule import feed_id_for
from feedcollector.schema import migrate
from feedcollector.spill import content_key
from feedcollector.store_images import ImageResult, record_image_results
from feedcollector.timestamps import format_timestamp
from feedcollector.tombstones import FeedListing, tombstones_to_drop

from . import cloud
from .cloud import S3Bucket, d1_database, run_d1_proxy
from .samples import Clock, Entry, rss
from .stepping import SteppingDatabase

s3_server = cloud.s3_server

T = TypeVar("T")
NOW = datetime(2026, 9, 1, 12, 0, 0, tzinfo=UTC)
ITEM_DAYS = 180
BACKUP_DAYS = 30
ITEM_CUTOFF = NOW - timedelta(days=ITEM_DAYS)
BACKUP_CUTOFF = NOW - timedelta(days=BACKUP_DAYS)
FEED_URL = "https://blog.example.org/feed.xml"
FEED_ID = feed_id_for(FEED_URL)
SECOND = timedelta(seconds=1)
HOUR = timedelta(hours=1)
OWNER = "test-host:1:00000000"
"""The owner of the leases a test's restore or sweep takes (a collector of another machine)."""


@dataclass
class Pair:
    """A database and an object store living on one event loop for the whole test."""

    name: str
    db: Database
    objects: ObjectStore
    runner: asyncio.Runner

    def run(self, step: Awaitable[T]) -> T:
        async def await_it() -> T:
            return await step

        return self.runner.run(await_it())

    def keys(self, prefix: str) -> list[str]:
        async def collect() -> list[str]:
            return [key async for key in self.objects.list(prefix)]

        return self.run(collect())

    def rows(self, sql: str, *params: str) -> list[dict[str, object]]:
        return self.run(self.db.query(sql, params))


@pytest.fixture(params=["embedded", pytest.param("cloud", marks=pytest.mark.cloud)])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Pair]:
    if request.param == "embedded":
        with asyncio.Runner() as runner:
            db = SQLiteDatabase(tmp_path / "collector.db")
            objects = LocalObjectStore(tmp_path / "objects")
            yield from _opened(Pair("embedded", db, objects, runner))
        return
    server = cloud.S3Server().start()
    try:
        bucket = server.create_bucket()
        with run_d1_proxy() as proxy, asyncio.Runner() as runner:
            yield from _opened(Pair("cloud", d1_database(proxy), server.store(bucket), runner))
    finally:
        server.stop()


def _opened(pair: Pair) -> Iterator[Pair]:
    pair.run(migrate(pair.db))
    try:
        yield pair
    finally:
        pair.run(pair.db.close())
        pair.run(pair.objects.close())


def hold_lease(pair: Pair, task: str, owner: str | None, until: datetime) -> None:
    """A maintenance lease as another process leaves it (taken, renewed, or killed while it
    held it); ``owner`` None is the wait a failed daily cleanup leaves."""
    pair.run(
        pair.db.query(
            "INSERT INTO maintenance (task, lease_owner, lease_until) VALUES (?, ?, ?) "
            "ON CONFLICT (task) DO UPDATE SET lease_owner = excluded.lease_owner, "
            "lease_until = excluded.lease_until",
            (task, owner, format_timestamp(until)),
        )
    )


class HeldStore:
    """Delegates to ``inner``; the first read or delete of a key under ``at`` awaits
    ``hold()`` first, which may raise: a restore or a cleanup held at a known point."""

    def __init__(self, inner: ObjectStore, at: str, hold: Callable[[], Awaitable[None]]) -> None:
        self.inner = inner
        self.at = at
        self.hold = hold
        self.held = False

    async def _maybe_hold(self, keys: Sequence[str]) -> None:
        if not self.held and any(key.startswith(self.at) for key in keys):
            self.held = True
            await self.hold()

    async def put(
        self, key: str, data: bytes, content_type: str | None = None, *, durable: bool = True
    ) -> None:
        await self.inner.put(key, data, content_type, durable=durable)

    async def get(self, key: str) -> bytes:
        await self._maybe_hold([key])
        return await self.inner.get(key)

    def list(self, prefix: str) -> AsyncIterator[str]:
        return self.inner.list(prefix)

    def list_with_times(self, prefix: str) -> AsyncIterator[ListedObject]:
        return self.inner.list_with_times(prefix)

    async def delete_many(self, keys: Sequence[str]) -> None:
        await self._maybe_hold(keys)
        await self.inner.delete_many(keys)

    def public_url(self, key: str) -> str | None:
        return self.inner.public_url(key)

    async def close(self) -> None:
        await self.inner.close()


async def add_feed(db: Database, url: str = FEED_URL) -> None:
    await store_sync.sync_feeds(db, [FeedSpec(url)], NOW - timedelta(days=400))


async def add_item(
    pair: Pair,
    guid: str,
    created: datetime,
    *,
    images: tuple[bool, ...] = (),
    spilled: bool = False,
    feed_url: str = FEED_URL,
) -> str:
    """Store an item as the pipeline would at ``created``; ``images`` says which succeeded."""
    feed_id = feed_id_for(feed_url)
    record = ItemRecord(
        id=f"id-{guid}",
        guid=guid,
        link=f"https://blog.example.org/{guid}",
        title=guid,
        pub_date=format_timestamp(created),
        content_html=None if spilled else f"<p>{guid}</p>",
        image_urls=tuple(f"https://img.example.org/{guid}/{n}.png" for n in range(len(images))),
        content_key=content_key(feed_id, guid) if spilled else None,
    )
    if spilled:
        await pair.objects.put(content_key(feed_id, guid), b"<p>big</p>")
    feed = Feed(id=feed_id, url=feed_url)
    outcome = store.FetchSuccess(None, None, None, created, created + timedelta(hours=1), 200)
    await store_items.save_items(pair.db, feed, [record], outcome)
    results = []
    for position, ok in enumerate(images):
        key = object_key(feed_id, guid, position, "png")
        if ok:
            await pair.objects.put(key, b"png bytes", "image/png")
        results.append(
            ImageResult(f"{record.id}-{position}", key if ok else None, None if ok else "404")
        )
    await record_image_results(pair.db, results, created)
    return record.id


def test_pure_decisions() -> None:
    cut = retention_cutoffs(NOW, item_days=180, backup_days=30)
    assert cut.items_before == "2026-03-05T12:00:00Z"
    assert cut.backups_before == datetime(2026, 8, 2, 12, 0, 0, tzinfo=UTC)
    assert is_expired_backup("backups/f/2026-08-02T11:59:59Z.xml", cut.backups_before)
    assert not is_expired_backup("backups/f/2026-08-02T12:00:00Z.xml", cut.backups_before)
    assert not is_expired_backup("backups/f/notes.txt", cut.backups_before)
    assert is_expired_backup("backups/f/2026-08-02T11:59:59Z.content-type", cut.backups_before)
    assert not is_expired_backup("backups/f/2026-08-02T12:00:00Z.content-type", cut.backups_before)
    assert not is_expired_backup("images/f/2020-01-01T00:00:00Z.xml", cut.backups_before)
    assert [len(c) for c in delete_chunks([str(n) for n in range(2500)])] == [1000, 1000, 500]
    with pytest.raises(ValueError, match=r"1\.\.1000"):
        delete_chunks(["a"], 1001)
    page = ItemPage(ItemCursor("a", "1"), ItemCursor("b", "2"), 2)
    where, params = page.where("z")
    assert where.count("?") == len(params) == 5
    listed = sqlite3.connect(":memory:")
    listed.execute("CREATE TABLE items (created_at TEXT, id TEXT)")
    listed.executemany(
        "INSERT INTO items VALUES (?, ?)",
        [("a", "0"), ("a", "1"), ("a", "2"), ("b", "1"), ("b", "2"), ("b", "3"), ("z", "0")],
    )
    selected = listed.execute(f"SELECT * FROM items WHERE {where} ORDER BY 1, 2", params)
    assert selected.fetchall() == [("a", "2"), ("b", "1"), ("b", "2")]  # after (a, 1) to (b, 2)
    subscribed = FeedListing(subscribed=True, listed=frozenset({"g1"}))
    assert tombstones_to_drop(["g1", "g2"], subscribed) == ["g2"]
    assert tombstones_to_drop(["g1"], FeedListing(subscribed=True, listed=None)) == []
    gone = FeedListing(subscribed=False, listed=None, has_backup=False)
    assert tombstones_to_drop(["g1"], gone) == ["g1"], "nothing can bring it back"
    removed = FeedListing(subscribed=False, listed=frozenset({"g1"}))
    assert tombstones_to_drop(["g1", "g2"], removed) == ["g2"], "a restore replays its backups"
    assert tombstones_to_drop(["g1"], FeedListing(subscribed=False, listed=None)) == []


def test_cleanup_deletes_what_is_just_outside_the_windows_and_keeps_the_rest(pair: Pair) -> None:
    pair.run(add_feed(pair.db))
    old = pair.run(add_item(pair, "old", ITEM_CUTOFF - SECOND, images=(True, False)))
    pair.run(add_item(pair, "old-spilled", ITEM_CUTOFF - timedelta(days=3), spilled=True))
    pair.run(add_item(pair, "edge", ITEM_CUTOFF, images=(True,)))
    pair.run(add_item(pair, "new", NOW - timedelta(days=1), images=(True,)))
    backups = {
        "expired": backup_key(FEED_ID, BACKUP_CUTOFF - SECOND),
        "older": backup_key(FEED_ID, BACKUP_CUTOFF - timedelta(days=90)),
        "edge": backup_key(FEED_ID, BACKUP_CUTOFF),
        "recent": backup_key(FEED_ID, NOW),
        "other": f"backups/{FEED_ID}/README.txt",
        # Content-Types kept beside two backups: each goes with its own, uncounted
        "expired-type": content_type_key(backup_key(FEED_ID, BACKUP_CUTOFF - SECOND)),
        "edge-type": content_type_key(backup_key(FEED_ID, BACKUP_CUTOFF)),
    }
    for key in backups.values():
        pair.run(pair.objects.put(key, b"<rss/>"))
    all_objects = pair.keys("")

    dry = pair.run(
        run_cleanup(
            pair.db,
            pair.objects,
            now=NOW,
            item_days=ITEM_DAYS,
            backup_days=BACKUP_DAYS,
            dry_run=True,
        )
    )
    assert (dry.backups, dry.items, dry.image_objects, dry.content_objects) == (2, 2, 1, 1)
    assert sorted(dry.sample_backups) == sorted([backups["expired"], backups["older"]])
    assert pair.keys("") == all_objects, "a dry run changes nothing"
    assert len(pair.rows("SELECT id FROM items")) == 4
    assert "would delete 2 backups" in dry.summary()

    report = pair.run(
        run_cleanup(pair.db, pair.objects, now=NOW, item_days=ITEM_DAYS, backup_days=BACKUP_DAYS)
    )
    assert (report.backups, report.items, report.image_objects, report.content_objects) == (
        dry.backups,
        dry.items,
        dry.image_objects,
        dry.content_objects,
    )
    assert sorted(pair.keys("backups/")) == sorted(
        [backups["edge"], backups["edge-type"], backups["recent"], backups["other"]]
    )
    assert pair.keys("content/") == []
    assert pair.keys("images/") == sorted(
        [object_key(FEED_ID, "edge", 0, "png"), object_key(FEED_ID, "new", 0, "png")]
    )
    assert [r["guid"] for r in pair.rows("SELECT guid FROM items ORDER BY guid")] == [
        "edge",
        "new",
    ]
    assert pair.rows("SELECT id FROM image_tasks WHERE item_id = ?", old) == []
    assert len(pair.rows("SELECT id FROM image_tasks")) == 2
    assert pair.rows("SELECT feed_id, guid, deleted_at FROM item_tombstones ORDER BY guid") == [
        {"feed_id": FEED_ID, "guid": "old", "deleted_at": format_timestamp(NOW)},
        {"feed_id": FEED_ID, "guid": "old-spilled", "deleted_at": format_timestamp(NOW)},
    ]
    again = pair.run(
        run_cleanup(pair.db, pair.objects, now=NOW, item_days=ITEM_DAYS, backup_days=BACKUP_DAYS)
    )
    assert (again.backups, again.items, again.image_objects) == (0, 0, 0)


def test_items_are_paged_and_every_statement_stays_under_the_parameter_limit(
    pair: Pair,
) -> None:
    """250 expired items with images, in pages of 60: D1 would refuse any statement binding
    more than 100 parameters, and every object and row goes."""

    async def seed() -> None:
        await add_feed(pair.db)
        records = []
        for n in range(250):
            guid = f"g{n:03d}"
            records.append(
                ItemRecord(
                    id=f"id-{guid}",
                    guid=guid,
                    link=None,
                    title=guid,
                    pub_date="2026-01-01T00:00:00Z",
                    content_html=None,
                    image_urls=(f"https://img.example.org/{guid}.png",),
                )
            )
        created = ITEM_CUTOFF - timedelta(days=10)
        outcome = store.FetchSuccess(None, None, None, created, created, 200)
        await store_items.save_items(pair.db, Feed(id=FEED_ID, url=FEED_URL), records, outcome)
        results = []
        for record in records:
            key = object_key(FEED_ID, record.guid, 0, "png")
            await pair.objects.put(key, b"x")
            results.append(ImageResult(f"{record.id}-0", key, None))
        await record_image_results(pair.db, results, created)

    pair.run(seed())
    report = CleanupReport(retention_cutoffs(NOW, item_days=ITEM_DAYS, backup_days=BACKUP_DAYS))
    pair.run(expire_items(pair.db, pair.objects, report, page_size=60, delete_chunk=100))
    assert (report.items, report.image_objects) == (250, 250)
    assert pair.rows("SELECT COUNT(*) AS n FROM items") == [{"n": 0}]
    assert pair.rows("SELECT COUNT(*) AS n FROM image_tasks") == [{"n": 0}]
    assert pair.rows("SELECT COUNT(*) AS n FROM item_tombstones") == [{"n": 250}]
    assert pair.keys("images/") == []


def test_old_tombstones_go_unless_the_newest_backup_still_lists_the_item(pair: Pair) -> None:
    quiet_url = "https://quiet.example.org/feed.xml"
    gone_url = "https://gone.example.org/feed.xml"

    async def seed() -> None:
        subscribed = [FeedSpec(FEED_URL), FeedSpec(quiet_url)]
        await store_sync.sync_feeds(
            pair.db, [*subscribed, FeedSpec(gone_url)], NOW - timedelta(days=800)
        )
        await store_sync.sync_feeds(pair.db, subscribed, NOW - timedelta(days=700))
        tombstones = [
            (FEED_ID, "still-listed"),
            (FEED_ID, "urn:Caf\u00c3\u00a9"),  # as versions before the text repair stored it
            (FEED_ID, "no-longer-listed"),
            (feed_id_for(quiet_url), "unknown"),
            (feed_id_for(gone_url), "unsubscribed"),
        ]
        for feed_id, guid in tombstones:
            await pair.db.query(
                "INSERT INTO item_tombstones (feed_id, guid, deleted_at) VALUES (?, ?, ?)",
                (feed_id, guid, format_timestamp(ITEM_CUTOFF - SECOND)),
            )
        await pair.db.query(
            "INSERT INTO item_tombstones (feed_id, guid, deleted_at) VALUES (?, ?, ?)",
            (FEED_ID, "recent", format_timestamp(ITEM_CUTOFF)),
        )
        listing = (
            b'<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>'
            b"<item><guid>still-listed</guid><title>x</title></item>"
            + "<item><guid>urn:Caf\u00c3\u00a9</guid><title>z</title></item>".encode()
            + b"<item><guid>brand-new</guid><title>y</title></item></channel></rss>"
        )
        older = b"<rss><channel><item><guid>no-longer-listed</guid></item></channel></rss>"
        await pair.objects.put(backup_key(FEED_ID, NOW - timedelta(days=40)), older)
        await pair.objects.put(backup_key(FEED_ID, NOW - timedelta(days=2)), listing)

    pair.run(seed())
    report = pair.run(
        run_cleanup(pair.db, pair.objects, now=NOW, item_days=ITEM_DAYS, backup_days=BACKUP_DAYS)
    )
    remaining = pair.rows("SELECT guid, deleted_at FROM item_tombstones ORDER BY guid")
    assert [(r["guid"], r["deleted_at"]) for r in remaining] == [
        ("recent", format_timestamp(ITEM_CUTOFF)),
        ("still-listed", format_timestamp(ITEM_CUTOFF - SECOND)),
        ("unknown", format_timestamp(ITEM_CUTOFF - SECOND)),
        ("urn:Caf\u00c3\u00a9", format_timestamp(ITEM_CUTOFF - SECOND)),
    ]
    assert (report.tombstones_dropped, report.tombstones_kept) == (2, 3)


def test_a_tombstone_outlives_the_backups_a_restore_replays(pair: Pair) -> None:
    """``restore`` replays the backups of the last ``item_days``: a tombstone dropped the day
    its feed stopped listing the item let a restore bring the expired item back from the
    backups of the days before."""
    listing = rss([Entry("Old", guid="old"), Entry("New", guid="new")])

    async def seed() -> None:
        await store_sync.sync_feeds(pair.db, [FeedSpec(FEED_URL)], NOW - timedelta(days=800))
        await pair.db.query(
            "INSERT INTO item_tombstones (feed_id, guid, deleted_at) VALUES (?, ?, ?)",
            (FEED_ID, "old", format_timestamp(ITEM_CUTOFF - SECOND)),
        )
        await pair.objects.put(backup_key(FEED_ID, ITEM_CUTOFF - SECOND), listing)
        await pair.objects.put(backup_key(FEED_ID, NOW - timedelta(days=100)), listing)
        await pair.objects.put(backup_key(FEED_ID, NOW - HOUR), rss([Entry("New", guid="new")]))

    pair.run(seed())
    cleanup = {"item_days": ITEM_DAYS, "backup_days": ITEM_DAYS + 30}
    report = pair.run(run_cleanup(pair.db, pair.objects, now=NOW, **cleanup))
    assert (report.tombstones_dropped, report.tombstones_kept) == (0, 1)
    restored = pair.run(
        restore_from_backups(
            pair.db, pair.objects, [FeedSpec(FEED_URL)], now=NOW, item_days=ITEM_DAYS, owner=OWNER
        )
    )
    assert restored.items_recovered == 1
    assert pair.rows("SELECT guid FROM items") == [{"guid": "new"}]
    later = NOW + timedelta(days=81)  # the last backup listing "old" is past item_days now
    report = pair.run(run_cleanup(pair.db, pair.objects, now=later, **cleanup))
    assert {"guid": "old"} not in pair.rows("SELECT guid FROM item_tombstones")


def test_a_backup_from_the_future_or_one_unreadable_decides_no_tombstone(pair: Pair) -> None:
    """The newest backup says which tombstones stay. One stamped after now (the clock was
    ahead) that no longer listed an item dropped its tombstone, and the item came back; an
    unreadable newest backup ended the cleanup. Both now leave the tombstones as they are."""

    async def seed() -> None:
        await store_sync.sync_feeds(pair.db, [FeedSpec(FEED_URL)], NOW - timedelta(days=700))
        await pair.db.query(
            "INSERT INTO item_tombstones (feed_id, guid, deleted_at) VALUES (?, ?, ?)",
            (FEED_ID, "listed-today", format_timestamp(ITEM_CUTOFF - SECOND)),
        )
        today = b"<rss><channel><item><guid>listed-today</guid></item></channel></rss>"
        await pair.objects.put(backup_key(FEED_ID, NOW - timedelta(hours=1)), today)
        ahead = b"<rss><channel><item><guid>other</guid></item></channel></rss>"
        await pair.objects.put(backup_key(FEED_ID, NOW + timedelta(days=365)), ahead)

    pair.run(seed())

    def cleanup() -> list[str]:
        pair.run(
            run_cleanup(
                pair.db, pair.objects, now=NOW, item_days=ITEM_DAYS, backup_days=BACKUP_DAYS
            )
        )
        return [r["guid"] for r in pair.rows("SELECT guid FROM item_tombstones")]

    assert cleanup() == ["listed-today"]
    if isinstance(pair.objects, LocalObjectStore):
        newest = pair.objects.root / backup_key(FEED_ID, NOW - timedelta(hours=1))
        newest.unlink()
        newest.symlink_to(newest.with_name("gone.xml"))
        assert cleanup() == ["listed-today"]


def test_backup_deletes_go_in_chunks(s3_server: S3Bucket) -> None:
    """moto accepts more than 1000 keys per DeleteObjects (S3 and R2 do not), so the chunking
    is checked by counting calls with a small chunk size."""

    async def go() -> CleanupReport:
        objects = s3_server.store()
        try:
            for day in range(7):
                await objects.put(
                    backup_key(FEED_ID, BACKUP_CUTOFF - timedelta(days=day + 1)), b"x"
                )
            await objects.put(backup_key(FEED_ID, NOW), b"x")
            report = CleanupReport(
                retention_cutoffs(NOW, item_days=ITEM_DAYS, backup_days=BACKUP_DAYS)
            )
            await sweep_backups(objects, report, delete_chunk=3)
            return report
        finally:
            await objects.close()

    report = asyncio.run(go())
    assert report.backups == 7
    calls = s3_server.server.delete_objects_calls(s3_server.bucket)
    assert [call.body.count(b"<Key>") for call in calls] == [3, 3, 1]
    remaining = s3_server.server.client().list_objects_v2(Bucket=s3_server.bucket)["Contents"]
    assert [o["Key"] for o in remaining] == [backup_key(FEED_ID, NOW)]


def test_the_daily_claim_has_one_winner_per_day_and_survives_restarts(pair: Pair) -> None:
    async def claim(owner: str, at: datetime) -> bool:
        return (await claim_cleanup(pair.db, now=at, owner=owner)).taken

    assert pair.run(last_cleanup_at(pair.db)) is None
    assert pair.run(claim("a", NOW))
    assert not pair.run(claim("b", NOW + timedelta(minutes=5))), "a holds the lease"
    pair.run(record_cleanup(pair.db, started_at=NOW, owner="a"))
    assert pair.run(last_cleanup_at(pair.db)) == format_timestamp(NOW)
    assert not pair.run(claim("b", NOW + timedelta(hours=23))), "done less than a day ago"
    found = pair.run(claim_cleanup(pair.db, now=NOW + timedelta(hours=23), owner="b"))
    assert found == DailyClaim(False, NOW + timedelta(days=1)), "when to ask again"
    assert pair.run(claim("b", NOW + timedelta(days=1)))
    assert not pair.run(claim("a", NOW + timedelta(days=1, minutes=30)))
    # b crashed without recording: after the lease expires someone else takes it
    assert pair.run(claim("a", NOW + timedelta(days=1, hours=1)))


def test_an_object_a_living_item_still_names_outlives_the_expired_item(pair: Pair) -> None:
    """Two GUIDs whose md5 share 8 hex digits, stored before the per-item key rule: both rows
    name the same short keys. Expiring the first leaves the objects the second still names;
    they go with the second."""
    first, second = "https://blog.example/post/15027", "https://blog.example/post/59911"
    pair.run(add_feed(pair.db))
    pair.run(
        add_item(pair, first, NOW - timedelta(days=ITEM_DAYS + 1), images=(True,), spilled=True)
    )
    pair.run(add_item(pair, second, NOW - timedelta(days=1), images=(True,), spilled=True))
    shared = [content_key(FEED_ID, first), object_key(FEED_ID, first, 0, "png")]
    assert shared == [content_key(FEED_ID, second), object_key(FEED_ID, second, 0, "png")]

    def cleanup(now: datetime) -> CleanupReport:
        return pair.run(
            run_cleanup(
                pair.db, pair.objects, now=now, item_days=ITEM_DAYS, backup_days=BACKUP_DAYS
            )
        )

    report = cleanup(NOW)
    assert (report.items, report.image_objects, report.content_objects) == (1, 0, 0)
    assert sorted(pair.keys("content/") + pair.keys("images/")) == sorted(shared)
    report = cleanup(NOW + timedelta(days=ITEM_DAYS))
    assert (report.items, report.image_objects, report.content_objects) == (1, 1, 1)
    assert pair.keys("content/") + pair.keys("images/") == []


def _expiring_database(path: Path, items: int, *, one_second: bool = False) -> SteppingDatabase:
    """``items`` expired items (every other one with a stored image), ``items`` living ones;
    the expired ones a minute apart, or all stored in one second (``one_second``)."""
    db = SQLiteDatabase(path)
    asyncio.run(migrate(db))
    con = sqlite3.connect(path)
    con.execute(
        "INSERT INTO feeds (id, url, created_at) VALUES (?, ?, '2026')", (FEED_ID, FEED_URL)
    )
    rows = []
    for n in range(2 * items):
        before_cutoff = timedelta(days=1) if one_second else timedelta(minutes=items - n)
        created = ITEM_CUTOFF - before_cutoff if n < items else NOW
        rows.append((f"{n:08d}", f"g{n}", format_timestamp(created)))
    con.executemany(
        "INSERT INTO items (id, feed_id, guid, created_at) VALUES (?, ?, ?, ?)",
        [(item_id, FEED_ID, guid, created) for item_id, guid, created in rows],
    )
    con.executemany(
        "INSERT INTO image_tasks (id, item_id, original_url, r2_key, status, created_at, "
        "updated_at, position) VALUES (?, ?, 'https://img.example/a.png', ?, 'success', ?, ?, 0)",
        [
            (f"t{item_id}", item_id, f"images/{FEED_ID}/{item_id}/0.png", created, created)
            for item_id, _, created in rows[::2]
        ],
    )
    con.commit()
    con.close()
    return SteppingDatabase(db)


@pytest.mark.parametrize("one_second", [False, True], ids=["spread", "one-second"])
def test_expiring_items_costs_each_page_the_same_however_many_expire(
    tmp_path: Path, one_second: bool
) -> None:
    """A page's queries read the page's rows from the created_at index, not every expired item
    or every stored image: 150,000 expired items took 127 s in a dry run (0.35 s a page for
    the image keys alone), 1.7 s now. Items a first cycle stored in one second are one range
    of the index too (it ends with the id). The most work any query or batch does is the same
    with four times as many items to expire."""
    most = []
    for items in (500, 2000):
        db = _expiring_database(tmp_path / f"{items}.db", items, one_second=one_second)
        objects = LocalObjectStore(tmp_path / f"objects-{items}")
        report = CleanupReport(retention_cutoffs(NOW, item_days=ITEM_DAYS, backup_days=30))
        asyncio.run(expire_items(db, objects, report, page_size=50))
        assert report.items == items
        assert report.image_objects == items // 2
        left = asyncio.run(db.query("SELECT COUNT(*) AS n FROM items"))
        assert left[0]["n"] == items
        tombstones = asyncio.run(db.query("SELECT COUNT(*) AS n FROM item_tombstones"))
        assert tombstones[0]["n"] == items
        most.append(db.most())
        asyncio.run(db.close())
    assert most[1] <= most[0] * 1.5, most


def test_a_restore_is_refused_while_the_daily_cleanup_runs_and_not_after_it_failed(
    pair: Pair,
) -> None:
    """The cleanup deletes backups a restore replays: a restore waits for a running one. A
    cleanup that fails lets go of its lease but leaves its time, so the daily claim still
    waits an hour before trying again, while a restore need not."""
    pair.run(add_feed(pair.db))
    expired = backup_key(FEED_ID, BACKUP_CUTOFF - timedelta(days=1))
    pair.run(pair.objects.put(expired, rss([Entry("Old", guid="old")])))
    assert pair.run(claim_cleanup(pair.db, now=NOW, owner="daily:1:a")).taken
    refusals: list[str] = []

    async def during_the_cleanup() -> None:
        try:
            await restore_from_backups(
                pair.db, pair.objects, [FeedSpec(FEED_URL)], now=NOW + SECOND, owner=OWNER
            )
        except ConfigError as exc:
            refusals.append(str(exc))
        raise ObjectStoreError("storage: cannot delete backups/...: the bucket went away")

    held = HeldStore(pair.objects, "backups/", during_the_cleanup)
    with pytest.raises(ObjectStoreError, match="the bucket went away"):
        pair.run(
            run_cleanup(
                pair.db,
                held,
                now=NOW,
                item_days=ITEM_DAYS,
                backup_days=BACKUP_DAYS,
                owner="daily:1:a",
            )
        )
    (refusal,) = refusals
    assert refusal.startswith(
        "restore: refused, a retention cleanup (the daily one of `run`, or `cleanup`) is under "
        f"way: collector daily:1:a holds its lease until {format_timestamp(NOW + HOUR)}"
    ), refusal
    assert "the cleanup deletes old backups, which the restore replays" in refusal
    assert pair.rows("SELECT COUNT(*) AS n FROM items") == [{"n": 0}]

    later = NOW + timedelta(minutes=5)
    assert not pair.run(claim_cleanup(pair.db, now=later, owner="daily:2:b")).taken, "it waits"
    restored = pair.run(
        restore_from_backups(pair.db, pair.objects, [FeedSpec(FEED_URL)], now=later, owner=OWNER)
    )
    assert restored.items_recovered == 1, "a failed cleanup's wait holds no restore back"
    assert pair.run(claim_cleanup(pair.db, now=NOW + HOUR, owner="daily:2:b")).taken


def test_a_lease_is_renewed_while_its_work_runs_and_a_lapsed_one_stops_it(pair: Pair) -> None:
    """Renewed in the background, a restore's lease outlives its first five minutes and keeps
    a sweep out; one that lapsed (renewals that could not reach the database, a suspended
    process) stops the work at its next check, and another process may take it."""
    clock = Clock(NOW)

    async def scenario() -> None:
        lease = await held_lease.take(
            pair.db,
            leases.RESTORE,
            owner=OWNER,
            now=clock(),
            command="restore",
            clock=clock,
            every=timedelta(milliseconds=10),
        )
        async with held_lease.renewed(lease):
            await lease.checkpoint()
            clock.now = NOW + timedelta(minutes=4)
            renewed_until = format_timestamp(NOW + timedelta(minutes=9))
            while await lease_until() != renewed_until:
                await asyncio.sleep(0.01)
            clock.now = NOW + timedelta(minutes=6)
            sweep = await leases.claim(
                pair.db, leases.ORPHANS, owner="other:1:b", now=clock(), length=leases.LEASE
            )
            assert not sweep.taken
            assert sweep.in_the_way == (leases.Holder("restore", OWNER, renewed_until),)
            await lease.checkpoint()

            clock.now = NOW + timedelta(minutes=20)  # nothing renewed it since minute 4
            while lease.lost is None:
                await asyncio.sleep(0.01)
            with pytest.raises(held_lease.LeaseLost, match=r"^restore: stopped, its restore lease"):
                await lease.checkpoint()
            sweep = await leases.claim(
                pair.db, leases.ORPHANS, owner="other:1:b", now=clock(), length=leases.LEASE
            )
            assert sweep.taken

    async def lease_until() -> str:
        rows = await pair.db.query("SELECT lease_until FROM maintenance WHERE task = 'restore'")
        return str(rows[0]["lease_until"])

    pair.run(scenario())


def test_a_maintenance_loop_that_never_waits_still_renews_its_lease(tmp_path: Path) -> None:
    """On SQLite and a folder nothing in a restore's loop waits: the renewal, a task of its
    own, never ran, and a restore longer than the lease stopped as if the database did not
    answer. Each checkpoint lets it run."""
    clock = Clock(NOW)

    async def scenario() -> None:
        db = SQLiteDatabase(tmp_path / "collector.db")
        await migrate(db)
        lease = await held_lease.take(
            db,
            leases.RESTORE,
            owner=OWNER,
            now=clock(),
            command="restore",
            clock=clock,
            every=timedelta(milliseconds=5),
        )
        taken_until = lease.until
        async with held_lease.renewed(lease):
            clock.now = NOW + timedelta(minutes=1)
            busy_until = time.monotonic() + 0.2
            while time.monotonic() < busy_until:
                time.sleep(0.002)  # synchronous work: a replayed backup on SQLite
                await lease.checkpoint()
        assert taken_until is not None
        assert lease.until is not None
        assert lease.until > taken_until
        await lease.release()
        await db.close()

    asyncio.run(scenario())


def test_a_refusal_says_when_a_lease_in_the_way_was_last_renewed(pair: Pair) -> None:
    """A lease whose holder could not let go of it (its work ended while the database did not
    answer) can only run out, and the refusal said its work was under way. Unrenewed for longer
    than a holder at work lets pass, the refusal says since when; renewed lately, it does not."""

    def refusal(task: str, renewed_ago: timedelta) -> str:
        hold_lease(pair, task, "web1:4242:0badf00d", NOW + leases.LENGTHS[task] - renewed_ago)
        with pytest.raises(ConfigError) as refused:
            pair.run(
                held_lease.take(pair.db, leases.RESTORE, owner=OWNER, now=NOW, command="restore")
            )
        pair.run(pair.db.query("DELETE FROM maintenance"))
        return str(refused.value)

    idle = ", though it last renewed it at {} (one at work does every minute: its work may have "
    cleanup_until = format_timestamp(NOW + HOUR - timedelta(minutes=10))
    assert (
        f"holds its lease until {cleanup_until}"
        + idle.format(format_timestamp(NOW - timedelta(minutes=10)))
        + "ended without letting go, the database not answering then, or that process is stuck "
        "or gone) (the cleanup deletes old backups"
    ) in refusal("cleanup", timedelta(minutes=10))
    sweep_until = format_timestamp(NOW + leases.LEASE - timedelta(minutes=4))
    assert f"holds its lease until {sweep_until}" + idle.format(
        format_timestamp(NOW - timedelta(minutes=4))
    ) in refusal("orphans", timedelta(minutes=4))
    for task in ("cleanup", "orphans"):
        assert "though it last renewed it" not in refusal(task, timedelta(minutes=2)), task
