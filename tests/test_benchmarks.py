"""The benchmark suite runs: the farm serves what a feed reader expects, the suite completes on
a tiny size and counts what it did. Benchmarks print figures; nothing here asserts on time."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import httpx
import pytest

from benchmarks.__main__ import RAM_SCRATCH_BYTES, _arguments, _ram_scratch, main
from benchmarks.cycles import synced_workdir
from benchmarks.farm import run_farm
from benchmarks.feeds import VARIANTS, feed_document
from benchmarks.parse_stage import NODE_DIR, RssParserRounds, corpus_documents
from feedcollector.decode import decode_feed
from feedcollector.parse import parse_feed

from .conftest import CORPUS


def test_every_farm_variant_is_a_feed_the_collector_reads() -> None:
    for index, variant in enumerate(VARIANTS):
        document = feed_document(index, items=4)
        decoded = decode_feed(document.body, document.content_type)
        parsed = parse_feed(decoded.data, f"http://127.0.0.2/feeds/{index}.xml")
        assert len(parsed.items) == 4, variant.name
        assert parsed.format == variant.format.removesuffix("-escaped"), variant.name
        assert all(item.pub_date is not None for item in parsed.items), variant.name
        assert all(item.content_html and "<p>" in item.content_html for item in parsed.items)
        images = [
            item for item in parsed.items if item.content_html and "<img" in item.content_html
        ]
        assert all('src="https://' in item.content_html for item in images if item.content_html), (
            variant.name
        )


def test_the_farm_answers_conditional_requests_on_several_loopback_hosts() -> None:
    with run_farm(6, 3, hosts=3) as farm, httpx.Client() as client:
        assert len({host for host, _ in farm.hosts}) == 3
        first = client.get(farm.url(4))
        assert first.status_code == 200
        assert first.content == feed_document(4, 3).body
        assert first.headers["content-type"] == feed_document(4, 3).content_type
        again = client.get(farm.url(4), headers={"If-None-Match": first.headers["etag"]})
        assert again.status_code == 304
        since = client.get(
            farm.url(4), headers={"If-Modified-Since": first.headers["last-modified"]}
        )
        assert since.status_code == 304
        assert client.get(farm.url(4).replace("4.xml", "99.xml")).status_code == 404
        assert (farm.stats.ok, farm.stats.not_modified, farm.stats.not_found) == (1, 2, 1)
        farm.honour_validators = False  # as a server without validators: the same body again
        ignored = client.get(farm.url(4), headers={"If-None-Match": first.headers["etag"]})
        assert (ignored.status_code, ignored.content) == (200, first.content)


def test_measured_cycles_start_with_the_feeds_file_already_synced(tmp_path: Path) -> None:
    urls = ["http://127.0.0.2:9/feeds/0.xml", "http://127.0.0.3:9/feeds/1.xml"]
    config = synced_workdir(tmp_path / "collector", urls)
    with sqlite3.connect(config.parent / "collector.db") as connection:
        stored = {url for (url,) in connection.execute("SELECT url FROM feeds")}
        state = connection.execute(
            "SELECT value FROM collector_state WHERE key = 'feeds_file_sha256'"
        ).fetchone()
    assert stored == set(urls)
    assert state is not None  # the measured cycle finds the file unchanged and skips reading it


def test_the_suite_runs_on_a_tiny_size(tmp_path: Path) -> None:
    figures = main(
        [
            "--feeds", "6", "--items", "3", "--parse-sample", "4", "--baseline-feeds", "4",
            "--round-trip-feeds", "3", "--rounds", "1", "--corpus-copies", "1", "--skip-node",
            "--skip-d1", "--ram-scratch", str(tmp_path / "ram"),
            "--json", str(tmp_path / "figures.json"), "--scratch", str(tmp_path / "scratch"),
        ]
    )  # fmt: skip
    assert (tmp_path / "figures.json").is_file()
    assert list((tmp_path / "scratch").iterdir()) == []  # the run's own folder is removed
    parse = figures["parse"]
    assert isinstance(parse, list)
    corpus, farm = parse
    assert corpus["documents"] == len(corpus_documents(CORPUS))
    assert corpus["ours_failed"] == 1  # unrecognized.rss is not a feed, on purpose
    assert farm["items"] == 4 * 3
    assert all(p["ours_mb_s"] > 0 and p["feedparser_mb_s"] > 0 for p in parse)
    [cycle] = figures["cycles"]  # type: ignore[misc]
    assert cycle["new_items"] == 6 * 3
    assert cycle["steady_not_modified"] == 6
    assert cycle["repeat_answered_200"] == 6
    assert all(
        cycle[run]["cpu_s"] > 0 and cycle[run]["peak_rss_mb"] > 0
        for run in ("first", "steady", "repeat")
    )
    baseline = figures["baseline"]
    assert isinstance(baseline, dict)
    assert baseline["new_items"] == 4 * 3
    assert baseline["repeat"]["cpu_s"] > 0
    corpus_cycle = figures["corpus_cycle"]
    assert isinstance(corpus_cycle, dict)
    served = len(corpus_documents(CORPUS))
    assert corpus_cycle["ours"]["feeds"] == corpus_cycle["baseline"]["feeds"] == served
    assert corpus_cycle["ours"]["new_items"] > 1000  # the corpus holds 1,371 items
    assert corpus_cycle["baseline"]["new_items"] > 1000
    again = figures["corpus_cycle_ram"]  # measured again, its files in --ram-scratch
    assert isinstance(again, dict)
    assert again["ours"]["new_items"] == corpus_cycle["ours"]["new_items"]
    assert again["baseline"]["new_items"] == corpus_cycle["baseline"]["new_items"]
    assert list((tmp_path / "ram").iterdir()) == []
    machine = figures["machine"]
    assert isinstance(machine, dict)
    assert f"one backup write in {tmp_path / 'ram'}, CPU" in machine
    [sqlite] = figures["round_trips"]  # type: ignore[misc]
    assert sqlite["feeds"] == 3
    assert sqlite["first"] >= 3  # at least one items batch per feed
    assert sqlite["steady"] >= 1


def test_the_corpus_cycle_in_ram_is_skipped_where_it_would_not_fit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert _ram_scratch(_arguments(["--ram-scratch", str(tmp_path)])) == tmp_path
    for skipping in (["--quick"], ["--skip-ram"], ["--skip-corpus"], ["--scratch", "/dev/shm/b"]):
        assert _ram_scratch(_arguments(skipping)) is None
    if not Path("/dev/shm").is_dir():
        return
    assert _ram_scratch(_arguments([])) in {Path("/dev/shm"), None}  # None: /dev/shm is full
    usage = shutil.disk_usage("/dev/shm")
    small = usage._replace(free=RAM_SCRATCH_BYTES - 1)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: small)
    assert _ram_scratch(_arguments([])) is None  # a container's 64 MiB /dev/shm, say


@pytest.mark.skipif(
    shutil.which("node") is None or not (NODE_DIR / "node_modules" / "rss-parser").is_dir(),
    reason="rss-parser is installed by `python -m benchmarks` (npm ci in benchmarks/node)",
)
def test_the_rss_parser_driver_reads_the_same_files(tmp_path: Path) -> None:
    documents = corpus_documents(CORPUS)[:5]
    node = shutil.which("node")
    assert node is not None
    rounds = RssParserRounds(node, documents, tmp_path)
    try:
        answer = rounds.round()
    finally:
        rounds.close()
    assert answer["ok"] + answer["failed"] == 5
    assert answer["cpu_s"] > 0
