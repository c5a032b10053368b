"""Per-host politeness and Retry-After, end to end: real servers on 127.0.0.1 (one host per
port), a real SQLite file, request times taken on the server side."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from datetime import timedelta
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from feedcollector import claims
from feedcollector.feed_urls import feed_url_key
from feedcollector.politeness import HostGate, PoliteQueue, host_key
from feedcollector.schedule import RATE_LIMIT_PAUSE

from .feedserver import FeedServer, Route
from .samples import START, Entry, rss, write_project
from .scheduling import (
    BusyLog,
    claim_first,
    execute,
    polite_project,
    register,
    schedule_toml,
    stamp,
)
from .test_cli import feedcollector

SLACK_S = 0.01
"""Timer and clock granularity: a measured gap may fall short of the setting by this much."""


def feed_body(name: str) -> bytes:
    return rss([Entry(f"{name} post", guid=f"{name}-1")])


def test_host_keys() -> None:
    assert host_key("https://Blog.Example.org/feed") == "blog.example.org"
    assert host_key("https://blog.example.org:443/feed") == "blog.example.org"
    assert host_key("http://blog.example.org:80/a") == host_key("https://blog.example.org/b")
    assert host_key("http://127.0.0.1:8080/feed") == "127.0.0.1:8080"
    assert host_key("http://127.0.0.1:8081/feed") != host_key("http://127.0.0.1:8080/feed")
    assert host_key("http://[::1]:9000/feed") == "::1:9000"


def test_host_keys_name_the_host_as_the_request_is_sent() -> None:
    """One server spelled two ways got two gates, and two requests at once."""
    assert host_key("http://bücher.example/a") == "xn--bcher-kva.example"
    assert host_key("https://BÜCHER.example:443/b") == host_key("http://xn--bcher-kva.example/")
    assert host_key("http://１２７.０.０.１:8080/feed") == "127.0.0.1:8080"
    assert host_key("http://ＥＸＡＭＰＬＥ.org/") == "example.org"
    assert host_key("http://Example.org./feed") == "example.org"
    assert host_key("http://example.org.:8080/") == host_key("http://example.org:8080/")


@pytest.mark.parametrize(
    "spellings",
    [
        ("http://bücher.example/feed", "http://xn--bcher-kva.example/feed"),
        ("https://BÜCHER.example:443/feed", "https://xn--bcher-kva.example/feed"),
        ("http://１２７.０.０.１:8080/feed", "http://127.0.0.1:8080/feed"),
        ("http://example.org:80/%66eed", "http://example.org/feed"),
    ],
)
def test_one_feed_spelled_two_ways_is_one_host_for_the_gate(spellings: tuple[str, str]) -> None:
    """The feeds file calls these one feed (the same request); the gate must call them one
    server, or one would be a duplicate to ``add`` but get its own turn at the host."""
    first, second = spellings
    assert feed_url_key(first) == feed_url_key(second)
    assert host_key(first) == host_key(second)


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("http://feeds.example:99999/", "http://feeds.example:99999/"),
        ("http://[bad/", "http://[bad/"),
        ("http://]a[@", "http://]a[@"),
        ("not a url", ""),
        ("", ""),
    ],
)
def test_odd_urls_still_get_a_host_key(url: str, key: str) -> None:
    assert host_key(url) == key


def test_one_server_spelled_two_ways_gets_one_request_at_a_time(tmp_path: Path) -> None:
    log = BusyLog()
    with FeedServer() as server:
        ascii_url = log.feed(server, "/a", feed_body("a"), delay_s=0.3)
        full_width = log.feed(server, "/b", feed_body("b"), delay_s=0.3).replace(
            "127.0.0.1", "１２７.０.０.１"
        )
        p = polite_project(tmp_path, [ascii_url, full_width], host_gap="500ms")
        assert p.cycle().stored == 2
    first, second = log.of(server)
    assert log.most_at_once() == 1
    assert second.start - first.end >= 0.5 - SLACK_S, "the gap holds between the spellings"


def test_one_request_per_host_with_a_gap_while_other_hosts_flow(
    tmp_path: Path,
) -> None:
    log = BusyLog()
    with FeedServer() as big, FeedServer() as b, FeedServer() as c:
        big_urls = [log.feed(big, f"/f{n}", feed_body(f"big{n}"), delay_s=0.1) for n in range(4)]
        others = [
            log.feed(server, f"/f{n}", feed_body(f"{server.port}-{n}"), delay_s=0.1)
            for server in (b, c)
            for n in range(2)
        ]
        p = polite_project(tmp_path, big_urls + others, host_gap="1s", concurrency=3)
        register(p)
        claim_first(p, big_urls, START - timedelta(hours=1))  # the big host's feeds come first
        report = p.cycle()

    assert report.stored == 8
    for server in (big, b, c):
        served = log.of(server)
        for before, after in itertools.pairwise(served):
            assert after.start - before.end >= 1.0 - SLACK_S, "the gap, after the last byte"
    assert log.most_at_once() <= 3, "the global concurrency still holds"
    second_of_big = log.of(big)[1].start
    assert log.of(b)[0].start < second_of_big, "other hosts do not wait behind the big one"
    assert log.of(c)[0].start < second_of_big


def test_manual_fetch_of_many_feeds_of_one_host_keeps_the_gap(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    urls = [feed_server.route(f"/f{n}", body=feed_body(f"f{n}")) for n in range(3)]
    config = write_project(tmp_path, urls, schedule_toml=schedule_toml("500ms"))
    result = feedcollector("--config", str(config), "fetch", *urls, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    starts = sorted(r.at for r in feed_server.requests)
    assert len(starts) == 3
    assert all(b - a >= 0.5 - SLACK_S for a, b in itertools.pairwise(starts))


def test_429_with_an_http_date_defers_the_whole_host_and_survives_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    retry_header = formatdate(time.time() + 3 * 3600, usegmt=True)
    with FeedServer() as limited, FeedServer() as other:
        refusing = Route(status=429, body=b"slow down", headers={"Retry-After": retry_header})
        limited_urls = [limited.route(f"/f{n}", refusing) for n in range(3)]
        fine = other.route("/fine", body=feed_body("fine"))
        p = polite_project(tmp_path, [*limited_urls, fine], host_gap="200ms")
        report = p.cycle()

        assert len(limited.requests) == 1, "the first 429 stops the host's other requests"
        assert (report.failed, report.deferred, report.stored) == (1, 2, 1)
        rows = {r["url"]: r for r in p.rows("SELECT * FROM feeds")}
        (asked,) = [rows[u] for u in limited_urls if rows[u]["consecutive_failures"] == 1]
        until = asked["retry_after_until"]
        expected = START + timedelta(hours=3)
        assert stamp(expected - timedelta(seconds=3)) <= until <= stamp(expected)
        assert asked["next_fetch_at"] == until, "Retry-After (3 h) beats the 30 min backoff"
        for url in limited_urls:
            if rows[url] is not asked:
                assert rows[url]["next_fetch_at"] == until, "deferred with the host"
                assert rows[url]["consecutive_failures"] == 0, "not a failure: never asked"
        assert rows[fine]["last_status"] == 200

        # A new process an hour later: a feed of that host added meanwhile waits too.
        newcomer = limited.route("/new", body=feed_body("new"))
        write_project(p.folder, [*limited_urls, fine, newcomer], schedule_toml=schedule_toml())
        p.clock.advance(hours=1)
        report = p.cycle()
        assert (report.deferred, report.unchanged, len(limited.requests)) == (1, 1, 1)
        assert p.rows("SELECT next_fetch_at FROM feeds WHERE url = ?", newcomer) == [
            {"next_fetch_at": until}
        ]

        # A manual fetch goes now, but not against a live Retry-After, and says so.
        with caplog.at_level(logging.INFO, logger="feedcollector"):
            report = p.cycle(urls=[asked["url"]], force=True)
        assert (report.deferred, len(limited.requests)) == (1, 1)
        assert f"the server asked to wait until {until} (a Retry-After" in caplog.text

        # Once it ran out, the host is asked again.
        limited.routes.update({f"/f{n}": Route(body=feed_body(f"f{n}")) for n in range(3)})
        p.clock.advance(hours=3)
        report = p.cycle()
        assert (report.stored, report.unchanged) == (4, 1), "the host's four; the other's again"
        assert len(limited.requests) == 5


def test_a_429_from_a_redirect_target_defers_that_host_not_the_feeds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The host that answered 429 asked to wait: the feed's own host did not, and is asked
    as before, in this process and in the next one."""
    with FeedServer() as feeds, FeedServer() as limiter:
        limited = limiter.route("/limited", status=429, headers={"Retry-After": "3600"})
        detour = feeds.route("/detour", status=302, headers={"Location": limited})
        own = feeds.route("/own", body=feed_body("own"))
        neighbour = limiter.route("/neighbour", body=feed_body("neighbour"))
        p = polite_project(tmp_path, [detour, own, neighbour], host_gap="200ms", concurrency=1)
        register(p)
        claim_first(p, [detour], START - timedelta(hours=1))
        with caplog.at_level(logging.INFO, logger="feedcollector"):
            report = p.cycle()

        assert (report.failed, report.stored, report.deferred) == (1, 1, 1)
        assert [r.path for r in limiter.requests] == ["/limited"], "its neighbour waits"
        assert [r.path for r in feeds.requests] == ["/detour", "/own"]
        limiter_key = f"127.0.0.1:{limiter.port}"
        assert "HTTP 429, failed: " in caplog.text
        assert f"; {limiter_key} rate-limits this collector: its feeds wait until " in caplog.text
        assert f"127.0.0.1:{feeds.port} rate-limits" not in caplog.text
        (row,) = p.rows("SELECT rate_limited_by FROM feeds WHERE url = ?", detour)
        assert row == {"rate_limited_by": limited}

        # A new process: the deferral read back from the database names the same host.
        report = p.cycle(urls=[own, neighbour], force=True)
        assert (report.deferred, report.unchanged) == (1, 1)
        assert [r.path for r in limiter.requests] == ["/limited"]
        assert [r.path for r in feeds.requests] == ["/detour", "/own", "/own"]


def test_503_retry_after_in_seconds_defers_only_that_feed(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    down = feed_server.route(
        "/down", status=503, body=b"maintenance", headers={"Retry-After": "7200"}
    )
    up = feed_server.route("/up", body=feed_body("up"))
    p = polite_project(tmp_path, [down, up], host_gap="200ms")
    report = p.cycle()
    assert (report.failed, report.stored, report.deferred) == (1, 1, 0)
    (row,) = p.rows(
        "SELECT consecutive_failures, next_fetch_at, retry_after_until FROM feeds WHERE url = ?",
        down,
    )
    two_hours = stamp(START + timedelta(hours=2))
    assert row == {
        "consecutive_failures": 1,
        "next_fetch_at": two_hours,
        "retry_after_until": two_hours,
    }


@pytest.mark.parametrize(
    ("header", "wait"),
    [
        ("soon, we promise", timedelta(minutes=30)),
        ("Sat, 01 Jan 2000 00:00:00 GMT", timedelta(minutes=30)),
        ("0", timedelta(minutes=30)),
        ("999999999", timedelta(hours=6)),
    ],
    ids=["garbage", "past-date", "zero", "capped"],
)
def test_unusable_retry_after_is_ignored_and_a_huge_one_capped(
    feed_server: FeedServer, tmp_path: Path, header: str, wait: timedelta
) -> None:
    url = feed_server.route("/f", status=503, body=b"x", headers={"Retry-After": header})
    p = polite_project(tmp_path, [url], max_retry_after='"6h"')
    p.cycle()
    assert p.rows("SELECT next_fetch_at FROM feeds") == [{"next_fetch_at": stamp(START + wait)}]


def test_429_without_retry_after_pauses_the_host_in_this_process(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    urls = [feed_server.route(f"/f{n}", status=429, body=b"no") for n in range(3)]
    p = polite_project(tmp_path, urls, host_gap="100ms")
    report = p.cycle()
    assert (len(feed_server.requests), report.failed, report.deferred) == (1, 1, 2)
    pause = stamp(START + RATE_LIMIT_PAUSE)
    waiting = p.rows("SELECT next_fetch_at FROM feeds WHERE consecutive_failures = 0")
    assert waiting == [{"next_fetch_at": pause}] * 2


def test_retry_after_shows_in_the_manual_fetch_output(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    url = feed_server.route("/f", status=429, body=b"no", headers={"Retry-After": "3600"})
    config = write_project(tmp_path, [url], schedule_toml=schedule_toml("100ms"))
    assert feedcollector("--config", str(config), "run", "--once", cwd=tmp_path).returncode == 0
    result = feedcollector("--config", str(config), "fetch", url, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(feed_server.requests) == 1
    assert "the server asked to wait until" in result.stderr
    assert "1 deferred, not requested" in result.stderr


def test_a_feed_whose_lease_was_taken_while_it_waited_is_left_alone(
    feed_server: FeedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another collector took over feeds whose lease ran out while they waited for the host:
    the waiting collector checks its lease before asking, and skips them."""
    monkeypatch.setattr(claims, "feed_lease", lambda collector: timedelta(seconds=1))
    urls = [feed_server.url(f"/f{n}") for n in range(3)]
    p = polite_project(tmp_path, urls, host_gap="1s")
    stolen: list[str] = []

    def first_request_steals_the_others(request: BaseHTTPRequestHandler) -> None:
        if not stolen:
            stolen.extend(url for url in urls if not url.endswith(request.path))
            for url in stolen:
                execute(p, "UPDATE feeds SET lease_owner = 'thief' WHERE url = ?", url)
        body = feed_body(request.path)
        request.send_response(200)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

    for n in range(3):
        feed_server.route(f"/f{n}", handler=first_request_steals_the_others)
    report = p.cycle()
    assert (report.stored, len(feed_server.requests)) == (1, 1)
    thief = p.rows("SELECT url FROM feeds WHERE lease_owner = 'thief' ORDER BY url")
    assert [r["url"] for r in thief] == sorted(stolen)


def test_the_queue_hands_out_free_hosts_first_and_deferred_ones_at_once() -> None:
    async def scenario() -> tuple[list[str], list[str]]:
        gate = HostGate(timedelta(seconds=30))
        queue: PoliteQueue[str] = PoliteQueue(
            gate, host_key, lambda: START, low_water=10, max_backlog=100
        )
        queue.extend(["http://a/1", "http://a/2", "http://b/1", "http://c/1", "http://c/2"])
        queue.close()
        order: list[str] = []
        for _ in range(3):
            ticket = await queue.get()
            assert ticket is not None
            assert ticket.claim is not None
            order.append(ticket.item)
            async with gate.request(ticket.host):
                pass
            queue.done(ticket)
        gate.defer("c", START + timedelta(hours=1))
        ticket = await queue.get()
        assert ticket is not None
        assert ticket.claim is None, "deferred: handed out at once"
        order.append(ticket.item)
        return order, queue.stop()

    order, left = asyncio.run(scenario())
    assert order == ["http://a/1", "http://b/1", "http://c/1", "http://c/2"]
    assert left == ["http://a/2"], "host a is in its 30 s gap"
