"""When a feed is fetched next, and what 410 and permanent redirects do, end to end: a real
feed server on 127.0.0.1, a real SQLite file, a clock the test moves."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta
from email.utils import formatdate
from pathlib import Path

import pytest

from feedcollector import store
from feedcollector.backends.sqlite import SQLiteDatabase
from feedcollector.schedule import feed_id_for, jittered

from . import cloud
from .cloud import D1Proxy, S3Bucket, cloud_environ, write_cloud_config
from .feedserver import FeedServer, Route
from .samples import START, Entry, rss, write_project
from .scheduling import polite_project, schedule_toml, stamp
from .test_cloud_cycle import Shape, write_feeds
from .test_pipeline import Project

d1_proxy = cloud.d1_proxy
s3_server = cloud.s3_server

SYNDICATION = 'xmlns:sy="http://purl.org/rss/1.0/modules/syndication/"'


def with_channel(body: bytes, extra: str, namespace: str = "") -> bytes:
    """Put ``extra`` elements into the channel (and a namespace on the root)."""
    text = body.decode().replace("<channel>", f"<channel>{extra}", 1)
    return text.replace('<rss version="2.0"', f'<rss version="2.0" {namespace}', 1).encode()


def one_post(name: str = "post") -> bytes:
    return rss([Entry(name, guid=name)])


def next_fetch(p: Project, url: str) -> str:
    (row,) = p.rows("SELECT next_fetch_at FROM feeds WHERE url = ?", url)
    return str(row["next_fetch_at"])


def real_http_date(seconds_from_now: float) -> str:
    return formatdate(time.time() + seconds_from_now, usegmt=True)


# --- floors from HTTP caching and from the feed itself ------------------------------------------


@pytest.mark.parametrize(
    ("headers", "body_extra", "wait"),
    [
        ({"Cache-Control": "max-age=7200"}, "", timedelta(hours=2)),
        ({"Cache-Control": "max-age=7200", "Age": "3600"}, "", timedelta(hours=1)),
        ({"Cache-Control": "max-age=600"}, "", timedelta(minutes=30)),
        ({"Cache-Control": "no-cache, max-age=7200"}, "", timedelta(minutes=30)),
        ({"Cache-Control": "no-store"}, "<ttl>5</ttl>", timedelta(minutes=30)),
        ({"Cache-Control": "max-age=99999999999"}, "", timedelta(hours=12)),
        ({}, "<ttl>180</ttl>", timedelta(hours=3)),
        ({"Cache-Control": "max-age=60"}, "<ttl>90</ttl>", timedelta(minutes=90)),
        ({}, "<sy:updatePeriod>weekly</sy:updatePeriod>", timedelta(hours=12)),
        (
            {},
            "<sy:updatePeriod>daily</sy:updatePeriod><sy:updateFrequency>4</sy:updateFrequency>",
            timedelta(hours=6),
        ),
    ],
    ids=[
        "max-age",
        "max-age-minus-age",
        "short-max-age",
        "no-cache",
        "no-store",
        "capped",
        "ttl",
        "ttl-beats-max-age",
        "sy-weekly-capped",
        "sy-4-a-day",
    ],
)
def test_cache_hints_are_a_floor_on_the_next_fetch(
    feed_server: FeedServer,
    tmp_path: Path,
    headers: dict[str, str],
    body_extra: str,
    wait: timedelta,
) -> None:
    body = with_channel(one_post(), body_extra, SYNDICATION)
    url = feed_server.route("/feed", body=body, headers=headers)
    p = polite_project(tmp_path, [url], max_cache_floor='"12h"')
    assert p.cycle().stored == 1
    assert next_fetch(p, url) == stamp(START + wait)


def test_expires_counts_from_the_servers_date(feed_server: FeedServer, tmp_path: Path) -> None:
    url = feed_server.route("/feed", body=one_post(), headers={"Expires": real_http_date(3 * 3600)})
    p = polite_project(tmp_path, [url])
    p.cycle()
    three_hours = START + timedelta(hours=3)
    assert stamp(three_hours - timedelta(seconds=3)) <= next_fetch(p, url) <= stamp(three_hours)


def test_a_304_keeps_the_feeds_own_ttl(feed_server: FeedServer, tmp_path: Path) -> None:
    with_ttl = feed_server.route(
        "/ttl", body=with_channel(one_post(), "<ttl>180</ttl>"), etag='"t"'
    )
    plain = feed_server.route("/plain", body=one_post(), etag='"p"')
    p = polite_project(tmp_path, [with_ttl, plain])
    p.cycle()
    p.clock.advance(hours=3)
    report = p.cycle()
    assert report.not_modified == 2
    assert next_fetch(p, with_ttl) == stamp(p.clock.now + timedelta(hours=3))
    assert next_fetch(p, plain) == stamp(p.clock.now + timedelta(minutes=30))


# --- adaptive intervals and jitter --------------------------------------------------------------


def posts_every(gap: timedelta, count: int = 10) -> bytes:
    entries = [
        Entry(
            f"p{n}", guid=f"p{n}", pub_date=formatdate((START - gap * n).timestamp(), usegmt=True)
        )
        for n in range(count)
    ]
    return rss(entries)


def test_intervals_follow_how_often_a_feed_posts_unless_pinned(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    hourly = feed_server.route("/hourly", body=posts_every(timedelta(hours=1)))
    chatty = feed_server.route("/chatty", body=posts_every(timedelta(minutes=2)))
    weekly = feed_server.route("/weekly", body=posts_every(timedelta(days=7)))
    pinned = feed_server.route("/pinned", body=posts_every(timedelta(hours=1)))
    undated = feed_server.route("/undated", body=rss([Entry("x", guid="x", pub_date=None)]))
    feeds = [hourly, chatty, weekly, {"url": pinned, "interval": "6h"}, undated]
    p = polite_project(tmp_path, feeds, host_gap="0s")
    p.cycle()
    assert next_fetch(p, hourly) == stamp(START + timedelta(hours=1))
    assert next_fetch(p, chatty) == stamp(START + timedelta(minutes=15)), "the lower bound"
    assert next_fetch(p, weekly) == stamp(START + timedelta(hours=2)), "the upper bound"
    assert next_fetch(p, pinned) == stamp(START + timedelta(hours=6)), "beyond the bounds"
    assert next_fetch(p, undated) == stamp(START + timedelta(minutes=30)), "no history: default"
    (row,) = p.rows("SELECT post_gap_seconds, newest_item_at FROM feeds WHERE url = ?", hourly)
    assert row == {"post_gap_seconds": 3600, "newest_item_at": stamp(START)}


def test_a_quiet_feed_is_asked_less_often_even_through_304s(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    url = feed_server.route("/feed", body=posts_every(timedelta(hours=1)), etag='"same"')
    p = polite_project(tmp_path, [url], host_gap="0s")
    p.cycle()
    p.clock.advance(hours=3)
    assert p.cycle().not_modified == 1
    assert next_fetch(p, url) == stamp(p.clock.now + timedelta(hours=1.5)), "half the silence"
    p.clock.advance(hours=7)
    assert p.cycle().not_modified == 1
    assert next_fetch(p, url) == stamp(p.clock.now + timedelta(hours=2)), "max_interval"


def test_adaptive_off_uses_the_default_and_bounds_are_configurable(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    url = feed_server.route("/feed", body=posts_every(timedelta(hours=1)))
    p = polite_project(tmp_path, [url], host_gap="0s", adaptive="false")
    p.cycle()
    assert next_fetch(p, url) == stamp(START + timedelta(minutes=30))
    write_project(
        tmp_path, [url], schedule_toml=schedule_toml("0s", min_interval='"2h"', max_interval='"3h"')
    )
    p.clock.advance(hours=1)
    p.cycle()
    assert next_fetch(p, url) == stamp(p.clock.now + timedelta(hours=2))


def test_jitter_spreads_feeds_that_would_fall_due_together(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    urls = [feed_server.route(f"/f{n}", body=one_post(f"p{n}")) for n in range(12)]
    p = polite_project(tmp_path, urls, host_gap="0s", jitter="0.1")
    p.cycle()
    due = {url: next_fetch(p, url) for url in urls}
    for url, at in due.items():
        assert at == stamp(START + jittered(timedelta(minutes=30), feed_id_for(url), 0.1))
        assert stamp(START + timedelta(minutes=27)) <= at <= stamp(START + timedelta(minutes=33))
    assert len(set(due.values())) > 6, "not all at the same second"


# --- 410 Gone ---------------------------------------------------------------------------------


def next_due(p: Project) -> str | None:
    async def go() -> str | None:
        db = SQLiteDatabase(p.folder / "collector.db")
        try:
            return await store.next_due_at(db, datetime(1970, 1, 1, tzinfo=UTC))
        finally:
            await db.close()

    return asyncio.run(go())


def test_410_stops_scheduling_keeps_the_items_and_says_what_to_do(
    feed_server: FeedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    route = Route(body=rss([Entry("kept", guid="k")]))
    url = feed_server.route("/feed", route)
    p = polite_project(tmp_path, [url])
    p.cycle()
    route.status, route.body = 410, b"gone for good"
    p.clock.advance(hours=1)
    with caplog.at_level(logging.WARNING, logger="feedcollector"):
        report = p.cycle()
        assert report.gone == 1
        (row,) = p.rows("SELECT gone_at, last_status, consecutive_failures FROM feeds")
        assert row == {"gone_at": stamp(p.clock.now), "last_status": 410, "consecutive_failures": 0}
        assert p.rows("SELECT guid FROM items") == [{"guid": "k"}], "its items stay"
        p.clock.advance(days=3)
        assert p.cycle().feeds == 0, "no longer scheduled"
        assert next_due(p) is None, "the scheduler does not wake up for it"
        assert len(feed_server.hits("/feed")) == 2
        assert p.cycle(urls=[url], force=True).gone == 1, "a manual fetch still tries it"
    advice = [r for r in caplog.records if "Remove it from the feeds file" in r.getMessage()]
    assert len(advice) == 1, "told once"
    assert str(p.folder / "feeds.yaml") in advice[0].getMessage()

    route.status, route.body = 200, rss([Entry("kept", guid="k"), Entry("new", guid="n")])
    assert p.cycle(urls=[url], force=True).stored == 1
    (row,) = p.rows("SELECT gone_at, next_fetch_at FROM feeds")
    assert row == {"gone_at": None, "next_fetch_at": stamp(p.clock.now + timedelta(minutes=30))}


def test_a_410_is_one_warning_and_a_manual_fetch_finding_it_gone_again_none(
    feed_server: FeedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The README says a 410 is told once: the advice came with the outcome line, a second
    WARNING saying less; a `fetch` of the gone feed logged that line as a WARNING again."""
    url = feed_server.route("/feed", status=410, body=b"gone for good")
    p = polite_project(tmp_path, [url])
    with caplog.at_level(logging.INFO, logger="feedcollector"):
        assert p.cycle().gone == 1
    (warning,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warning.getMessage().startswith(f"fetch: {url} answered 410 Gone: it is no longer ")
    assert "Remove it from the feeds file" in warning.getMessage()
    pasted = f"`feedcollector --config {p.config.resolve()} fetch {url}` tries it once more"
    assert pasted in warning.getMessage(), "the command works pasted in any folder"
    cycle = [r for r in caplog.records if r.getMessage().startswith("cycle: ")]
    assert [r.levelno for r in cycle] == [logging.INFO], "a feed gone is news"

    caplog.clear()
    p.clock.advance(hours=1)
    with caplog.at_level(logging.INFO, logger="feedcollector"):
        assert p.cycle(urls=[url], force=True).gone == 1
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if url in r.getMessage()]
    assert lines == [
        (
            logging.INFO,
            f"feed {url}: HTTP 410, gone: fetch: HTTP 410 Gone from {url} (the feed was removed "
            f"for good), 0 KiB, {lines[0][1].rsplit(', ', 1)[1]}",
        )
    ]


def test_taking_a_gone_feed_out_of_the_file_and_back_tries_it_again(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    gone = feed_server.route("/gone", status=410, body=b"")
    other = feed_server.route("/other", body=one_post())
    p = polite_project(tmp_path, [gone, other])
    p.cycle()
    write_project(tmp_path, [other], schedule_toml=schedule_toml())
    p.cycle()
    write_project(tmp_path, [other, gone], schedule_toml=schedule_toml())
    feed_server.route("/gone", body=one_post("back"))
    assert p.cycle().stored == 1
    assert p.rows("SELECT gone_at FROM feeds WHERE url = ?", gone) == [{"gone_at": None}]


# --- permanent and temporary redirects ----------------------------------------------------------


def redirect(server: FeedServer, path: str, status: int, to: str) -> str:
    return server.route(path, status=status, headers={"Location": to})


def test_a_permanent_move_is_followed_recorded_and_reported(
    feed_server: FeedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old = redirect(feed_server, "/old", 301, "/mid")
    redirect(feed_server, "/mid", 308, "/new")
    new = feed_server.route("/new", body=rss([Entry("a", guid="a")]))
    p = polite_project(tmp_path, [old])
    with caplog.at_level(logging.WARNING, logger="feedcollector"):
        assert p.cycle().stored == 1
    (row,) = p.rows("SELECT id, url, moved_to FROM feeds")
    assert row == {"id": feed_id_for(old), "url": old, "moved_to": new}
    warning = next(r.getMessage() for r in caplog.records if "moved permanently" in r.getMessage())
    assert old in warning
    assert new in warning
    assert "Update the feeds file" in warning

    p.clock.advance(hours=1)
    assert p.cycle().unchanged == 1  # the same body from the same (new) URL
    assert [len(feed_server.hits(path)) for path in ("/old", "/mid", "/new")] == [1, 1, 2]

    # The operator puts the new URL in the file: the same feed, same id, no duplicate items.
    feed_server.route("/new", body=rss([Entry("a", guid="a"), Entry("b", guid="b")]))
    write_project(tmp_path, [new], schedule_toml=schedule_toml())
    p.clock.advance(hours=1)
    assert p.cycle().new_items == 1
    assert p.rows("SELECT id, url, moved_to, active FROM feeds") == [
        {"id": feed_id_for(old), "url": new, "moved_to": None, "active": 1}
    ]
    assert p.rows("SELECT COUNT(*) AS n FROM items") == [{"n": 2}]


def test_a_permanent_redirect_to_a_page_that_is_no_feed_moves_nothing(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """A site redesign sends its old feed URL to the home page (301): the move was recorded
    before the page failed to parse, so the feed was asked at the home page for good, and
    never at its own URL again, fixed or not."""
    old = redirect(feed_server, "/feed", 301, "/")
    feed_server.route("/", body=b"<html><head><title>Home</title></head></html>")
    p = polite_project(tmp_path, [old])
    assert p.cycle().failed == 1
    assert p.rows("SELECT moved_to, consecutive_failures FROM feeds") == [
        {"moved_to": None, "consecutive_failures": 1}
    ]
    feed_server.route("/feed", body=rss([Entry("a", guid="a")]))  # the site fixed its feed
    p.clock.advance(hours=1)
    assert p.cycle().stored == 1
    assert p.rows("SELECT moved_to, consecutive_failures FROM feeds") == [
        {"moved_to": None, "consecutive_failures": 0}
    ]


@pytest.mark.parametrize(
    ("chain", "recorded"),
    [
        ([(302, "/b")], None),
        ([(307, "/b")], None),
        ([(302, "/b"), (301, "/c")], None),
        ([(301, "/b"), (302, "/c")], "/b"),
    ],
    ids=["302", "307", "temporary-then-permanent", "permanent-then-temporary"],
)
def test_temporary_redirects_are_followed_but_not_recorded(
    feed_server: FeedServer,
    tmp_path: Path,
    chain: list[tuple[int, str]],
    recorded: str | None,
) -> None:
    start = "/a"
    for status, target in chain:
        redirect(feed_server, start, status, target)
        start = target
    feed_server.route(start, body=one_post())
    url = feed_server.url("/a")
    p = polite_project(tmp_path, [url])
    assert p.cycle().stored == 1
    moved_to = recorded and feed_server.url(recorded)
    assert p.rows("SELECT moved_to FROM feeds") == [{"moved_to": moved_to}]
    p.clock.advance(hours=1)
    p.cycle()
    first = recorded or "/a"
    assert len(feed_server.hits(first)) == 2, "the next fetch starts at the recorded place"


def test_a_move_that_ends_in_an_error_is_not_recorded(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    old = redirect(feed_server, "/old", 301, "/missing")
    p = polite_project(tmp_path, [old])
    assert p.cycle().failed == 1
    assert p.rows("SELECT moved_to FROM feeds") == [{"moved_to": None}]


# --- the same through the Proxy Worker and D1 ------------------------------------------------


@pytest.mark.cloud
def test_gone_moved_and_retry_after_through_d1(
    feed_server: FeedServer, tmp_path: Path, d1_proxy: D1Proxy, s3_server: S3Bucket
) -> None:
    gone = feed_server.route("/gone", status=410, body=b"")
    old = redirect(feed_server, "/old", 301, "/new")
    new = feed_server.route("/new", body=one_post("moved"))
    limited = feed_server.route("/busy", status=429, body=b"", headers={"Retry-After": "3600"})
    write_feeds(tmp_path, [gone, old, limited])
    config = write_cloud_config(
        tmp_path,
        proxy_url=d1_proxy.url,
        s3_endpoint=s3_server.server.endpoint,
        bucket=s3_server.bucket,
    )
    s = Shape(
        "cloud", tmp_path, config, cloud_environ(d1_proxy.token), proxy=d1_proxy, s3=s3_server
    )
    report = s.cycle()
    assert (report.gone, report.stored, report.failed) == (1, 1, 1)
    rows = {
        r["url"]: r
        for r in s.rows(
            "SELECT url, gone_at, moved_to, retry_after_until, rate_limited_by, next_fetch_at "
            "FROM feeds"
        )
    }
    hour = stamp(START + timedelta(hours=1))
    assert rows[gone]["gone_at"] == stamp(START)
    assert rows[old]["moved_to"] == new
    assert (rows[limited]["retry_after_until"], rows[limited]["next_fetch_at"]) == (hour, hour)
    assert rows[limited]["rate_limited_by"] == limited, "the host D1 names to the next cycle"

    assert s.cycle(urls=[limited], force=True).deferred == 1
    assert len(feed_server.hits("/busy")) == 1
    s.clock.advance(hours=2)
    assert s.cycle().feeds == 2, "the gone feed is not claimed"
    assert len(feed_server.hits("/gone")) == 1

    write_feeds(tmp_path, [gone, new, limited])
    s.cycle()
    assert s.rows("SELECT id, moved_to FROM feeds WHERE url = ?", new) == [
        {"id": feed_id_for(old), "moved_to": None}
    ]
