"""``cleanup --orphans``: objects under ``images/`` and ``content/`` that no row names go once a
day old, on both backend pairs (SQLite + folder, D1 Proxy Worker + S3). S3 keeps the time of
the last write, which a test cannot set: the cloud cases move the clock instead, the local ones
also set a file's time."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from feedcollector import maintenance_leases as leases
from feedcollector import orphans
from feedcollector.backends.local import LocalObjectStore
from feedcollector.backends.sqlite import SQLiteDatabase
from feedcollector.backups import backup_key
from feedcollector.database import Statement
from feedcollector.errors import ConfigError, ObjectStoreError, StorageError
from feedcollector.images import object_key
from feedcollector.objectstore import ListedObject
from feedcollector.orphans import ORPHAN_MIN_AGE, OrphanReport, sweep_orphans
from feedcollector.spill import content_key
from feedcollector.timestamps import format_timestamp

from . import test_retention
from .test_retention import FEED_ID, NOW, OWNER, Pair, add_feed, add_item, hold_lease

pair = test_retention.pair

LATER = timedelta(days=2)
"""Past the default grace period of every object a test has just written."""


def sweep(
    pair: Pair,
    *,
    now: datetime | None = None,
    min_age: timedelta = ORPHAN_MIN_AGE,
    dry_run: bool = False,
    chunk_size: int = 1000,
) -> OrphanReport:
    return pair.run(
        sweep_orphans(
            pair.db,
            pair.objects,
            now=now or datetime.now(UTC),
            owner=OWNER,
            min_age=min_age,
            dry_run=dry_run,
            chunk_size=chunk_size,
        )
    )


def every_key(pair: Pair) -> list[str]:
    return pair.keys("")


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[Pair]:
    with asyncio.Runner() as runner:
        db = SQLiteDatabase(tmp_path / "collector.db")
        objects = LocalObjectStore(tmp_path / "objects")
        yield from test_retention._opened(Pair("embedded", db, objects, runner))


def test_objects_no_row_names_go_once_old_and_named_ones_and_backups_stay(pair: Pair) -> None:
    """An item's image and spilled HTML stay; an image and HTML of items the database no
    longer has go, once old. Unnamed images in the folder of an item still stored stay too:
    the image of a task whose process died before recording it (downloaded again to that
    key), one a restore could not place (the only copy once the source is gone)."""
    pair.run(add_feed(pair.db))
    pair.run(add_item(pair, "kept", NOW, images=(True,), spilled=True))
    pair.run(add_item(pair, "pending", NOW, images=(False,)))
    named = [object_key(FEED_ID, "kept", 0, "png"), content_key(FEED_ID, "kept")]
    owned = {
        object_key(FEED_ID, "pending", 0, "png"): b"uploaded, never recorded",
        object_key(FEED_ID, "kept", 1, "jpg"): b"archived, not placed by a restore",
        object_key(FEED_ID, "kept", 0, "gif", full=True): b"in its full-md5 folder",
    }
    orphans = {
        object_key(FEED_ID, "restored-without", 1, "jpg"): b"jpeg",
        content_key(FEED_ID, "dropped"): b"<p>spilled before a failed batch</p>",
    }
    backups = [backup_key(FEED_ID, NOW - timedelta(days=400)), f"backups/{FEED_ID}/notes.txt"]
    for key, data in {**owned, **orphans}.items():
        pair.run(pair.objects.put(key, data))
    for key in backups:
        pair.run(pair.objects.put(key, b"<rss/>"))
    everything = every_key(pair)

    young = sweep(pair)
    assert (young.objects, young.young, young.images, young.content) == (7, 7, 0, 0)
    assert every_key(pair) == everything, "objects younger than a day are left alone"

    later = datetime.now(UTC) + LATER
    dry = sweep(pair, now=later, dry_run=True)
    assert (dry.objects, dry.young, dry.images, dry.content, dry.owned) == (7, 0, 1, 1, 3)
    assert dry.orphan_bytes == sum(len(data) for data in orphans.values())
    assert sorted(dry.samples) == sorted(orphans)
    assert every_key(pair) == everything, "a dry run deletes nothing"
    assert "would delete 1 image object and 1 content object" in dry.summary()
    assert "3 unnamed image objects kept in the folders of items still stored" in dry.summary()

    done = sweep(pair, now=later)
    assert (done.images, done.content, done.orphan_bytes) == (1, 1, dry.orphan_bytes)
    assert every_key(pair) == sorted([*named, *owned, *backups])
    assert "deleted 1 image object and 1 content object" in done.summary()
    assert pair.run(pair.objects.get(content_key(FEED_ID, "kept"))) == b"<p>big</p>"
    again = sweep(pair, now=later)
    assert (again.objects, again.images, again.content, again.owned) == (5, 0, 0, 3)


def test_references_are_asked_in_statements_d1_accepts(pair: Pair) -> None:
    """300 named images among 100 unnamed ones, in chunks of 250 keys: each chunk's lookup is
    statements of at most 100 keys (D1 refuses more), and a key named in any of them stays."""
    pair.run(add_feed(pair.db))
    item = pair.run(add_item(pair, "anchor", NOW))
    named = [f"images/{FEED_ID}/n{n:04d}/0.png" for n in range(0, 400) if n % 4]
    unnamed = [f"images/{FEED_ID}/n{n:04d}/0.png" for n in range(0, 400, 4)]
    rows = [
        Statement(
            "INSERT INTO image_tasks (id, item_id, original_url, r2_key, status, attempts, "
            "created_at, updated_at, position) "
            "VALUES (?, ?, 'https://img.example/a.png', ?, 'success', 1, ?, ?, ?)",
            (f"t{n}", item, key, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", n),
        )
        for n, key in enumerate(named)
    ]
    for start in range(0, len(rows), 100):
        pair.run(pair.db.batch(rows[start : start + 100]))
    for key in named + unnamed:
        pair.run(pair.objects.put(key, b"x"))

    report = sweep(pair, now=datetime.now(UTC) + LATER, chunk_size=250)
    assert (report.objects, report.images) == (400, 100)
    assert pair.keys("images/") == sorted(named)


def test_a_feed_with_more_items_than_a_page_of_guids_keeps_each_items_folder(
    embedded: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(orphans, "GUID_PAGE", 2)
    pair = embedded
    pair.run(add_feed(pair.db))
    for n in range(5):
        pair.run(add_item(pair, f"item{n}", NOW))
    kept = [object_key(FEED_ID, f"item{n}", 0, "png") for n in range(5)]
    gone = object_key(FEED_ID, "expired", 0, "png")
    for key in [*kept, gone]:
        pair.run(pair.objects.put(key, b"png"))

    done = sweep(pair, now=datetime.now(UTC) + LATER)

    assert (done.images, done.owned) == (1, 5)
    assert every_key(pair) == sorted(kept)


def test_a_young_orphan_stays_beside_an_old_one(embedded: Pair, tmp_path: Path) -> None:
    """By the file's time: two days old goes, an hour old stays unless the grace is shorter."""
    pair = embedded
    pair.run(add_feed(pair.db))
    pair.run(add_item(pair, "kept", NOW, images=(True,)))
    now = datetime.now(UTC)
    ages = {"old": timedelta(days=2), "recent": timedelta(hours=1)}
    for name, age in ages.items():
        key = f"images/{FEED_ID}/{name}/0.png"
        pair.run(pair.objects.put(key, b"x"))
        stamp = (now - age).timestamp()
        os.utime(tmp_path / "objects" / key, (stamp, stamp))
    old_named = tmp_path / "objects" / object_key(FEED_ID, "kept", 0, "png")
    os.utime(old_named, (0, 0))

    report = sweep(pair, now=now)
    assert (report.objects, report.young, report.images) == (3, 1, 1)
    assert pair.keys("images/") == sorted(
        [object_key(FEED_ID, "kept", 0, "png"), f"images/{FEED_ID}/recent/0.png"]
    )
    shorter = sweep(pair, now=now, min_age=timedelta(minutes=30))
    assert (shorter.young, shorter.images) == (0, 1)
    assert pair.keys("images/") == [object_key(FEED_ID, "kept", 0, "png")]


class RecordingStore(LocalObjectStore):
    """The real local store, noting how much of the listing was read at each delete."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.listed = 0
        self.deletes: list[tuple[int, int]] = []
        """(objects listed so far, keys deleted) per ``delete_many``."""

    async def list_with_times(self, prefix: str) -> AsyncIterator[ListedObject]:
        async for found in super().list_with_times(prefix):
            self.listed += 1
            yield found

    async def delete_many(self, keys: Sequence[str]) -> None:
        self.deletes.append((self.listed, len(keys)))
        await super().delete_many(keys)


def test_the_listing_streams_and_deletes_go_a_thousand_at_a_time(
    embedded: Pair, tmp_path: Path
) -> None:
    """Memory holds one chunk: the first thousand orphans are deleted before the listing
    goes on, so a store of millions is swept like one of thousands."""
    pair = embedded
    pair.run(add_feed(pair.db))
    pair.run(add_item(pair, "kept", NOW))
    root = tmp_path / "objects"
    for n in range(2500):
        path = root / "images" / FEED_ID / f"{n:05d}" / "0.png"
        path.parent.mkdir(parents=True)
        path.write_bytes(b"x")
    recording = RecordingStore(root)
    report = pair.run(sweep_orphans(pair.db, recording, now=datetime.now(UTC) + LATER, owner=OWNER))
    assert report.images == 2500
    assert recording.deletes == [(1000, 1000), (2000, 1000), (2500, 500)]
    assert pair.keys("images/") == []


def test_a_database_without_items_deletes_nothing(embedded: Pair) -> None:
    """Every object would count as an orphan: a lost or wrong database, whose images a
    restore would link again. A dry run still shows it; a store without orphans is fine."""
    pair = embedded
    later = datetime.now(UTC) + LATER
    assert sweep(pair, now=later).objects == 0, "a new install has nothing to refuse"
    pair.run(pair.objects.put(object_key(FEED_ID, "g", 0, "png"), b"x"))
    dry = sweep(pair, now=later, dry_run=True)
    assert dry.images == 1
    with pytest.raises(ConfigError, match=r"cleanup: the database holds no items.*restore"):
        sweep(pair, now=later)
    assert pair.keys("images/") == [object_key(FEED_ID, "g", 0, "png")]


def test_a_dry_run_on_a_database_without_items_gives_the_reason_the_sweep_refuses(
    embedded: Pair,
) -> None:
    """The refusal's message points at the dry run, which said "would delete" and no more:
    it counts the same objects and says the sweep would refuse, in the refusal's words."""
    pair = embedded
    later = datetime.now(UTC) + LATER
    pair.run(pair.objects.put(object_key(FEED_ID, "g", 0, "png"), b"x"))
    with pytest.raises(ConfigError) as refused:
        sweep(pair, now=later)
    dry = sweep(pair, now=later, dry_run=True)
    assert (dry.images, dry.samples) == (1, [object_key(FEED_ID, "g", 0, "png")])
    assert dry.refusal is not None
    assert dry.refusal.startswith("the database holds no items")
    assert dry.refusal in str(refused.value)
    assert "would delete" not in dry.summary()
    assert f"`cleanup --orphans` would refuse (exit 2) and delete none: {dry.refusal}" in (
        dry.summary()
    )

    pair.run(add_feed(pair.db))
    pair.run(add_item(pair, "kept", NOW))
    named = sweep(pair, now=later, dry_run=True)
    assert (named.images, named.refusal) == (1, None)
    assert "would delete 1 image object and 0 content objects" in named.summary()


@pytest.mark.parametrize("dry_run", [False, True], ids=["sweep", "dry-run"])
def test_a_ctrl_c_stops_a_sweep_at_its_next_chunk_also_without_orphans(
    embedded: Pair, dry_run: bool
) -> None:
    """Ctrl-C cancels the main task at its next wait: on SQLite and a folder a sweep let the
    event loop run only before deleting, so one without orphans, or a dry run, went on to the
    end (and its lease was never renewed meanwhile)."""
    pair = embedded
    pair.run(add_feed(pair.db))
    pair.run(add_item(pair, "kept", NOW))
    keys = [object_key(FEED_ID, "kept", position, "png") for position in range(5)]
    for key in keys:  # the item's own folder: none of them is an orphan
        pair.run(pair.objects.put(key, b"x"))
    seen: list[int] = []

    async def go() -> None:
        sweeping = asyncio.current_task()
        assert sweeping is not None

        def interrupt(report: OrphanReport) -> None:
            seen.append(report.objects)
            sweeping.cancel()

        await sweep_orphans(
            pair.db,
            pair.objects,
            now=datetime.now(UTC) + LATER,
            owner=OWNER,
            dry_run=dry_run,
            chunk_size=1,
            progress=interrupt,
        )

    with pytest.raises(asyncio.CancelledError):
        pair.run(go())
    assert seen == [1]


class FailingDeletes(LocalObjectStore):
    async def delete_many(self, keys: Sequence[str]) -> None:
        raise ObjectStoreError("storage: cannot delete images/x: disk on fire")


def test_a_storage_error_stops_the_sweep_and_says_where(embedded: Pair, tmp_path: Path) -> None:
    pair = embedded
    pair.run(add_feed(pair.db))
    pair.run(add_item(pair, "kept", NOW))
    pair.run(pair.objects.put(object_key(FEED_ID, "gone", 0, "png"), b"x"))
    failing = FailingDeletes(tmp_path / "objects")
    with pytest.raises(StorageError, match=r"cleanup: the orphan sweep stopped.*disk on fire"):
        pair.run(sweep_orphans(pair.db, failing, now=datetime.now(UTC) + LATER, owner=OWNER))


def test_the_sweep_is_refused_while_a_restore_holds_its_lease_and_takes_over_a_stale_one(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    """A restore links archived images again, of any age: a sweep beside it deleted those it
    had not linked yet (9,360 of 16,000 in the audit). It deletes nothing while the restore's
    lease lives; a dry run still counts (and says why its count is too high); once the lease
    has run out unrenewed (the restore was killed), the sweep takes over."""
    pair.run(add_feed(pair.db))
    pair.run(add_item(pair, "kept", NOW, images=(True,)))
    orphan = object_key(FEED_ID, "not-linked-yet", 0, "png")
    pair.run(pair.objects.put(orphan, b"png"))
    everything = every_key(pair)
    later = datetime.now(UTC) + LATER
    restorer = "web1:4242:0badf00d"
    until = later + timedelta(minutes=2)
    hold_lease(pair, "restore", restorer, until)

    with pytest.raises(ConfigError) as refused:
        sweep(pair, now=later)
    message = str(refused.value)
    assert message.startswith(
        f"cleanup: refused, a restore is under way: collector {restorer} holds its lease "
        f"until {format_timestamp(until)}"
    ), message
    assert f"if that process is dead, its lease runs out at {format_timestamp(until)}" in message
    assert every_key(pair) == everything

    with caplog.at_level(logging.WARNING, logger="feedcollector"):
        dry = sweep(pair, now=later, dry_run=True)
    assert dry.images == 1
    assert any("count as orphans in this dry run" in r.getMessage() for r in caplog.records)
    assert every_key(pair) == everything

    taken_over = sweep(pair, now=until)
    assert taken_over.images == 1
    assert orphan not in every_key(pair)
    assert pair.rows("SELECT lease_owner, lease_until FROM maintenance WHERE task = 'orphans'") == [
        {"lease_owner": None, "lease_until": None}
    ], "let go at the end"


def test_after_a_restore_that_did_not_finish_a_dry_sweep_warns_and_a_sweep_is_refused(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    """The mark of the first unfinished restore stays until a restore finishes: its images
    wait to be linked, and the sweep would delete them."""
    pair.run(add_feed(pair.db))
    pair.run(add_item(pair, "kept", NOW, images=(True,)))
    orphan = object_key(FEED_ID, "not-linked-yet", 0, "png")
    pair.run(pair.objects.put(orphan, b"png"))
    assert pair.run(leases.restore_began(pair.db, NOW))
    assert not pair.run(leases.restore_began(pair.db, NOW + timedelta(hours=1)))
    later = datetime.now(UTC) + LATER

    with caplog.at_level(logging.WARNING, logger="feedcollector"):
        dry = sweep(pair, now=later, dry_run=True)
    assert dry.images == 1
    begun = f"a restore begun at {format_timestamp(NOW)} did not finish"
    assert any(begun in r.getMessage() for r in caplog.records)
    with pytest.raises(ConfigError, match=begun):
        sweep(pair, now=later)
    assert orphan in every_key(pair)

    pair.run(leases.restore_finished(pair.db))
    assert sweep(pair, now=later).images == 1
