"""Recovery from the raw XML backups: the drill (collect, lose the database, restore, same items
back), idempotence, schedules left alone, ``--feed``/``--since``, tombstones, the command, and
a replay on both backend pairs (SQLite + folder, D1 Proxy Worker + S3)."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from feedcollector import store_sync
from feedcollector.backends.local import LocalObjectStore
from feedcollector.backends.sqlite import SQLiteDatabase
from feedcollector.backups import backup_key, write_backup
from feedcollector.collector import open_collector
from feedcollector.config import load_feeds, load_settings
from feedcollector.decode import decode_feed
from feedcollector.errors import ConfigError, StorageError
from feedcollector.images import object_key
from feedcollector.models import FeedSpec, ItemRecord
from feedcollector.objectstore import ObjectStore
from feedcollector.orphans import sweep_orphans
from feedcollector.owners import owner_name
from feedcollector.pipeline import run_cycle
from feedcollector.restore import (
    RestoreProgress,
    RestoreReport,
    _write_lost_html,
    restore_from_backups,
    restore_targets,
)
from feedcollector.restore_images import Uncertain, stored_with_unlinked_images
from feedcollector.schedule import feed_id_for
from feedcollector.schema import migrate
from feedcollector.spill import INLINE_CONTENT_LIMIT, content_key
from feedcollector.timestamps import format_timestamp, utc_now

from . import test_retention
from .feedserver import FeedServer
from .samples import START, Clock, Entry, png, rss, write_project
from .test_cli import feedcollector
from .test_retention import OWNER, HeldStore, Pair, hold_lease

pair = test_retention.pair

ITEM_COLUMNS = "f.url, i.guid, i.title, i.link, i.pub_date, i.content_html, i.content_key"
BIG = "<p>" + "x" * (1024 * 1024) + "</p>"


@dataclass
class Drill:
    folder: Path
    config: Path
    clock: Clock

    @property
    def database(self) -> Path:
        return self.folder / "collector.db"

    def cycle(self) -> None:
        async def go() -> None:
            async with open_collector(load_settings(self.config), clock=self.clock) as collector:
                await run_cycle(collector, force=True)

        asyncio.run(go())

    def restore(self, **kwargs: Any) -> tuple[RestoreReport, list[RestoreProgress]]:
        steps: list[RestoreProgress] = []

        async def go() -> RestoreReport:
            settings = load_settings(self.config)
            async with open_collector(settings, clock=self.clock) as collector:
                return await restore_from_backups(
                    collector.db,
                    collector.objects,
                    load_feeds(settings.feeds_file),
                    now=self.clock(),
                    owner=collector.owner,
                    progress=steps.append,
                    **kwargs,
                )

        return asyncio.run(go()), steps

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.database) as conn:
            return list(conn.execute(sql))

    def items(self) -> list[tuple[Any, ...]]:
        return self.rows(
            f"SELECT {ITEM_COLUMNS} FROM items i JOIN feeds f ON f.id = i.feed_id "
            "ORDER BY f.url, i.guid"
        )

    def images(self) -> list[tuple[Any, ...]]:
        return self.rows(
            "SELECT i.guid, t.position, t.original_url, t.status, t.r2_key FROM image_tasks t "
            "JOIN items i ON i.id = t.item_id ORDER BY i.guid, t.position"
        )


@pytest.fixture
def drill(feed_server: FeedServer, tmp_path: Path) -> Drill:
    """Two feeds collected three times: an unchanged body, a changed one, a broken one."""
    feed_server.route("/img/a.png", body=png(), headers={"Content-Type": "image/png"})
    feed_server.route("/img/b.png", body=png(3, 3), headers={"Content-Type": "image/png"})
    base = feed_server.url("/")
    first = [
        Entry("A", guid="urn:a", link="/a", content='<p>a</p><img src="/img/a.png">'),
        Entry("Undated", guid="urn:u", pub_date="sometime soon"),
        Entry("Big", guid="urn:big", content=BIG),
    ]
    later = [*first, Entry("B", guid="urn:b", content='<img src="/img/b.png"><img src="/x">')]
    news = feed_server.route("/news.xml", body=rss(first, link=base))
    other = feed_server.route("/other.xml", body=rss([Entry("O", guid="urn:o")], link=base))
    drill = Drill(tmp_path, write_project(tmp_path, [news, other]), Clock())
    drill.cycle()
    drill.clock.now += timedelta(hours=1)
    drill.cycle()
    feed_server.route("/news.xml", body=rss(later, link=base))
    drill.clock.now += timedelta(hours=1)
    drill.cycle()
    feed_server.route("/other.xml", body=b"<html>maintenance</html>")
    drill.clock.now += timedelta(hours=1)
    drill.cycle()
    return drill


def test_the_drill_collect_lose_the_database_restore_same_items(drill: Drill) -> None:
    items, images = drill.items(), drill.images()
    assert len(items) == 5
    assert [row[3] for row in images] == ["success", "success", "pending"]
    assert any(row[6] is not None and row[5] is None for row in items), "one item was spilled"

    drill.database.unlink()
    drill.clock.now += timedelta(days=2)
    report, steps = drill.restore()

    assert drill.items() == items
    restored = drill.images()
    assert [row[:3] for row in restored] == [row[:3] for row in images]
    assert [row[3:] for row in restored[:2]] == [row[3:] for row in images[:2]], (
        "archived images are linked again, not downloaded anew"
    )
    assert restored[2][3:] == ("pending", None)
    assert (report.feeds, report.feeds_created, report.items_recovered) == (2, 2, 5)
    assert (report.backups, report.backups_unchanged, report.backups_unreadable) == (8, 4, 1)
    assert report.images_relinked == 2
    assert "5 items recovered from 8 backups of 2 feeds" in report.summary()
    assert [s.feeds_done for s in steps if s.feed_done] == [1, 2]
    assert steps[-1].items_recovered == 5
    feeds = drill.rows("SELECT title, last_fetched_at, last_etag, next_fetch_at FROM feeds")
    assert feeds == [("Test feed", None, None, "2026-03-04T12:00:00Z")] * 2

    again, _ = drill.restore()
    assert (again.items_recovered, again.feeds_created, again.images_relinked) == (0, 0, 0)
    assert drill.items() == items


KOI8_HEADER = "application/rss+xml; charset=KOI8-R"
KOI8_BODY = (
    '<rss version="2.0"><channel><title>Лента</title><link>http://example.com/</link>'
    "<item><title>Привет</title><guid>urn:koi8</guid></item></channel></rss>"
).encode("koi8-r")


def test_a_charset_given_only_by_the_header_survives_a_restore(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    header = KOI8_HEADER
    assert decode_feed(KOI8_BODY, None).data != decode_feed(KOI8_BODY, header).data
    url = feed_server.route("/koi8.xml", body=KOI8_BODY, headers={"Content-Type": header})
    drill = Drill(tmp_path, write_project(tmp_path, [url]), Clock())
    drill.cycle()
    items = drill.items()
    assert [row[2] for row in items] == ["Привет"]
    folder = tmp_path / "objects" / "backups" / feed_id_for(url)
    stamp = "2026-03-02T09:00:00Z"
    assert sorted(p.name for p in folder.iterdir()) == [f"{stamp}.content-type", f"{stamp}.xml"]
    assert (folder / f"{stamp}.content-type").read_text() == header

    drill.database.unlink()
    report, _ = drill.restore()
    assert report.items_recovered == 1
    assert drill.items() == items, "read with the header it was fetched with, not a guess"


def test_restore_leaves_schedules_and_validators_alone(drill: Drill) -> None:
    before = drill.rows("SELECT * FROM feeds ORDER BY url")
    items = drill.items()
    drill.rows("DELETE FROM image_tasks")
    drill.rows("DELETE FROM items WHERE guid IN ('urn:a', 'urn:b')")
    report, _ = drill.restore()
    assert report.items_recovered == 2
    assert drill.items() == items
    assert drill.rows("SELECT * FROM feeds ORDER BY url") == before


def test_one_feed_and_since(drill: Drill) -> None:
    news = drill.rows("SELECT url FROM feeds ORDER BY url")[0][0]
    drill.database.unlink()
    since = START + timedelta(hours=2)
    report, _ = drill.restore(feed_url=news, since=since)
    assert (report.feeds, report.backups, report.backups_unchanged) == (1, 2, 1)
    assert [row[1] for row in drill.items()] == ["urn:a", "urn:b", "urn:big", "urn:u"]
    assert drill.rows("SELECT url FROM feeds") == [(news,)]
    assert drill.rows("SELECT DISTINCT created_at FROM items") == [("2026-03-02T11:00:00Z",)]


def test_tombstoned_items_stay_deleted(drill: Drill) -> None:
    drill.rows(
        "INSERT INTO item_tombstones (feed_id, guid, deleted_at) "
        "SELECT feed_id, guid, '2026-03-03T00:00:00Z' FROM items WHERE guid = 'urn:a'"
    )
    drill.rows("DELETE FROM image_tasks")
    drill.rows("DELETE FROM items")
    report, _ = drill.restore()
    assert report.items_recovered == 4
    assert "urn:a" not in [row[1] for row in drill.items()]


def test_one_backup_that_cannot_be_read_is_skipped_not_fatal(drill: Drill) -> None:
    """A backup gone between the listing and the read (a dangling link here, as when the
    expiry sweep removes it meanwhile) ended the whole restore, every feed's."""
    items = drill.items()
    other = drill.rows("SELECT id FROM feeds ORDER BY url")[1][0]
    folder = drill.folder / "objects" / "backups" / other
    (folder / "2026-03-01T00:00:00Z.xml").symlink_to(folder / "no-such-file.xml")
    drill.database.unlink()
    report, _ = drill.restore()
    assert report.backups_unreadable >= 1
    assert drill.items() == items


def test_backups_older_than_item_days_are_not_replayed(drill: Drill) -> None:
    """Their items have expired: with backups kept longer than items, a replay brought them
    back once their tombstones were gone, for the next cleanup to delete again."""
    drill.database.unlink()
    drill.clock.now = START + timedelta(days=1, hours=1, minutes=30)
    report, _ = drill.restore(item_days=1)
    assert report.backups == 4, "the two feeds' backups of the last 24 hours only"
    assert report.backups_before == 4
    assert (
        "4 backups taken before 2026-03-02T10:30:00Z were not replayed (what they hold is older "
        "than item_days (1) and has expired)"
    ) in report.summary(), "else '0 items from 0 backups' says nothing of why"
    assert len(drill.items()) == 5
    assert drill.rows("SELECT DISTINCT created_at FROM items") == [("2026-03-02T11:00:00Z",)]


def test_a_second_run_links_what_an_interrupted_one_left_unlinked(drill: Drill) -> None:
    """Items a run stored whose archived images it did not link (it stopped in between; here
    the image was out of place during the first run) were never linked by a later run: only
    items new in a run were looked at, so the images were downloaded anew."""
    archived = {row[0]: row[1] for row in drill.rows("SELECT r2_key, status FROM image_tasks")}
    key = next(k for k in archived if k)
    image = drill.folder / "objects" / key
    aside = image.with_name("aside")
    image.rename(aside)
    drill.database.unlink()
    first, _ = drill.restore()
    assert first.items_recovered == 5
    assert first.images_relinked == 1, "the other archived image"
    aside.rename(image)
    second, _ = drill.restore()
    assert (second.items_recovered, second.images_relinked) == (0, 1)
    assert drill.rows(f"SELECT status FROM image_tasks WHERE r2_key = '{key}'") == [("success",)]
    third, _ = drill.restore()
    assert third.images_relinked == 0


def test_a_database_copy_gets_the_images_archived_since_it_was_taken_linked(
    drill: Drill,
) -> None:
    """A copy of the database (``backup-db``) put back after a loss: an image that had failed
    for good when the copy was taken, and was archived later (``retry-images``), stayed
    ``failed`` beside its object, which ``cleanup --orphans`` then deleted."""
    key = next(k for (k,) in drill.rows("SELECT r2_key FROM image_tasks") if k)
    with sqlite3.connect(drill.database) as conn:  # as the copy has it
        conn.execute(
            "UPDATE image_tasks SET status = 'failed', attempts = 3, r2_key = NULL, "
            "last_error = 'image: HTTP 404' WHERE r2_key = ?",
            (key,),
        )
    report, _ = drill.restore()
    assert (report.items_recovered, report.images_relinked) == (0, 1)
    assert drill.rows(f"SELECT status FROM image_tasks WHERE r2_key = '{key}'") == [("success",)]


def test_spilled_html_gone_from_the_store_is_written_again_from_the_backups(
    drill: Drill,
) -> None:
    """The item stayed in the database, its HTML object went (a folder deleted by hand): no
    run put it back, though every backup since holds it."""
    ((key,),) = drill.rows("SELECT content_key FROM items WHERE content_key IS NOT NULL")
    stored = drill.folder / "objects" / key
    original = stored.read_bytes()
    stored.unlink()
    report, _ = drill.restore()
    assert (report.items_recovered, report.contents_rewritten) == (0, 1)
    assert "the spilled HTML of 1 item, gone from the object store" in report.summary()
    assert stored.read_bytes() == original
    again, _ = drill.restore()
    assert again.contents_rewritten == 0


def test_restore_targets() -> None:
    specs = [FeedSpec("https://a.example/feed"), FeedSpec("https://b.example/feed")]
    known = {"https://b.example/feed": "b-id", "https://old.example/feed": "old-id"}
    targets = restore_targets(specs, known)
    assert [(t.url, t.feed_id, t.spec is not None, t.in_database) for t in targets] == [
        ("https://a.example/feed", feed_id_for("https://a.example/feed"), True, False),
        ("https://b.example/feed", "b-id", True, True),
        ("https://old.example/feed", "old-id", False, True),
    ]
    assert [t.url for t in restore_targets(specs, known, "HTTPS://OLD.example/feed")] == [
        "https://old.example/feed"
    ]
    with pytest.raises(ConfigError, match=r"restore: https://c\.example/feed is neither"):
        restore_targets(specs, known, "https://c.example/feed")


def test_a_feed_respelled_in_the_feeds_file_keeps_its_old_backups_replayed() -> None:
    """``HTTP://`` for ``http://`` makes a new feed (another id) and leaves the old one in the
    database: keyed by the spelling-blind duplicate key, the old one was dropped from the
    targets and its backups reported as belonging to no feed."""
    specs = [FeedSpec("HTTP://a.example/feed")]
    known = {"http://a.example/feed": "old-id"}
    targets = restore_targets(specs, known)
    assert sorted((t.url, t.feed_id) for t in targets) == [
        ("HTTP://a.example/feed", feed_id_for("HTTP://a.example/feed")),
        ("http://a.example/feed", "old-id"),
    ]
    assert [t.feed_id for t in restore_targets(specs, known, "http://a.example/feed")] == ["old-id"]
    assert len(restore_targets(specs, known, "http://A.example/feed")) == 2


def test_unknown_backup_folders_are_reported(drill: Drill) -> None:
    stray = drill.folder / "objects" / "backups" / "0123456789abcdef" / "2026-03-01T00:00:00Z.xml"
    stray.parent.mkdir(parents=True)
    stray.write_bytes(rss([Entry("lost", guid="urn:lost")]))
    report, _ = drill.restore()
    assert report.unknown_feed_folders == 1
    assert "1 backup folder of feeds in neither" in report.summary()


def test_restore_command(drill: Drill) -> None:
    drill.database.unlink()
    with drill.config.open("a") as settings:  # the drill's backups are months old by now
        settings.write("\n[retention]\nitem_days = 36500\n")
    config = str(drill.config)
    result = feedcollector("--config", config, "restore", cwd=drill.folder)
    assert result.returncode == 0, result.stderr
    assert "restore: 5 items recovered from 8 backups of 2 feeds" in result.stdout
    assert "restore: [2/2]" in result.stderr, "plain progress lines when not on a terminal"
    assert len(drill.items()) == 5

    again = feedcollector("--config", config, "restore", "--since", "2d", cwd=drill.folder)
    assert again.returncode == 0, again.stderr
    assert "restore: 0 items recovered" in again.stdout

    unknown = feedcollector(
        "--config", config, "restore", "--feed", "https://nowhere.example/x", cwd=drill.folder
    )
    assert unknown.returncode == 2
    assert "is neither in the feeds file nor in the database" in unknown.stderr
    assert "is found once its URL is back in the file" in unknown.stderr, "how to get it back"
    bad_since = feedcollector("--config", config, "restore", "--since", "soon", cwd=drill.folder)
    assert bad_since.returncode == 2
    assert "--since must be a date" in bad_since.stderr


def test_restore_on_both_backend_pairs(pair: Pair) -> None:
    """The same replay against SQLite + folder and against D1 (Proxy Worker) + S3."""
    url = "https://blog.example.org/feed.xml"
    feed_id = feed_id_for(url)
    first = rss([Entry("A", guid="urn:a", content='<img src="https://img.example.org/a.png">')])
    second = rss([Entry("A", guid="urn:a"), Entry("B", guid="urn:b")])

    async def seed() -> None:
        await pair.objects.put(backup_key(feed_id, START), first)
        await pair.objects.put(backup_key(feed_id, START + timedelta(hours=1)), second)
        await pair.objects.put(object_key(feed_id, "urn:a", 0, "png"), png())
        # a third backup that needs its Content-Type: kept beside it on either store
        await write_backup(
            pair.objects, feed_id, KOI8_BODY, START + timedelta(hours=2), KOI8_HEADER
        )

    async def restore() -> RestoreReport:
        return await restore_from_backups(
            pair.db,
            pair.objects,
            [FeedSpec(url, title="Mine")],
            now=START + timedelta(days=1),
            owner=OWNER,
        )

    pair.run(seed())
    report = pair.run(restore())
    assert (report.feeds_created, report.items_recovered, report.images_relinked) == (1, 3, 1)
    assert pair.rows("SELECT guid, title, created_at FROM items ORDER BY guid") == [
        {"guid": "urn:a", "title": "A", "created_at": "2026-03-02T09:00:00Z"},
        {"guid": "urn:b", "title": "B", "created_at": "2026-03-02T10:00:00Z"},
        {"guid": "urn:koi8", "title": "Привет", "created_at": "2026-03-02T11:00:00Z"},
    ]
    assert pair.rows("SELECT status, r2_key FROM image_tasks") == [
        {"status": "success", "r2_key": object_key(feed_id, "urn:a", 0, "png")}
    ]
    assert pair.rows("SELECT title, config_title, active FROM feeds") == [
        {"title": "Mine", "config_title": "Mine", "active": 1}
    ]
    assert pair.run(restore()).items_recovered == 0


def test_a_ctrl_c_stops_a_restore_at_its_next_backup_and_leaves_it_unfinished(pair: Pair) -> None:
    """Ctrl-C cancels the main task, which hears it at its next wait: on SQLite and a folder
    the restore never waited, and went on to its end before it stopped "interrupted"."""
    urls = [f"https://blog{n}.example.org/feed.xml" for n in range(3)]

    async def go() -> None:
        for url in urls:
            for hour in range(2):
                body = rss([Entry(f"{url} {hour}", guid=f"urn:{hour}")])
                at = START + timedelta(hours=hour)
                await pair.objects.put(backup_key(feed_id_for(url), at), body)
        restoring = asyncio.current_task()
        assert restoring is not None

        def interrupt(step: RestoreProgress) -> None:
            if step.feed_done and step.feeds_done == 1:
                restoring.cancel()

        await restore_from_backups(
            pair.db,
            pair.objects,
            [FeedSpec(url) for url in urls],
            now=START + timedelta(days=1),
            owner=OWNER,
            progress=interrupt,
        )

    with pytest.raises(asyncio.CancelledError):
        pair.run(go())
    assert pair.rows("SELECT COUNT(*) AS n FROM items") == [{"n": 2}]
    assert pair.rows("SELECT task, lease_owner FROM maintenance ORDER BY task") == [
        {"task": "restore", "lease_owner": None},
        {"task": "restore-unfinished", "lease_owner": None},
    ]


def test_restore_gives_guids_whose_md5_share_8_digits_their_own_objects_again(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """Both spilled and with an image: after the restore each row names its own objects, the
    second item's full-md5 ones, and none is linked to the other item's image."""
    guids = ("https://blog.example/post/15027", "https://blog.example/post/59911")
    entries = []
    for name, size in (("a", 2), ("b", 3)):
        feed_server.route(
            f"/img/{name}.png", body=png(size, size), headers={"Content-Type": "image/png"}
        )
    for name, guid in zip("ab", guids, strict=True):
        html = f'<p>content of {name}</p><img src="/img/{name}.png">{BIG}'
        entries.append(Entry(name.upper(), guid=guid, content=html))
    base = feed_server.url("/")
    url = feed_server.route("/feed.xml", body=rss(entries[:1], link=base))
    drill = Drill(tmp_path, write_project(tmp_path, [url]), Clock())
    drill.cycle()
    feed_server.route("/feed.xml", body=rss(entries, link=base))
    drill.clock.now += timedelta(hours=1)
    drill.cycle()
    items, images = drill.items(), drill.images()
    assert len({row[6] for row in items}) == len({row[4] for row in images}) == 2
    assert [row[3] for row in images] == ["success", "success"]

    drill.database.unlink()
    drill.clock.now += timedelta(days=2)
    report, _ = drill.restore()
    assert (report.items_recovered, report.images_relinked) == (2, 2)
    assert drill.items() == items
    assert drill.images() == images
    for (_, guid, *_rest, key), name in zip(items, "ab", strict=True):
        assert guid == guids["ab".index(name)]
        html = (tmp_path / "objects" / key).read_text()
        assert html.startswith(f"<p>content of {name}</p>")


def test_a_restore_after_the_short_key_holders_backups_expired_gives_no_item_its_html(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """A held the short key, B the full one; then A left the feed and the backups listing it
    expired. After a database loss, B (replayed alone) took A's object at the short key as
    its own, "already there": it read A's HTML, and its own object belonged to no row."""
    guids = ("https://blog.example/post/15027", "https://blog.example/post/59911")
    a, b = (
        Entry(n, guid=g, content=f"<p>content of {n}</p>{BIG}")
        for n, g in zip("AB", guids, strict=True)
    )
    url = feed_server.route("/feed.xml", body=rss([a]))
    drill = Drill(tmp_path, write_project(tmp_path, [url]), Clock())
    for entries in ([a], [a, b], [b]):
        feed_server.route("/feed.xml", body=rss(entries))
        drill.cycle()
        drill.clock.now += timedelta(hours=1)
    feed_id = feed_id_for(url)
    backups = sorted((tmp_path / "objects" / "backups" / feed_id).iterdir())
    assert len(backups) == 3
    for expired in backups[:2]:
        expired.unlink()
    b_key = content_key(feed_id, guids[1], full=True)
    assert drill.rows("SELECT guid, content_key FROM items ORDER BY guid") == [
        (guids[0], content_key(feed_id, guids[0])),
        (guids[1], b_key),
    ]

    drill.database.unlink()
    report, _ = drill.restore()
    assert report.items_recovered == 1
    assert drill.rows("SELECT guid, content_key FROM items") == [(guids[1], b_key)]
    assert (tmp_path / "objects" / b_key).read_text().startswith("<p>content of B</p>")


def test_a_spilled_item_whose_short_key_holds_another_items_lost_object_takes_the_full_key(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """The same after a database loss, for an item spilled for the first time: an object at its
    short key that no row names and that holds other bytes is not its own."""
    guids = ("https://blog.example/post/15027", "https://blog.example/post/59911")
    url = feed_server.route("/feed.xml", body=rss([]))
    drill = Drill(tmp_path, write_project(tmp_path, [url]), Clock())
    feed_id = feed_id_for(url)
    short = tmp_path / "objects" / content_key(feed_id, guids[1])
    short.parent.mkdir(parents=True)
    short.write_text("<p>content of a lost item</p>")
    feed_server.route(
        "/feed.xml", body=rss([Entry("B", guid=guids[1], content=f"<p>content of B</p>{BIG}")])
    )
    drill.cycle()
    b_key = content_key(feed_id, guids[1], full=True)
    assert drill.rows("SELECT content_key FROM items") == [(b_key,)]
    assert (tmp_path / "objects" / b_key).read_text().startswith("<p>content of B</p>")
    assert short.read_text() == "<p>content of a lost item</p>"


def test_a_backup_whose_items_d1_refuses_as_too_large_is_skipped_not_fatal(pair: Pair) -> None:
    """D1 refuses a batch over the Worker's 16 MiB on every run (413): the restore stopped
    there with a database error, leaving every later backup and feed unreplayed. The backup
    is skipped instead, and its other items still come back from the backups that list them
    too, and the HTML it spilled to the object store is deleted again. (70 titles just within
    the bound of a value, 17 MB together.)"""
    url = "https://blog.example.org/feed.xml"
    feed_id = feed_id_for(url)
    long_titles = [Entry(f"{n:02d}" + "T" * 240_000, guid=f"urn:long{n:02d}") for n in range(70)]
    spilled = Entry("S", guid="urn:spilled", content="<p>" + "x" * INLINE_CONTENT_LIMIT + "</p>")
    backups = [
        rss([Entry("A", guid="urn:a")]),
        rss([Entry("A", guid="urn:a"), *long_titles, spilled, Entry("B", guid="urn:b")]),
        rss([Entry("B", guid="urn:b"), Entry("C", guid="urn:c")]),
    ]

    async def seed() -> None:
        for hour, body in enumerate(backups):
            await pair.objects.put(backup_key(feed_id, START + timedelta(hours=hour)), body)

    pair.run(seed())
    report = pair.run(
        restore_from_backups(
            pair.db, pair.objects, [FeedSpec(url)], now=START + timedelta(days=1), owner=OWNER
        )
    )
    guids = [row["guid"] for row in pair.rows("SELECT guid FROM items ORDER BY guid")]
    if pair.name == "embedded":  # SQLite takes a batch of any size
        assert (report.backups, report.backups_unreadable) == (3, 0)
        assert guids == ["urn:a", "urn:b", "urn:c", *(e.guid for e in long_titles), "urn:spilled"]
        assert pair.keys("content/") == [content_key(feed_id, "urn:spilled")]
    else:
        assert (report.backups, report.backups_unreadable) == (3, 1)
        assert guids == ["urn:a", "urn:b", "urn:c"]
        assert pair.keys("content/") == [], "the skipped backup's spilled HTML belongs to no row"


IMG = "https://img.example.org"


def images_of(guid: str, *names: str) -> Entry:
    """An item whose content shows the named images, in that order."""
    return Entry(guid, guid=guid, content="".join(f'<img src="{IMG}/{n}.png">' for n in names))


def archive_images(pair: Pair, feed_id: str, guid: str, count: int) -> None:
    """Objects at positions 0..count-1 of the item, as its image stage stored them."""

    async def put() -> None:
        for position in range(count):
            await pair.objects.put(object_key(feed_id, guid, position, "png"), png(position + 2))

    pair.run(put())


def replay(pair: Pair, url: str, *bodies: bytes, first_at: datetime = START) -> RestoreReport:
    """Keep ``bodies`` as the feed's backups an hour apart from ``first_at``, then restore
    from them. Backups taken before the archived images were written (the default) were
    fetched before those images were downloaded, as when they were collected."""
    feed_id = feed_id_for(url)

    async def go() -> RestoreReport:
        for hour, body in enumerate(bodies):
            await pair.objects.put(backup_key(feed_id, first_at + timedelta(hours=hour)), body)
        return await restore_from_backups(
            pair.db, pair.objects, [FeedSpec(url)], now=first_at + timedelta(days=1), owner=OWNER
        )

    return pair.run(go())


def just_before_the_images() -> datetime:
    """A time for backups taken just before the archived images were written: those images
    were downloaded in the cycle that fetched them."""
    return datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)


def after_the_images() -> datetime:
    """A time for backups taken after the archived images were written: those images were
    downloaded for an item listed by an older backup, expired since."""
    return datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)


def image_tasks(pair: Pair) -> list[tuple[object, ...]]:
    rows = pair.rows(
        "SELECT i.guid, t.original_url, t.status, t.r2_key FROM image_tasks t "
        "JOIN items i ON i.id = t.item_id ORDER BY i.guid, t.position"
    )
    return [
        (r["guid"], str(r["original_url"]).rsplit("/", 1)[1], r["status"], r["r2_key"])
        for r in rows
    ]


def test_an_item_edited_since_its_expired_first_backup_gets_no_wrong_images(pair: Pair) -> None:
    """Stored as [a, b] (objects 0 = a, 1 = b), edited to [new, a, b], first backup expired:
    the replay of the edited version linked new.png's task to a's object and a.png's to b's,
    marked success for good. Now all three are downloaded anew."""
    url = "https://blog.example.org/feed.xml"
    archive_images(pair, feed_id_for(url), "urn:x", 2)
    report = replay(
        pair, url, rss([images_of("urn:x", "new", "a", "b")]), first_at=after_the_images()
    )
    assert (report.items_recovered, report.images_relinked) == (1, 0)
    assert image_tasks(pair) == [
        ("urn:x", "new.png", "pending", None),
        ("urn:x", "a.png", "pending", None),
        ("urn:x", "b.png", "pending", None),
    ]
    again = pair.run(
        restore_from_backups(
            pair.db,
            pair.objects,
            [FeedSpec(url)],
            now=datetime.now(UTC) + timedelta(days=2),
            owner=OWNER,
        )
    )
    assert again.images_relinked == 0, "nor by a second run, which finds its tasks pending"


def test_only_items_new_after_a_replayed_backup_are_trusted_with_a_partial_folder(
    pair: Pair,
) -> None:
    """An item first listed by a later backup was stored from that body: its archived images
    are linked even when one failed to download. One of the first backup replayed may come
    from an expired version: linked only when its objects are exactly 0..n-1."""
    url = "https://blog.example.org/feed.xml"
    feed_id = feed_id_for(url)
    for guid, count in (("urn:new", 2), ("urn:old", 2), ("urn:whole", 2)):
        archive_images(pair, feed_id, guid, count)
    first = [images_of("urn:old", "a", "b", "c"), images_of("urn:whole", "a", "b")]
    latest = rss([*first, images_of("urn:new", "a", "b", "c")])
    report = replay(pair, url, rss(first), latest, first_at=after_the_images())
    assert (report.items_recovered, report.images_relinked) == (3, 4)
    key = object_key
    assert image_tasks(pair) == [
        ("urn:new", "a.png", "success", key(feed_id, "urn:new", 0, "png")),
        ("urn:new", "b.png", "success", key(feed_id, "urn:new", 1, "png")),
        ("urn:new", "c.png", "pending", None),
        ("urn:old", "a.png", "pending", None),
        ("urn:old", "b.png", "pending", None),
        ("urn:old", "c.png", "pending", None),
        ("urn:whole", "a.png", "success", key(feed_id, "urn:whole", 0, "png")),
        ("urn:whole", "b.png", "success", key(feed_id, "urn:whole", 1, "png")),
    ]


def test_images_downloaded_after_the_first_backup_are_linked_though_one_failed(
    pair: Pair,
) -> None:
    """The first backup replayed is older than the item's archived images: they were
    downloaded for that version, so a position left out (a dead image, failed for good) does
    not cost the item its other archived images, whose sources may be gone too."""
    url = "https://blog.example.org/feed.xml"
    feed_id = feed_id_for(url)
    archive_images(pair, feed_id, "urn:x", 1)
    archive_images(pair, feed_id, "urn:more", 3)  # more objects than the row has images
    body = rss([images_of("urn:x", "kept", "dead"), images_of("urn:more", "a", "b")])
    report = replay(pair, url, body, first_at=just_before_the_images())
    assert (report.items_recovered, report.images_relinked) == (2, 1)
    assert image_tasks(pair) == [
        ("urn:more", "a.png", "pending", None),
        ("urn:more", "b.png", "pending", None),
        ("urn:x", "kept.png", "success", object_key(feed_id, "urn:x", 0, "png")),
        ("urn:x", "dead.png", "pending", None),
    ]


def test_images_written_long_after_the_first_backup_may_be_retries_for_an_older_version(
    pair: Pair,
) -> None:
    """Written more than an hour after the first backup replayed, an item's objects may be
    retries (an hour, a day later) for a version whose backup expired: not trusted."""
    url = "https://blog.example.org/feed.xml"
    archive_images(pair, feed_id_for(url), "urn:x", 1)
    report = replay(pair, url, rss([images_of("urn:x", "new", "a")]))  # backups in March
    assert (report.items_recovered, report.images_relinked) == (1, 0)


def test_an_item_new_after_an_unreadable_backup_is_not_trusted(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    """The unreadable backup may have listed it in an older version, stored then. It is
    skipped with a WARNING that names it (the README promises one)."""
    url = "https://blog.example.org/feed.xml"
    archive_images(pair, feed_id_for(url), "urn:x", 2)
    before = rss([Entry("Y", guid="urn:y")])
    after = rss([Entry("Y", guid="urn:y"), images_of("urn:x", "new", "a", "b")])
    with caplog.at_level(logging.WARNING, logger="feedcollector"):
        report = replay(
            pair, url, before, b"<html>maintenance</html>", after, first_at=after_the_images()
        )
    assert (report.backups_unreadable, report.items_recovered, report.images_relinked) == (1, 2, 0)
    skipped = [r for r in caplog.records if "is not readable, skipped" in r.getMessage()]
    assert [r.levelno for r in skipped] == [logging.WARNING]
    assert "backups/" in skipped[0].getMessage()
    assert url in skipped[0].getMessage()
    assert [row[2] for row in image_tasks(pair)] == ["pending"] * 3


A_URL, B_URL = "https://a.example.org/feed.xml", "https://b.example.org/feed.xml"
"""Two feeds, restored in this order."""
ARCHIVED = {A_URL: {"urn:a": 1}, B_URL: {"urn:b1": 2, "urn:b2": 1}}
"""Per feed, its items and how many archived images each has."""


async def archive_two_feeds(objects: ObjectStore, taken: datetime) -> list[str]:
    """The backups of both feeds and their items' archived images; returns the image keys."""
    keys = []
    for url, items in ARCHIVED.items():
        entries = [
            images_of(guid, *(f"{guid}-{position}" for position in range(count)))
            for guid, count in items.items()
        ]
        await objects.put(backup_key(feed_id_for(url), taken), rss(entries))
        for guid, count in items.items():
            for position in range(count):
                key = object_key(feed_id_for(url), guid, position, "png")
                await objects.put(key, png(position + 2), "image/png")
                keys.append(key)
    return sorted(keys)


def test_cleanup_orphans_is_refused_while_a_restore_runs_and_every_image_is_linked(
    tmp_path: Path,
) -> None:
    """The audit: a database lost, `restore`, and `cleanup --orphans` started beside it. The
    sweep deleted the archived images the restore had not linked yet, leaving their tasks to
    download them again. Here the command runs while the restore is held after the first
    feed (items exist, so the sweep's empty-database guard lets it through): it is refused
    with exit 2 naming the restore, and the restore links every image."""
    config = write_project(tmp_path, [A_URL, B_URL])
    objects = tmp_path / "objects"
    keys = asyncio.run(archive_two_feeds(LocalObjectStore(objects), utc_now() - timedelta(days=2)))
    for key in keys:  # archived long ago: past the sweep's day of grace
        stamp = (utc_now() - timedelta(days=30)).timestamp()
        os.utime(objects / key, (stamp, stamp))
    commands: list[subprocess.CompletedProcess[str]] = []

    async def sweep_beside_the_restore() -> None:
        commands.append(
            await asyncio.to_thread(
                feedcollector, "--config", str(config), "cleanup", "--orphans", cwd=tmp_path
            )
        )

    async def restore() -> tuple[RestoreReport, str]:
        settings = load_settings(config)
        async with open_collector(settings) as collector:
            held = HeldStore(
                collector.objects, f"backups/{feed_id_for(B_URL)}/", sweep_beside_the_restore
            )
            report = await restore_from_backups(
                collector.db,
                held,
                load_feeds(settings.feeds_file),
                now=collector.clock(),
                owner=collector.owner,
                item_days=settings.retention.item_days,
            )
            return report, collector.owner

    report, owner = asyncio.run(restore())
    (sweep,) = commands
    assert sweep.returncode == 2, sweep.stderr
    assert f"cleanup: refused, a restore is under way: collector {owner} holds" in sweep.stderr
    assert "if that process is dead, its lease runs out at" in sweep.stderr
    assert (report.items_recovered, report.images_relinked) == (3, 4)
    assert sorted(str(p.relative_to(objects)) for p in objects.glob("images/**/*.png")) == keys
    with sqlite3.connect(tmp_path / "collector.db") as conn:
        tasks = sorted(conn.execute("SELECT status, r2_key FROM image_tasks"))
    assert tasks == [("success", key) for key in keys]


@pytest.mark.parametrize("ending", ["error", "interrupt"])
def test_a_restore_lets_go_of_its_lease_however_it_ends(pair: Pair, ending: str) -> None:
    """While a restore runs, a sweep is refused; once it has failed (a storage error) or been
    interrupted (Ctrl-C cancels it), its lease is let go, but the sweep is still refused: the
    images of the feeds it did not reach wait to be linked, and no row names them yet (the
    sweep deleted them). The same restore run again to its end lets the sweep go on."""
    later = utc_now() + timedelta(days=2)  # the archived images are past the sweep's grace
    pair.run(archive_two_feeds(pair.objects, START))
    refusals: list[str] = []
    held_up = asyncio.Event()

    async def sweep() -> None:
        await sweep_orphans(pair.db, pair.objects, now=later, owner="sweeper:1:a")

    async def at_the_second_feed() -> None:
        try:
            await sweep()
        except ConfigError as exc:
            refusals.append(str(exc))
        if ending == "error":
            raise StorageError("storage: the bucket went away")
        held_up.set()
        await asyncio.Event().wait()  # until Ctrl-C

    specs = [FeedSpec(A_URL), FeedSpec(B_URL)]

    async def scenario() -> None:
        held = HeldStore(pair.objects, f"backups/{feed_id_for(B_URL)}/", at_the_second_feed)
        restoring = asyncio.create_task(
            restore_from_backups(pair.db, held, specs, now=later, owner=OWNER)
        )
        if ending == "error":
            with pytest.raises(StorageError, match="the bucket went away"):
                await restoring
        else:
            await held_up.wait()
            restoring.cancel()
            with pytest.raises(asyncio.CancelledError):
                await restoring
        with pytest.raises(ConfigError) as unfinished:
            await sweep()
        refusals.append(str(unfinished.value))
        await restore_from_backups(pair.db, pair.objects, specs, now=later, owner=OWNER)
        await sweep()

    pair.run(scenario())
    refusal, unfinished = refusals
    assert unfinished.startswith(
        f"cleanup: refused, a restore begun at {format_timestamp(later)} did not finish"
    ), unfinished
    assert "Run `feedcollector restore` again first" in unfinished
    assert pair.rows("SELECT task FROM maintenance WHERE task = 'restore-unfinished'") == []
    assert pair.rows("SELECT DISTINCT status FROM image_tasks") == [{"status": "success"}], (
        "every image linked, none swept"
    )
    assert refusal.startswith(f"cleanup: refused, a restore is under way: collector {OWNER}")
    assert pair.rows("SELECT lease_owner FROM maintenance WHERE task = 'restore'") == [
        {"lease_owner": None}
    ]


@pytest.mark.parametrize("task", ["orphans", "cleanup"])
def test_a_restore_is_refused_while_a_sweep_or_a_cleanup_holds_its_lease(
    pair: Pair, task: str
) -> None:
    """Nothing is replayed or linked while the lease lives; a lease that ran out unrenewed (its
    process was killed) is taken over."""
    now = START + timedelta(days=1)
    pair.run(archive_two_feeds(pair.objects, START))
    until = now + timedelta(minutes=3)
    hold_lease(pair, task, "web1:4242:0badf00d", until)
    specs = [FeedSpec(A_URL), FeedSpec(B_URL)]

    with pytest.raises(ConfigError) as refused:
        pair.run(restore_from_backups(pair.db, pair.objects, specs, now=now, owner=OWNER))
    message = str(refused.value)
    what = "an orphan sweep (`cleanup --orphans`)" if task == "orphans" else "a retention cleanup"
    assert message.startswith(f"restore: refused, {what}"), message
    assert f"collector web1:4242:0badf00d holds its lease until {format_timestamp(until)}" in (
        message
    )
    assert "Wait for it to finish, then run restore again" in message
    assert pair.rows("SELECT COUNT(*) AS n FROM items") == [{"n": 0}]

    report = pair.run(restore_from_backups(pair.db, pair.objects, specs, now=until, owner=OWNER))
    assert (report.items_recovered, report.images_relinked) == (3, 4)


def test_the_restore_command_lets_go_the_lease_of_a_dead_holder_in_the_way(drill: Drill) -> None:
    """A sweep killed on this machine left its lease: that process is gone, so its lease is
    let go, with a WARNING naming it, and the restore runs (it was refused until the lease
    ran out, up to an hour for a cleanup's)."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    owner = owner_name(gone.pid, "deadbeef")
    until = format_timestamp(utc_now() + timedelta(minutes=4))
    with sqlite3.connect(drill.database) as conn:
        conn.execute("DELETE FROM image_tasks")
        conn.execute("DELETE FROM items")
        conn.execute(
            "INSERT INTO maintenance (task, lease_owner, lease_until) VALUES ('orphans', ?, ?)",
            (owner, until),
        )
    result = feedcollector("--config", str(drill.config), "restore", cwd=drill.folder)
    assert result.returncode == 0, result.stderr
    assert (
        f"an orphan sweep (`cleanup --orphans`) was under way: collector {owner} of this "
        f"machine holds its lease until {until}, but that process has stopped without letting "
        "go (killed?): its lease is let go"
    ) in result.stderr
    assert "restore: [2/2] 100%" in result.stderr, "the restore ran"


def test_an_item_stored_under_its_earlier_guid_is_found_by_restore(tmp_path: Path) -> None:
    """Versions before the text repair stored ``urn:CafÃ©``: a restore replaying its backup
    (read as ``urn:Café`` now) writes its lost HTML again and finds its unlinked images."""
    written, repaired = "urn:Caf\u00c3\u00a9", "urn:Caf\u00e9"
    record = ItemRecord("new-id", repaired, None, "t", "2026-03-02T08:00:00Z", "<p>x</p>", ())
    record = record._replace(earlier_guid=written)
    objects = LocalObjectStore(tmp_path / "objects")
    lost = {written: "content/f/abc.html"}
    assert asyncio.run(_write_lost_html(objects, [record], lost, "backups/f/1.xml")) == 1
    assert lost == {}
    assert (tmp_path / "objects/content/f/abc.html").read_bytes() == b"<p>x</p>"

    async def unlinked() -> list[Uncertain]:
        db = SQLiteDatabase(tmp_path / "collector.db")
        try:
            await migrate(db)
            await store_sync.sync_feeds(db, [FeedSpec("https://a.example/")], START)
            feed_id = feed_id_for("https://a.example/")
            await db.query(
                "INSERT INTO items (id, feed_id, guid, created_at) VALUES ('old-id', ?, ?, ?)",
                (feed_id, written, format_timestamp(START)),
            )
            await db.query(
                "INSERT INTO image_tasks (id, item_id, original_url, status, created_at, "
                "updated_at, position) VALUES ('t', 'old-id', 'https://a.example/i.png', "
                "'failed', ?, ?, 0)",
                (format_timestamp(START), format_timestamp(START)),
            )
            return await stored_with_unlinked_images(db, feed_id, [record])
        finally:
            await db.close()

    [found] = asyncio.run(unlinked())
    assert (found.record.id, found.record.guid) == ("old-id", written)
