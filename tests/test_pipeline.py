"""End-to-end collection cycles through the library: a real feed server on 127.0.0.1, a real
SQLite file, a real objects folder, and a clock the test moves forward."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from feedcollector import collector as collector_module
from feedcollector import fetch as fetch_module
from feedcollector import image_results, image_stage, pipeline, store_images
from feedcollector import parse as parse_module
from feedcollector.backends.local import LocalObjectStore
from feedcollector.breaker import STORAGE_TRIP_AFTER, StorageBreaker
from feedcollector.collector import open_collector
from feedcollector.config import load_settings
from feedcollector.database import CountingDatabase
from feedcollector.errors import TOO_LARGE
from feedcollector.images import make_image_client
from feedcollector.models import Feed
from feedcollector.owners import owner_name
from feedcollector.parse_fallback import parse_with_feedparser
from feedcollector.pipeline import run_cycle
from feedcollector.report import CycleReport, FeedOutcome
from feedcollector.schedule import feed_id_for
from feedcollector.timestamps import format_timestamp

from .feedserver import FeedServer, Route
from .samples import (
    START,
    Clock,
    Entry,
    closed_port,
    dripping_body,
    md5_8,
    png,
    rss,
    send_ok,
    write_project,
)


@dataclass
class Project:
    folder: Path
    config: Path
    clock: Clock

    def cycle(self, **kwargs: Any) -> CycleReport:
        async def go() -> CycleReport:
            settings = load_settings(self.config)
            async with open_collector(settings, clock=self.clock) as collector:
                return await run_cycle(collector, **kwargs)

        return asyncio.run(go())

    def rows(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        with sqlite3.connect(self.folder / "collector.db") as conn:
            conn.row_factory = sqlite3.Row
            return [dict(r) for r in conn.execute(sql, params)]

    def execute(self, sql: str, *params: Any) -> None:
        with sqlite3.connect(self.folder / "collector.db") as conn:
            conn.execute(sql, params)

    def object(self, key: str) -> bytes:
        return (self.folder / "objects" / key).read_bytes()

    def keys(self, prefix: str) -> list[str]:
        root = self.folder / "objects"
        return sorted(
            p.relative_to(root).as_posix() for p in (root / prefix).rglob("*") if p.is_file()
        )


@pytest.fixture
def project(tmp_path: Path) -> Callable[..., Project]:
    def make(feeds: list[Any], **kwargs: Any) -> Project:
        return Project(tmp_path, write_project(tmp_path, feeds, **kwargs), Clock())

    return make


def test_first_cycle_stores_items_images_and_the_raw_backup(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    image = png()
    feed_server.route("/img/a.png", body=image, headers={"Content-Type": "image/png"})
    body = rss(
        [
            Entry(
                "First",
                guid="urn:1",
                link="/posts/1",
                content='<p>Hi <a href="/about">me</a></p><img src="/img/a.png" alt="a">',
                description="summary only",
            ),
            Entry("Second", guid="urn:2", description="<b>just a description</b>"),
        ],
        link=feed_server.url("/"),
    )
    url = feed_server.route(
        "/feed.xml", body=body, etag='"v1"', headers={"Content-Type": "application/rss+xml"}
    )
    p = project([url])
    report = p.cycle()
    assert (report.stored, report.new_items, report.images_stored) == (1, 2, 1)

    feed_id = feed_id_for(url)
    items = p.rows(
        "SELECT guid, link, title, pub_date, content_html, created_at FROM items ORDER BY guid"
    )
    base = feed_server.url("")
    assert items == [
        {
            "guid": "urn:1",
            "link": f"{base}/posts/1",
            "title": "First",
            "pub_date": "2026-03-02T08:00:00Z",
            "content_html": f'<p>Hi <a href="{base}/about">me</a></p><img src="{base}/img/a.png" alt="a">',
            "created_at": "2026-03-02T09:00:00Z",
        },
        {
            "guid": "urn:2",
            "link": None,
            "title": "Second",
            "pub_date": "2026-03-02T08:00:00Z",
            "content_html": "<b>just a description</b>",
            "created_at": "2026-03-02T09:00:00Z",
        },
    ]
    key = f"images/{feed_id}/{md5_8('urn:1')}/0.png"
    assert p.rows("SELECT original_url, status, attempts, r2_key FROM image_tasks") == [
        {"original_url": f"{base}/img/a.png", "status": "success", "attempts": 1, "r2_key": key}
    ]
    assert p.object(key) == image
    assert p.keys("backups") == [f"backups/{feed_id}/2026-03-02T09:00:00Z.xml"]
    assert p.object(f"backups/{feed_id}/2026-03-02T09:00:00Z.xml") == body
    feed = p.rows(
        "SELECT title, last_etag, last_fetched_at, next_fetch_at, consecutive_failures FROM feeds"
    )
    assert feed == [
        {
            "title": "Test feed",
            "last_etag": '"v1"',
            "last_fetched_at": "2026-03-02T09:00:00Z",
            "next_fetch_at": "2026-03-02T09:30:00Z",
            "consecutive_failures": 0,
        }
    ]


def test_images_reach_the_disk_before_their_rows_and_backups_are_left_to_the_kernel(
    feed_server: FeedServer, project: Callable[..., Project], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An image's row names its object, so the object is flushed first; no row names a
    backup, whose flush would cost every fetch (ObjectStore.put's ``durable``)."""
    writes: list[tuple[str, bool]] = []
    real_put = LocalObjectStore.put

    async def put(self: LocalObjectStore, key: str, data: bytes, *args: Any, **kw: Any) -> None:
        writes.append((key.split("/")[0], kw.get("durable", True)))
        await real_put(self, key, data, *args, **kw)

    monkeypatch.setattr(LocalObjectStore, "put", put)
    image = feed_server.route("/a.png", body=png(), headers={"Content-Type": "image/png"})
    url = feed_server.route("/feed.xml", body=rss([Entry("A", content=f'<img src="{image}">')]))
    report = project([url]).cycle()
    assert (report.new_items, report.images_stored) == (1, 1)
    assert sorted(writes) == [("backups", False), ("images", True)]


def test_an_item_gets_200_image_tasks_at_most_and_says_so(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    many = "".join(f'<img src="{feed_server.url(f"/i/{n}.png")}">' for n in range(250))
    few = "".join(f'<img src="{feed_server.url(f"/j/{n}.png")}">' for n in range(199))
    body = rss([Entry("Gallery", guid="g", content=many), Entry("Few", guid="f", content=few)])
    p = project([feed_server.route("/feed", body=body)], extra_toml="enabled = false\n")
    caplog.set_level(logging.INFO, "feedcollector")
    p.cycle()
    counts = p.rows(
        "SELECT i.guid, COUNT(*) AS n, MAX(t.position) AS last FROM image_tasks t "
        "JOIN items i ON i.id = t.item_id GROUP BY i.guid ORDER BY i.guid"
    )
    assert counts == [{"guid": "f", "n": 199, "last": 198}, {"guid": "g", "n": 200, "last": 199}]
    [line] = [r.getMessage() for r in caplog.records if "images or more" in r.getMessage()]
    assert line.startswith("parse: item 'Gallery' of feed ")


def test_an_item_an_earlier_version_stored_under_its_unrepaired_guid_is_not_stored_twice(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    """Before the repair of mis-encoded text, ``<guid>urn:CafÃ©</guid>`` was stored as
    written; this version reads it as ``urn:Café`` and must know the item all the same."""
    entries = [Entry("one", guid="urn:Caf\u00c3\u00a9"), Entry("two", guid="urn:two")]
    url = feed_server.route("/feed", body=rss(entries))
    p = project([url])
    p.cycle()
    p.execute("UPDATE items SET guid = 'urn:Caf\u00c3\u00a9' WHERE guid = 'urn:Caf\u00e9'")
    feed_server.route("/feed", body=rss([Entry("three", guid="urn:three"), *entries]))
    p.clock.advance(hours=1)
    assert p.cycle().new_items == 1
    assert sorted(row["guid"] for row in p.rows("SELECT guid FROM items")) == [
        "urn:Caf\u00c3\u00a9",
        "urn:three",
        "urn:two",
    ]


def test_conditional_get_304_touches_only_the_two_timestamps(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    body = rss([Entry("One", guid="1")])
    url = feed_server.route(
        "/feed", body=body, etag='"abc"', last_modified="Mon, 02 Mar 2026 08:00:00 GMT"
    )
    p = project([url])
    p.cycle()
    before = p.rows("SELECT * FROM feeds")[0]
    p.clock.advance(minutes=31)
    report = p.cycle()
    assert report.not_modified == 1
    request = feed_server.hits("/feed")[-1]
    assert request.headers["If-None-Match"] == '"abc"'
    assert request.headers["If-Modified-Since"] == "Mon, 02 Mar 2026 08:00:00 GMT"
    after = p.rows("SELECT * FROM feeds")[0]
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {"last_fetched_at", "next_fetch_at", "last_status"}
    assert after["last_fetched_at"] == "2026-03-02T09:31:00Z"
    assert after["next_fetch_at"] == "2026-03-02T10:01:00Z"
    assert len(p.keys("backups")) == 1, "a 304 has no body to back up"


def test_the_image_client_is_built_only_for_a_cycle_with_images_to_fetch(
    feed_server: FeedServer, project: Callable[..., Project], monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[object] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(args)
        return make_image_client(*args, **kwargs)

    monkeypatch.setattr(collector_module, "make_image_client", counting)
    feed_server.route("/a.png", body=png(), headers={"Content-Type": "image/png"})
    body = rss([Entry("One", guid="1", content=f'<img src="{feed_server.url("/a.png")}">')])
    p = project([feed_server.route("/feed", body=body, etag='"v1"')])
    assert p.cycle().images_stored == 1
    assert len(built) == 1
    p.clock.advance(minutes=31)
    assert p.cycle().not_modified == 1
    assert len(built) == 1, "a cycle with no image task pays for no TLS setup"


def test_a_cycle_with_nothing_to_do_logs_its_line_at_debug(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    """An idle `run` polls every minute: 1,440 INFO lines a day that said nothing."""
    p = project([feed_server.route("/feed", body=rss([Entry("a", guid="a")]))])
    with caplog.at_level(logging.DEBUG, logger="feedcollector"):
        p.cycle()
        p.cycle()
    cycles = [
        (r.levelno, r.getMessage().split(")")[0])
        for r in caplog.records
        if "cycle: " in r.getMessage()
    ]
    assert [(level, text[:16]) for level, text in cycles] == [
        (logging.INFO, "cycle: 1 feed (1"),
        (logging.DEBUG, "cycle: 0 feeds ("),
    ]


def test_a_feed_not_yet_due_is_not_fetched(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    url = feed_server.route("/feed", body=rss([Entry("One", guid="1")]))
    p = project([{"url": url, "interval": "2h"}])
    p.cycle()
    p.clock.advance(hours=1)
    assert p.cycle().feeds == 0
    p.clock.advance(hours=1)
    assert p.cycle().feeds == 1
    assert len(feed_server.hits("/feed")) == 2


def test_without_validators_a_changed_body_is_stored_idempotently(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    feed_server.route("/i.png", body=png(), headers={"Content-Type": "image/png"})
    entries = [
        Entry(f"Post {n}", guid=f"g{n}", content=f'<img src="/i.png?{n}">') for n in range(3)
    ]
    route = Route(body=rss(entries, link=feed_server.url("/")))
    url = feed_server.route("/feed", route)
    p = project([url])
    for cycle in range(3):
        route.body = rss(
            [*entries, Entry("Post 3", guid="g3")] if cycle == 2 else entries,
            link=feed_server.url("/"),
            title=f"Fetch {cycle}",  # the body changes on every fetch, as with lastBuildDate
        )
        report = p.cycle()
        assert report.stored == 1
        assert report.new_items == (3 if cycle == 0 else 0 if cycle == 1 else 1)
        p.clock.advance(minutes=30)
    assert "If-None-Match" not in feed_server.hits("/feed")[-1].headers
    assert p.rows("SELECT COUNT(*) AS n FROM items")[0]["n"] == 4
    assert p.rows("SELECT COUNT(*) AS n, SUM(status = 'success') AS ok FROM image_tasks") == [
        {"n": 3, "ok": 3}
    ]
    assert len(feed_server.hits("/i.png")) == 3, "each image downloaded exactly once"
    assert len(p.keys("backups")) == 3, "every 200 body is backed up"


def test_the_body_stored_last_time_is_backed_up_but_not_read_again(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    """Servers that ignore validators answer every poll with the same bytes: those are backed
    up (every non-304 body is) and only the feed's bookkeeping changes."""
    route = Route(body=rss([Entry("One", guid="1"), Entry("Two", guid="2")]))
    url = feed_server.route("/feed", route)
    p = project([url])
    assert p.cycle().stored == 1
    # A row lost without a tombstone comes back only if the body is read again.
    p.execute("DELETE FROM items WHERE guid = '2'")
    p.clock.advance(minutes=30)
    route.headers = {"ETag": '"new"', "Last-Modified": "Mon, 02 Mar 2026 09:00:00 GMT"}
    with caplog.at_level(logging.INFO, logger="feedcollector"):
        report = p.cycle()
    assert (report.stored, report.unchanged, report.not_modified, report.failed) == (0, 1, 0, 0)
    assert "1 not modified" not in report.summary()
    assert "0 not modified, 1 sent the same body again" in report.summary()
    assert not [r for r in caplog.records if r.levelno >= logging.INFO and url in r.getMessage()]
    assert p.rows("SELECT guid FROM items") == [{"guid": "1"}]
    assert p.rows(
        "SELECT last_status, last_fetched_at, last_etag, last_modified, consecutive_failures "
        "FROM feeds"
    ) == [
        {
            "last_status": 200,
            "last_fetched_at": "2026-03-02T09:30:00Z",
            "last_etag": '"new"',
            "last_modified": "Mon, 02 Mar 2026 09:00:00 GMT",
            "consecutive_failures": 0,
        }
    ]
    assert len(p.keys("backups")) == 2
    p.clock.advance(minutes=30)
    route.body = rss([Entry("One", guid="1"), Entry("Two", guid="2"), Entry("Three", guid="3")])
    report = p.cycle()
    assert (report.stored, report.new_items) == (1, 2), "a changed body is read whole"


def test_the_same_bytes_are_read_again_under_another_charset_or_version(
    feed_server: FeedServer, project: Callable[..., Project], monkeypatch: pytest.MonkeyPatch
) -> None:
    body = rss([Entry("Caf\u00e9", guid="1")], encoding="windows-1252", declare=False)
    route = Route(body=body, headers={"Content-Type": "application/rss+xml; charset=utf-8"})
    url = feed_server.route("/feed", route)
    p = project([url])
    p.cycle()
    p.execute("DELETE FROM items")
    route.headers = {"Content-Type": "application/rss+xml; charset=windows-1252"}
    p.clock.advance(hours=1)
    assert p.cycle().new_items == 1, "the charset decides how the bytes read"
    assert p.rows("SELECT title FROM items") == [{"title": "Caf\u00e9"}]
    p.clock.advance(hours=1)
    assert p.cycle().unchanged == 1
    p.execute("DELETE FROM items")
    monkeypatch.setattr(fetch_module, "code_fingerprint", lambda: "0.1.0+changed")
    p.clock.advance(hours=1)
    assert p.cycle().new_items == 1, "a newer feedcollector reads the body again"


def test_the_fingerprint_of_the_code_follows_any_change_of_a_source_file(tmp_path: Path) -> None:
    """The version was 0.1.0 in every version: a newer parser never read an unchanged body."""
    package = Path(fetch_module.__file__).parent
    copy = tmp_path / "feedcollector"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert fetch_module.source_fingerprint(copy) == fetch_module.code_fingerprint()
    (copy / "parse_xml.py").write_text((copy / "parse_xml.py").read_text() + "\n")
    changed = fetch_module.source_fingerprint(copy)
    assert changed != fetch_module.code_fingerprint()
    assert changed.startswith(fetch_module.PACKAGE_VERSION + "+")


def test_a_body_that_failed_to_parse_is_read_again_and_fails_again(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    url = feed_server.route("/feed", body=b"<html><title>Down for maintenance</title></html>")
    p = project([url])
    for failures in (1, 2):
        report = p.cycle()
        assert (report.failed, report.unchanged) == (1, 0)
        assert p.rows("SELECT consecutive_failures FROM feeds")[0]["consecutive_failures"] == (
            failures
        )
        p.clock.advance(days=1)


def test_a_feed_redirected_to_a_page_says_where_it_was_sent(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    """A feed whose site sends it to its home page or a login wall: the page's title alone
    did not say which address answered, the one to look at."""
    home = feed_server.route("/home", body=b"<html><title>Welcome</title></html>")
    url = feed_server.route("/feed", status=302, headers={"Location": "/home"})
    direct = feed_server.route("/page", body=b"<html><title>Welcome</title></html>")
    p = project([url, direct])
    assert p.cycle().failed == 2
    errors = {row["url"]: row["last_error"] for row in p.rows("SELECT url, last_error FROM feeds")}
    assert errors[url] == (
        f"parse: not a feed (an HTML page titled 'Welcome') (read at {home}, where {url} redirects)"
    )
    assert errors[direct] == "parse: not a feed (an HTML page titled 'Welcome')"


def test_content_of_a_known_guid_is_never_updated(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    route = Route(body=rss([Entry("Original", guid="g", description="v1")]))
    url = feed_server.route("/feed", route)
    p = project([url])
    p.cycle()
    route.body = rss([Entry("Edited", guid="g", description="v2")])
    p.clock.advance(hours=1)
    p.cycle()
    assert p.rows("SELECT title, content_html FROM items") == [
        {"title": "Original", "content_html": "v1"}
    ]


@pytest.mark.parametrize(
    ("encoding", "declare", "header_charset", "title"),
    [
        ("gbk", True, None, "中文订阅 — 镕"),
        ("gb18030", False, "gb2312", "中文订阅 镕"),
        ("big5", True, None, "繁體中文新聞"),
        ("big5", False, "big5", "繁體中文新聞"),
        ("shift_jis", True, None, "日本語のフィード"),
        ("shift_jis", False, None, "日本語のフィードのタイトルとアイテムの本文はここにあります"),
        ("euc-kr", False, "euc-kr", "한국어 피드"),
        ("iso-8859-1", True, None, "Notícias de São Paulo"),
    ],
)
def test_encodings_are_settled_before_parsing(
    feed_server: FeedServer,
    project: Callable[..., Project],
    encoding: str,
    declare: bool,
    header_charset: str | None,
    title: str,
) -> None:
    body = rss(
        [Entry(title, guid="1", description=f"<p>{title} {title}</p>")],
        title=title,
        encoding=encoding,
        declare=declare,
    )
    content_type = "application/xml" + (f"; charset={header_charset}" if header_charset else "")
    url = feed_server.route("/feed", body=body, headers={"Content-Type": content_type})
    p = project([url])
    assert p.cycle().stored == 1
    assert p.rows("SELECT title FROM feeds")[0]["title"] == title
    assert p.rows("SELECT title, content_html FROM items") == [
        {"title": title, "content_html": f"<p>{title} {title}</p>"}
    ]
    keys = p.keys("backups")
    [backup] = [key for key in keys if key.endswith(".xml")]
    companion = [key for key in keys if key != backup]
    assert p.object(backup) == body, "the backup keeps the original bytes"
    if header_charset is None:
        assert companion == []
    else:  # only the header tells the charset: it is kept beside the backup
        assert [p.object(key) for key in companion] == [content_type.encode()]


def test_http_charset_wins_over_a_lying_declaration(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    body = rss([Entry("标题", guid="1")], title="新闻", encoding="gbk").replace(
        b'encoding="gbk"', b'encoding="iso-8859-1"'
    )
    url = feed_server.route("/feed", body=body, headers={"Content-Type": "text/xml; charset=GBK"})
    p = project([url])
    p.cycle()
    assert p.rows("SELECT title FROM items") == [{"title": "标题"}]


def test_a_body_cut_inside_an_item_keeps_no_validators_so_the_whole_feed_comes_next(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    """A server that cut its answer still says 304 to the cut answer's validators: keeping
    them would leave the cut item, and every one after it, unstored until the feed changes."""
    whole = rss([Entry(f"Post {n}", guid=f"g{n}") for n in range(4)])
    cut = whole[: whole.index(b"<title>Post 2</title>")]
    route = Route(body=cut, etag='"v1"', last_modified="Mon, 02 Mar 2026 09:00:00 GMT")
    url = feed_server.route("/feed", route)
    p = project([url])
    assert (p.cycle().new_items, p.rows("SELECT last_etag, body_digest FROM feeds")) == (
        2,
        [{"last_etag": None, "body_digest": None}],
    )
    # its whole items are stored, and the feed fails all the same (seed section 8): backoff
    [row] = p.rows("SELECT consecutive_failures, last_error, next_fetch_at FROM feeds")
    assert row == {
        "consecutive_failures": 1,
        "last_error": "parse: the body ends inside an item, after 2 whole items (cut off in "
        "transfer, or by the server?)",
        "next_fetch_at": format_timestamp(p.clock() + timedelta(minutes=30)),
    }
    p.clock.advance(minutes=30)
    assert p.cycle().new_items == 0, "the same cut body is read again, and stores nothing twice"
    assert p.rows("SELECT consecutive_failures FROM feeds") == [{"consecutive_failures": 2}]
    p.clock.advance(hours=1)
    route.body = whole
    assert p.cycle().new_items == 2
    assert [h.headers.get("If-None-Match") for h in feed_server.hits("/feed")] == [None] * 3
    assert p.rows("SELECT last_etag, consecutive_failures, last_error FROM feeds") == [
        {"last_etag": '"v1"', "consecutive_failures": 0, "last_error": None}
    ]
    p.clock.advance(minutes=30)
    assert p.cycle().not_modified == 1, "a whole body's validators are used"


def test_a_body_cut_between_items_keeps_no_validators_so_the_rest_comes_next(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    """A connection closed at a flush, or a script that died after writing an item (its error
    message after it), ends the body between items: it was read as whole, and the 304 to its
    validators hid the items after the cut until the feed changed."""
    whole = rss([Entry(f"Post {n}", guid=f"g{n}") for n in range(4)])
    died = whole[: whole.index(b"<item>", whole.index(b"</item>"))] + b"<b>Fatal error</b>"
    route = Route(body=died, etag='"v1"', last_modified="Mon, 02 Mar 2026 09:00:00 GMT")
    url = feed_server.route("/feed", route)
    p = project([url])
    assert p.cycle().new_items == 1
    assert p.rows(
        "SELECT last_etag, last_modified, body_digest, consecutive_failures, last_error FROM feeds"
    ) == [
        {
            "last_etag": None,
            "last_modified": None,
            "body_digest": None,
            "consecutive_failures": 1,
            "last_error": "parse: the body ends before its channel closes, after 1 whole item "
            "(cut off in transfer, or by the server?)",
        }
    ]
    p.clock.advance(minutes=30)
    route.body = whole
    assert p.cycle().new_items == 3
    assert [h.headers.get("If-None-Match") for h in feed_server.hits("/feed")] == [None] * 2
    assert p.rows("SELECT last_etag, consecutive_failures FROM feeds") == [
        {"last_etag": '"v1"', "consecutive_failures": 0}
    ]


def test_a_body_cut_inside_an_item_is_a_failure_in_the_feeds_line_and_the_cycles_counts(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    """Its whole items are stored, but the feed fails: its line is a WARNING with when it is
    tried next (it read as an INFO recovery, "answering again after 1 failure in a row"), the
    cycle counts it failed, and ten in a row make the prominent WARNING."""
    whole = rss([Entry(f"Post {n}", guid=f"g{n}") for n in range(3)])
    url = feed_server.route("/feed", body=whole[: whole.index(b"<title>Post 2</title>")])
    p = project([url])
    for failures in (1, 2):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="feedcollector"):
            report = p.cycle()
        assert (report.stored, report.failed) == (1, 1)
        (line,) = [r for r in caplog.records if url in r.getMessage()]
        assert line.levelno == logging.WARNING
        assert (
            f"{2 if failures == 1 else 0} new of 2 items; failed: parse: the body ends inside an "
            "item, after 2 whole items (cut off in transfer, or by the server?) (will retry with "
            f"backoff at "
        ) in line.getMessage()
        assert f"failure {failures} in a row)" in line.getMessage()
        assert "answering again" not in line.getMessage()
        assert "(1 updated, 0 not modified, 1 failed," in report.summary()
        p.clock.advance(hours=1)
    p.execute(
        "UPDATE feeds SET consecutive_failures = 9, next_fetch_at = ?", format_timestamp(p.clock())
    )
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="feedcollector"):
        p.cycle()
    (line,) = [r for r in caplog.records if url in r.getMessage()]
    assert line.getMessage().startswith(
        f"!!! feed {url} has failed 10 times in a row (last: parse: the body ends inside an item"
    )


def test_a_feed_only_feedparser_reads_is_stored_and_feedparser_runs_off_the_event_loop(
    feed_server: FeedServer, project: Callable[..., Project], monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []

    def recording(data: bytes, base_url: str) -> Any:
        threads.append(threading.current_thread().name)
        return parse_with_feedparser(data, base_url)

    monkeypatch.setattr(parse_module, "parse_with_feedparser", recording)
    broken = rss([Entry("One", guid="1"), Entry("Two", guid="2")]).replace(b"</channel>", b"")
    p = project([feed_server.route("/broken", body=broken)])
    assert p.cycle().new_items == 2
    assert threads, "the lenient parser read it"
    assert threading.main_thread().name not in threads, "its seconds per MiB stay off the loop"


def test_failures_back_off_and_success_resets(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    route = Route(status=503, body=b"down")
    url = feed_server.route("/feed", route)
    p = project([url])
    expected_gaps = [30, 60, 120, 240, 480, 960, 1440, 1440, 1440, 1440]
    with caplog.at_level(logging.WARNING, logger="feedcollector"):
        for failures, gap in enumerate(expected_gaps, start=1):
            p.cycle()
            row = p.rows(
                "SELECT consecutive_failures, next_fetch_at, last_fetched_at, last_error FROM feeds"
            )[0]
            assert row["consecutive_failures"] == failures
            assert row["next_fetch_at"] == (p.clock.now + timedelta(minutes=gap)).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )
            assert row["last_fetched_at"] is None
            assert "503" in row["last_error"]
            p.clock.advance(minutes=gap)
    alerts = [r.getMessage() for r in caplog.records if "10 times in a row" in r.getMessage()]
    assert len(alerts) == 1
    assert url in alerts[0]
    route.status, route.body = 200, rss([Entry("Back", guid="1")])
    p.cycle()
    row = p.rows("SELECT consecutive_failures, next_fetch_at, last_error FROM feeds")[0]
    assert row == {
        "consecutive_failures": 0,
        "next_fetch_at": (p.clock.now + timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "last_error": None,
    }


def test_a_garbage_body_is_backed_up_then_counted_as_a_parse_failure(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    garbage = b"<html><body>Service moved, sorry</body></html>"
    url = feed_server.route(
        "/feed", body=garbage, etag='"e1"', headers={"Content-Type": "text/html"}
    )
    p = project([url])
    report = p.cycle()
    assert report.failed == 1
    feed_id = feed_id_for(url)
    assert p.object(f"backups/{feed_id}/2026-03-02T09:00:00Z.xml") == garbage
    row = p.rows("SELECT consecutive_failures, last_etag, last_error FROM feeds")[0]
    assert row["consecutive_failures"] == 1
    assert row["last_etag"] is None, (
        "validators of an unparsed body are not kept (so it is re-read)"
    )
    assert row["last_error"].startswith("parse:")


def test_one_failing_feed_never_stops_the_others(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    good = [
        feed_server.route(f"/ok{n}", body=rss([Entry(f"item {n}", guid=f"{n}")])) for n in range(6)
    ]
    bad = [
        feed_server.route("/500", status=500, body=b"boom"),
        feed_server.route("/garbage", body=b"\x00\xff not xml at all"),
        "http://127.0.0.1:9/refused",
    ]
    p = project([*good, *bad])
    report = p.cycle()
    assert (report.stored, report.failed) == (6, 3)
    assert p.rows("SELECT COUNT(*) AS n FROM items")[0]["n"] == 6


def test_an_unreadable_pub_date_becomes_the_fetch_time_with_a_warning(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    url = feed_server.route(
        "/feed",
        body=rss(
            [
                Entry("Odd date", guid="1", pub_date="the day after tomorrow"),
                Entry("Named zone", guid="2", pub_date="mon, 2 mar 2026 03:00:00 est"),
            ]
        ),
    )
    p = project([url])
    with caplog.at_level(logging.WARNING, logger="feedcollector"):
        p.cycle()
    assert p.rows("SELECT guid, pub_date FROM items ORDER BY guid") == [
        {"guid": "1", "pub_date": "2026-03-02T09:00:00Z"},
        {"guid": "2", "pub_date": "2026-03-02T08:00:00Z"},
    ]
    (warning,) = [r.getMessage() for r in caplog.records if "pubDate" in r.getMessage()]
    assert "the day after tomorrow" in warning
    assert url in warning
    assert "Odd date" in warning


@pytest.mark.parametrize("well_formed", [True, False], ids=["strict", "lenient"])
def test_undecodable_bytes_are_replaced_with_one_warning_naming_the_feed(
    feed_server: FeedServer,
    project: Callable[..., Project],
    caplog: pytest.LogCaptureFixture,
    well_formed: bool,
) -> None:
    """Damaged UTF-8 is read with U+FFFD in place of the bad bytes; the warning says which feed
    and how many, once, also when the body went on to the lenient parser's thread."""
    body = rss([Entry("北京欢迎你 carte", guid="1"), Entry("上海欢迎你", guid="2")])
    body = body.replace(b"carte", b"carte\xff")
    if not well_formed:
        body = body.replace(b"</channel>", b"")
    url = feed_server.route("/damaged", body=body)
    p = project([url])
    with caplog.at_level(logging.WARNING, logger="feedcollector"):
        assert p.cycle().new_items == 2
    assert p.rows("SELECT title FROM items WHERE guid = '1'") == [
        {"title": "北京欢迎你 carte\ufffd"}
    ]
    (warning,) = [r.getMessage() for r in caplog.records if "undecodable" in r.getMessage()]
    assert url in warning
    assert "utf-8 with 1 undecodable byte sequence(s)" in warning


def test_windows_1252_bytes_in_a_western_utf8_feed_are_read_with_one_line_naming_the_feed(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    body = rss([Entry("Caf\u00e9 M\u00fcller", guid="1"), Entry("K\u00f6ln", guid="2")])
    body = body.replace("ü".encode(), b"\xfc")
    url = feed_server.route("/mixed", body=body)
    p = project([url])
    with caplog.at_level(logging.INFO, logger="feedcollector"):
        assert p.cycle().new_items == 2
    assert p.rows("SELECT title FROM items ORDER BY guid") == [
        {"title": "Caf\u00e9 M\u00fcller"},
        {"title": "K\u00f6ln"},
    ]
    (line,) = [r.getMessage() for r in caplog.records if "windows-1252" in r.getMessage()]
    assert url in line
    assert "1 byte sequence(s) of windows-1252 text mixed in" in line
    assert not [r for r in caplog.records if "undecodable" in r.getMessage()]


def test_a_body_in_a_coding_not_decoded_fails_with_the_coding_named(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    """Unknown codings pass through (servers name bogus ones over plain bodies, which then
    parse); one that was real left only "not a feed", and nothing about the coding."""
    body = rss([Entry("a", guid="a")])
    coded = feed_server.route(
        "/coded", body=zlib.compress(body), headers={"Content-Encoding": "x-foo"}
    )
    plain = feed_server.route("/plain", body=body, headers={"Content-Encoding": "utf-8"})
    p = project([coded, plain])
    report = p.cycle()
    assert (report.stored, report.failed) == (1, 1)
    (error,) = [
        row["last_error"] for row in p.rows("SELECT last_error FROM feeds") if row["last_error"]
    ]
    assert error.startswith("parse: ")
    assert error.endswith(
        "(the body came with Content-Encoding 'x-foo', which is not decoded; the server's "
        "setup may be at fault)"
    )


def test_image_results_are_written_while_a_slow_image_of_the_page_downloads(
    feed_server: FeedServer, project: Callable[..., Project], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The results of a page were written once all of its downloads ended: a process killed
    during a slow one left the others stored but unrecorded, downloaded again next time, and
    their objects to no row when the retries then failed."""
    monkeypatch.setattr(image_results, "RECORD_EVERY_S", 0.2)
    seen: list[list[tuple[int, str]]] = []

    def slow(request: BaseHTTPRequestHandler) -> None:
        for _ in range(300):  # what the collector has written meanwhile (30 s at most)
            rows = p.rows("SELECT position, status FROM image_tasks ORDER BY position")
            if rows and rows[0]["status"] == "success":
                break
            time.sleep(0.1)
        seen.append([(row["position"], row["status"]) for row in rows])
        send_ok(request, png(), "image/png")

    feed_server.route("/fast.png", body=png(), headers={"Content-Type": "image/png"})
    feed_server.route("/slow.png", handler=slow)
    html = '<img src="/fast.png"><img src="/slow.png">'
    url = feed_server.route(
        "/feed", body=rss([Entry("P", guid="p", content=html)], link=feed_server.url("/"))
    )
    p = project([url])
    report = p.cycle()
    assert seen == [[(0, "success"), (1, "pending")]]
    assert report.images_stored == 2
    assert [r["status"] for r in p.rows("SELECT status FROM image_tasks")] == ["success"] * 2


def test_missing_images_are_retried_an_hour_then_a_day_later_and_fail_at_three(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    """The third failure gives up, and says what to do: queue it again once its server serves
    it, or, for an image over ``[images] max_bytes``, raise the limit first (the server was
    never the trouble)."""
    html = '<img src="/missing.png"><img src="/page"><img src="/big.png">'
    url = feed_server.route(
        "/feed", body=rss([Entry("Pic", guid="p", content=html)], link=feed_server.url("/"))
    )
    feed_server.route(
        "/page", body=b"<html>not an image</html>", headers={"Content-Type": "text/html"}
    )
    feed_server.route("/big.png", body=png() + b"\0" * 2048, headers={"Content-Type": "image/png"})
    p = project([url], extra_toml='max_bytes = "1KiB"\n')
    for attempt in (1, 2, 3):
        with caplog.at_level(logging.INFO, logger="feedcollector"):
            p.cycle()
        rows = p.rows(
            "SELECT position, status, attempts, last_error FROM image_tasks ORDER BY position"
        )
        assert [r["attempts"] for r in rows] == [attempt] * 3
        assert [r["status"] for r in rows] == ["pending"] * 3 if attempt < 3 else ["failed"] * 3
        assert "404" in rows[0]["last_error"]
        assert "image" in rows[1]["last_error"].lower()
        assert "byte limit" in rows[2]["last_error"]
        p.clock.advance(minutes=1)
        p.cycle()
        assert len(feed_server.hits("/missing.png")) == attempt, "not again a minute later"
        if attempt < 3:
            p.clock.advance(seconds=store_images.RETRY_DELAYS[attempt - 1].total_seconds())
    assert len(feed_server.hits("/missing.png")) == 3, "a failed task is not tried again"
    assert p.rows("SELECT COUNT(*) AS n FROM items")[0]["n"] == 1
    given_up = {
        r.getMessage().split()[1].rsplit("/", 1)[1]: r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING
    }
    assert sorted(given_up) == ["big.png", "missing.png", "page"]
    assert "Once its server serves it again, queue it again with" in given_up["missing.png"]
    assert "raise [images] max_bytes in the config, then queue it again" in given_up["big.png"]


def test_an_unreachable_feed_host_is_tried_once_a_cycle(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    """Feeds of one host go one at a time: three feeds of a host that took no connection
    waited out three connect timeouts in a row. Now one is tried a cycle; the others are not
    requested (no failure counted, no backoff, a DEBUG line each) and due again a minute later."""
    dead = f"http://127.0.0.1:{closed_port()}"
    live = feed_server.route("/feed", body=rss([Entry("one", guid="1")]))
    one_at_a_time = '[schedule]\nhost_gap = "1ms"\njitter = 0\n'
    p = project([f"{dead}/a", f"{dead}/b", f"{dead}/c", live], schedule_toml=one_at_a_time)
    for cycle, failures in enumerate(([0, 0, 1], [0, 1, 1], [1, 1, 1])):
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="feedcollector"):
            report = p.cycle()
        assert report.new_items == (1 if cycle == 0 else 0)
        assert (report.failed, report.deferred) == (1, 2 - cycle)
        not_tried = [r for r in caplog.records if "not tried" in r.getMessage()]
        assert [r.levelno for r in not_tried] == [logging.DEBUG] * (2 - cycle)
        rows = p.rows(
            "SELECT consecutive_failures AS n, last_error, next_fetch_at FROM feeds "
            "WHERE url <> ? ORDER BY n",
            live,
        )
        assert [r["n"] for r in rows] == failures
        for row in rows:
            if row["n"] == 0:
                assert row["last_error"] is None
                assert row["next_fetch_at"] == format_timestamp(p.clock.now + timedelta(minutes=1))
            else:
                assert "refused the connection" in row["last_error"]
        p.clock.advance(minutes=1)


def test_image_tasks_stay_leased_for_as_long_as_their_page_may_take(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    """A page of 50 tasks at concurrency 1, each allowed a minute: the lease must outlast 50
    minutes of downloads (it was a fixed 15 min, and another collector took them over)."""
    seen: list[str] = []

    def image(request: Any) -> None:
        with sqlite3.connect(p.folder / "collector.db") as conn:
            seen.extend(row[0] for row in conn.execute("SELECT lease_until FROM image_tasks"))
        body = png()
        send_ok(request, body, "image/png")

    src = feed_server.route("/img/a.png", Route(handler=image))
    url = feed_server.route(
        "/feed", body=rss([Entry("pic", guid="p", content=f'<img src="{src}">')])
    )
    p = project([url], extra_toml='concurrency = 1\ndeadline = "1m"\n')
    p.cycle()
    assert seen == ["2026-03-02T10:40:00Z"], "START + 2 x 50 rounds x 1 min"
    assert p.rows("SELECT status, lease_until FROM image_tasks") == [
        {"status": "success", "lease_until": None}
    ]


def test_a_running_service_stops_its_image_stage_between_pages_once_feeds_fell_due(
    feed_server: FeedServer,
    project: Callable[..., Project],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Thousands of slow images held every feed back until they were all tried. Past its
    share (as long as the feeds took, 30 s at least: none here) the stage claims no page once
    a feed fell due; the next cycle fetches it, then goes on with the images left. ``run
    --once`` (no ``images_yield``) still downloads them all."""
    monkeypatch.setattr(pipeline, "images_share", lambda feeds_took: timedelta(0))

    def first_image(request: Any) -> None:
        p.clock.advance(minutes=10)  # while the first page downloads, the feeds fall due
        send_ok(request, png(), "image/png")

    sources = [feed_server.route("/img/0.png", Route(handler=first_image))]
    image = {"body": png(), "headers": {"Content-Type": "image/png"}}
    sources += [feed_server.route(f"/img/{n}.png", **image) for n in range(1, 60)]
    html = "".join(f'<img src="{src}">' for src in sources)
    url = feed_server.route("/feed", body=rss([Entry("pics", guid="p", content=html)]))
    p = project([{"url": url, "interval": "5m"}], extra_toml="concurrency = 1\n")

    with caplog.at_level(logging.INFO, logger="feedcollector"):
        p.cycle(images_yield=True)

    states = p.rows("SELECT status, COUNT(*) AS n FROM image_tasks GROUP BY status")
    assert states == [{"status": "pending", "n": 10}, {"status": "success", "n": 50}]
    assert re.search(r"images: feeds fell due after \d+s of image downloads", caplog.text)
    p.cycle()
    assert p.rows("SELECT COUNT(*) AS n FROM image_tasks WHERE status = 'success'") == [{"n": 60}]


def test_an_unreachable_image_host_is_tried_once_a_cycle(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    """One task of a host that took no connection is tried a cycle; its others are handed
    back uncharged instead of each waiting out a timeout (a host down for a while does not
    fail images it never tried), to rest ten minutes (a backlog handed back whole every cycle
    cost CPU in proportion), and the other hosts' images go on. A charged one waits for its
    retry (an hour), new ones first."""
    dead = f"http://127.0.0.1:{closed_port()}"
    ok = feed_server.route("/img/ok.png", body=png(), headers={"Content-Type": "image/png"})
    html = "".join(f'<img src="{dead}/{n}.png">' for n in range(3)) + f'<img src="{ok}">'
    url = feed_server.route("/feed", body=rss([Entry("pictures", guid="p", content=html)]))
    p = project([url], extra_toml="concurrency = 1\n")
    rest = image_stage.HOST_REST
    waits = {0: rest, 1: rest, 2: timedelta(hours=1)}
    for cycle, attempts in enumerate(([0, 0, 1], [0, 1, 1], [1, 1, 1], [1, 1, 2])):
        report = p.cycle()
        rows = p.rows(
            "SELECT attempts, status, last_error, lease_until FROM image_tasks "
            "WHERE original_url LIKE ? ORDER BY attempts",
            f"{dead}/%",
        )
        assert [r["attempts"] for r in rows] == attempts
        assert report.images_retry_later + report.images_failed == 1, "one attempt a cycle"
        for row in rows:
            assert row["lease_until"] is None, "handed back"
            if row["attempts"] == 0:
                assert (row["status"], row["last_error"]) == ("pending", None)
            else:
                assert "refused the connection" in row["last_error"]
        p.clock.advance(seconds=waits.get(cycle, timedelta(0)).total_seconds())
    assert p.rows("SELECT status FROM image_tasks WHERE original_url = ?", ok) == [
        {"status": "success"}
    ]


def test_images_already_on_their_way_to_a_dead_host_are_not_charged(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    """A soak of the cloud shape: the check for a dead host runs before the connect, so the
    attempts already in flight (``[images] concurrency``, 8) all went out and were all charged
    before the first refusal was known; a few minutes' outage charged every image."""
    dead = f"http://127.0.0.1:{closed_port()}"
    html = "".join(f'<img src="{dead}/{n}.png">' for n in range(12))
    url = feed_server.route("/feed", body=rss([Entry("pictures", guid="p", content=html)]))
    p = project([url])
    report = p.cycle()
    attempts = [r["attempts"] for r in p.rows("SELECT attempts FROM image_tasks")]
    assert sorted(attempts) == [0] * 11 + [1], "one image of the dead host pays, once"
    assert report.images_retry_later == 1


def test_private_image_addresses_are_refused_by_default(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    feed_server.route("/i.png", body=png(), headers={"Content-Type": "image/png"})
    url = feed_server.route(
        "/feed",
        body=rss([Entry("Pic", guid="p", content='<img src="/i.png">')], link=feed_server.url("/")),
    )
    p = project([url], allow_private_images=False)
    p.cycle()
    row = p.rows("SELECT status, attempts, last_error FROM image_tasks")[0]
    assert row["attempts"] == 1
    assert "private" in row["last_error"].lower()
    assert feed_server.hits("/i.png") == []


def test_a_feed_removed_from_the_file_keeps_its_data_but_is_not_fetched(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    kept = feed_server.route("/kept", body=rss([Entry("k", guid="k")]))
    dropped = feed_server.route("/dropped", body=rss([Entry("d", guid="d")]))
    p = project([kept, dropped])
    p.cycle()
    write_project(p.folder, [kept])
    p.clock.advance(hours=1)
    p.cycle()
    assert len(feed_server.hits("/dropped")) == 1
    assert len(feed_server.hits("/kept")) == 2
    assert p.rows("SELECT COUNT(*) AS n FROM items")[0]["n"] == 2
    assert p.rows("SELECT url, active FROM feeds ORDER BY url") == [
        {"url": dropped, "active": 0},
        {"url": kept, "active": 1},
    ]


def test_a_storage_failure_aborts_the_feed_and_the_next_cycle_completes_it(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    url = feed_server.route("/feed", body=rss([Entry("One", guid="1")]), etag='"x"')
    p = project([url])
    blocker = p.folder / "objects" / "backups"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("a file where the backups folder should be")
    report = p.cycle()
    assert report.aborted == 1
    row = p.rows(
        "SELECT last_fetched_at, consecutive_failures, next_fetch_at, lease_owner, last_etag FROM feeds"
    )[0]
    assert row == {
        "last_fetched_at": None,
        "consecutive_failures": 0,
        "next_fetch_at": "2026-03-02T09:00:00Z",
        "lease_owner": None,
        "last_etag": None,
    }
    assert p.rows("SELECT COUNT(*) AS n FROM items")[0]["n"] == 0
    blocker.unlink()
    p.clock.advance(minutes=1)
    assert p.cycle().stored == 1
    assert p.rows("SELECT COUNT(*) AS n FROM items")[0]["n"] == 1


# --- storage failing: the cycle's breaker ----------------------------------------------------------


def ten_feeds(feed_server: FeedServer, version: str) -> list[str]:
    """Ten feeds on the loopback server, each answering its ``version`` (a new ETag and item)."""
    return [
        feed_server.route(
            f"/f{n}",
            body=rss([Entry(f"{n} {version}", guid=f"{n}-{version}")]),
            etag=f'"{version}"',
        )
        for n in range(10)
    ]


def feed_hits(feed_server: FeedServer) -> int:
    return sum(len(feed_server.hits(f"/f{n}")) for n in range(10))


def test_a_cycle_that_could_claim_no_feed_says_storage_failed() -> None:
    """A database locked past its timeout read "0 feeds (... 0 aborted by storage errors)",
    as if nothing had been due."""
    report = CycleReport(started=START)
    report.storage_failing = "database: locked"
    assert "cycle" not in report.summary()
    assert report.summary().startswith("0 feeds (0 updated")
    assert "), no feed claimed (storage failing, see above), 0 new items" in report.summary()


@pytest.mark.parametrize("concurrency", [1, 4])
def test_storage_failing_stops_the_cycle_after_a_few_aborts_and_leaves_the_rest_untouched(
    feed_server: FeedServer,
    project: Callable[..., Project],
    caplog: pytest.LogCaptureFixture,
    concurrency: int,
) -> None:
    """A full disk or a revoked key aborted every due feed alike, each one downloaded first and
    logged: a thousand requests and ERROR lines a minute for a thousand feeds, none storable."""
    urls = ten_feeds(feed_server, "v1")
    p = project(urls, extra_toml=f"[fetch]\nconcurrency = {concurrency}\n")
    assert p.cycle().stored == 10
    ten_feeds(feed_server, "v2")  # every feed has something new to store
    before = p.rows("SELECT * FROM feeds ORDER BY id")
    backups = p.folder / "objects" / "backups"
    backups.rename(p.folder / "objects" / "kept")
    backups.write_text("a file where the backups folder goes: every backup write fails")
    p.clock.advance(hours=1)
    requested = feed_hits(feed_server)

    with caplog.at_level(logging.INFO, logger="feedcollector"):
        report = p.cycle()
    sent = feed_hits(feed_server) - requested
    in_flight = concurrency - 1  # started before the third abort came back
    assert STORAGE_TRIP_AFTER <= sent <= STORAGE_TRIP_AFTER + in_flight
    assert (report.feeds, report.aborted, report.stored) == (sent, sent, 0)
    assert report.left == 10 - sent
    assert f"{10 - sent} feeds left for the next cycle (storage failing)" in report.summary()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len([e for e in errors if "aborted for this cycle" in e]) == sent
    (failing,) = [e for e in errors if e.startswith("storage: failing,")]
    assert f"{10 - sent} claimed feeds were not requested" in failing
    assert report.storage_failing is not None
    assert "backups" in report.storage_failing
    assert f"(the last: {report.storage_failing})" in failing
    assert len(errors) == sent + 1
    loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert loud == errors, "an aborted feed's outcome line repeated its ERROR as a WARNING"
    assert p.rows("SELECT * FROM feeds ORDER BY id") == before, "no feed's row changed"

    p.clock.advance(minutes=1)
    requested = feed_hits(feed_server)
    again = p.cycle()
    assert again.aborted >= STORAGE_TRIP_AFTER, "the next cycle probes storage afresh"
    assert feed_hits(feed_server) - requested == again.feeds <= STORAGE_TRIP_AFTER + in_flight

    backups.unlink()
    (p.folder / "objects" / "kept").rename(backups)
    p.clock.advance(minutes=1)
    fixed = p.cycle()
    assert (fixed.stored, fixed.new_items, fixed.left, fixed.storage_failing) == (10, 10, 0, None)
    assert p.rows("SELECT COUNT(*) AS n FROM items") == [{"n": 20}]
    assert p.rows("SELECT DISTINCT last_etag FROM feeds") == [{"last_etag": '"v2"'}]


def test_feeds_a_stop_aborts_by_giving_up_on_the_database_do_not_trip_the_breaker(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    """A stop gives up waiting for storage (10 s at most: a slow D1 Worker, another process's
    SQLite write lock): the feeds that aborts were counted as an outage, and its ERROR
    tripped alerts on a plain SIGTERM."""
    urls = [
        feed_server.route(f"/s{n}", Route(body=rss([Entry("a", guid=f"{n}")]), delay_s=0.3))
        for n in range(6)
    ]
    p = project(urls, extra_toml="[fetch]\nconcurrency = 6\n")
    p.cycle(force=True)  # the database exists; the feeds are due again an hour later
    for n in range(6):
        feed_server.route(f"/s{n}", Route(body=rss([Entry("b", guid=f"b{n}")]), delay_s=0.3))
    p.clock.advance(hours=1)
    lock = sqlite3.connect(p.folder / "collector.db", isolation_level=None)

    async def stopped_mid_cycle() -> tuple[CycleReport, bool]:
        async with open_collector(load_settings(p.config), clock=p.clock) as collector:
            cycle = asyncio.create_task(run_cycle(collector))
            while len(feed_server.hits("/s0")) < 2:
                await asyncio.sleep(0.01)
            lock.execute("BEGIN IMMEDIATE")  # another process's write lock
            collector.stopping.set()
            collector.stop_waiting_for_database(timedelta(seconds=0.5))
            report = await cycle
            lock.execute("ROLLBACK")
            return report, collector.gave_up_on_database

    with caplog.at_level(logging.ERROR, logger="feedcollector"):
        report, gave_up = asyncio.run(stopped_mid_cycle())
    lock.close()
    assert gave_up
    assert report.aborted >= STORAGE_TRIP_AFTER
    assert report.storage_failing is None
    assert not [r for r in caplog.records if r.getMessage().startswith("storage: failing")]


def test_a_forced_fetch_of_every_feed_stops_as_a_cycle_does_when_storage_fails(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    """``fetch --all`` claims the feeds by id, not by due time: it goes through the same
    breaker, and hands the feeds it did not start back with their schedule as it was."""
    p = project(ten_feeds(feed_server, "v1"), extra_toml="[fetch]\nconcurrency = 1\n")
    (p.folder / "objects").mkdir()
    (p.folder / "objects" / "backups").write_text("not a folder")
    report = p.cycle(force=True)
    assert feed_hits(feed_server) == STORAGE_TRIP_AFTER
    assert (report.aborted, report.left) == (STORAGE_TRIP_AFTER, 10 - STORAGE_TRIP_AFTER)
    assert p.rows("SELECT DISTINCT last_fetched_at, lease_owner FROM feeds") == [
        {"last_fetched_at": None, "lease_owner": None}
    ]


def outcome(state: str, error_kind: str | None = None) -> FeedOutcome:
    feed = Feed(id="f", url="https://blog.example/feed")
    error = f"storage: {state}" if state == "aborted" else None
    return FeedOutcome(feed, Clock()(), state=state, error=error, error_kind=error_kind)


def trips(*states: str | FeedOutcome) -> list[bool]:
    breaker = StorageBreaker()
    return [breaker.record(s if isinstance(s, FeedOutcome) else outcome(s)) for s in states]


def test_the_breaker_trips_once_at_the_third_storage_abort_in_a_row() -> None:
    assert STORAGE_TRIP_AFTER == 3
    assert trips("aborted", "aborted", "aborted", "aborted") == [False, False, True, False]


@pytest.mark.parametrize("state", ["stored", "failed", "gone", "deferred"])
def test_a_feed_whose_row_was_written_resets_the_count(state: str) -> None:
    assert not any(trips("aborted", "aborted", state, "aborted", "aborted"))


@pytest.mark.parametrize("state", ["not_modified", "unchanged"])
def test_a_feed_whose_row_waits_for_the_batch_neither_counts_nor_resets(state: str) -> None:
    """A 304 writes nothing until the cycle's batch: on a full disk most feeds answer 304, and
    if each one reset the count the breaker would never trip."""
    assert trips("aborted", state, "aborted", state, state) == [False] * 5
    assert trips("aborted", state, "aborted", state, "aborted") == [False] * 4 + [True]


def test_a_database_refusing_a_feed_as_too_large_is_no_storage_abort() -> None:
    """D1 refusing one feed's items (``TOO_LARGE``) is that feed's failure, written as such:
    the database took the write, so storage works."""
    too_large = outcome("failed", TOO_LARGE)
    assert not any(trips("aborted", "aborted", too_large, "aborted", "aborted"))
    assert not any(trips(too_large, too_large, too_large))


def test_the_breaker_quotes_the_last_storage_abort() -> None:
    breaker = StorageBreaker()
    for n in range(3):
        breaker.record(FeedOutcome(Feed(id="f", url="u"), Clock()(), "aborted", error=f"e{n}"))
    assert (breaker.tripped, breaker.last_error) == (True, "e2")


def test_forced_fetch_ignores_the_schedule(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    a = feed_server.route("/a", body=rss([Entry("a", guid="a")]))
    b = feed_server.route("/b", body=rss([Entry("b", guid="b")]))
    p = project([a, b])
    p.cycle()
    assert p.cycle().feeds == 0
    assert p.cycle(force=True, urls=[b]).feeds == 1
    assert p.cycle(force=True).feeds == 2
    assert (len(feed_server.hits("/a")), len(feed_server.hits("/b"))) == (2, 3)


def test_fetches_within_one_second_keep_a_backup_each(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    """A backup's key holds whole seconds: ``fetch`` run twice in a row replaced the first
    body's backup with the second's, and left the first's Content-Type beside it, so a
    restore read the second body in the first one's charset."""
    route = Route(
        body=rss([Entry("\u043a\u043e\u0442", guid="a")], encoding="koi8-r", declare=False),
        headers={"Content-Type": "application/rss+xml; charset=KOI8-R"},
    )
    url = feed_server.route("/feed", route)
    p = project([url])
    p.cycle(force=True)
    route.body = rss([Entry("\u043a\u043e\u0442", guid="a"), Entry("b", guid="b")])
    route.headers = {"Content-Type": "application/rss+xml"}
    p.cycle(force=True)
    feed_id = feed_id_for(url)
    first, second = (
        f"backups/{feed_id}/2026-03-02T09:00:00Z",
        f"backups/{feed_id}/2026-03-02T09:00:01Z",
    )
    assert p.keys("backups") == [f"{first}.content-type", f"{first}.xml", f"{second}.xml"]
    assert p.object(f"{second}.xml") == route.body
    assert p.rows("SELECT guid, created_at FROM items ORDER BY guid") == [
        {"guid": "a", "created_at": "2026-03-02T09:00:00Z"},
        {"guid": "b", "created_at": "2026-03-02T09:00:01Z"},
    ]


def test_a_failed_fetchs_backup_is_kept_from_a_fetch_within_its_second(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    """A body that does not parse is backed up, but its fetch leaves ``last_fetched_at`` as it
    was: the next fetch within that second replaced its backup (the seed keeps failed bodies
    too), and left its KOI8-R Content-Type beside a Latin-1 body, read so on restore."""
    route = Route(body=b"not a feed at all", headers={"Content-Type": "text/xml; charset=koi8-r"})
    url = feed_server.route("/feed", route)
    p = project([url])
    p.cycle(force=True)
    assert p.rows("SELECT consecutive_failures, last_fetched_at FROM feeds") == [
        {"consecutive_failures": 1, "last_fetched_at": None}
    ]
    route.body = rss([Entry("cr\u00e8me", guid="a")], encoding="iso-8859-1")
    route.headers = {"Content-Type": "application/rss+xml"}
    p.cycle(force=True)
    feed_id = feed_id_for(url)
    failed, stored = (
        f"backups/{feed_id}/2026-03-02T09:00:00Z",
        f"backups/{feed_id}/2026-03-02T09:00:01Z",
    )
    assert p.keys("backups") == [f"{failed}.content-type", f"{failed}.xml", f"{stored}.xml"]
    assert p.object(f"{failed}.xml") == b"not a feed at all"
    assert p.rows("SELECT consecutive_failures, last_fetched_at FROM feeds") == [
        {"consecutive_failures": 0, "last_fetched_at": "2026-03-02T09:00:01Z"}
    ]


def test_a_manual_fetch_names_who_holds_a_feed_it_skips(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    """``fetch`` said that another collector was fetching the feed right now, and no more."""
    url = feed_server.route("/a", body=rss([Entry("a", guid="a")]))
    p = project([url])
    p.cycle()
    until = "2026-03-02T09:14:00Z"
    p.execute("UPDATE feeds SET lease_owner = 'elsewhere:1:ab', lease_until = ?", until)
    with caplog.at_level(logging.WARNING):
        assert p.cycle(force=True).feeds == 0
    assert [r.getMessage() for r in caplog.records] == [
        f"fetch: {url} skipped: collector elsewhere:1:ab holds it until {until} (fetching it "
        "now, or stopped before it let go)",
    ]


def test_a_manual_fetch_takes_back_the_feeds_a_killed_fetch_held(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    """A `fetch --all` killed (SIGTERM, SIGHUP, kill -9) held feeds that are not due, which
    the take-back at a cycle's start (due feeds only) leaves alone: the same `fetch --all`
    run again skipped every one of them for 15 minutes, saying that their holder had
    stopped. Now it takes them back, as `run` does a due feed's, and fetches them."""
    urls = [feed_server.route(f"/{n}", body=rss([Entry("a", guid="a")])) for n in "abc"]
    p = project(urls)
    p.cycle()
    gone = owner_name(_ended_pid(), "0f0f0f0f")
    p.execute(
        "UPDATE feeds SET lease_owner = ?, lease_until = '2026-03-02T09:14:00Z' WHERE url != ?",
        gone,
        urls[2],
    )
    p.execute(
        "UPDATE feeds SET lease_owner = 'elsewhere:1:ab', lease_until = "
        "'2026-03-02T09:14:00Z' WHERE url = ?",
        urls[2],
    )
    with caplog.at_level(logging.WARNING):
        assert p.cycle(force=True).feeds == 2
    assert [len(feed_server.hits(f"/{n}")) for n in "abc"] == [2, 2, 1]
    assert [r.getMessage() for r in caplog.records] == [
        f"schedule: took back 2 feeds from collector {gone} of this machine, whose process "
        "stopped without letting go (killed?)",
        f"fetch: {urls[2]} skipped: collector elsewhere:1:ab holds it until "
        "2026-03-02T09:14:00Z (fetching it now, or stopped before it let go)",
    ]
    assert p.rows("SELECT lease_owner FROM feeds WHERE lease_owner IS NOT NULL") == [
        {"lease_owner": "elsewhere:1:ab"}
    ]


def test_the_image_tasks_a_killed_collector_leased_are_taken_back(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    """A collector killed in its image stage (kill -9, the OOM killer) left its page of tasks
    leased for half an hour, and no cycle downloaded them meanwhile: image tasks had no
    owner to judge. Now the next process of this machine takes them back at its start, as it
    takes back feeds; a task another machine's collector leased stays its own."""
    for name in "ab":
        feed_server.route(f"/img/{name}.png", body=png(), headers={"Content-Type": "image/png"})
    images = '<img src="/img/a.png"><img src="/img/b.png">'
    body = rss([Entry("A", guid="a", content=images)], link=feed_server.url("/"))
    p = project([feed_server.route("/feed.xml", body=body)])
    p.cycle()
    gone = owner_name(_ended_pid(), "0f0f0f0f")
    p.execute(
        "UPDATE image_tasks SET status = 'pending', r2_key = NULL, lease_until = "
        "'2026-03-02T09:40:00Z', lease_owner = CASE position WHEN 0 THEN ? "
        "ELSE 'elsewhere:1:ab' END",
        gone,
    )
    p.clock.now += timedelta(minutes=1)
    with caplog.at_level(logging.WARNING):
        report = p.cycle()
    assert report.images_stored == 1
    tasks = p.rows("SELECT status, lease_owner, lease_until FROM image_tasks ORDER BY position")
    assert [(task["status"], task["lease_until"]) for task in tasks] == [
        ("success", None),
        ("pending", "2026-03-02T09:40:00Z"),
    ]
    assert tasks[0]["lease_owner"] != gone, "this process leased it again, and downloaded it"
    assert tasks[1]["lease_owner"] == "elsewhere:1:ab"
    assert [r.getMessage() for r in caplog.records if "took back" in r.getMessage()] == [
        f"images: took back 1 image task from collector {gone} of this machine, whose process "
        "stopped without letting go (killed?)"
    ]


@pytest.mark.parametrize("force", [False, True])
def test_the_feeds_a_stopped_collector_of_this_machine_held_are_taken_back(
    feed_server: FeedServer,
    project: Callable[..., Project],
    caplog: pytest.LogCaptureFixture,
    force: bool,
) -> None:
    """A collector killed, or gone while the database did not answer, left its feeds claimed
    for 15 minutes; the next `run --once` skipped them without a word. A live collector of
    this machine, and one of another machine, keep theirs; so do one of another container of
    this host name (another pid namespace: its pid means nothing here; it was taken back and
    its feed fetched twice) and one of a version that did not name its namespace."""
    urls = [feed_server.route(f"/{n}", body=rss([Entry("a", guid="a")])) for n in range(6)]
    p = project(urls)
    p.cycle()
    host = socket.gethostname()
    ended = _ended_pid()
    gone = owner_name(ended, "0f0f0f0f")
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    owners = [
        gone,
        gone,
        owner_name(live.pid, "11111111"),
        "elsewhere:1:ab",
        f"{host}:{ended}@0badf00d:22222222",
        f"{host}:{ended}:33333333",
    ]
    for url, owner in zip(urls, owners, strict=True):
        p.execute(
            "UPDATE feeds SET lease_owner = ?, lease_until = '2026-03-02T09:14:00Z', "
            "next_fetch_at = '2026-03-02T09:00:00Z' WHERE url = ?",
            owner,
            url,
        )
    try:
        with caplog.at_level(logging.WARNING):
            report = p.cycle(force=force)
    finally:
        live.kill()
        live.wait()
    assert (report.feeds, len(feed_server.hits("/0")), len(feed_server.hits("/2"))) == (2, 2, 1)
    assert (len(feed_server.hits("/4")), len(feed_server.hits("/5"))) == (1, 1)
    held = p.rows("SELECT lease_owner FROM feeds WHERE lease_owner IS NOT NULL ORDER BY url")
    assert [row["lease_owner"] for row in held] == owners[2:]
    assert [r.getMessage() for r in caplog.records if "took back" in r.getMessage()] == [
        f"schedule: took back 2 feeds from collector {gone} of this machine, whose process "
        "stopped without letting go (killed?)"
    ]


def test_a_collector_hands_back_the_feeds_it_still_holds_when_it_leaves(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    """A claim the database took but whose answer was lost kept the feed from every
    collector for 15 minutes after this one had exited normally."""
    p = project([feed_server.route("/feed", body=rss([Entry("a", guid="a")]))])
    p.cycle()

    async def claim_answer_lost() -> None:
        async with open_collector(load_settings(p.config), clock=p.clock) as collector:
            collector.claims_feeds = True  # as claiming marks it
            await collector.db.query(
                "UPDATE feeds SET lease_owner = ?, lease_until = '2099-01-01T00:00:00Z'",
                (collector.owner,),
            )

    asyncio.run(claim_answer_lost())
    assert p.rows("SELECT lease_owner, lease_until FROM feeds") == [
        {"lease_owner": None, "lease_until": None}
    ]


def test_a_collector_that_cannot_hand_back_its_feeds_says_so(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    """The database gone as it left (a Worker stopped mid-cycle): the feeds it still held were
    skipped for 15 minutes, and only a DEBUG line said why."""
    p = project([feed_server.route("/feed", body=rss([Entry("a", guid="a")]))])

    async def leave_with_the_database_gone() -> None:
        async with open_collector(load_settings(p.config), clock=p.clock) as collector:
            collector.claims_feeds = True
            await collector.db.close()

    with caplog.at_level(logging.WARNING):
        asyncio.run(leave_with_the_database_gone())
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.endswith(
        "; the feeds this collector holds stay claimed until their leases run out (15 minutes "
        "after their claim, or twice [fetch] deadline), unless a collector started on this "
        "machine takes them back first"
    )


def test_a_collector_that_claimed_nothing_leaves_without_a_write(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    """``items`` and ``item`` only read, yet handed back leases they never took as they
    closed: behind another process's write lock they waited for it, 30 s by default."""
    p = project([feed_server.route("/feed", body=rss([Entry("a", guid="a")]))])
    p.cycle()
    counted: list[CountingDatabase] = []

    async def read_only() -> None:
        async with open_collector(load_settings(p.config), clock=p.clock) as collector:
            collector.db = CountingDatabase(collector.db)
            counted.append(collector.db)
            await collector.db.query("SELECT guid FROM items")

    asyncio.run(read_only())
    assert counted[0].round_trips == 1


def _ended_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_an_unexpected_error_fails_only_its_feed_and_is_recorded(
    feed_server: FeedServer,
    project: Callable[..., Project],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug (an exception no stage promises) is injected: it cannot be produced for real."""
    import feedcollector.read_body as read_body

    real_decode = read_body.decode_feed

    def buggy_decode(body: bytes, content_type: str | None) -> Any:
        if b"trigger-bug" in body:
            raise RuntimeError("a bug in a stage")
        return real_decode(body, content_type)

    monkeypatch.setattr(read_body, "decode_feed", buggy_decode)
    good = feed_server.route("/good", body=rss([Entry("fine", guid="1")]))
    bad = feed_server.route("/bad", body=rss([Entry("trigger-bug", guid="2")]))
    p = project([good, bad])
    with caplog.at_level(logging.ERROR, logger="feedcollector"):
        report = p.cycle()
    assert (report.stored, report.failed) == (1, 1)
    (row,) = p.rows("SELECT * FROM feeds WHERE url = ?", bad)
    assert row["consecutive_failures"] == 1
    assert row["last_error"] == "internal: RuntimeError: a bug in a stage"
    assert row["next_fetch_at"] == "2026-03-02T09:30:00Z", "backed off like any failure"
    assert p.rows("SELECT guid FROM items") == [{"guid": "1"}]
    (logged,) = [r for r in caplog.records if r.getMessage().startswith("internal: unexpected")]
    assert bad in logged.getMessage()
    assert logged.exc_info is not None


def test_an_unexpected_error_fails_only_its_image_attempt(
    feed_server: FeedServer,
    project: Callable[..., Project],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug in a download (injected) counts as that task's attempt: before, it raised out of
    the image stage and ended the cycle, as a malformed IDNA host (``xn--``) once did."""
    import feedcollector.image_stage as image_stage

    real_download = image_stage.download_image

    async def buggy_download(client: Any, url: str, **kwargs: Any) -> Any:
        if "trigger-bug" in url:
            raise RuntimeError("a bug in a download")
        return await real_download(client, url, **kwargs)

    monkeypatch.setattr(image_stage, "download_image", buggy_download)
    ok = feed_server.route("/img/ok.png", body=png(), headers={"Content-Type": "image/png"})
    html = f'<img src="{feed_server.url("/img/trigger-bug.png")}"><img src="{ok}">'
    url = feed_server.route("/feed", body=rss([Entry("pictures", guid="p", content=html)]))
    p = project([url])
    with caplog.at_level(logging.ERROR, logger="feedcollector"):
        p.cycle()
    rows = p.rows("SELECT position, status, attempts, last_error FROM image_tasks ORDER BY 1")
    assert rows == [
        {
            "position": 0,
            "status": "pending",
            "attempts": 1,
            "last_error": "image: internal: RuntimeError('a bug in a download')",
        },
        {"position": 1, "status": "success", "attempts": 1, "last_error": None},
    ]
    (logged,) = [r for r in caplog.records if r.getMessage().startswith("internal: unexpected")]
    assert "trigger-bug" in logged.getMessage()
    assert logged.exc_info is not None


def test_an_image_whose_item_was_deleted_during_its_download_is_not_kept(
    feed_server: FeedServer,
    project: Callable[..., Project],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Retention may delete an item (and its image tasks) while its image downloads: the
    object put afterwards would belong to no row and outlive every cleanup."""
    import feedcollector.image_stage as image_stage

    real_download = image_stage.download_image

    async def download_then_expire(client: Any, url: str, **kwargs: Any) -> Any:
        image = await real_download(client, url, **kwargs)
        if "gone" in url:  # what a cleanup's batch does meanwhile
            with sqlite3.connect(p.folder / "collector.db") as conn:
                conn.execute(
                    "INSERT INTO item_tombstones (feed_id, guid, deleted_at) "
                    "SELECT feed_id, guid, created_at FROM items WHERE guid = 'gone'"
                )
                conn.execute(
                    "DELETE FROM image_tasks WHERE item_id IN "
                    "(SELECT id FROM items WHERE guid = 'gone')"
                )
                conn.execute("DELETE FROM items WHERE guid = 'gone'")
        return image

    feed_server.route("/img/gone.png", body=png(), headers={"Content-Type": "image/png"})
    feed_server.route("/img/kept.png", body=png(), headers={"Content-Type": "image/png"})
    entries = [
        Entry("Gone", guid="gone", content=f'<img src="{feed_server.url("/img/gone.png")}">'),
        Entry("Kept", guid="kept", content=f'<img src="{feed_server.url("/img/kept.png")}">'),
    ]
    url = feed_server.route("/feed", body=rss(entries))
    p = project([url])
    monkeypatch.setattr(image_stage, "download_image", download_then_expire)
    with caplog.at_level(logging.INFO, logger="feedcollector"):
        report = p.cycle()
    (task,) = p.rows("SELECT status, r2_key FROM image_tasks")
    assert task["status"] == "success"
    assert p.keys("images") == [task["r2_key"]], "no image object without its task row"
    assert report.images_stored == 1
    (logged,) = [r.getMessage() for r in caplog.records if "retention deleted" in r.getMessage()]
    assert f"images/{feed_id_for(url)}/{md5_8('gone')}/0.png" in logged


def test_unreadable_dates_are_logged_with_feed_and_title_and_bounded(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    """The seed's log line (raw pubDate, feed URL, item title) for each item stored with the
    fetch time; a feed of thousands such items, or of a megabyte-long date, stays readable."""
    entries = [Entry("Odd one", guid="odd", pub_date="le 3 mars, vers midi")]
    entries.append(Entry("Long " * 100, guid="long", pub_date="x" * 1_000_000))
    entries += [Entry(f"n{n}", guid=f"n{n}", pub_date="soon") for n in range(30)]
    url = feed_server.route("/feed", body=rss(entries))
    p = project([url])
    with caplog.at_level(logging.WARNING, logger="feedcollector"):
        p.cycle()
    lines = [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]
    assert lines[0] == (
        f"parse: unreadable pubDate 'le 3 mars, vers midi' in feed {url}, item 'Odd one': "
        "stored with the fetch time"
    )
    assert len(lines) == 21
    assert lines[-1] == (
        f"parse: 12 more items of feed {url} have unreadable dates (not listed), stored with "
        "the fetch time"
    )
    assert max(len(line) for line in lines) < 600
    assert p.rows("SELECT COUNT(*) AS n FROM items WHERE pub_date = created_at") == [{"n": 32}]


def test_items_beyond_the_per_feed_cap_are_dropped_with_a_warning(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    from feedcollector.parse_common import MAX_ITEMS_PER_FEED

    total = MAX_ITEMS_PER_FEED + 25
    url = feed_server.route("/huge", body=rss([Entry(f"t{n}", guid=f"g{n}") for n in range(total)]))
    p = project([url])
    with caplog.at_level(logging.WARNING, logger="feedcollector"):
        p.cycle()
    assert p.rows("SELECT COUNT(*) AS n FROM items")[0]["n"] == MAX_ITEMS_PER_FEED
    (warning,) = [r.getMessage() for r in caplog.records if "more than" in r.getMessage()]
    assert url in warning
    assert "25 more were not read" in warning


def test_a_feeds_file_emptied_of_feeds_is_said_with_a_warning(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    """``feeds: []`` while run runs unsubscribed every feed with an INFO line, where an
    empty or deleted file is an ERROR that keeps them: an editor's slip as often as a wish."""
    url = feed_server.route("/feed", body=rss([Entry("a", guid="a")]))
    p = project([url])
    p.cycle()
    (p.folder / "feeds.yaml").write_text("feeds: []\n")
    p.clock.advance(hours=1)
    with caplog.at_level(logging.INFO, logger="feedcollector"):
        assert p.cycle().feeds == 0
    (warning,) = [r for r in caplog.records if "lists no feeds now" in r.getMessage()]
    assert warning.levelno == logging.WARNING
    assert "all 1 feeds were removed from the schedule" in warning.getMessage()
    assert p.rows("SELECT active, (SELECT COUNT(*) FROM items) AS items FROM feeds") == [
        {"active": 0, "items": 1}
    ]


def test_an_unchanged_feeds_file_is_not_synced_again(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    """The file's digest in the database stands for "the feeds table follows these bytes"."""
    url = feed_server.route("/feed", body=rss([Entry("a", guid="a")]))
    p = project([url])
    p.cycle()
    digest = hashlib.sha256((p.folder / "feeds.yaml").read_bytes()).hexdigest()
    state = "SELECT value FROM collector_state WHERE key = 'feeds_file_sha256'"
    assert p.rows(state) == [{"value": digest}]
    p.execute("UPDATE feeds SET active = 0")  # a state the file does not describe
    p.clock.advance(hours=1)
    p.cycle()
    assert p.rows("SELECT active FROM feeds") == [{"active": 0}]

    (p.folder / "feeds.yaml").write_text(f"# edited\nfeeds:\n  - {url}\n")
    p.cycle()
    assert p.rows("SELECT active FROM feeds") == [{"active": 1}]
    assert p.rows(state)[0]["value"] != digest


def test_collectors_with_different_feeds_files_on_one_database_switch_no_feed_off(
    feed_server: FeedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each removed the feeds only the other's file listed and put its own back: a feed was
    switched off and on every minute and fetched at each switch (a 410 Gone one too). Feeds
    another live collector's file lists now stay scheduled, with one WARNING."""
    one = feed_server.route("/one", body=rss([Entry("1", guid="1")]))
    two = feed_server.route("/two", body=rss([Entry("2", guid="2")]))
    clock = Clock()
    collectors = []
    for name, feeds in (("laptop", [one, two]), ("server", [one])):
        folder = tmp_path / name
        folder.mkdir()
        config = write_project(folder, feeds)
        shared = config.read_text().replace('path = "', 'path = "../')
        config.write_text(shared)
        collectors.append(Project(folder, config, clock))
    laptop, server = collectors
    with caplog.at_level(logging.INFO, logger="feedcollector"):
        for _ in range(3):
            laptop.cycle()
            server.cycle()
            clock.advance(minutes=1)
    with sqlite3.connect(tmp_path / "collector.db") as conn:
        assert conn.execute("SELECT url, active FROM feeds ORDER BY url").fetchall() == [
            (one, 1),
            (two, 1),
        ]
    assert len(feed_server.hits("/two")) == 1
    kept = [r.getMessage() for r in caplog.records if "another collector" in r.getMessage()]
    assert kept, caplog.text
    assert "does not list stay scheduled (1) until no other file is in the way" in kept[0]
    synced = [r.getMessage() for r in caplog.records if "synced" in r.getMessage()]
    assert not [line for line in synced if "0 removed" not in line]

    (tmp_path / "laptop" / "feeds.yaml").write_bytes(
        (tmp_path / "server" / "feeds.yaml").read_bytes()
    )
    laptop.cycle()  # both files alike now: the feed neither lists leaves the schedule
    server.cycle()
    with sqlite3.connect(tmp_path / "collector.db") as conn:
        assert conn.execute("SELECT url, active FROM feeds ORDER BY url").fetchall() == [
            (one, 1),
            (two, 0),
        ]


def test_fetch_concurrency_above_twenty_is_real(project: Callable[..., Project]) -> None:
    """``[fetch] concurrency`` allows 1 to 1000 workers, and each needs a connection of its
    own: a pool of 20 held the rest back (and their wait counted as connect time)."""
    hosts = 25
    gathered = threading.Barrier(hosts, timeout=10)
    peak: list[int] = []

    def when_all_are_in(request: Any) -> None:
        try:
            gathered.wait()
            peak.append(hosts)
        except threading.BrokenBarrierError:
            peak.append(0)
        body = rss([Entry("one", guid="1")])
        send_ok(request, body, "application/rss+xml")

    servers = [FeedServer() for _ in range(hosts)]
    for server in servers:
        server.__enter__()
    try:
        urls = [s.route("/feed", Route(handler=when_all_are_in)) for s in servers]
        p = project(urls, extra_toml=f"[fetch]\nconcurrency = {hosts}\n")
        report = p.cycle()
    finally:
        for server in servers:
            server.__exit__(None, None, None)
    assert peak == [hosts] * hosts, "every request was in flight at once"
    assert report.new_items == hosts


def test_a_feed_stays_leased_for_as_long_as_its_fetch_may_take(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    """``[fetch] deadline`` may be longer than the 15 min lease a claim used to take: the lease
    ran out while the feed was still being fetched, and a second collector fetched it too."""
    body = rss([Entry("one", guid="1")])
    in_flight, release = threading.Event(), threading.Event()

    def first_one_hangs(request: Any) -> None:
        if not in_flight.is_set():
            in_flight.set()
            release.wait()
        send_ok(request, body, "application/rss+xml")

    url = feed_server.route("/feed", Route(handler=first_one_hangs))
    p = project([url], extra_toml='[fetch]\ndeadline = "40m"\n')
    first: list[CycleReport] = []
    collector_a = threading.Thread(target=lambda: first.append(p.cycle()))
    collector_a.start()
    try:
        assert in_flight.wait(60), "the first collector sent its request"
        p.clock.advance(minutes=30)  # within the first fetch's deadline
        second = p.cycle()
    finally:
        release.set()
        collector_a.join()
    assert second.feeds == 0, "the feed was still leased to the first collector"
    assert len(feed_server.hits("/feed")) == 1
    assert (first[0].feeds, first[0].new_items) == (1, 1)


def test_an_item_over_ten_megabytes_is_read_within_the_body_cap(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    """``[fetch] max_body_bytes`` (20 MiB) lets a feed carry an item of over 10 MB (images
    inlined as data: URLs), but lxml refuses a text node that long unless told otherwise, and
    the lenient parser then took at most 4 MiB: the whole feed failed on every fetch."""
    huge = "<p>" + "x" * 11_000_000 + "</p>"
    body = rss([Entry("huge", guid="huge", content=huge), Entry("small", guid="small")])
    url = feed_server.route("/feed", body=body, headers={"Content-Type": "application/rss+xml"})
    p = project([url])
    report = p.cycle()
    assert (report.stored, report.failed, report.new_items) == (1, 0, 2)
    (spilled,) = p.rows("SELECT content_key FROM items WHERE guid = 'huge'")
    assert p.object(spilled["content_key"]).decode() == huge


def test_items_are_dated_when_they_are_stored_so_a_consumer_resuming_misses_none(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """A slow feed (its answer takes 1.5 s) and a quick one on another host, fetched together
    with the real clock: the slow one's items are stored last, so they must not be dated
    before the quick one's. Dated by the fetch's start, they were; a consumer that had read
    the quick feed's items and resumed from their ``created_at`` (``items --since``, the
    documented way) never saw the slow feed's."""
    with FeedServer() as other_host:
        slow = feed_server.route("/slow", body=rss([Entry("slow", guid="s")]), delay_s=1.5)
        quick = other_host.route("/quick", body=rss([Entry("quick", guid="q")]))
        config = write_project(tmp_path, [slow, quick])

        async def cycle() -> CycleReport:
            async with open_collector(load_settings(config)) as collector:  # the real clock
                return await run_cycle(collector)

        assert asyncio.run(cycle()).stored == 2
    with sqlite3.connect(tmp_path / "collector.db") as conn:
        dated = dict(conn.execute("SELECT guid, created_at FROM items"))
        fetched = dict(conn.execute("SELECT url, last_fetched_at FROM feeds"))
    assert dated["s"] > dated["q"], dated
    assert fetched[slow] < dated["s"], "the feed keeps the time its fetch began"


def test_a_batch_written_after_another_is_never_dated_before_it(
    feed_server: FeedServer, project: Callable[..., Project]
) -> None:
    """A batch dated when it was sent can be written after a later-dated one (it waited for
    another process's lock, for an event loop busy with other batches, for a slow D1 answer:
    11 s with a 2 s timeout in an audit), and a consumer that had resumed from the later date
    missed its items. Dated inside its transaction, it is never dated before what is stored."""
    quick = feed_server.route("/quick", body=rss([Entry("quick", guid="q")]))
    late = feed_server.route("/late", status=500, body=b"not yet")
    p = project([quick, late])
    p.clock.advance(hours=1)
    p.cycle()
    feed_server.route("/late", body=rss([Entry("late", guid="l")]))
    p.clock.now = START  # this batch is dated an hour before the one already written
    assert p.cycle(force=True).new_items == 1
    assert p.rows("SELECT guid, created_at FROM items ORDER BY guid") == [
        {"guid": "l", "created_at": "2026-03-02T10:00:00Z"},
        {"guid": "q", "created_at": "2026-03-02T10:00:00Z"},
    ]


# --- what the log says: once, in plain words, and nothing in the steady state ---------------


def feed_lines(caplog: pytest.LogCaptureFixture, url: str) -> list[tuple[int, str]]:
    """The outcome lines of feed ``url`` and the cycles' summaries, with their levels."""
    return [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.getMessage().startswith((f"feed {url}:", "cycle: "))
    ]


def gist(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """``(level, what)``: a feed line's outcome (``1 new of 2 items``), a summary's start."""
    return [
        (level, message.split(", ")[0 if message.startswith("cycle: ") else 1])
        for level, message in lines
    ]


def test_a_feed_with_nothing_new_is_quiet_at_info(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    """A body that changes on every fetch (a new lastBuildDate, an ad) with no new item logged
    "0 new of N items" and the cycle's summary at INFO on every fetch: hours of a soak test's
    log said nothing. Both are DEBUG now; new items, and a first fetch, stay INFO."""
    route = Route()
    url = feed_server.route("/feed", route)
    p = project([url])
    cycles: list[list[tuple[int, str]]] = []
    for fetch, entries in enumerate(([], [], [Entry("Two", guid="2")])):
        route.body = rss([Entry("One", guid="1"), *entries], title=f"Fetch {fetch}")
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="feedcollector"):
            assert p.cycle().stored == 1
        cycles.append(gist(feed_lines(caplog, url)))
        p.clock.advance(minutes=30)
    assert cycles == [
        [(logging.INFO, "1 new of 1 item"), (logging.INFO, "cycle: 1 feed (1 updated")],
        [(logging.DEBUG, "0 new of 1 item"), (logging.DEBUG, "cycle: 1 feed (1 updated")],
        [(logging.INFO, "1 new of 2 items"), (logging.INFO, "cycle: 1 feed (1 updated")],
    ]
    route.body = rss([Entry("One", guid="1"), Entry("Two", guid="2")], title="Fetch 3")
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="feedcollector"):
        assert p.cycle(urls=[url], force=True).new_items == 0
    assert gist(feed_lines(caplog, url)) == [
        (logging.DEBUG, "0 new of 2 items"),
        (logging.INFO, "cycle: 1 feed (1 updated"),
    ], "`fetch` asked for it: its summary answers at INFO even when nothing changed"


def test_the_first_fetch_of_an_empty_feed_is_said_once(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    route = Route(body=rss([], title="Nothing yet"))
    url = feed_server.route("/empty", route)
    p = project([url])
    with caplog.at_level(logging.DEBUG, logger="feedcollector"):
        p.cycle()
        route.body = rss([], title="Still nothing")
        p.clock.advance(minutes=30)
        p.cycle()
    assert gist(feed_lines(caplog, url)) == [
        (logging.INFO, "0 new of 0 items"),
        (logging.INFO, "cycle: 1 feed (1 updated"),
        (logging.DEBUG, "0 new of 0 items"),
        (logging.DEBUG, "cycle: 1 feed (1 updated"),
    ]


def test_a_feed_answering_again_after_failures_says_so_once(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    """Its failures were WARNINGs; its recovery, with nothing new (a 304), was a DEBUG line in
    a cycle logged at DEBUG: the log never said it was fine again."""
    route = Route(body=rss([Entry("One", guid="1")]), etag='"v1"')
    url = feed_server.route("/feed", route)
    p = project([url])
    p.cycle()
    route.status = 503
    for _ in range(2):
        p.clock.advance(minutes=30)
        assert p.cycle().failed == 1
    route.status = 200
    p.clock.advance(minutes=60)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="feedcollector"):
        assert p.cycle().not_modified == 1
        p.clock.advance(minutes=30)
        assert p.cycle().not_modified == 1
    lines = feed_lines(caplog, url)
    assert [n for n, _ in lines] == [logging.INFO, logging.INFO, logging.DEBUG, logging.DEBUG]
    assert lines[0][1].startswith(
        f"feed {url}: HTTP 304, not modified, answering again after 2 failures in a row, "
    )


def slow_answer(request: BaseHTTPRequestHandler) -> None:
    """Headers at once, the body never: the read times out."""
    request.send_response(200)
    request.send_header("Content-Length", "100")
    request.end_headers()
    request.wfile.flush()
    time.sleep(3)


@pytest.mark.parametrize(
    ("path", "route", "error"),
    [
        ("/timeout", Route(handler=slow_answer), "timed out after 0.2 s waiting for data"),
        (
            "/deadline",
            Route(handler=dripping_body("application/rss+xml", every_s=0.05, for_s=5)),
            "did not finish within the 0.5 s deadline",
        ),
        ("/500", Route(status=500), "(the server is failing)"),
        ("/503", Route(status=503), "HTTP 503 Service Unavailable"),
        ("/404", Route(status=404), "(the feed is not there; check its URL)"),
        ("/html", Route(body=b"<html><body>no feed</body></html>"), "parse: "),
        ("refused", None, "refused the connection"),
    ],
    ids=["timeout", "deadline", "500", "503", "404", "parse", "refused"],
)
def test_every_failure_line_says_alike_when_the_next_try_is(
    feed_server: FeedServer,
    project: Callable[..., Project],
    caplog: pytest.LogCaptureFixture,
    path: str,
    route: Route | None,
    error: str,
) -> None:
    """A timeout's line lacked "will retry with backoff", which a 5xx's carried, and no
    failure's line said when the next try was. One WARNING per failure, worded alike."""
    url = feed_server.route(path, route) if route else f"http://127.0.0.1:{closed_port()}/feed"
    # Only the cases that test a limit get a short one: a refused connection answered after
    # 0.2 s on a loaded machine read as a timeout.
    limit = {"/timeout": 'timeout = "200ms"', "/deadline": 'deadline = "500ms"'}.get(path, "")
    p = project([url], extra_toml=f"[fetch]\n{limit}\n")
    for failures, backoff in ((1, 30), (2, 60)):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="feedcollector"):
            assert p.cycle().failed == 1
        (row,) = p.rows("SELECT next_fetch_at, last_error FROM feeds")
        assert row["next_fetch_at"] == format_timestamp(p.clock.now + timedelta(minutes=backoff))
        (line,) = [r.getMessage() for r in caplog.records if url in r.getMessage()]
        assert line.startswith(f"feed {url}: ")
        assert error in line
        assert f"{row['last_error']} (will retry with backoff at {row['next_fetch_at']}, " in line
        assert f"failure {failures} in a row), " in line
        assert "retry" not in row["last_error"], "the stored error says what happened"
        p.clock.advance(minutes=backoff)


def test_a_retry_after_is_worded_in_seconds_and_until_when(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    """A 429's "asks to wait 150;" gave no unit and no time. An HTTP-date is measured against
    the server's Date (its clock is an hour ahead here) and worded the same way."""
    limited = feed_server.route("/429", status=429, headers={"Retry-After": "150"})

    def busy_for_five_minutes(request: BaseHTTPRequestHandler) -> None:
        request.send_response_only(503)  # no Date of this machine's clock
        request.send_header("Date", "Mon, 02 Mar 2026 10:00:00 GMT")
        request.send_header("Retry-After", "Mon, 02 Mar 2026 10:05:00 GMT")
        request.send_header("Content-Length", "0")
        request.end_headers()

    with FeedServer() as other:
        dated = other.route("/503", handler=busy_for_five_minutes)
        p = project([limited, dated])
        with caplog.at_level(logging.WARNING, logger="feedcollector"):
            assert p.cycle().failed == 2
    lines = {
        url: r.getMessage()
        for r in caplog.records
        for url in (limited, dated)
        if url in r.getMessage()
    }
    assert (
        "(rate limited, the server asks to wait 150 s (until 2026-03-02T09:02:30Z); this host's "
        "feeds wait) (will retry with backoff at 2026-03-02T09:30:00Z, failure 1 in a row)"
    ) in lines[limited]
    assert (
        "(unavailable, the server asks to wait 300 s (until 2026-03-02T09:05:00Z)) "
        "(will retry with backoff at 2026-03-02T09:30:00Z, failure 1 in a row)"
    ) in lines[dated]
    honoured = {
        row["url"]: row["until"]
        for row in p.rows("SELECT url, retry_after_until AS until FROM feeds")
    }
    assert honoured == {limited: "2026-03-02T09:02:30Z", dated: "2026-03-02T09:05:00Z"}, (
        "the wait the words name is the one honoured"
    )


def test_failing_ten_times_in_a_row_is_one_prominent_warning(
    feed_server: FeedServer, project: Callable[..., Project], caplog: pytest.LogCaptureFixture
) -> None:
    """The tenth failure logged its ordinary WARNING and the prominent one: the prominent
    one is the feed's line now, and says when the next try is."""
    url = feed_server.route("/feed", status=500)
    p = project([url])
    p.cycle()
    p.execute(
        "UPDATE feeds SET consecutive_failures = 9, next_fetch_at = ?", "2026-03-02T09:00:00Z"
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="feedcollector"):
        assert p.cycle().failed == 1
    (line,) = [r.getMessage() for r in caplog.records if url in r.getMessage()]
    assert line.startswith(f"!!! feed {url} has failed 10 times in a row (last: fetch: HTTP 500")
    assert "; will retry with backoff at 2026-03-03T09:00:00Z). Check whether" in line
