"""Reading items back: rendering with mixed image statuses, sanitizing, listing with filters and
paging, and the ``items``/``item`` commands on a collection from a loopback feed server."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shlex
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from feedcollector import store_sync
from feedcollector.backends.local import LocalObjectStore
from feedcollector.backends.s3 import S3ObjectStore
from feedcollector.backends.sqlite import SQLiteDatabase
from feedcollector.collector import open_collector
from feedcollector.config import load_settings
from feedcollector.database import Database
from feedcollector.errors import ConfigError
from feedcollector.models import FeedSpec
from feedcollector.pipeline import run_cycle
from feedcollector.reading import (
    ReadItem,
    StoredImage,
    StoredItem,
    items_images,
    iter_items,
    load_content,
    open_stores,
    parse_since,
    read_item,
    render_item_html,
    replace_image_sources,
    sanitize_html,
)
from feedcollector.schedule import feed_id_for
from feedcollector.schema import migrate

from . import cloud
from .feedserver import FeedServer
from .samples import START, Entry, png, rss, write_project
from .stepping import SteppingDatabase
from .test_cli import feedcollector

d1_proxy = cloud.d1_proxy

ORIGIN = "https://img.example.org"


def image(position: int, url: str, status: str, key: str | None = None) -> StoredImage:
    return StoredImage(position, url, status, key)


def test_render_replaces_only_success_images_and_only_in_src(tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path / "objects")
    html = (
        f"<p>See {ORIGIN}/a.png for the original.</p>"
        f'<img alt="a" src="{ORIGIN}/a.png" srcset="{ORIGIN}/a@2x.png 2x" width="10">'
        f"<img src='{ORIGIN}/q.png?w=1&amp;h=2'>"
        f"<img src={ORIGIN}/pending.png>"
        f'<img src="{ORIGIN}/failed.png">'
        f'<a href="{ORIGIN}/a.png">link to the original</a>'
        f'<!-- <img src="{ORIGIN}/a.png"> -->'
        f"<script>document.write('<img src=\"{ORIGIN}/a.png\">')</script>"
        f'<IMG SRC=" {ORIGIN}/a.png ">'
    )
    tasks = [
        image(0, f"{ORIGIN}/a.png", "success", "images/f/abcd1234/0.png"),
        image(1, f"{ORIGIN}/q.png?w=1&h=2", "success", "images/f/abcd1234/1.gif"),
        image(2, f"{ORIGIN}/pending.png", "pending"),
        image(3, f"{ORIGIN}/failed.png", "failed"),
        image(4, f"{ORIGIN}/a.png", "success", "images/f/abcd1234/4.png"),
    ]
    rendered = render_item_html(html, tasks, objects)
    stored_a = (tmp_path / "objects" / "images/f/abcd1234/0.png").as_uri()
    stored_q = (tmp_path / "objects" / "images/f/abcd1234/1.gif").as_uri()
    assert rendered == (
        f"<p>See {ORIGIN}/a.png for the original.</p>"
        f'<img alt="a" src="{stored_a}" width="10">'
        f'<img src="{stored_q}">'
        f"<img src={ORIGIN}/pending.png>"
        f'<img src="{ORIGIN}/failed.png">'
        f'<a href="{ORIGIN}/a.png">link to the original</a>'
        f'<!-- <img src="{ORIGIN}/a.png"> -->'
        f"<script>document.write('<img src=\"{ORIGIN}/a.png\">')</script>"
        f'<IMG src="{stored_a}">'
    )
    assert render_item_html(html, tasks[2:4], objects) == html


def test_render_finds_an_image_whose_src_holds_a_line_break(tmp_path: Path) -> None:
    """Browsers drop tabs and line breaks from a URL; so did the download, to its task's
    ``original_url``."""
    objects = LocalObjectStore(tmp_path / "objects")
    html = f'<img src="{ORIGIN}/broken\nover/two&#9;lines.png">'
    tasks = [image(0, f"{ORIGIN}/brokenover/twolines.png", "success", "images/f/ab/0.png")]
    stored = (tmp_path / "objects" / "images/f/ab/0.png").as_uri()
    assert render_item_html(html, tasks, objects) == f'<img src="{stored}">'


def test_public_urls_come_from_the_store(tmp_path: Path) -> None:
    html = f'<img src="{ORIGIN}/a.png?x=1&amp;y=2">'
    tasks = [image(0, f"{ORIGIN}/a.png?x=1&y=2", "success", "images/f/ab/0.png")]
    cdn = S3ObjectStore(
        "http://127.0.0.1:9",
        "bucket",
        "auto",
        "key",
        "secret",
        public_base_url="https://cdn.example",
    )
    assert render_item_html(html, tasks, cdn) == '<img src="https://cdn.example/images/f/ab/0.png">'
    private = S3ObjectStore("http://127.0.0.1:9", "bucket", "auto", "key", "secret")
    assert render_item_html(html, tasks, private) == html, "no public URL: originals stay"
    served = LocalObjectStore(tmp_path, public_base_url="https://home.example/objects/")
    assert render_item_html(html, tasks, served) == (
        '<img src="https://home.example/objects/images/f/ab/0.png">'
    ), "a served objects folder: its public URL (it was accepted and ignored)"
    local = LocalObjectStore(tmp_path)
    assert render_item_html(html, tasks, local) == (
        f'<img src="{(tmp_path / "images/f/ab/0.png").resolve().as_uri()}">'
    )
    assert replace_image_sources(html, {f"{ORIGIN}/a.png?x=1&y=2": "https://c/x?a=1&b=2"}) == (
        '<img src="https://c/x?a=1&amp;b=2">'
    )


def test_an_archived_image_in_a_picture_is_not_overruled_by_its_sources() -> None:
    """Browsers take a ``<picture>``'s ``<source srcset>`` before its ``<img>``: with only the
    img swapped, the original was still loaded. Its sources lose their srcset (a picture whose
    image is not archived, and a video's source, keep theirs)."""
    archived = {"https://o.example/a.png": "file:///objects/images/f/ab/0.png"}
    html = (
        '<picture><source srcset="https://o.example/a.webp 1x" type="image/webp">'
        '<source media="(min-width: 80em)" srcset="https://o.example/big.png" sizes="80vw">'
        '<img src="https://o.example/a.png" srcset="https://o.example/a2.png 2x"></picture>'
        '<picture><source srcset="https://o.example/b.webp"><img src="https://o.example/b.png">'
        '</picture><video><source src="https://o.example/v.mp4" srcset="x"></video>'
    )
    assert replace_image_sources(html, archived) == (
        '<picture><source type="image/webp">'
        '<source media="(min-width: 80em)">'
        '<img src="file:///objects/images/f/ab/0.png"></picture>'
        '<picture><source srcset="https://o.example/b.webp"><img src="https://o.example/b.png">'
        '</picture><video><source src="https://o.example/v.mp4" srcset="x"></video>'
    )


def test_only_the_first_src_of_an_image_counts_and_its_srcset_goes_wherever_it_stands() -> None:
    """Browsers read the first of repeated attributes; the swapped ``src`` is written anew."""
    archived = {"https://o.example/a.png": "file:///objects/0.png"}
    html = (
        "<img srcset=\"https://o.example/a2.png 2x\"\n  SRC = 'https://o.example/a.png' "
        'src="https://o.example/b.png" sizes>'
        '<img src="https://o.example/b.png" src="https://o.example/a.png" srcset="x 2x">'
    )
    assert replace_image_sources(html, archived) == (
        '<img src="file:///objects/0.png" src="https://o.example/b.png">'
        '<img src="https://o.example/b.png" src="https://o.example/a.png" srcset="x 2x">'
    )


def test_sanitizing_removes_active_content_and_keeps_our_file_urls(tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path / "objects")
    html = (
        f'<p onclick="steal()">Hi <a href="javascript:alert(1)">x</a> <b>bold</b></p>'
        f'<script>alert(1)</script><img src="{ORIGIN}/a.png" onerror="steal()" alt="pic">'
        f'<img src="{ORIGIN}/b.png"><iframe src="{ORIGIN}/frame"></iframe>'
    )
    tasks = [image(0, f"{ORIGIN}/a.png", "success", "images/f/ab/0.png")]
    rendered = render_item_html(html, tasks, objects, sanitize=True)
    for gone in ("onclick", "javascript:", "<script", "onerror", "<iframe", "steal"):
        assert gone not in rendered
    stored = (tmp_path / "objects" / "images/f/ab/0.png").as_uri()
    assert f'src="{stored}"' in rendered
    assert f'<img src="{ORIGIN}/b.png">' in rendered
    assert "<b>bold</b>" in rendered
    assert "<p>" in rendered


def test_sanitizing_keeps_the_images_of_a_noscript_and_data_images_only_in_images(
    tmp_path: Path,
) -> None:
    """nh3 reads a ``<noscript>``'s content as text: its image, archived by the image stage,
    showed as the words ``<img src=...>``; and it dropped every ``data:`` URL."""
    objects = LocalObjectStore(tmp_path / "objects")
    html = (
        f'<p><img data-src="{ORIGIN}/a.png"><noscript><img src="{ORIGIN}/a.png"></noscript></p>'
        '<img src="data:image/gif;base64,R0lGOD"><a href="data:text/html,<b>x</b>">l</a>'
        '<img src=" DATA:text/html,x">'
    )
    tasks = [image(0, f"{ORIGIN}/a.png", "success", "images/f/ab/0.png")]
    rendered = render_item_html(html, tasks, objects, sanitize=True)
    stored = (tmp_path / "objects" / "images/f/ab/0.png").as_uri()
    assert rendered == (
        f'<p><img><img src="{stored}"></p><img src="data:image/gif;base64,R0lGOD">'
        '<a rel="noopener noreferrer">l</a><img>'
    )


@pytest.mark.parametrize(
    ("link", "image"),
    [
        ("data:text/html,<script>alert(1)</script>", ""),
        ("da&#10;ta:text/html,<script>alert(1)</script>", ""),
        ("&#1;data:text/html,x", ""),
        (" D&#9;ATA:text/html,x", ""),
        (
            "data:image/svg+xml,<svg onload=alert(1)>",
            ' src="data:image/svg+xml,&lt;svg onload=alert(1)&gt;"',
        ),
    ],
)
def test_a_data_url_goes_from_a_link_however_it_is_spelled(link: str, image: str) -> None:
    """Browsers drop tabs and line breaks anywhere in a URL and controls at its ends: a check
    of the value as written let ``da&#10;ta:`` links through once ``data:`` was allowed. An
    image's stays when it is of an image type (an SVG in ``<img>`` runs no script)."""
    assert sanitize_html(f'<a href="{link}">x</a><img src="{link}">') == (
        f'<a rel="noopener noreferrer">x</a><img{image}>'
    )


def test_text_attributes_that_start_like_a_data_url_stay() -> None:
    kept = '<img src="https://o.example/a.png" alt="Data: sales by region" title="data: 2026">'
    assert sanitize_html(kept) == kept


def test_an_unquoted_value_with_a_quote_in_it_does_not_hide_the_images_after_it(
    tmp_path: Path,
) -> None:
    """A quote opens a value only after ``=``: ``alt=Don't`` made the rest of the item one
    tag, and no image after it was swapped for its archived copy."""
    objects = LocalObjectStore(tmp_path / "objects")
    html = f"<p><img alt=Don't src=\"{ORIGIN}/a.png\"> it's <img src='{ORIGIN}/b.png'></p>"
    tasks = [
        image(0, f"{ORIGIN}/a.png", "success", "images/f/ab/0.png"),
        image(1, f"{ORIGIN}/b.png", "success", "images/f/ab/1.png"),
    ]
    folder = tmp_path / "objects" / "images/f/ab"
    assert render_item_html(html, tasks, objects) == (
        f"<p><img alt=Don't src=\"{(folder / '0.png').as_uri()}\"> it's "
        f'<img src="{(folder / "1.png").as_uri()}"></p>'
    )


def test_a_missing_spilled_html_object_is_said_with_how_to_write_it_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    objects = LocalObjectStore(tmp_path / "objects")
    item = StoredItem(
        "i1", "f1", "https://a.example/feed", "g", None, "T", None, "2026-03-02T09:00:00Z",
        None, "content/f1/abcd1234.html",
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="feedcollector"):
        assert asyncio.run(load_content(objects, item)) is None
    assert caplog.messages == [
        "storage: item i1: its content object content/f1/abcd1234.html is missing; shown "
        "without content (`feedcollector restore --feed https://a.example/feed` writes it "
        "again while a backup lists the item)"
    ]


def test_parse_since() -> None:
    now = datetime(2026, 3, 10, 12, 0, 0, tzinfo=UTC)
    assert parse_since("2026-03-01", now) == datetime(2026, 3, 1, tzinfo=UTC)
    assert parse_since("2026-03-01T08:00:00Z", now) == datetime(2026, 3, 1, 8, tzinfo=UTC)
    assert parse_since("7d", now) == now - timedelta(days=7)
    with pytest.raises(ValueError, match="--since must be"):
        parse_since("yesterday-ish", now)
    later = parse_since("2026-03-01T08:00:00+02:00", now)
    assert (later, later.tzinfo) == (datetime(2026, 3, 1, 6, tzinfo=UTC), UTC)
    assert parse_since("9999-12-31T23:59:59-05:00", now) == datetime.max.replace(tzinfo=UTC)
    assert parse_since("0001-01-01T00:00:00+05:00", now) == datetime(1000, 1, 1, tzinfo=UTC)
    assert parse_since("0999-01-01", now) == datetime(1000, 1, 1, tzinfo=UTC), "sorts as text"
    assert parse_since("2026-03-01T08:00:00z", now) == datetime(2026, 3, 1, 8, tzinfo=UTC)
    with pytest.raises(ValueError, match=r'needs a unit .* got "2025"'):
        parse_since("2025", now)  # read as 2025 seconds, it listed the last 34 minutes


def test_jsonl_records_stay_one_line_for_every_line_reader(collected: Collected) -> None:
    """JSON leaves U+2028, U+2029 and NEL raw; ``splitlines`` and JavaScript split on them,
    and a consumer got one record as three broken lines."""
    with sqlite3.connect(collected.database) as conn:
        conn.execute("UPDATE items SET title = 'a\u2028b\u2029c\x85d' WHERE guid = 'n1'")
    config = str(collected.config)
    stream = feedcollector("--config", config, "items", "--jsonl", cwd=collected.folder)
    assert stream.returncode == 0, stream.stderr
    lines = stream.stdout.splitlines()
    assert len(lines) == 4
    records = {r["guid"]: r for r in map(json.loads, lines)}
    assert records["n1"]["title"] == "a\u2028b\u2029c\x85d"


@dataclass
class Collected:
    folder: Path
    config: Path
    feeds: dict[str, str]

    @property
    def database(self) -> Path:
        return self.folder / "collector.db"

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.database) as conn:
            return list(conn.execute(sql))

    def run(self, work: Any) -> Any:
        """``work(stores)`` over what was collected, opened as a downstream reader opens it."""

        async def go() -> Any:
            async with open_stores(load_settings(self.config)) as stores:
                return await work(stores)

        return asyncio.run(go())


@pytest.fixture
def collected(feed_server: FeedServer, tmp_path: Path) -> Collected:
    """Two feeds, two cycles an hour apart; one image archived, one that cannot be fetched."""
    feed_server.route("/img/ok.png", body=png(), headers={"Content-Type": "image/png"})
    base = feed_server.url("/")
    content = '<p>x</p><img src="/img/ok.png?a=1&amp;b=2"><img src="/img/missing.png">'
    news = feed_server.route(
        "/news.xml",
        body=rss([Entry("N1", guid="n1", content=content), Entry("N2", guid="n2")], link=base),
    )
    blog = feed_server.route("/blog.xml", body=rss([Entry("B1", guid="b1")], link=base))
    config = write_project(tmp_path, [news, blog])
    clock = [START]

    async def cycle() -> None:
        settings = load_settings(config)
        async with open_collector(settings, clock=lambda: clock[0]) as collector:
            await run_cycle(collector, force=True)

    asyncio.run(cycle())
    feed_server.route(
        "/news.xml",
        body=rss([Entry("N1", guid="n1", content=content), Entry("N3", guid="n3")], link=base),
    )
    clock[0] = START + timedelta(hours=1)
    asyncio.run(cycle())
    return Collected(tmp_path, config, {"news": news, "blog": blog})


def test_read_item_renders_without_changing_what_is_stored(collected: Collected) -> None:
    ((item_id, stored),) = collected.rows("SELECT id, content_html FROM items WHERE guid = 'n1'")

    async def read(collector: Any) -> ReadItem | None:
        return await read_item(collector.db, collector.objects, item_id)

    found = collected.run(read)
    assert found is not None
    assert found.content_html == stored
    assert [(i.position, i.status) for i in found.images] == [(0, "success"), (1, "pending")]
    archived = collected.folder / "objects" / str(found.images[0].r2_key)
    assert found.rendered_html == stored.replace(
        f'"{collected.feeds["news"].replace("news.xml", "img/ok.png")}?a=1&amp;b=2"',
        f'"{archived.as_uri()}"',
    )
    assert found.rendered_html != stored
    assert collected.rows("SELECT content_html FROM items WHERE guid = 'n1'") == [(stored,)]
    assert collected.run(lambda c: read_item(c.db, c.objects, "no-such-id")) is None


def test_the_readmes_library_example_reads_what_was_collected(collected: Collected) -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("\n## Reading items\n") :]
    example = section[section.index("```python\n") + 10 : section.index("\n```\n")]
    result = subprocess.run(
        [sys.executable, "-c", example],
        cwd=collected.folder,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    rows = collected.rows(
        "SELECT id, created_at, title, length(coalesce(content_html, '')) FROM items "
        "ORDER BY created_at, id"
    )
    assert len(rows) == 4
    assert result.stdout.splitlines() == [" ".join(map(str, row)) for row in rows]


def test_open_stores_refuses_a_missing_database_and_creates_nothing(tmp_path: Path) -> None:
    """A reader pointed at a mistyped folder saw "nothing collected", and left an empty
    database there that a collector started in that folder would then use."""
    settings = load_settings(write_project(tmp_path, ["https://a.example/feed"]))

    async def open_and_close() -> None:
        async with open_stores(settings):
            pytest.fail("opened a database that does not exist")

    with pytest.raises(ConfigError, match=r"reading: there is no database at .*collector\.db"):
        asyncio.run(open_and_close())
    assert sorted(path.name for path in tmp_path.iterdir()) == ["feedcollector.toml", "feeds.yaml"]
    (tmp_path / "collector.db").touch()  # as a wrong D1 url or an empty D1 looks
    with pytest.raises(ConfigError, match=r"reading: the database .* holds no feedcollector tab"):
        asyncio.run(open_and_close())
    with sqlite3.connect(tmp_path / "collector.db") as conn:
        assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [], "no tables made"


def test_iter_items_filters_and_pages(collected: Collected) -> None:
    def listed(**kwargs: Any) -> list[str]:
        async def go(collector: Any) -> list[StoredItem]:
            return [item async for item in iter_items(collector.db, page_size=2, **kwargs)]

        return [item.guid for item in collected.run(go)]

    assert sorted(listed()) == ["b1", "n1", "n2", "n3"]
    assert listed()[-1] == "n3", "created_at order"
    assert listed(newest_first=True)[0] == "n3"
    assert sorted(listed(feed_url=collected.feeds["news"])) == ["n1", "n2", "n3"]
    assert listed(since=START + timedelta(minutes=30)) == ["n3"]
    assert len(listed(limit=3)) == 3
    assert listed(feed_url="https://unknown.example/feed") == []


def test_a_consumer_reading_in_batches_goes_on_past_a_second_of_more_items(
    collected: Collected,
) -> None:
    """Three items share one second; batches of two from the last created_at alone returned
    the same two forever. From the last id taken, each batch goes on where the last ended."""
    ids = [row[0] for row in collected.rows("SELECT id FROM items ORDER BY created_at, id")]
    assert len(collected.rows("SELECT DISTINCT created_at FROM items")) < len(ids)

    def batch(after: str | None) -> list[str]:
        async def go(collector: Any) -> list[StoredItem]:
            return [item async for item in iter_items(collector.db, limit=2, after=after)]

        return [item.id for item in collected.run(go)]

    taken: list[str] = []
    while batch_ids := batch(taken[-1] if taken else None):
        taken += batch_ids
    assert taken == ids
    with pytest.raises(ConfigError, match="no item has the id 'gone'"):
        batch("gone")
    config = str(collected.config)
    page = feedcollector(
        "--config",
        config,
        "items",
        "--jsonl",
        "--limit",
        "2",
        "--after",
        ids[1],
        cwd=collected.folder,
    )
    assert page.returncode == 0, page.stderr
    assert [json.loads(line)["id"] for line in page.stdout.splitlines()] == ids[2:4]
    unknown = feedcollector("--config", config, "items", "--after", "gone", cwd=collected.folder)
    assert unknown.returncode == 2
    assert "no item has the id 'gone'" in unknown.stderr
    assert unknown.stdout == "", "refused before the table's header"


def test_an_image_written_as_image_is_archived_and_shown_from_the_archive(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """HTML5 reads <image> as <img>: one alone in an item was never archived, and one next
    to an <img> was archived but still shown from its source."""
    for name in ("a", "b", "c"):
        feed_server.route(f"/img/{name}.png", body=png(), headers={"Content-Type": "image/png"})
    entries = [
        Entry("alone", guid="alone", content='<p><image src="/img/a.png"></p>'),
        Entry("mixed", guid="mixed", content='<img src="/img/b.png"><IMAGE SRC="/img/c.png">'),
    ]
    feed = feed_server.route("/feed.xml", body=rss(entries, link=feed_server.url("/")))
    config = write_project(tmp_path, [feed])

    async def cycle() -> None:
        async with open_collector(load_settings(config), clock=lambda: START) as collector:
            await run_cycle(collector, force=True)

    asyncio.run(cycle())
    collected = Collected(tmp_path, config, {"feed": feed})
    assert collected.rows("SELECT status, count(*) FROM image_tasks GROUP BY 1") == [("success", 3)]
    for guid, count in (("alone", 1), ("mixed", 2)):
        ((item_id,),) = collected.rows(f"SELECT id FROM items WHERE guid = '{guid}'")
        found = collected.run(lambda c, i=item_id: read_item(c.db, c.objects, i))
        assert found is not None
        assert found.rendered_html is not None
        assert found.rendered_html.count("file://") == count
        assert feed_server.url("/img/") not in found.rendered_html


def test_items_and_item_commands(collected: Collected) -> None:
    config = str(collected.config)
    table = feedcollector("--config", config, "items", cwd=collected.folder)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith("created_at")
    assert len(lines) == 5
    assert "N3" in lines[-1]

    stream = feedcollector(
        "--config",
        config,
        "items",
        "--jsonl",
        "--feed",
        collected.feeds["news"],
        cwd=collected.folder,
    )
    assert stream.returncode == 0, stream.stderr
    records = [json.loads(line) for line in stream.stdout.splitlines()]
    guids = [r["guid"] for r in records]
    assert (sorted(guids[:2]), guids[2]) == (["n1", "n2"], "n3"), "created_at order"
    first = next(r for r in records if r["guid"] == "n1")
    assert {r["feed_url"] for r in records} == {collected.feeds["news"]}
    assert first["content_html"].startswith("<p>x</p><img src=")
    archived, missing = first["images"]
    assert (archived["position"], archived["status"], missing["status"]) == (
        0,
        "success",
        "pending",
    )
    assert (collected.folder / "objects" / archived["key"]).is_file()
    assert archived["url"] == (collected.folder / "objects" / archived["key"]).resolve().as_uri()
    assert (missing["key"], missing["url"]) == (None, None)
    assert all(r["images"] == [] for r in records if r["guid"] != "n1")
    limited = feedcollector(
        "--config", config, "items", "--jsonl", "--limit", "1", cwd=collected.folder
    )
    assert len(limited.stdout.splitlines()) == 1
    since = feedcollector(
        "--config",
        config,
        "items",
        "--jsonl",
        "--since",
        "2026-03-02T09:30:00Z",
        cwd=collected.folder,
    )
    assert [json.loads(line)["guid"] for line in since.stdout.splitlines()] == ["n3"]

    item_id = first["id"]
    shown = feedcollector("--config", config, "item", item_id, cwd=collected.folder)
    assert shown.returncode == 0, shown.stderr
    assert "title:      N1" in shown.stdout
    assert "image 0:    success" in shown.stdout
    assert "image 1:    pending" in shown.stdout
    why = re.search(r"image 1: .*missing\.png - \((.*)\)$", shown.stdout, re.MULTILINE)
    assert why is not None, shown.stdout
    assert re.fullmatch(r"\d failed attempts?; tried again from \S+Z; last: .*404.*", why[1])
    assert shown.stdout.rstrip().endswith(first["content_html"])
    as_json = feedcollector("--config", config, "item", item_id, "--json", cwd=collected.folder)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == first, "the object `items --jsonl` wrote for it"
    both = feedcollector(
        "--config", config, "item", item_id, "--json", "--html", cwd=collected.folder
    )
    assert both.returncode == 2
    assert "use one or the other" in both.stderr
    rendered = feedcollector(
        "--config",
        config,
        "item",
        item_id,
        "--render",
        "--sanitize",
        "--html",
        cwd=collected.folder,
    )
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stdout.startswith('<p>x</p><img src="file://')
    assert "missing.png" in rendered.stdout
    served = Path(config).with_name("served.toml")
    served.write_text(
        Path(config)
        .read_text()
        .replace(
            'path = "objects"\n', 'path = "objects"\npublic_base_url = "https://home.example/o"\n'
        )
    )
    rendered = feedcollector(
        "--config", served, "item", item_id, "--render", "--html", cwd=collected.folder
    )
    assert rendered.stdout.startswith(
        f'<p>x</p><img src="https://home.example/o/{archived["key"]}"'
    ), "the local folder served at [storage] public_base_url (the key was ignored)"

    unknown_item = feedcollector("--config", config, "item", "nope", cwd=collected.folder)
    assert unknown_item.returncode == 2
    assert "no item with id nope" in unknown_item.stderr
    unknown_feed = feedcollector(
        "--config", config, "items", "--feed", "https://x.example/f", cwd=collected.folder
    )
    assert unknown_feed.returncode == 2
    assert "no feed https://x.example/f" in unknown_feed.stderr


def test_one_missing_or_broken_content_object_does_not_stop_the_others(
    collected: Collected,
) -> None:
    """A content object gone (a crash between cleanup's deletes and its batch) or not UTF-8
    stopped the whole --jsonl stream (and `item` ended in a traceback)."""
    with sqlite3.connect(collected.database) as conn:
        conn.execute(
            "UPDATE items SET content_html = NULL, content_key = 'content/x/gone.html' "
            "WHERE guid = 'n1'"
        )
        conn.execute(
            "UPDATE items SET content_html = NULL, content_key = 'content/x/bad.html' "
            "WHERE guid = 'n2'"
        )
    (collected.folder / "objects" / "content" / "x").mkdir(parents=True)
    (collected.folder / "objects" / "content" / "x" / "bad.html").write_bytes(b"<p>caf\xff</p>")
    config = str(collected.config)
    stream = feedcollector("--config", config, "items", "--jsonl", cwd=collected.folder)
    assert stream.returncode == 0, stream.stderr
    records = {r["guid"]: r for r in map(json.loads, stream.stdout.splitlines())}
    assert sorted(records) == ["b1", "n1", "n2", "n3"]
    assert records["n1"]["content_html"] is None
    assert records["n2"]["content_html"] == "<p>caf\ufffd</p>"
    assert "content/x/gone.html is missing" in stream.stderr
    restore = shlex.join(["feedcollector", "--config", str(collected.config), "restore", "--feed"])
    assert f"(`{restore} {collected.feeds['news']}` writes it again" in stream.stderr, (
        "pasted without the --config it was given, restore ran on the defaults"
    )
    shown = feedcollector("--config", config, "item", records["n2"]["id"], cwd=collected.folder)
    assert shown.returncode == 0, shown.stderr


class AnswerSizes:
    """A Database that notes the characters of text each query answered."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.largest = 0

    async def query(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = await self.inner.query(sql, params)
        size = sum(len(v) for row in rows for v in row.values() if isinstance(v, str))
        self.largest = max(self.largest, size)
        return rows


@pytest.mark.cloud
def test_listing_items_keeps_every_d1_answer_far_under_its_result_limit(
    d1_proxy: cloud.D1Proxy,
) -> None:
    """A page of 200 items carried every item's inline HTML, up to 900 KiB each: 180 MB,
    past D1's 50 MB query result limit. Long HTML now follows the page in bounded groups."""
    sizes = [900 * 1024, 10, 200_000, 900 * 1024, 3_000, 0, 900 * 1024] * 4
    htmls = [chr(ord("a") + n % 26) * size if size else None for n, size in enumerate(sizes)]

    async def go() -> list[StoredItem]:
        db = cloud.d1_database(d1_proxy, timeout_s=120)
        try:
            await migrate(db)
            await store_sync.sync_feeds(db, [FeedSpec("https://a.example/")], START)
            for n, html in enumerate(htmls):
                await db.query(
                    "INSERT INTO items (id, feed_id, guid, pub_date, content_html, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (f"id{n:03}", feed_id_for("https://a.example/"), f"g{n}", "x", html, "t"),
                )
            counted = AnswerSizes(db)
            listed = [item async for item in iter_items(counted)]  # type: ignore[arg-type]
            assert counted.largest <= 6 * 2**20
            paged = [item.id async for item in iter_items(db, page_size=5, newest_first=True)]
            assert paged == [item.id for item in reversed(listed)]  # the cursor's row values
            return listed
        finally:
            await db.close()

    listed = asyncio.run(go())
    assert [item.id for item in listed] == [f"id{n:03}" for n in range(len(htmls))]
    assert [item.content_html for item in listed] == htmls


def _listing_database(path: Path, created_at: Callable[[int], str], count: int) -> SQLiteDatabase:
    """A database of ``count`` items of one feed, ids ``00000000`` up, item n stored at
    ``created_at(n)``."""
    db = SQLiteDatabase(path)
    asyncio.run(migrate(db))
    con = sqlite3.connect(path)
    con.execute(
        "INSERT INTO feeds (id, url, created_at) VALUES ('f', 'https://a.example/f', '2026')"
    )
    con.executemany(
        "INSERT INTO items (id, feed_id, guid, created_at) VALUES (?, 'f', ?, ?)",
        [(f"{n:08d}", f"g{n}", created_at(n)) for n in range(count)],
    )
    con.commit()
    con.close()
    return db


def test_the_images_of_many_items_are_read_a_hundred_items_a_query(tmp_path: Path) -> None:
    db = _listing_database(tmp_path / "collector.db", lambda n: "2026-01-01T00:00:00Z", 250)
    with_images = ["00000000", "00000120", "00000249"]

    async def go() -> dict[str, tuple[StoredImage, ...]]:
        for item_id in with_images:
            for position in (1, 0):
                await db.query(
                    "INSERT INTO image_tasks (id, item_id, original_url, created_at, updated_at, "
                    "position) VALUES (?, ?, ?, 'x', 'x', ?)",
                    (f"{item_id}-{position}", item_id, f"https://i.example/{position}", position),
                )
        stepping = SteppingDatabase(db)
        found = await items_images(stepping, [f"{n:08d}" for n in range(250)])
        assert len(stepping.steps) == 3
        return found

    found = asyncio.run(go())
    assert sorted(found) == with_images
    assert [image.position for image in found["00000120"]] == [0, 1]
    asyncio.run(db.close())


def _listed(db: Database, *, newest_first: bool) -> list[str]:
    async def go() -> list[str]:
        items = iter_items(db, page_size=100, newest_first=newest_first)
        return [item.id async for item in items]

    return asyncio.run(go())


def test_iter_items_pages_cost_the_same_at_the_end_as_at_the_start(tmp_path: Path) -> None:
    """Each page starts from its cursor in the created_at index: the last page of 3,000 items
    does about the work of the first (the cursor's OR used to make every page scan the index
    from the start, so a 300k-item ``items --jsonl`` took 33 s, 28 ms a page at the end)."""
    db = _listing_database(  # pairs of items share a created_at: the tie-break by id must hold
        tmp_path / "collector.db",
        lambda n: f"2026-01-01T00:{n // 120:02d}:{n // 2 % 60:02d}Z",
        3000,
    )
    stepping = SteppingDatabase(db)
    ascending = _listed(stepping, newest_first=False)
    assert ascending == [f"{n:08d}" for n in range(3000)]
    steps = stepping.steps
    assert len(steps) == 31
    assert max(steps[1:]) <= 3 * steps[1] + 5, steps
    steps.clear()
    assert _listed(stepping, newest_first=True) == ascending[::-1]
    assert len(steps) == 31
    assert max(steps[1:]) <= 3 * steps[1] + 5, steps
    asyncio.run(db.close())


def test_iter_items_pages_among_the_rows_of_one_second_cost_what_other_pages_cost(
    tmp_path: Path,
) -> None:
    """A first cycle stores thousands of items in one second (12,000 of a corpus cycle's
    13,700). The created_at index ends with the id, so a page among them starts at its cursor;
    with created_at alone every page read and sorted the whole second (listing that cycle's
    items took 1.0 s, 0.15 s now). The most work a page does is the same with four times as
    many rows in the second."""
    most = []
    for count in (400, 1600):
        db = _listing_database(tmp_path / f"{count}.db", lambda n: "2026-01-01T00:00:00Z", count)
        stepping = SteppingDatabase(db)
        ascending = _listed(stepping, newest_first=False)
        assert ascending == [f"{n:08d}" for n in range(count)]
        assert _listed(stepping, newest_first=True) == ascending[::-1]
        most.append(stepping.most())
        asyncio.run(db.close())
    assert most[1] <= most[0] * 1.5, most


class ExpiringOnTheWay:
    """A Database on which retention deletes an item between a page and its long HTML."""

    def __init__(self, inner: SQLiteDatabase, doomed: str) -> None:
        self.inner = inner
        self.doomed = doomed

    async def query(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        if sql.startswith("SELECT id, content_html FROM items WHERE id IN"):
            await self.inner.query("DELETE FROM items WHERE id = ?", (self.doomed,))
        rows: list[dict[str, Any]] = await self.inner.query(sql, params)
        return rows


def test_an_item_expired_between_its_page_and_its_html_is_left_out(tmp_path: Path) -> None:
    """Its HTML read after its page found no row: it was listed with no content at all, and a
    consumer kept it so, never reading that id again."""
    db = _listing_database(tmp_path / "c.db", lambda n: "2026-03-01T00:00:00Z", 3)
    long_html = "<p>" + "x" * 20_000 + "</p>"
    with sqlite3.connect(tmp_path / "c.db") as con:
        con.execute("UPDATE items SET content_html = ? WHERE id != '00000002'", (long_html,))

    async def listed() -> list[StoredItem]:
        try:
            expiring = ExpiringOnTheWay(db, "00000001")
            return [item async for item in iter_items(expiring)]  # type: ignore[arg-type]
        finally:
            await db.close()

    items = asyncio.run(listed())
    assert [(item.id, item.content_html) for item in items] == [
        ("00000000", long_html),
        ("00000002", None),
    ]
