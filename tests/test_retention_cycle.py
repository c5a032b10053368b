"""Retention end to end: collection cycles from a loopback feed server with a clock the test
moves, the daily cleanup of the scheduler, an expired item its feed still lists (tombstones),
and the ``cleanup`` and ``run --once`` commands."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from feedcollector.collector import open_collector
from feedcollector.config import load_feeds, load_settings
from feedcollector.pipeline import run_cycle
from feedcollector.reading import read_item
from feedcollector.restore import RestoreReport, restore_from_backups
from feedcollector.retention import CleanupReport
from feedcollector.retention_daily import CLEANUP_LEASE
from feedcollector.schedule import feed_id_for
from feedcollector.service import cleanup_if_due
from feedcollector.spill import INLINE_CONTENT_LIMIT, content_key
from feedcollector.timestamps import format_timestamp, utc_now

from .feedserver import FeedServer
from .samples import Clock, Entry, png, rss, write_project
from .test_cli import feedcollector


def collect_and_clean(config: Path, clock: Clock, *, cycle: bool = True) -> CleanupReport | None:
    """A forced cycle (when ``cycle``), then the daily cleanup if it is due, at ``clock``."""

    async def go() -> CleanupReport | None:
        settings = load_settings(config)
        async with open_collector(settings, clock=clock) as collector:
            if cycle:
                await run_cycle(collector, force=True)
            return await cleanup_if_due(collector)

    return asyncio.run(go())


def sqlite_rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute(sql))


def test_an_expired_item_its_feed_still_lists_is_not_ingested_again(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    image = png()
    feed_server.route("/img/a.png", body=image, headers={"Content-Type": "image/png"})
    a = Entry("A", guid="urn:a", content='<p>a</p><img src="/img/a.png">')
    b, c = Entry("B", guid="urn:b"), Entry("C", guid="urn:c")
    base = feed_server.url("/")
    url = feed_server.route("/feed.xml", body=rss([a, b], link=base))
    config = write_project(tmp_path, [url])
    database = tmp_path / "collector.db"
    clock = Clock(datetime(2026, 1, 1, 9, 0, 0, tzinfo=UTC))

    first = collect_and_clean(config, clock)
    assert first is not None, "the first cleanup is due at once"
    assert sqlite_rows(database, "SELECT guid FROM items ORDER BY guid") == [("urn:a",), ("urn:b",)]
    image_key = f"images/{feed_id_for(url)}/{hashlib.md5(b'urn:a').hexdigest()[:8]}/0.png"
    assert (tmp_path / "objects" / image_key).read_bytes() == image
    assert collect_and_clean(config, clock, cycle=False) is None, "not again the same day"

    # 181 days later the feed still lists A and B, and has C: cleanup first, then a fetch
    clock.now += timedelta(days=181)
    feed_server.route("/feed.xml", body=rss([a, b, c], link=base))
    report = collect_and_clean(config, clock, cycle=False)
    assert report is not None
    assert (report.items, report.image_objects) == (2, 1)
    assert not (tmp_path / "objects" / image_key).exists()
    collect_and_clean(config, clock)
    assert sqlite_rows(database, "SELECT guid FROM items") == [("urn:c",)]
    assert sqlite_rows(database, "SELECT COUNT(*) FROM image_tasks") == [(0,)]
    assert len(feed_server.hits("/img/a.png")) == 1, "the expired image is not downloaded again"

    # another 181 days: C expires; A and B are still listed by the newest backup, so kept
    clock.now += timedelta(days=181)
    report = collect_and_clean(config, clock)
    assert report is not None
    assert (report.items, report.tombstones_dropped, report.tombstones_kept) == (1, 0, 2)
    assert sqlite_rows(database, "SELECT COUNT(*) FROM items") == [(0,)]

    # the feed drops A: its tombstone stays while a backup a restore would replay lists A
    # (restore replays the last item_days of backups), then goes; B's stays, C's is too new
    feed_server.route("/feed.xml", body=rss([b, c], link=base))
    clock.now += timedelta(days=1)
    report = collect_and_clean(config, clock)
    assert report is not None
    assert (report.tombstones_dropped, report.tombstones_kept) == (0, 2)
    clock.now += timedelta(days=31)  # the backups listing A are past backup_days (30)
    report = collect_and_clean(config, clock)
    assert report is not None
    assert (report.tombstones_dropped, report.tombstones_kept) == (1, 1)
    assert sqlite_rows(database, "SELECT guid FROM item_tombstones ORDER BY guid") == [
        ("urn:b",),
        ("urn:c",),
    ]
    assert sqlite_rows(database, "SELECT COUNT(*) FROM items") == [(0,)]


def restore_at(config: Path, clock: Clock) -> RestoreReport:
    """``restore`` of every feed at ``clock``, with the configured ``item_days``."""

    async def go() -> RestoreReport:
        settings = load_settings(config)
        async with open_collector(settings, clock=clock) as collector:
            return await restore_from_backups(
                collector.db,
                collector.objects,
                load_feeds(settings.feeds_file),
                now=clock(),
                owner=collector.owner,
                item_days=settings.retention.item_days,
            )

    return asyncio.run(go())


def test_an_expired_item_of_a_feed_just_removed_does_not_come_back_in_a_restore(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """A removed feed's old tombstones were dropped at once (it cannot re-ingest), but its
    backups of the last days still listed the item: a restore brought it back, dated by them."""
    a = Entry("A", guid="urn:a")
    url = feed_server.route("/feed.xml", body=rss([a]))
    other = feed_server.route("/other.xml", body=rss([Entry("O", guid="urn:o")]))
    config = write_project(tmp_path, [url])
    database = tmp_path / "collector.db"
    clock = Clock(datetime(2026, 1, 1, 9, 0, 0, tzinfo=UTC))
    collect_and_clean(config, clock)

    clock.now += timedelta(days=181)  # A expires; the feed still lists it
    report = collect_and_clean(config, clock)
    assert report is not None
    assert report.items == 1
    clock.now += timedelta(days=181)  # the tombstone is old; the newest backup lists A
    report = collect_and_clean(config, clock)
    assert report is not None
    assert (report.tombstones_dropped, report.tombstones_kept) == (0, 1)

    write_project(tmp_path, [other])  # the feed is removed from the feeds file
    clock.now += timedelta(days=1)
    report = collect_and_clean(config, clock)
    assert report is not None
    assert sqlite_rows(database, "SELECT url, active FROM feeds ORDER BY url") == [
        (url, 0),
        (other, 1),
    ]
    assert sqlite_rows(database, "SELECT guid FROM item_tombstones") == [("urn:a",)]

    restored = restore_at(config, clock)
    assert restored.backups >= 1, "the removed feed's recent backups are replayed"
    assert sqlite_rows(database, "SELECT guid FROM items ORDER BY guid") == [("urn:o",)]

    clock.now += timedelta(days=31)  # its backups are gone: nothing can bring A back now
    report = collect_and_clean(config, clock)
    assert report is not None
    assert (report.tombstones_dropped, report.tombstones_kept) == (1, 0)
    assert restore_at(config, clock).items_recovered == 0
    assert sqlite_rows(database, "SELECT guid FROM items ORDER BY guid") == [("urn:o",)]


def test_an_expired_spilled_item_its_feed_still_lists_leaves_no_object(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """Its tombstone keeps the row out, so its HTML is not spilled again either: the object
    would belong to no row and no cleanup would ever find it."""
    big = Entry("Big", guid="urn:big", content="<p>" + "x" * (INLINE_CONTENT_LIMIT + 1) + "</p>")
    url = feed_server.route("/feed.xml", body=rss([big]))
    config = write_project(tmp_path, [url])
    clock = Clock(datetime(2026, 1, 1, 9, 0, 0, tzinfo=UTC))
    collect_and_clean(config, clock)
    key = content_key(feed_id_for(url), "urn:big")
    assert (tmp_path / "objects" / key).exists()

    clock.now += timedelta(days=181)
    report = collect_and_clean(config, clock, cycle=False)
    assert report is not None
    assert (report.items, report.content_objects) == (1, 1)
    collect_and_clean(config, clock)
    assert sqlite_rows(tmp_path / "collector.db", "SELECT COUNT(*) FROM items") == [(0,)]
    assert not (tmp_path / "objects" / key).exists()


COLLIDING_GUIDS = ("https://blog.example/post/15027", "https://blog.example/post/59911")
"""Two GUIDs whose md5 share the first 8 hex digits (``10650bb4``), the short key's part."""


def read_back(config: Path, clock: Clock, folder: Path) -> dict[str, tuple[str, str, bytes]]:
    """guid -> (its content as a reader loads it, its image's key, that image's bytes)."""

    async def go() -> dict[str, tuple[str, str, bytes]]:
        async with open_collector(load_settings(config), clock=clock) as collector:
            found: dict[str, tuple[str, str, bytes]] = {}
            for row in await collector.db.query("SELECT id, guid FROM items"):
                item = await read_item(collector.db, collector.objects, row["id"])
                assert item is not None
                assert item.content_html is not None
                (image,) = item.images
                assert image.status == "success"
                assert image.r2_key is not None
                data = (folder / "objects" / image.r2_key).read_bytes()
                found[row["guid"]] = (item.content_html, image.r2_key, data)
            return found

    return asyncio.run(go())


@pytest.mark.parametrize("together", [False, True], ids=["one-after-the-other", "in-one-batch"])
def test_guids_whose_md5_share_8_digits_share_no_object_and_outlive_each_other(
    feed_server: FeedServer, tmp_path: Path, together: bool
) -> None:
    """Spilled HTML and images of two such items of a feed: each reads back its own, and
    expiring the first leaves the second's content and image in place."""
    first, second = COLLIDING_GUIDS
    digests = [hashlib.md5(guid.encode()).hexdigest() for guid in COLLIDING_GUIDS]
    assert digests[0][:8] == digests[1][:8]
    assert digests[0] != digests[1]
    images = {first: png(2, 2), second: png(3, 3)}
    entries = []
    for name, guid in zip("AB", COLLIDING_GUIDS, strict=True):
        feed_server.route(
            f"/img/{name}.png", body=images[guid], headers={"Content-Type": "image/png"}
        )
        filler = "x" * (INLINE_CONTENT_LIMIT + 1)
        html = f'<p>content of {name}</p><img src="/img/{name}.png"><p>{filler}</p>'
        entries.append(Entry(name, guid=guid, content=html))
    base = feed_server.url("/")
    url = feed_server.route("/feed.xml", body=rss(entries if together else entries[:1], link=base))
    config = write_project(tmp_path, [url])
    database = tmp_path / "collector.db"
    clock = Clock(datetime(2026, 1, 1, 9, 0, 0, tzinfo=UTC))
    collect_and_clean(config, clock)
    if not together:
        clock.now += timedelta(days=1)
        feed_server.route("/feed.xml", body=rss(entries, link=base))
        collect_and_clean(config, clock)

    stored = read_back(config, clock, tmp_path)
    assert set(stored) == {first, second}
    for name, guid in zip("AB", COLLIDING_GUIDS, strict=True):
        content, _, image = stored[guid]
        assert content.startswith(f"<p>content of {name}</p>")
        assert image == images[guid]
    keys = sqlite_rows(database, "SELECT guid, content_key FROM items ORDER BY guid")
    feed_id = feed_id_for(url)
    assert keys == [
        (first, f"content/{feed_id}/{digests[0][:8]}.html"),
        (second, f"content/{feed_id}/{digests[1]}.html"),
    ], "the first item keeps the documented key, the second takes its full md5"
    assert stored[first][1] != stored[second][1]
    if not together:
        assert stored[second][1] == f"images/{feed_id}/{digests[1]}/0.png"

    with sqlite3.connect(database) as conn:
        conn.execute(
            "UPDATE items SET created_at = '2020-01-01T00:00:00Z' WHERE guid = ?", (first,)
        )
    clock.now += timedelta(days=1)
    report = collect_and_clean(config, clock, cycle=False)
    assert report is not None
    assert (report.items, report.content_objects, report.image_objects) == (1, 1, 1)
    assert not (tmp_path / "objects" / keys[0][1]).exists()
    assert not (tmp_path / "objects" / stored[first][1]).exists()
    after = read_back(config, clock, tmp_path)
    assert list(after) == [second]
    assert after[second] == stored[second]


def test_cleanup_command_dry_run_then_for_real(feed_server: FeedServer, tmp_path: Path) -> None:
    url = feed_server.route("/feed.xml", body=rss([Entry("A", guid="a"), Entry("B", guid="b")]))
    config = write_project(tmp_path, [url], extra_toml="[retention]\nitem_days = 10\n")
    assert feedcollector("--config", str(config), "fetch", "--all", cwd=tmp_path).returncode == 0
    database = tmp_path / "collector.db"
    with sqlite3.connect(database) as conn:
        conn.execute("UPDATE items SET created_at = '2020-01-01T00:00:00Z' WHERE guid = 'a'")
    old_backup = tmp_path / "objects" / "backups" / feed_id_for(url) / "2020-01-01T00:00:00Z.xml"
    old_backup.write_bytes(b"<rss/>")

    dry = feedcollector("--config", str(config), "cleanup", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "cleanup (dry run): would delete 1 backup" in dry.stdout
    assert "1 item created before" in dry.stdout
    assert f"backups/{feed_id_for(url)}/2020-01-01T00:00:00Z.xml" in dry.stdout
    assert f"{feed_id_for(url)} a" in dry.stdout
    assert old_backup.exists()
    assert sqlite_rows(database, "SELECT COUNT(*) FROM items") == [(2,)]
    assert sqlite_rows(database, "SELECT COUNT(*) FROM maintenance") == [(0,)]

    real = feedcollector("--config", str(config), "cleanup", cwd=tmp_path)
    assert real.returncode == 0, real.stderr
    assert "cleanup: deleted 1 backup" in real.stdout
    assert not old_backup.exists()
    assert sqlite_rows(database, "SELECT guid FROM items") == [("b",)]
    assert sqlite_rows(database, "SELECT guid FROM item_tombstones") == [("a",)]
    assert len(sqlite_rows(database, "SELECT last_done_at FROM maintenance")) == 1


def test_cleanup_command_exits_1_when_the_database_is_unusable(tmp_path: Path) -> None:
    (tmp_path / "feeds.yaml").write_text("feeds:\n  - https://blog.example.org/feed.xml\n")
    (tmp_path / "collector.db").mkdir()
    result = feedcollector("cleanup", "--dry-run", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("error: database:"), result.stderr


def test_run_once_runs_the_daily_cleanup_and_records_it(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    url = feed_server.route("/feed.xml", body=rss([Entry("A", guid="a")]))
    config = write_project(tmp_path, [url])
    old_backup = tmp_path / "objects" / "backups" / feed_id_for(url) / "2020-01-01T00:00:00Z.xml"
    old_backup.parent.mkdir(parents=True)
    old_backup.write_bytes(b"<rss/>")
    result = feedcollector("--config", str(config), "run", "--once", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "cleanup: deleted 1 backup" in result.stderr
    assert not old_backup.exists()
    (done,) = sqlite_rows(tmp_path / "collector.db", "SELECT last_done_at FROM maintenance")
    again = feedcollector("--config", str(config), "run", "--once", cwd=tmp_path)
    assert "cleanup:" not in again.stderr, "once a day"
    assert sqlite_rows(tmp_path / "collector.db", "SELECT last_done_at FROM maintenance") == [done]


def hold_lease(db: Path, task: str, owner: str | None, until: datetime) -> None:
    """A maintenance lease as another process holds it (``owner`` None: a failed run's wait)."""
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO maintenance (task, lease_owner, lease_until) VALUES (?, ?, ?) "
            "ON CONFLICT (task) DO UPDATE SET lease_owner = excluded.lease_owner, "
            "lease_until = excluded.lease_until",
            (task, owner, format_timestamp(until)),
        )


def test_cleanup_by_hand_is_refused_while_the_daily_one_holds_the_lease(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """It ran beside a collector's daily cleanup (the same deletes twice, counts doubled) and
    its record cleared that run's lease. Now it is refused (exit 2) and leaves the lease and
    the last run's time alone; a dry run deletes nothing and is not refused; the wait a
    failed daily run leaves holds back only the next daily run."""
    url = feed_server.route("/feed.xml", body=rss([Entry("A", guid="a")]))
    config = write_project(tmp_path, [url])
    assert feedcollector("--config", str(config), "fetch", "--all", cwd=tmp_path).returncode == 0
    database = tmp_path / "collector.db"
    old_backup = tmp_path / "objects" / "backups" / feed_id_for(url) / "2020-01-01T00:00:00Z.xml"
    old_backup.write_bytes(b"<rss/>")
    daily = "web1:4242:0badf00d"
    until = utc_now() + CLEANUP_LEASE  # renewed just now: at work
    hold_lease(database, "cleanup", daily, until)
    before = sqlite_rows(database, "SELECT * FROM maintenance")

    refused = feedcollector("--config", str(config), "cleanup", cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith(
        "error: cleanup: refused, a retention cleanup (the daily one of `run`, or `cleanup`) is "
        f"under way: collector {daily} holds its lease until {format_timestamp(until)} (one "
        "cleanup at a time). Wait for it to finish, then run cleanup again; if that process is "
        f"dead, its lease runs out at {format_timestamp(until)}"
    ), refused.stderr
    assert old_backup.exists()
    assert sqlite_rows(database, "SELECT * FROM maintenance") == before

    dry = feedcollector("--config", str(config), "cleanup", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "would delete 1 backup" in dry.stdout

    hold_lease(database, "cleanup", None, until)  # that daily run failed: it waits an hour
    done = feedcollector("--config", str(config), "cleanup", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "cleanup: deleted 1 backup" in done.stdout
    assert not old_backup.exists()
    ((last, owner, lease_until),) = sqlite_rows(
        database, "SELECT last_done_at, lease_owner, lease_until FROM maintenance"
    )
    assert (owner, lease_until) == (None, None), "recorded and let go"
    assert last is not None


def test_the_daily_cleanup_waits_for_a_restore_and_runs_once_it_is_over(
    feed_server: FeedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A restore replays backups the cleanup would delete. The daily cleanup does not run
    beside it, says why once at INFO (then every cycle at DEBUG), and runs in the first cycle
    after the restore let go of its lease; ``run --once`` still ends well."""
    url = feed_server.route("/feed.xml", body=rss([Entry("A", guid="a")]))
    config = write_project(tmp_path, [url])
    database = tmp_path / "collector.db"
    clock = Clock(datetime(2026, 1, 1, 9, 0, 0, tzinfo=UTC))
    collect_and_clean(config, clock)
    clock.now += timedelta(days=1)
    old_backup = tmp_path / "objects" / "backups" / feed_id_for(url) / "2020-01-01T00:00:00Z.xml"
    old_backup.write_bytes(b"<rss/>")
    restorer = f"web1:4242:{uuid.uuid4().hex[:8]}"  # its wait is logged at INFO once a process
    hold_lease(database, "restore", restorer, clock.now + timedelta(minutes=5))

    with caplog.at_level(logging.DEBUG, logger="feedcollector"):
        assert collect_and_clean(config, clock, cycle=False) is None
        clock.now += timedelta(minutes=1)
        assert collect_and_clean(config, clock, cycle=False) is None
    waits = [r for r in caplog.records if "the daily cleanup is due but waits" in r.getMessage()]
    assert [r.levelno for r in waits] == [logging.INFO, logging.DEBUG]
    assert f"a restore is under way: collector {restorer} holds its lease" in waits[0].getMessage()
    assert old_backup.exists()

    hold_lease(database, "restore", restorer, utc_now() + timedelta(minutes=5))
    once = feedcollector("--config", str(config), "run", "--once", cwd=tmp_path)
    assert once.returncode == 0, once.stderr
    assert "the daily cleanup is due but waits, a restore is under way" in once.stderr
    assert old_backup.exists()

    hold_lease(database, "restore", None, clock.now)  # the restore let go
    report = collect_and_clean(config, clock, cycle=False)
    assert report is not None
    assert report.backups == 1
    assert not old_backup.exists()
