"""Whole collection cycles on the cloud pair: the real Proxy Worker under Miniflare with a local
D1, and moto's S3 server, both on 127.0.0.1, with a real feed server and a clock the test moves.

The scenarios of the embedded pair run on both pairs (``shape`` fixture); the fault tests break
the Worker or S3 in the middle of a cycle (through :class:`~tests.cloud.FaultyRelay`, by
stopping a server, or with a trigger inside D1) and check that the feed's work was aborted
cleanly and that the next cycle completes it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest

from feedcollector import store, store_items, store_sync
from feedcollector.collector import open_collector
from feedcollector.config import Settings, load_settings
from feedcollector.errors import DatabaseError
from feedcollector.models import FeedSpec, ItemRecord
from feedcollector.parse_common import MAX_FIELD_CHARS
from feedcollector.pipeline import run_cycle
from feedcollector.report import CycleReport
from feedcollector.schedule import feed_id_for
from feedcollector.schema import migrate
from feedcollector.spill import BATCH_TEXT_BUDGET, INLINE_CONTENT_LIMIT, content_key

from . import cloud
from .cloud import (
    DROP,
    D1Proxy,
    FakeReply,
    FaultyRelay,
    S3Bucket,
    S3Server,
    cloud_environ,
    d1_database,
    items_batch,
    write_cloud_config,
)
from .feedserver import FeedServer, Route
from .samples import START, Clock, Entry, closed_port, md5_8, png, rss, send_ok, write_project

d1_proxy = cloud.d1_proxy
s3_server = cloud.s3_server


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Shape:
    """One deployment shape under test: run cycles, then look at its database and objects."""

    name: str
    folder: Path
    config: Path
    environ: dict[str, str]
    clock: Clock = field(default_factory=Clock)
    proxy: D1Proxy | None = None
    s3: S3Bucket | None = None

    def settings(self) -> Settings:
        return load_settings(self.config, environ=self.environ)

    def cycle(self, **kwargs: Any) -> CycleReport:
        async def go() -> CycleReport:
            async with open_collector(self.settings(), clock=self.clock) as collector:
                return await run_cycle(collector, **kwargs)

        return asyncio.run(go())

    def rows(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        if self.proxy is None:
            with sqlite3.connect(self.folder / "collector.db") as conn:
                conn.row_factory = sqlite3.Row
                return [dict(r) for r in conn.execute(sql, params)]
        return d1_rows(self.proxy, sql, *params)

    def count(self, table: str) -> int:
        return int(self.rows(f"SELECT COUNT(*) AS n FROM {table}")[0]["n"])

    def object(self, key: str) -> bytes:
        if self.s3 is None:
            return (self.folder / "objects" / key).read_bytes()
        answer = self.s3.server.client().get_object(Bucket=self.s3.bucket, Key=key)
        return bytes(answer["Body"].read())

    def keys(self, prefix: str) -> list[str]:
        if self.s3 is None:
            root = self.folder / "objects"
            return sorted(
                p.relative_to(root).as_posix() for p in (root / prefix).rglob("*") if p.is_file()
            )
        client = self.s3.server.client()
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=self.s3.bucket, Prefix=prefix
        )
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))

    def puts(self, key: str) -> int:
        """How many times S3 was asked to write ``key`` (cloud only)."""
        assert self.s3 is not None
        path = f"/{self.s3.bucket}/{key}"
        return sum(r.method == "PUT" and r.path == path for r in self.s3.server.requests)


def d1_rows(proxy: D1Proxy, sql: str, *params: Any) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        db = d1_database(proxy)
        try:
            return await db.query(sql, params)
        finally:
            await db.close()

    return asyncio.run(go())


def write_feeds(folder: Path, urls: list[str]) -> None:
    (folder / "feeds.yaml").write_text(
        "feeds:\n" + "".join(f"  - url: {url}\n" for url in urls), encoding="utf-8"
    )


@pytest.fixture(params=["embedded", pytest.param("cloud", marks=pytest.mark.cloud)])
def shape(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[list[str]], Shape]:
    """A factory: the feed URLs in, a ready Shape (embedded or cloud) out."""

    def make(urls: list[str]) -> Shape:
        if request.param == "embedded":
            config = write_project(tmp_path, urls)
            return Shape("embedded", tmp_path, config, {})
        proxy: D1Proxy = request.getfixturevalue("d1_proxy")
        s3: S3Bucket = request.getfixturevalue("s3_server")
        write_feeds(tmp_path, urls)
        config = write_cloud_config(
            tmp_path, proxy_url=proxy.url, s3_endpoint=s3.server.endpoint, bucket=s3.bucket
        )
        return Shape("cloud", tmp_path, config, cloud_environ(proxy.token), proxy=proxy, s3=s3)

    return make


@pytest.fixture
def cloud_shape(tmp_path: Path, d1_proxy: D1Proxy, s3_server: S3Bucket) -> Callable[..., Shape]:
    """A factory for the cloud pair only, optionally behind a relay or with other settings."""

    def make(urls: list[str], *, proxy_url: str | None = None, **config: Any) -> Shape:
        write_feeds(tmp_path, urls)
        path = write_cloud_config(
            tmp_path,
            proxy_url=proxy_url or d1_proxy.url,
            s3_endpoint=config.pop("s3_endpoint", s3_server.server.endpoint),
            bucket=config.pop("bucket", s3_server.bucket),
            **config,
        )
        return Shape(
            "cloud", tmp_path, path, cloud_environ(d1_proxy.token), proxy=d1_proxy, s3=s3_server
        )

    return make


# --- the embedded pair's scenarios, on both pairs ------------------------------------------


def test_first_cycle_stores_items_images_and_the_raw_backup(
    feed_server: FeedServer, shape: Callable[[list[str]], Shape]
) -> None:
    image = png(3, 2)
    feed_server.route("/img/a.png", body=image, headers={"Content-Type": "image/png"})
    body = rss(
        [
            Entry(
                "First",
                guid="urn:1",
                link="/posts/1",
                content='<p>Hi</p><img src="/img/a.png" alt="a">',
            ),
            Entry("Second", guid="urn:2", description="<b>just a description</b>"),
        ],
        link=feed_server.url("/"),
    )
    url = feed_server.route("/feed.xml", body=body, etag='"v1"')
    s = shape([url])
    report = s.cycle()
    assert (report.stored, report.new_items, report.images_stored, report.aborted) == (1, 2, 1, 0)
    feed_id = feed_id_for(url)
    base = feed_server.url("")
    assert s.rows(
        "SELECT guid, link, title, pub_date, content_html, content_key FROM items ORDER BY guid"
    ) == [
        {
            "guid": "urn:1",
            "link": f"{base}/posts/1",
            "title": "First",
            "pub_date": "2026-03-02T08:00:00Z",
            "content_html": f'<p>Hi</p><img src="{base}/img/a.png" alt="a">',
            "content_key": None,
        },
        {
            "guid": "urn:2",
            "link": None,
            "title": "Second",
            "pub_date": "2026-03-02T08:00:00Z",
            "content_html": "<b>just a description</b>",
            "content_key": None,
        },
    ]
    key = f"images/{feed_id}/{md5_8('urn:1')}/0.png"
    assert s.rows("SELECT original_url, status, attempts, r2_key FROM image_tasks") == [
        {"original_url": f"{base}/img/a.png", "status": "success", "attempts": 1, "r2_key": key}
    ]
    assert s.object(key) == image
    backup = f"backups/{feed_id}/2026-03-02T09:00:00Z.xml"
    assert s.keys("") == sorted([backup, key])
    assert s.object(backup) == body
    assert s.rows(
        "SELECT title, last_etag, last_fetched_at, next_fetch_at, consecutive_failures, "
        "lease_owner FROM feeds"
    ) == [
        {
            "title": "Test feed",
            "last_etag": '"v1"',
            "last_fetched_at": "2026-03-02T09:00:00Z",
            "next_fetch_at": "2026-03-02T09:30:00Z",
            "consecutive_failures": 0,
            "lease_owner": None,
        }
    ]


def test_a_304_touches_only_the_two_timestamps(
    feed_server: FeedServer, shape: Callable[[list[str]], Shape]
) -> None:
    url = feed_server.route(
        "/feed",
        body=rss([Entry("One", guid="1")]),
        etag='"abc"',
        last_modified="Mon, 02 Mar 2026 08:00:00 GMT",
    )
    s = shape([url])
    s.cycle()
    before = s.rows("SELECT * FROM feeds")[0]
    s.clock.advance(minutes=31)
    assert s.cycle().not_modified == 1
    assert feed_server.hits("/feed")[-1].headers["If-None-Match"] == '"abc"'
    after = s.rows("SELECT * FROM feeds")[0]
    assert {k for k in before if before[k] != after[k]} == {
        "last_fetched_at",
        "next_fetch_at",
        "last_status",
    }
    assert (after["last_fetched_at"], after["next_fetch_at"]) == (
        "2026-03-02T09:31:00Z",
        "2026-03-02T10:01:00Z",
    )
    assert len(s.keys("backups/")) == 1, "a 304 has no body to back up"
    assert s.count("items") == 1


def test_refetching_without_validators_is_idempotent_and_skips_the_same_body(
    feed_server: FeedServer, shape: Callable[[list[str]], Shape]
) -> None:
    feed_server.route("/i.png", body=png(), headers={"Content-Type": "image/png"})
    entries = [
        Entry(f"Post {n}", guid=f"g{n}", content=f'<img src="/i.png?{n}">') for n in range(3)
    ]
    route = Route(body=rss(entries, link=feed_server.url("/")))
    url = feed_server.route("/feed", route)
    s = shape([url])
    outcomes = []
    for cycle in range(3):
        if cycle == 1:
            route.headers = {"ETag": '"ignored"'}  # sent, but never answered with a 304
        if cycle == 2:
            route.body = rss([*entries, Entry("Post 3", guid="g3")], link=feed_server.url("/"))
        report = s.cycle()
        outcomes.append((report.stored, report.unchanged, report.new_items))
        if cycle == 1:
            assert s.rows("SELECT last_status, last_etag, last_fetched_at FROM feeds") == [
                {
                    "last_status": 200,
                    "last_etag": '"ignored"',
                    "last_fetched_at": "2026-03-02T09:30:00Z",
                }
            ], "the same body again: only the bookkeeping, in the cycle's batch"
        s.clock.advance(minutes=30)
    assert outcomes == [(1, 0, 3), (0, 1, 0), (1, 0, 1)]
    assert s.count("items") == 4
    assert s.rows("SELECT COUNT(*) AS n, SUM(status = 'success') AS ok FROM image_tasks") == [
        {"n": 3, "ok": 3}
    ]
    assert len(feed_server.hits("/i.png")) == 3, "each image downloaded exactly once"
    assert len(s.keys("backups/")) == 3, "every 200 body is backed up"
    assert len(s.keys("images/")) == 3


# --- content too big for a D1 row ----------------------------------------------------------


def big_html(base: str, size: int, tag: str) -> str:
    """Real-looking HTML of about ``size`` bytes: paragraphs of mixed-script text and an image."""
    paragraph = f"<p>{tag}: Lorem ipsum dolor sit amet, 中文内容与日本語のテキスト — ünïcödé.</p>\n"
    count = size // len(paragraph.encode()) + 1
    return f'<img src="{base}/img/{tag}.png">\n' + paragraph * count


def test_an_item_too_big_for_d1_is_spilled_to_the_object_store(
    feed_server: FeedServer, shape: Callable[[list[str]], Shape], caplog: pytest.LogCaptureFixture
) -> None:
    base = feed_server.url("")
    feed_server.route("/img/big.png", body=png(4, 4), headers={"Content-Type": "image/png"})
    huge = big_html(base, 3_000_000, "big")
    assert len(huge.encode()) > 3_000_000
    entries = [
        Entry("Before", guid="a", description="<p>small one</p>"),
        Entry("Huge", guid="big", content=huge),
        Entry("After", guid="z", description="<p>small two</p>"),
    ]
    route = Route(body=rss(entries, link=base + "/"))
    url = feed_server.route("/feed", route)
    s = shape([url])
    feed_id = feed_id_for(url)
    key = content_key(feed_id, "big")
    assert key == f"content/{feed_id}/{md5_8('big')}.html"
    with caplog.at_level(logging.INFO, logger="feedcollector"):
        report = s.cycle()
    assert (report.stored, report.new_items, report.aborted) == (1, 3, 0)
    assert s.rows("SELECT guid, content_html, content_key FROM items ORDER BY guid") == [
        {"guid": "a", "content_html": "<p>small one</p>", "content_key": None},
        {"guid": "big", "content_html": None, "content_key": key},
        {"guid": "z", "content_html": "<p>small two</p>", "content_key": None},
    ]
    assert s.object(key) == huge.encode("utf-8"), "the object is the HTML, byte for byte"
    (line,) = [r.getMessage() for r in caplog.records if "spilled to" in r.getMessage()]
    assert key in line
    assert url in line
    assert "'Huge'" in line
    assert s.rows("SELECT original_url, status FROM image_tasks") == [
        {"original_url": f"{base}/img/big.png", "status": "success"}
    ], "the images of a spilled item are still archived"
    assert s.rows("SELECT last_fetched_at FROM feeds") == [
        {"last_fetched_at": "2026-03-02T09:00:00Z"}
    ]

    s.clock.advance(minutes=30)
    route.body = rss(entries, link=base + "/", title="Edited")  # read again, items unchanged
    report = s.cycle()
    assert (report.stored, report.new_items) == (1, 0)
    assert s.count("items") == 3
    assert s.object(key) == huge.encode("utf-8")
    assert s.rows("SELECT last_fetched_at FROM feeds") == [
        {"last_fetched_at": "2026-03-02T09:30:00Z"}
    ]
    if s.s3 is not None:
        assert s.puts(key) == 1, "an existing spilled object is neither rewritten nor re-uploaded"


@pytest.mark.cloud
def test_a_feed_whose_image_rows_fill_the_request_is_stored_as_in_the_embedded_shape(
    feed_server: FeedServer, cloud_shape: Callable[..., Shape]
) -> None:
    """A hundred items of 200 images each (7.5 MB): the HTML alone fit the budget, but the
    20,000 image rows repeating every URL took the batch over the Worker's 16 MiB, refused
    on every fetch while the embedded shape stored the feed."""
    urls = [f"/i/{'x' * 340}/{n}.png" for n in range(200)]
    html = "".join(f'<img src="{url}">' for url in urls)
    entries = [Entry(f"item {n}", guid=f"g{n}", content=html) for n in range(100)]
    url = feed_server.route("/feed", body=rss(entries, link=feed_server.url("/")))
    s = cloud_shape([url], extra_toml="enabled = false\n")  # in [images]: none to download
    report = s.cycle()
    assert (report.stored, report.new_items, report.failed) == (1, 100, 0)
    assert s.rows("SELECT COUNT(*) AS n FROM image_tasks") == [{"n": 20000}]
    assert len(s.keys("content/")) == 100, "the image rows alone fill the budget"


@pytest.mark.cloud
def test_a_batch_over_the_workers_16_mib_limit_is_brought_under_budget(
    feed_server: FeedServer, cloud_shape: Callable[..., Shape]
) -> None:
    """20 items just under the per-item limit: 17 MB of HTML would be refused (413)."""
    base = feed_server.url("")
    size = INLINE_CONTENT_LIMIT - 20_000
    htmls = {f"g{n:02}": big_html(base, size - n * 1000, f"g{n:02}") for n in range(20)}
    assert all(len(h.encode()) <= INLINE_CONTENT_LIMIT for h in htmls.values())
    assert sum(len(h.encode()) for h in htmls.values()) > 16 * 2**20
    url = feed_server.route(
        "/feed",
        body=rss([Entry(guid, guid=guid, content=html) for guid, html in htmls.items()]),
    )
    s = cloud_shape([url])
    report = s.cycle()
    assert (report.stored, report.new_items, report.aborted) == (1, 20, 0)
    rows = s.rows("SELECT guid, content_html, content_key FROM items ORDER BY guid")
    inline = {r["guid"]: r["content_html"] for r in rows if r["content_key"] is None}
    spilled = {r["guid"]: r["content_key"] for r in rows if r["content_key"] is not None}
    assert sum(len(html.encode()) for html in inline.values()) <= BATCH_TEXT_BUDGET
    assert min(len(htmls[g].encode()) for g in spilled) > max(
        len(htmls[g].encode()) for g in inline
    ), "the largest items were spilled first"
    assert all(inline[g] == htmls[g] for g in inline)
    assert all(s.object(key) == htmls[g].encode() for g, key in spilled.items())
    assert len(spilled) == len(s.keys("content/"))


@pytest.mark.cloud
def test_without_spilling_d1_refuses_the_whole_batch(d1_proxy: D1Proxy) -> None:
    """Why spilling exists: one 3 MB value fails the feed's batch, and nothing of it is kept."""

    async def go() -> None:
        db = d1_database(d1_proxy)
        try:
            await migrate(db)
            await store_sync.sync_feeds(db, [FeedSpec("https://a.example/")], START)
            (feed,) = await store.claim_feeds_by_id(
                db,
                [feed_id_for("https://a.example/")],
                now=START,
                owner="t",
                lease=timedelta(minutes=1),
            )
            records = [
                ItemRecord(
                    id=f"id{n}",
                    guid=f"g{n}",
                    link=None,
                    title=None,
                    pub_date="2026-03-02T08:00:00Z",
                    content_html=html,
                    image_urls=("https://img.example/1.png",),
                )
                for n, html in enumerate(["<p>small</p>", "x" * 3_000_000, "<p>small</p>"])
            ]
            outcome = store.FetchSuccess("t", None, None, START, START, 200)
            with pytest.raises(DatabaseError, match="SQLITE_TOOBIG"):
                await store_items.save_items(db, feed, records, outcome)
            for table in ("items", "image_tasks"):
                assert (await db.query(f"SELECT COUNT(*) AS n FROM {table}"))[0]["n"] == 0
            (feed_row,) = await db.query("SELECT last_fetched_at FROM feeds")
            assert feed_row["last_fetched_at"] is None
        finally:
            await db.close()

    asyncio.run(go())


# --- faults in the middle of a cycle --------------------------------------------------------


def assert_untouched(s: Shape, url: str) -> None:
    """The aborted feed: no items, no tasks, no success or failure recorded, due as before."""
    assert s.count("items") == 0
    assert s.count("image_tasks") == 0
    assert s.rows(
        "SELECT last_fetched_at, consecutive_failures, next_fetch_at, last_etag, last_error "
        "FROM feeds WHERE url = ?",
        url,
    ) == [
        {
            "last_fetched_at": None,
            "consecutive_failures": 0,
            "next_fetch_at": stamp(START),
            "last_etag": None,
            "last_error": None,
        }
    ]


def image_feed(feed_server: FeedServer) -> tuple[str, bytes]:
    image = png(5, 5)
    feed_server.route("/pic.png", body=image, headers={"Content-Type": "image/png"})
    body = rss(
        [
            Entry(f"Post {n}", guid=f"p{n}", content=f'<p>{n}</p><img src="/pic.png?{n}">')
            for n in range(4)
        ],
        link=feed_server.url("/"),
    )
    return feed_server.route("/feed", body=body, etag='"e1"'), image


def assert_completed(s: Shape, url: str, at: datetime) -> None:
    assert s.count("items") == 4
    assert s.rows("SELECT status, COUNT(*) AS n FROM image_tasks GROUP BY status") == [
        {"status": "success", "n": 4}
    ]
    assert s.rows(
        "SELECT last_fetched_at, consecutive_failures, last_etag, lease_owner FROM feeds WHERE url = ?",
        url,
    ) == [
        {
            "last_fetched_at": stamp(at),
            "consecutive_failures": 0,
            "last_etag": '"e1"',
            "lease_owner": None,
        }
    ]
    assert len(s.keys("images/")) == 4


WORKER_FAULTS = {
    "500": FakeReply(500, b'{"error": {"kind": "d1", "message": "D1 DB is overloaded"}}'),
    "timeout": FakeReply(delay_s=3.0),
    "401": FakeReply(401, b'{"error": {"kind": "unauthorized", "message": "unauthorized"}}'),
    "down": DROP,
}
"""What the proxy does to the batch storing the items; the log line that must say so."""
WORKER_FAULT_LOGS = {
    "500": "/batch answered 500: D1 DB is overloaded [d1]",
    "timeout": "/batch timed out after 1s",
    "401": "/batch refused the token (401)",
    "down": "/batch unreachable",
}


@pytest.mark.cloud
@pytest.mark.parametrize("fault", list(WORKER_FAULTS))
def test_a_proxy_fault_on_the_items_batch_aborts_the_feed_until_the_next_cycle(
    fault: str,
    feed_server: FeedServer,
    d1_proxy: D1Proxy,
    cloud_shape: Callable[..., Shape],
    caplog: pytest.LogCaptureFixture,
) -> None:
    url, _ = image_feed(feed_server)
    relay = FaultyRelay(
        d1_proxy.url,
        lambda path, payload: WORKER_FAULTS[fault] if items_batch(path, payload) else None,
    )
    try:
        s = cloud_shape([url], proxy_url=relay.url, database_timeout="1s")
        with caplog.at_level(logging.ERROR, logger="feedcollector"):
            report = s.cycle()
        assert (report.feeds, report.aborted, report.stored, report.failed) == (1, 1, 0, 0)
        assert len(relay.faults) == 1, "the fault hit the items batch, once"
        (error,) = [
            r.getMessage() for r in caplog.records if "aborted for this cycle" in r.getMessage()
        ]
        assert WORKER_FAULT_LOGS[fault] in error
        assert url in error
        if fault != "401":
            assert "INSERT OR IGNORE INTO items" in error, "the log names the request"
        assert_untouched(s, url)
        assert s.keys("backups/") == [f"backups/{feed_id_for(url)}/{stamp(START)}.xml"]
        assert s.keys("images/") == []

        if fault == "down":
            # The lease could not be handed back while the proxy was down: the feed waits for
            # it to expire (15 min) rather than risk a second collector fetching it.
            relay = FaultyRelay(d1_proxy.url, port=relay.port)
            s.clock.advance(minutes=1)
            assert s.cycle().feeds == 0
            s.clock.advance(minutes=15)
        else:
            relay.rule = None
            s.clock.advance(minutes=1)
        report = s.cycle()
        assert (report.stored, report.new_items, report.images_stored) == (1, 4, 4)
        assert_completed(s, url, s.clock.now)
    finally:
        relay.close()


@pytest.mark.cloud
def test_a_proxy_down_before_the_cycle_changes_nothing(
    feed_server: FeedServer, d1_proxy: D1Proxy, cloud_shape: Callable[..., Shape]
) -> None:
    url, _ = image_feed(feed_server)
    relay = FaultyRelay(d1_proxy.url)
    port = relay.port
    relay.close()
    s = cloud_shape([url], proxy_url=f"http://127.0.0.1:{port}")
    with pytest.raises(DatabaseError, match="unreachable"):
        s.cycle()
    assert feed_server.hits("/feed") == []
    relay = FaultyRelay(d1_proxy.url, port=port)
    try:
        assert s.cycle().stored == 1
        assert_completed(s, url, START)
    finally:
        relay.close()


@pytest.mark.cloud
def test_a_batch_failing_inside_d1_leaves_nothing_half_written(
    feed_server: FeedServer, cloud_shape: Callable[..., Shape]
) -> None:
    url, _ = image_feed(feed_server)
    s = cloud_shape([url])
    assert s.proxy is not None
    s.cycle(force=True, urls=[])  # creates the schema and registers the feed, fetches nothing
    d1_rows(
        s.proxy,
        "CREATE TRIGGER boom BEFORE INSERT ON items WHEN NEW.guid = 'p3' "
        "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END",
    )
    report = s.cycle()
    assert report.aborted == 1
    assert_untouched(s, url)
    d1_rows(s.proxy, "DROP TRIGGER boom")
    s.clock.advance(minutes=1)
    assert s.cycle().stored == 1
    assert_completed(s, url, s.clock.now)


@pytest.mark.cloud
def test_a_missing_bucket_aborts_the_feed_until_it_exists(
    feed_server: FeedServer, s3_server: S3Bucket, cloud_shape: Callable[..., Shape]
) -> None:
    url, _ = image_feed(feed_server)
    bucket = f"later-{uuid.uuid4().hex[:12]}"
    s = cloud_shape([url], bucket=bucket)
    s.s3 = S3Bucket(s3_server.server, bucket)
    assert s.cycle().aborted == 1
    assert_untouched(s, url)
    s3_server.server.client().create_bucket(Bucket=bucket)
    s.clock.advance(minutes=1)
    assert s.cycle().stored == 1
    assert_completed(s, url, s.clock.now)


def stopping_then(
    server: S3Server, body: bytes, content_type: str
) -> Callable[[BaseHTTPRequestHandler], None]:
    """A feed-server handler that stops the S3 server, then answers: S3 dies mid-cycle."""

    def handle(request: BaseHTTPRequestHandler) -> None:
        server.stop()
        send_ok(request, body, content_type)

    return handle


@pytest.fixture
def second_s3() -> Iterator[S3Server]:
    """Another moto server: moto keeps buckets per process, so it serves the same bucket."""
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.cloud
def test_s3_going_down_mid_cycle_aborts_the_feed(
    feed_server: FeedServer,
    s3_server: S3Bucket,
    second_s3: S3Server,
    cloud_shape: Callable[..., Shape],
) -> None:
    url, _ = image_feed(feed_server)
    route = feed_server.routes["/feed"]
    feed_server.route(
        "/feed", Route(handler=stopping_then(s3_server.server, route.body, "application/rss+xml"))
    )
    s = cloud_shape([url])
    report = s.cycle()
    assert report.aborted == 1, "the backup could not be written"
    assert_untouched(s, url)
    feed_server.route("/feed", route)
    s = cloud_shape([url], s3_endpoint=second_s3.endpoint)
    s.s3 = S3Bucket(second_s3, s3_server.bucket)
    s.clock.advance(minutes=1)
    assert s.cycle().stored == 1
    assert_completed(s, url, s.clock.now)


@pytest.mark.cloud
def test_s3_going_down_during_the_image_stage_charges_no_attempt(
    feed_server: FeedServer,
    s3_server: S3Bucket,
    second_s3: S3Server,
    cloud_shape: Callable[..., Shape],
) -> None:
    image = png(7, 3)
    feed_server.route(
        "/only.png", Route(handler=stopping_then(s3_server.server, image, "image/png"))
    )
    url = feed_server.route(
        "/feed",
        body=rss(
            [Entry("Pic", guid="pic", content='<img src="/only.png">')], link=feed_server.url("/")
        ),
    )
    s = cloud_shape([url])
    report = s.cycle()
    assert (report.stored, report.images_stored, report.images_retry_later) == (1, 0, 0)
    assert s.count("items") == 1, "items are stored before images are downloaded"
    assert s.rows("SELECT status, attempts, last_error, r2_key, lease_until FROM image_tasks") == [
        {
            "status": "pending",
            "attempts": 0,
            "last_error": None,
            "r2_key": None,
            "lease_until": None,
        }
    ]
    feed_server.route("/only.png", body=image, headers={"Content-Type": "image/png"})
    s = cloud_shape([url], s3_endpoint=second_s3.endpoint)
    s.s3 = S3Bucket(second_s3, s3_server.bucket)
    s.clock.advance(minutes=1)
    assert s.cycle().images_stored == 1
    key = f"images/{feed_id_for(url)}/{md5_8('pic')}/0.png"
    assert s.rows("SELECT status, attempts, r2_key FROM image_tasks") == [
        {"status": "success", "attempts": 1, "r2_key": key}
    ]
    assert s.object(key) == image


# --- several collectors, one D1 -------------------------------------------------------------


@pytest.mark.cloud
def test_two_collectors_share_one_d1_without_fetching_a_feed_twice(
    feed_server: FeedServer, cloud_shape: Callable[..., Shape]
) -> None:
    feed_server.route("/img.png", body=png(), headers={"Content-Type": "image/png"})
    urls = [
        feed_server.route(
            f"/f{n}",
            Route(
                body=rss(
                    [
                        Entry(f"{n}-a", guid=f"{n}-a", content=f'<img src="/img.png?{n}">'),
                        Entry(f"{n}-b", guid=f"{n}-b"),
                    ],
                    link=feed_server.url("/"),
                ),
                delay_s=0.05,
            ),
        )
        for n in range(50)
    ]
    s = cloud_shape(urls)
    settings = s.settings()

    async def one_collector() -> CycleReport:
        async with open_collector(settings, clock=s.clock) as collector:
            return await run_cycle(collector)

    async def both() -> list[CycleReport]:
        return list(await asyncio.gather(one_collector(), one_collector()))

    first, second = asyncio.run(both())
    assert first.feeds + second.feeds == 50
    assert first.feeds > 0
    assert second.feeds > 0, "both collectors took part"
    assert (first.aborted, second.aborted, first.failed, second.failed) == (0, 0, 0, 0)
    assert [len(feed_server.hits(f"/f{n}")) for n in range(50)] == [1] * 50
    assert first.new_items + second.new_items == 100
    assert s.rows("SELECT COUNT(*) AS n, COUNT(DISTINCT feed_id || guid) AS u FROM items") == [
        {"n": 100, "u": 100}
    ]
    assert len(feed_server.hits("/img.png")) == 50, "each image downloaded by one collector"
    assert first.images_stored + second.images_stored == 50
    assert s.rows("SELECT MAX(version) AS v FROM schema_migrations")[0]["v"] >= 2


# --- the command ----------------------------------------------------------------------------


def feedcollector(
    config: Path, environ: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    keep = {k: v for k, v in os.environ.items() if k not in ("FEEDCOLLECTOR_CONFIG", *environ)}
    return subprocess.run(
        [sys.executable, "-m", "feedcollector", "--config", str(config), *args],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=120,
        env={**keep, **environ},
    )


@pytest.mark.cloud
def test_an_unreachable_object_store_ends_every_command_with_exit_code_1(
    feed_server: FeedServer, cloud_shape: Callable[..., Shape]
) -> None:
    """obstore's runtime threads, still retrying the failed request, crashed the interpreter's
    teardown now and then: SIGABRT ("Fatal Python error: Aborted", about one run in three)
    instead of the documented exit code 1."""
    url = feed_server.route("/feed", body=rss([Entry("one", guid="1")]))
    s = cloud_shape([url], s3_endpoint=f"http://127.0.0.1:{closed_port()}")
    for _ in range(8):  # without the fix, one of these crashed in most runs of the test
        result = feedcollector(s.config, s.environ, "cleanup")
        assert result.returncode == 1, result.stderr
        assert "error: storage: S3 list 'backups/'" in result.stderr
        assert "Fatal Python error" not in result.stderr
    for command in (("run", "--once"), ("fetch", "--all")):
        result = feedcollector(s.config, s.environ, *command)
        assert result.returncode == 1, "an object store that cannot be used looked healthy"
        assert "all 1 feeds this cycle refreshed were aborted by storage errors" in result.stderr


@pytest.mark.cloud
def test_run_once_from_the_command_line_on_the_cloud_pair(
    feed_server: FeedServer, cloud_shape: Callable[..., Shape]
) -> None:
    url, image = image_feed(feed_server)
    s = cloud_shape([url])
    wrong = feedcollector(
        s.config, {**s.environ, "FEEDCOLLECTOR_D1_TOKEN": "not-the-token"}, "run", "--once"
    )
    assert wrong.returncode == 1
    assert "FEEDCOLLECTOR_D1_TOKEN" in wrong.stderr
    assert "401" in wrong.stderr
    assert feed_server.hits("/feed") == []

    result = feedcollector(s.config, s.environ, "run", "--once")
    assert result.returncode == 0, result.stderr
    assert f"feed {url}: HTTP 200, 4 new of 4 items" in result.stderr
    (fetched_at,) = [r["last_fetched_at"] for r in s.rows("SELECT last_fetched_at FROM feeds")]
    assert s.count("items") == 4
    feed_id = feed_id_for(url)
    assert s.object(f"backups/{feed_id}/{fetched_at}.xml") == feed_server.routes["/feed"].body
    assert [s.object(key) for key in s.keys("images/")] == [image] * 4
    assert s.rows("SELECT COUNT(*) AS n FROM image_tasks WHERE status = 'success'") == [{"n": 4}]

    s = cloud_shape([url])  # the Worker answers again
    again = feedcollector(s.config, s.environ, "fetch", "--all")
    assert again.returncode == 0, again.stderr
    assert "not modified" in again.stderr
    assert s.count("items") == 4


@pytest.mark.cloud
def test_a_manual_fetch_with_high_concurrency_claims_within_d1s_parameter_limit(
    feed_server: FeedServer, cloud_shape: Callable[..., Shape]
) -> None:
    """``fetch --all`` claims the feeds a page at a time, and a page grows with ``[fetch]
    concurrency`` (4 per worker): at 25 workers a page of 100 ids plus the lease's three
    values was over D1's 100 bound parameters, so the claim failed and nothing was fetched."""
    body = rss([Entry("one", guid="g1")])
    urls = [feed_server.route(f"/feed{n}", body=body) for n in range(110)]
    s = cloud_shape(urls, extra_toml="[fetch]\nconcurrency = 25\n")
    report = s.cycle(force=True)
    assert (report.feeds, report.stored, report.aborted, report.failed) == (110, 110, 0, 0)
    assert s.count("items") == 110
    assert all(feed_server.hits(f"/feed{n}") for n in range(110))


def assert_refused_then_backed_off(s: Shape, feed_server: FeedServer, url: str, error: str) -> None:
    """A cycle of a feed whose data the database refuses: counted as a failure and backed off,
    and not requested again before its backoff ends."""
    report = s.cycle()
    assert (report.stored, report.failed, report.aborted) == (0, 1, 0)
    (row,) = s.rows(
        "SELECT consecutive_failures, next_fetch_at, last_error, last_fetched_at, lease_owner "
        "FROM feeds WHERE url = ?",
        url,
    )
    assert row["consecutive_failures"] == 1
    assert row["next_fetch_at"] == stamp(START + timedelta(minutes=30))
    assert "refused this feed's items as too large" in row["last_error"]
    assert error in row["last_error"]
    assert (row["last_fetched_at"], row["lease_owner"]) == (None, None)
    assert s.count("items") == 0
    assert s.keys("content/") == [], "the spilled HTML of refused items belongs to no row"
    s.clock.advance(minutes=1)
    assert s.cycle().feeds == 0
    assert len(feed_server.hits("/feed")) == 1


@pytest.mark.cloud
def test_a_title_over_d1s_value_limit_is_stored_cut_with_the_feeds_other_items(
    feed_server: FeedServer, cloud_shape: Callable[..., Shape]
) -> None:
    """A title over D1's value limit failed the feed's whole batch with SQLITE_TOOBIG on
    every fetch (SQLite stored it): values are bounded on every shape now, and the feed's
    items are stored, the spilled one too."""
    spilled = Entry("spilled", guid="b", content="<p>" + "x" * INLINE_CONTENT_LIMIT + "</p>")
    body = rss([Entry("small", guid="a"), spilled, Entry("T" * 3_000_000, guid="huge")])
    url = feed_server.route("/feed", body=body)
    s = cloud_shape([url])
    report = s.cycle()
    assert (report.stored, report.failed, report.new_items) == (1, 0, 3)
    (title,) = s.rows("SELECT title FROM items WHERE guid = 'huge'")
    assert title["title"] == "T" * (MAX_FIELD_CHARS - 1) + "…"
    assert len(s.keys("content/")) == 1


@pytest.mark.cloud
def test_a_batch_over_the_workers_body_limit_backs_off_the_feed(
    feed_server: FeedServer, tmp_path: Path, s3_server: S3Bucket
) -> None:
    """Many small items add up past the Worker's request limit (413, not an outage)."""
    spilled = Entry("spilled", guid="big", content="<p>" + "x" * INLINE_CONTENT_LIMIT + "</p>")
    entries = [Entry(f"item {n}", guid=f"g{n}", description="<p>x</p>") for n in range(2000)]
    body = rss([spilled, *entries])
    url = feed_server.route("/feed", body=body)
    write_feeds(tmp_path, [url])
    with cloud.run_d1_proxy(max_body_bytes=100_000) as proxy:
        config = write_cloud_config(
            tmp_path,
            proxy_url=proxy.url,
            s3_endpoint=s3_server.server.endpoint,
            bucket=s3_server.bucket,
        )
        s = Shape("cloud", tmp_path, config, cloud_environ(proxy.token), proxy=proxy, s3=s3_server)
        assert_refused_then_backed_off(s, feed_server, url, "request body over 100000 bytes")


# --- stopping `run` while the Worker hangs --------------------------------------------------

HANG_S = 120.0
"""Generous "did not hang" bound: these collectors wait an hour (``[database] timeout``) for an
answer, so only a stop that gives up waiting ends them before it."""
NO_ANSWER = FakeReply(delay_s=3600.0)
"""A Worker that took the request and never answers."""
RELEASE_LEASES = (
    "UPDATE feeds SET lease_owner = NULL, lease_until = NULL WHERE lease_owner = ? RETURNING id"
)


class Service:
    """``feedcollector run`` in a process of its own; its log is read line by line as it comes."""

    def __init__(self, s: Shape) -> None:
        keep = {
            k: v for k, v in os.environ.items() if k not in ("FEEDCOLLECTOR_CONFIG", *s.environ)
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "feedcollector", "--config", str(s.config), "run"],
            cwd=s.folder,
            stderr=subprocess.PIPE,
            text=True,
            env={**keep, **s.environ},
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        self.lines.extend(self.process.stderr)

    def log(self) -> str:
        return "".join(self.lines)

    def wait_for(self, what: str, happened: Callable[[], bool]) -> None:
        deadline = time.monotonic() + HANG_S
        while not happened():
            assert self.process.poll() is None, f"run exited before {what}:\n{self.log()}"
            assert time.monotonic() < deadline, f"{what} never happened:\n{self.log()}"
            time.sleep(0.05)

    def wait(self) -> int:
        """Its exit code (a process still waiting after ``HANG_S`` fails the test)."""
        try:
            code = self.process.wait(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"run did not stop within {HANG_S:g} s:\n{self.log()}")
        self._reader.join()
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def post_to_worker(proxy: D1Proxy, path: str, payload: dict[str, Any]) -> None:
    """Send a request the relay took on to the Worker, as a relay that hangs after does."""
    answer = httpx.post(
        f"{proxy.url}{path}",
        json=payload,
        headers={"Authorization": f"Bearer {proxy.token}"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text


@pytest.mark.cloud
def test_sigterm_stops_run_when_the_worker_hangs_after_applying_a_batch(
    feed_server: FeedServer, d1_proxy: D1Proxy, cloud_shape: Callable[..., Shape]
) -> None:
    """The Worker applies the batch storing a feed's items, then answers nothing more. A stop
    waited for that answer, then for the feed's hand-back, for when to wake, and for the
    leases' hand-back: four times ``[database] timeout``. It gives up after a bounded wait; the
    batch that was applied stays whole, and fetching the feed again stores nothing twice."""
    url, _ = image_feed(feed_server)
    hung = threading.Event()

    def rule(path: str, payload: dict[str, Any]) -> FakeReply | None:
        if items_batch(path, payload):
            post_to_worker(d1_proxy, path, payload)
            hung.set()
        return NO_ANSWER if hung.is_set() else None

    relay = FaultyRelay(d1_proxy.url, rule)
    s = cloud_shape([url], proxy_url=relay.url, database_timeout="1h")
    service = Service(s)
    try:
        service.wait_for("the items batch", hung.is_set)
        service.process.send_signal(signal.SIGTERM)
        assert service.wait() == 0, service.log()
    finally:
        service.kill()
        relay.close()
    log = service.log()
    assert "database: stopping, gave up waiting for the D1 proxy" in log
    assert "1 unanswered request(s) abandoned, none sent after them" in log
    assert "the leases this collector holds expire by themselves" in log
    assert "run: stopped, without the database's last answers (see above)" in log
    assert len(relay.faults) == 1, "nothing was sent after the batch left unanswered"
    assert s.count("items") == 4, "the batch the Worker applied is whole"
    assert s.count("image_tasks") == 4

    s = cloud_shape([url])  # the Worker answers again
    again = feedcollector(s.config, s.environ, "fetch", "--all")
    assert again.returncode == 0, again.stderr
    assert s.count("items") == 4, "fetched again: no item stored twice"
    assert s.count("image_tasks") == 4


@pytest.mark.cloud
def test_sigterm_while_run_sleeps_bounds_the_lease_hand_back_to_a_hung_worker(
    feed_server: FeedServer, d1_proxy: D1Proxy, cloud_shape: Callable[..., Shape]
) -> None:
    """Stopped between cycles, ``run`` handed its leases back to a Worker that stopped
    answering after the cycle, and waited ``[database] timeout`` for it: a request sent after
    the stop is bounded too."""
    url, _ = image_feed(feed_server)
    hung = threading.Event()

    def rule(path: str, payload: dict[str, Any]) -> FakeReply | None:
        if hung.is_set():
            return NO_ANSWER
        if "MIN(next_fetch_at)" in str(payload.get("sql")):  # the cycle is over: it sleeps
            hung.set()
        return None

    relay = FaultyRelay(d1_proxy.url, rule)
    s = cloud_shape([url], proxy_url=relay.url, database_timeout="1h")
    service = Service(s)
    try:
        service.wait_for("the sleep after the first cycle", hung.is_set)
        service.process.send_signal(signal.SIGTERM)
        assert service.wait() == 0, service.log()
    finally:
        service.kill()
        relay.close()
    log = service.log()
    assert [(path, payload["sql"]) for path, payload in relay.faults] == [
        ("/query", RELEASE_LEASES)
    ], "the stop's one request: the leases' hand-back, started after the stop"
    assert "database: stopping, gave up waiting for the D1 proxy" in log
    assert "the leases this collector holds expire by themselves" in log
    assert s.count("items") == 4, "the cycle before the stop is stored"


@pytest.mark.cloud
def test_a_request_timing_out_during_a_stop_gives_the_worker_up(
    feed_server: FeedServer, d1_proxy: D1Proxy, cloud_shape: Callable[..., Shape]
) -> None:
    """A ``[database] timeout`` shorter than the stop's patience runs out first for the request
    in flight at the stop (here the cycle's first, to a Worker that answered only the
    migrations); ``run`` then asked when to wake and handed its leases back, a timeout each."""
    url, _ = image_feed(feed_server)
    relay = FaultyRelay(
        d1_proxy.url,
        lambda path, payload: None if "schema_migrations" in json.dumps(payload) else NO_ANSWER,
    )
    s = cloud_shape([url], proxy_url=relay.url, database_timeout="2s")
    service = Service(s)
    try:
        service.wait_for("a request left unanswered", lambda: bool(relay.faults))
        # The stop's patience is the 2 s timeout too, counted from the stop: sent at once,
        # the two ran out within milliseconds of each other, and on a busy machine the stop's
        # came first now and then. Half a second apart, the request's is plainly first.
        time.sleep(0.5)
        service.process.send_signal(signal.SIGTERM)
        assert service.wait() == 0, service.log()
    finally:
        service.kill()
        relay.close()
    log = service.log()
    assert "timed out after 2s" in log
    assert "database: stopping, gave up waiting for the D1 proxy" in log
    sent = [payload.get("sql") for _, payload in relay.faults]
    assert RELEASE_LEASES not in sent, "the leases' hand-back was not sent to the hung Worker"
    assert "SELECT MIN(next_fetch_at)" not in " ".join(map(str, sent)), "nor when to wake"
    assert feed_server.hits("/feed") == []


@pytest.mark.cloud
def test_a_second_ctrl_c_exits_without_waiting_for_a_hung_worker(
    feed_server: FeedServer, d1_proxy: D1Proxy, cloud_shape: Callable[..., Shape]
) -> None:
    """The second Ctrl-C cancelled the work, then still waited ``[database] timeout`` to hand
    the leases back to a Worker that stopped answering at the items batch. It sends nothing
    more: the feed's lease expires by itself."""
    url, _ = image_feed(feed_server)
    hung = threading.Event()

    def rule(path: str, payload: dict[str, Any]) -> FakeReply | None:
        if items_batch(path, payload):
            hung.set()
        return NO_ANSWER if hung.is_set() else None

    relay = FaultyRelay(d1_proxy.url, rule)
    s = cloud_shape([url], proxy_url=relay.url, database_timeout="1h")
    service = Service(s)
    try:
        service.wait_for("the items batch", hung.is_set)
        service.process.send_signal(signal.SIGINT)
        service.wait_for("the first stop", lambda: "run: stopping after" in service.log())
        service.process.send_signal(signal.SIGINT)
        assert service.wait() == 130, service.log()
    finally:
        service.kill()
        relay.close()
    log = service.log()
    assert "run: second interrupt, exiting now" in log
    assert "database: stopping, gave up waiting for the D1 proxy" in log
    assert "interrupted" in log
    assert len(relay.faults) == 1, "the leases were not handed back: nothing was sent"
    (feed,) = s.rows("SELECT last_fetched_at, lease_owner, lease_until FROM feeds")
    assert feed["last_fetched_at"] is None, "the unanswered batch was not applied"
    assert feed["lease_owner"] is not None, "the lease is left to expire"
    assert feed["lease_until"] is not None
    assert s.count("items") == 0
