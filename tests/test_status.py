"""``status``: states, worst-first order, per-feed counts and totals from a real SQLite
database filled by real cycles; a fixed number of queries however many feeds; the command's
table and its documented ``--json``."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import re
import socket
import sqlite3
import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len
from rich.console import Console
from typer.testing import CliRunner

from feedcollector.backends.sqlite import SQLiteDatabase
from feedcollector.claims import sync_feeds_file
from feedcollector.cli import app
from feedcollector.cli import status as cli_status
from feedcollector.collector import open_collector
from feedcollector.config import Settings, load_feeds, load_settings
from feedcollector.database import CountingDatabase, Statement
from feedcollector.models import FeedSpec
from feedcollector.owners import owner_name
from feedcollector.pipeline import run_cycle
from feedcollector.schema import migrate
from feedcollector.status import (
    FeedStatus,
    StatusReport,
    StatusTotals,
    read_status,
    worst_first_key,
)
from feedcollector.store_sync import sync_feeds
from feedcollector.timestamps import parse_timestamp, utc_now

from . import test_retention
from .feedserver import FeedServer
from .samples import Entry, png, rss, write_project
from .test_cli import feedcollector
from .test_retention import Pair

FEED_KEYS = {
    "url",
    "title",
    "state",
    "last_fetched_at",
    "next_fetch_at",
    "consecutive_failures",
    "last_error",
    "last_status",
    "items",
    "images_pending",
    "images_failed",
    "images_retry_at",
    "gone_at",
    "moved_to",
    "held_by",
    "held_until",
}


def test_worst_first_order() -> None:
    feeds = [
        FeedStatus("https://e.example/", "active", last_fetched_at="2026-03-02T09:00:00Z"),
        FeedStatus("https://d.example/", "active", last_fetched_at="2026-03-01T09:00:00Z"),
        FeedStatus("https://n.example/", "active"),
        FeedStatus("https://r.example/", "removed", consecutive_failures=9),
        FeedStatus("https://f1.example/", "failing", consecutive_failures=1),
        FeedStatus("https://f7.example/", "failing", consecutive_failures=7),
        FeedStatus("https://g.example/", "gone", consecutive_failures=1),
        FeedStatus("https://new.example/", "new"),
    ]
    ordered = [feed.url.split("//")[1].split(".")[0] for feed in sorted(feeds, key=worst_first_key)]
    assert ordered == ["g", "f7", "f1", "new", "n", "d", "e", "r"]


def collect(config: Path, feeds: Sequence[str]) -> None:
    """Write ``feeds`` as the feeds file and run one forced cycle over it."""
    (config.parent / "feeds.yaml").write_text(
        "feeds:\n" + "".join(f"  - url: {url}\n" for url in feeds)
    )

    async def go() -> None:
        async with open_collector(load_settings(config)) as collector:
            await run_cycle(collector, force=True)

    asyncio.run(go())


def due_again(folder: Path) -> None:
    """The failed images' retry waits (an hour, then a day) have passed."""
    with sqlite3.connect(folder / "collector.db") as conn:
        conn.execute("UPDATE image_tasks SET retry_at = '' WHERE status = 'pending'")


def fill(feed_server: FeedServer, folder: Path) -> tuple[Path, dict[str, str]]:
    """A database where every state occurs, made by real cycles (gone_at set as the collector
    sets it on a 410)."""
    image = feed_server.route("/ok.png", body=png(), headers={"Content-Type": "image/png"})
    broken = feed_server.url("/broken.png")
    items = [
        Entry("One", guid="1", content=f'<img src="{image}"><img src="{broken}">'),
        Entry("Two", guid="2"),
    ]
    urls = {
        "ok": feed_server.route("/ok.xml", body=rss(items, title="Fine")),
        "failing": feed_server.route("/failing.xml", status=500, body=b"down"),
        "gone": feed_server.route("/gone.xml", body=rss([Entry("G", guid="g")], title="Gone")),
        "removed": feed_server.route("/removed.xml", body=rss([Entry("R", guid="r")])),
        "flaky": feed_server.route("/flaky.xml", status=503, body=b"busy"),
        "new": feed_server.url("/new.xml"),
    }
    config = write_project(folder, [])
    first = [urls[name] for name in ("ok", "failing", "gone", "removed")]
    collect(config, first)
    due_again(folder)
    collect(config, first)
    due_again(folder)
    later = [*items, Entry("Three", guid="3", content=f'<img src="{broken}?again">')]
    feed_server.route("/ok.xml", body=rss(later, title="Fine"))
    collect(config, [urls[name] for name in ("ok", "failing", "gone", "flaky")])
    with sqlite3.connect(folder / "collector.db") as conn:
        conn.execute(
            "UPDATE feeds SET gone_at = '2026-03-02T09:00:00Z', moved_to = ? WHERE url = ?",
            (feed_server.url("/moved.xml"), urls["gone"]),
        )
    (folder / "feeds.yaml").write_text(
        "feeds:\n"
        + "".join(f"  - url: {urls[n]}\n" for n in ("ok", "failing", "gone", "flaky", "new"))
    )
    return config, urls


def test_a_feed_left_out_of_the_file_shows_removed_before_the_next_cycle(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """`remove` then `status` showed the feed still active until a cycle synced the file; one
    put back showed removed. The unsynced file says what the next sync will do."""
    config, urls = fill(feed_server, tmp_path)
    listed = ("failing", "gone", "flaky", "new", "removed")
    (tmp_path / "feeds.yaml").write_text(
        "feeds:\n" + "".join(f"  - url: {urls[n]}\n" for n in listed)
    )
    settings = load_settings(config)

    async def go() -> StatusReport:
        db = SQLiteDatabase(settings.database.path)
        try:
            return await read_status(
                db, load_feeds(settings.feeds_file), generated_at="2027-03-02T10:00:00Z"
            )
        finally:
            await db.close()

    report = asyncio.run(go())
    states = {feed.url: feed.state for feed in report.feeds}
    assert (states[urls["ok"]], states[urls["removed"]]) == ("removed", "new")
    due = {feed.url: feed.next_fetch_at for feed in report.feeds}
    assert (due[urls["removed"]], due[urls["new"]]) == ("2027-03-02T10:00:00Z",) * 2, (
        "put back or added, a feed is due at the next cycle (its row's time was long past)"
    )
    result = CliRunner().invoke(app, ["--config", str(config), "status", "--json"])
    assert result.exit_code == 0, result.output
    shown = {feed["url"]: feed["state"] for feed in json.loads(result.stdout)["feeds"]}
    assert (shown[urls["ok"]], shown[urls["removed"]]) == ("removed", "new")


@pytest.mark.parametrize("generated_at", ["2026-03-02T09:00:00Z", "2026-03-05T00:00:00Z"])
def test_a_failing_feed_put_back_shows_what_the_next_sync_makes_of_it(
    feed_server: FeedServer, tmp_path: Path, generated_at: str
) -> None:
    """Put back during its backoff, a feed keeps the later next fetch it had and its
    failures: status said ``new``, due now, and the next cycle did not fetch it."""
    config, urls = fill(feed_server, tmp_path)
    with sqlite3.connect(tmp_path / "collector.db") as conn:  # as a sync that missed it
        conn.execute("UPDATE feeds SET active = 0 WHERE url = ?", (urls["failing"],))
    settings = load_settings(config)

    async def predicted_then_synced() -> tuple[StatusReport, StatusReport]:
        db = SQLiteDatabase(settings.database.path)
        try:
            specs = load_feeds(settings.feeds_file)
            predicted = await read_status(db, specs, generated_at=generated_at)
            await sync_feeds(db, specs, parse_timestamp(generated_at))
            return predicted, await read_status(db, None, generated_at=generated_at)
        finally:
            await db.close()

    predicted, synced = asyncio.run(predicted_then_synced())
    before, after = (
        next(feed for feed in report.feeds if feed.url == urls["failing"])
        for report in (predicted, synced)
    )
    assert (before.state, before.next_fetch_at) == (after.state, after.next_fetch_at)
    assert before.state == "failing"


def test_an_edited_title_shows_before_the_next_cycle(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """Shown as the next sync will store it: the file's title, else the channel's."""
    config, urls = fill(feed_server, tmp_path)
    titled, plain = urls["ok"], urls["gone"]
    with sqlite3.connect(tmp_path / "collector.db") as conn:  # its title: line just deleted
        conn.execute("UPDATE feeds SET config_title = 'Old', title = 'Old' WHERE url = ?", (plain,))
    (tmp_path / "feeds.yaml").write_text(
        f"feeds:\n  - url: {titled}\n    title: Renamed by hand\n  - url: {plain}\n"
    )
    result = CliRunner().invoke(app, ["--config", str(config), "status", "--json"])
    assert result.exit_code == 0, result.output
    titles = {feed["url"]: feed["title"] for feed in json.loads(result.stdout)["feeds"]}
    assert (titles[titled], titles[plain]) == ("Renamed by hand", "Gone")


def test_status_of_a_real_database(feed_server: FeedServer, tmp_path: Path) -> None:
    config, urls = fill(feed_server, tmp_path)
    settings = load_settings(config)

    async def go() -> tuple[StatusReport, int]:
        db = CountingDatabase(SQLiteDatabase(settings.database.path))
        try:
            report = await read_status(
                db, load_feeds(settings.feeds_file), generated_at="2026-03-02T10:00:00Z"
            )
        finally:
            await db.close()
        return report, db.round_trips

    report, round_trips = asyncio.run(go())
    assert round_trips == 4
    by_url = {feed.url: feed for feed in report.feeds}
    name = {url: key for key, url in urls.items()}
    assert [name[feed.url] for feed in report.feeds] == [
        "gone",
        "failing",
        "flaky",
        "new",
        "ok",
        "removed",
    ]
    assert [feed.state for feed in report.feeds] == [
        "gone",
        "failing",
        "failing",
        "new",
        "active",
        "removed",
    ]
    failing = by_url[urls["failing"]]
    assert (failing.consecutive_failures, failing.last_status) == (3, 500)
    assert failing.last_error is not None
    assert "HTTP 500" in failing.last_error
    assert failing.last_fetched_at is None
    ok = by_url[urls["ok"]]
    assert (ok.title, ok.items, ok.images_pending, ok.images_failed) == ("Fine", 3, 1, 1)
    with sqlite3.connect(tmp_path / "collector.db") as conn:
        ((waiting,),) = conn.execute("SELECT retry_at FROM image_tasks WHERE status = 'pending'")
    assert ok.images_retry_at == waiting > "2026-03-02T10:00:00Z", "its next try, an hour on"
    assert by_url[urls["gone"]].images_retry_at is None
    assert ok.last_fetched_at is not None
    assert ok.next_fetch_at is not None
    gone = by_url[urls["gone"]]
    assert gone.moved_to == feed_server.url("/moved.xml")
    assert gone.gone_at == "2026-03-02T09:00:00Z"
    assert by_url[urls["removed"]].items == 1
    assert by_url[urls["new"]].last_fetched_at is None
    totals = report.totals.to_json()
    assert totals == {
        "feeds": 6,
        "gone": 1,
        "failing": 2,
        "new": 1,
        "active": 1,
        "removed": 1,
        "items": 5,
        "image_tasks": {"pending": 1, "success": 1, "failed": 1},
    }


def test_a_fixed_number_of_queries_for_many_feeds(tmp_path: Path) -> None:
    specs = [FeedSpec(f"https://feed{n}.example/rss") for n in range(600)]

    async def go() -> tuple[int, int]:
        db = SQLiteDatabase(tmp_path / "many.db")
        await migrate(db)
        await sync_feeds(db, specs[:500], utc_now())
        counting = CountingDatabase(db)
        report = await read_status(counting, specs, generated_at="2026-03-02T10:00:00Z")
        await db.close()
        return counting.round_trips, report.totals.feeds["new"]

    assert asyncio.run(go()) == (4, 100)


def test_status_command_table_and_json(feed_server: FeedServer, tmp_path: Path) -> None:
    config, urls = fill(feed_server, tmp_path)
    table = feedcollector("--config", str(config), "status", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    rows = [line for line in lines if "http://" in line]
    assert [row.split()[0] for row in rows] == [
        "gone",
        "failing",
        "failing",
        "new",
        "active",
        "removed",
    ]
    assert f"moved to {feed_server.url('/moved.xml')}" in rows[0]
    assert "HTTP 500" in rows[1]
    assert "1/1, next in 59m" in rows[4] or "1/1, next in 1h00m" in rows[4], (
        "image tasks pending/failed, and when the failed one is tried again (an hour on)"
    )
    assert lines[-1] == (
        "6 feeds (1 gone, 2 failing, 1 new, 1 active, 1 removed); 5 items; image tasks: "
        "1 pending, 1 stored, 1 failed"
    )

    as_json = feedcollector("--config", str(config), "status", "--json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    document = json.loads(as_json.stdout)
    assert set(document) == {"generated_at", "feeds_file_error", "totals", "feeds"}
    assert document["feeds_file_error"] is None
    assert all(set(feed) == FEED_KEYS for feed in document["feeds"])
    assert document["totals"]["feeds"] == 6
    assert document["feeds"][0]["url"] == urls["gone"]

    only = feedcollector(
        "--config",
        str(config),
        "status",
        "--json",
        "--state",
        "failing",
        "--limit",
        "1",
        cwd=tmp_path,
    )
    chosen = json.loads(only.stdout)
    assert [feed["url"] for feed in chosen["feeds"]] == [urls["failing"]]
    assert chosen["totals"]["feeds"] == 6, "totals count every feed"


def test_a_feed_held_by_a_killed_collector_says_so(feed_server: FeedServer, tmp_path: Path) -> None:
    """A collector killed mid-cycle leaves its feeds leased, and the next cycles skip them
    until the lease runs out without a word: status says who holds them and until when."""
    config, urls = fill(feed_server, tmp_path)
    ended = subprocess.Popen(["true"])
    ended.wait()
    killed = owner_name(ended.pid, "0f0f0f0f")
    with sqlite3.connect(tmp_path / "collector.db") as conn:
        conn.execute(
            "UPDATE feeds SET lease_owner = ?, lease_until = '2099-01-01T00:00:00Z' "
            "WHERE url IN (?, ?)",
            (killed, urls["ok"], urls["removed"]),
        )
    table = feedcollector("--config", str(config), "status", cwd=tmp_path)
    (row,) = [line for line in table.stdout.splitlines() if urls["ok"] in line]
    assert "skipped until in " in row
    assert ": held by a stopped collector of this machi" in row, "cut to the column width"
    (removed,) = [line for line in table.stdout.splitlines() if urls["removed"] in line]
    assert "held by" not in removed, "a removed feed is not fetched: nothing is skipped"
    listed = feedcollector("--config", str(config), "status", "--json", cwd=tmp_path)
    document = json.loads(listed.stdout)
    held = {feed["url"]: feed["held_until"] for feed in document["feeds"] if feed["held_by"]}
    assert held == {urls["ok"]: "2099-01-01T00:00:00Z", urls["removed"]: "2099-01-01T00:00:00Z"}


def test_feeds_not_fetched_have_no_next_fetch_in_json_either(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """The table showed `-` for a gone (410) feed's next fetch while --json showed the time
    planned before it went, long past: a script read it as overdue. Removed feeds alike."""
    gone = feed_server.route("/gone.xml", body=rss([Entry("G", guid="g")]))
    removed = feed_server.route("/removed.xml", body=rss([Entry("R", guid="r")]))
    active = feed_server.route("/active.xml", body=rss([Entry("A", guid="a")]))
    config = write_project(tmp_path, [])
    collect(config, [gone, removed, active])
    feed_server.route("/gone.xml", status=410, body=b"gone for good")
    collect(config, [gone, active])
    as_json = feedcollector("--config", str(config), "status", "--json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    feeds = {feed["url"]: feed for feed in json.loads(as_json.stdout)["feeds"]}
    assert [feeds[url]["state"] for url in (gone, removed, active)] == [
        "gone",
        "removed",
        "active",
    ]
    assert feeds[gone]["gone_at"] is not None
    assert (feeds[gone]["next_fetch_at"], feeds[removed]["next_fetch_at"]) == (None, None)
    assert feeds[active]["next_fetch_at"] is not None
    (row,) = sqlite3.connect(tmp_path / "collector.db").execute(
        "SELECT next_fetch_at FROM feeds WHERE url = ?", (gone,)
    )
    assert row[0] is not None, "the row keeps it: only the report says there is none"
    table = feedcollector("--config", str(config), "status", cwd=tmp_path)
    (row,) = [line for line in table.stdout.splitlines() if gone in line]
    assert row.startswith("gone")
    assert re.match(r"gone +0 +(now|\S+ ago) +- +1 ", row), row  # "now": fetched this second


def test_status_prints_what_feeds_wrote_literally(feed_server: FeedServer, tmp_path: Path) -> None:
    """Titles and errors come from feeds and servers: square brackets in them are text, not
    rich markup (``[podcast]`` vanished and ``[/]`` crashed the command), and control
    characters never reach the terminal (XML allows the C1 ones, U+009D starts an escape
    sequence for some terminals; it is one of the five that windows-1252 leaves undefined, so
    the parser keeps it). The listing of items shows their titles alike."""
    osc = "\x9d"
    feed = rss([Entry(f"E{osc}2J item", guid="e")], title=f"[podcast] [/] Weekly{osc}2J")
    titled = feed_server.route("/titled.xml", body=feed)
    page = b"<html><head><title>[/] Sign in [b]now[/b]</title></head><body><br></body></html>"
    walled = feed_server.route("/walled.xml", body=page, headers={"Content-Type": "text/html"})
    config = write_project(tmp_path, [])
    collect(config, [titled, walled])
    table = feedcollector("--config", str(config), "status", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert "[podcast] [/] Weekly 2J" in table.stdout
    assert "an HTML page titled '[/] Sign in [b]now[/b]'" in table.stdout
    listing = feedcollector("--config", str(config), "items", cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert "E 2J item" in listing.stdout
    item_id = listing.stdout.splitlines()[1].split()[1]
    shown = feedcollector("--config", str(config), "item", item_id, cwd=tmp_path)
    assert "title:      E 2J item" in shown.stdout
    assert osc not in table.stdout + listing.stdout + shown.stdout
    stored = sqlite3.connect(tmp_path / "collector.db").execute("SELECT title FROM items")
    assert stored.fetchall() == [(f"E{osc}2J item",)], (
        "stored as written: only the shown is cleaned"
    )


def _listing(feeds: int) -> StatusReport:
    """Feeds with titles and errors longer than their columns, some in wide characters."""
    shown = []
    for n in range(feeds):
        title = f"Weekly notes number {n} " + (
            "long words " * 6 if n % 2 else "日本語のタイトル" * 4
        )
        error = f"HTTP 500 from the server of feed {n}: " + "the reason went on " * 5
        shown.append(
            FeedStatus(
                f"https://blog{n}.example/feed.xml",
                "failing" if n % 3 else "active",
                title=title.strip(),
                last_fetched_at="2026-03-01T09:00:00Z",
                next_fetch_at="2026-03-01T10:00:00Z",
                consecutive_failures=n % 3,
                last_error=error if n % 3 else None,
                items=n * 7,
                images_pending=n,
            )
        )
    return StatusReport("2026-03-01T09:30:00Z", tuple(shown), StatusTotals({"active": feeds}))


@pytest.mark.parametrize("width", [80, 120])
def test_on_a_narrow_terminal_every_feeds_url_and_error_stay_visible(
    monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    """Below about 170 columns, one line per feed hid the errors (the column squeezed to
    nothing, blank lines where it wrapped) and cut URLs to their host: title, URL and error
    are stacked in the last column there, wrapped, never cut."""
    screen = io.StringIO()
    terminal = Console(file=screen, width=width, force_terminal=True, color_system=None)
    monkeypatch.setattr(cli_status, "Console", lambda **_: terminal)
    report = _listing(4)
    cli_status._print_table(report, parse_timestamp(report.generated_at))
    lines = screen.getvalue().splitlines()
    assert max(len(line) for line in lines) <= width
    assert "" not in [line.strip() for line in lines]
    column = next(line.index("title, url") for line in lines if "title, url" in line)
    rule = next(n for n, line in enumerate(lines) if line.startswith("─"))
    stacked = "".join(line[column:].replace(" ", "") for line in lines[rule + 1 : -1])
    for feed in report.feeds:
        assert feed.url in stacked
        if feed.last_error:
            assert feed.last_error[:60].replace(" ", "") in stacked


def test_a_long_status_table_shows_what_the_short_one_shows(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``RICH_TABLE_MAX_ROWS`` feeds the table is laid out without rich (9 s for 10,000
    feeds): the same columns, cells and cuts, one line per feed, the columns aligned."""
    report = _listing(12)
    now = parse_timestamp(report.generated_at)
    cli_status._print_table(report, now)
    short = capsys.readouterr().out.splitlines()
    monkeypatch.setattr(cli_status, "RICH_TABLE_MAX_ROWS", 5)
    cli_status._print_table(report, now)
    long = capsys.readouterr().out.splitlines()

    def rows(lines: list[str]) -> list[str]:
        return [" ".join(line.split()) for line in lines if "://" in line]

    assert rows(long) == rows(short)
    assert len(rows(long)) == 12
    assert " ".join(long[0].split()) == " ".join(short[0].split()), "the same header"
    assert long[-1] == short[-1], "the same totals"
    assert any("日本語" in row and "…" in row for row in rows(long)), "wide titles cut"
    url_columns = {cell_len(line[: line.index("https://")]) for line in long if "://" in line}
    assert len(url_columns) == 1, "every URL starts in the same column"
    hints = [line[line.index(".xml") + 4 :].strip() for line in long if "HTTP 500" in line]
    assert len(hints) == 8
    assert all(cell_len(hint) == cli_status.HINT_WIDTH for hint in hints)
    assert all(hint.endswith("…") for hint in hints)


def test_status_before_the_first_run(tmp_path: Path) -> None:
    config = write_project(tmp_path, ["https://a.example/feed"])
    result = feedcollector("--config", str(config), "status", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert [(f["url"], f["state"]) for f in document["feeds"]] == [
        ("https://a.example/feed", "new")
    ]
    assert not (tmp_path / "collector.db").exists(), "status creates no database"
    (tmp_path / "collector.db").touch()  # as an empty D1 looks: no tables
    again = feedcollector("--config", str(config), "status", "--json", cwd=tmp_path)
    assert [(f["url"], f["state"]) for f in json.loads(again.stdout)["feeds"]] == [
        ("https://a.example/feed", "new")
    ]
    with sqlite3.connect(tmp_path / "collector.db") as conn:
        assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [], "no tables made"


pair = test_retention.pair


def test_the_same_status_on_both_backend_pairs(pair: Pair) -> None:
    """The four status queries on SQLite and on D1 through the Proxy Worker."""
    a, b, c, d, e = (FeedSpec(f"https://{name}.example/rss") for name in "abcde")
    now = utc_now()
    pair.run(sync_feeds(pair.db, [a, b, d, e], now))
    pair.run(sync_feeds(pair.db, [a, b, d], now))  # e leaves the file: removed
    item_id = "0" * 32
    stamp = "2026-03-01T00:00:00Z"
    pair.run(
        pair.db.batch(
            [
                Statement(
                    "UPDATE feeds SET consecutive_failures = 2, last_error = 'HTTP 500', "
                    "last_status = 500 WHERE url = ?",
                    (b.url,),
                ),
                Statement("UPDATE feeds SET gone_at = ? WHERE url = ?", (stamp, d.url)),
                Statement(
                    "INSERT INTO items (id, feed_id, guid, created_at) "
                    "SELECT ?, id, 'urn:1', ? FROM feeds WHERE url = ?",
                    (item_id, stamp, a.url),
                ),
                *(
                    Statement(
                        "INSERT INTO image_tasks (id, item_id, original_url, status, attempts, "
                        "created_at, updated_at, position) VALUES (?, ?, ?, ?, 0, ?, ?, ?)",
                        (f"{item_id}-{n}", item_id, f"https://img.example/{n}.png", status,
                         stamp, stamp, n),
                    )
                    for n, status in enumerate(["pending", "failed", "success"])
                ),
            ]
        )
    )  # fmt: skip
    report = pair.run(read_status(pair.db, [a, b, c, d], generated_at="2026-03-02T10:00:00Z"))
    assert [(f.url, f.state) for f in report.feeds] == [
        (d.url, "gone"),
        (b.url, "failing"),
        (c.url, "new"),
        (a.url, "active"),
        (e.url, "removed"),
    ]
    line_of_a = report.feeds[3]
    assert (line_of_a.items, line_of_a.images_pending, line_of_a.images_failed) == (1, 1, 1)
    assert report.feeds[1].last_error == "HTTP 500"
    assert dict(report.totals.feeds) == {
        "gone": 1,
        "failing": 1,
        "new": 1,
        "active": 1,
        "removed": 1,
    }
    assert report.totals.items == 1
    assert dict(report.totals.image_tasks) == {"pending": 1, "success": 1, "failed": 1}


def test_status_does_not_parse_the_feeds_file_the_table_follows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A feeds file whose bytes the ``feeds`` table last followed holds no new feed and its
    titles are in the table: status does not parse it (4 s of YAML for 30,000 feeds, on
    every call). Once the file changes, status reads it and lists the new feed."""
    config = write_project(tmp_path, [{"url": "https://a.example/feed", "title": "A"}])
    settings = load_settings(config)

    async def sync() -> None:
        async with open_collector(settings) as collector:
            await sync_feeds_file(collector, utc_now())

    asyncio.run(sync())
    parsed: list[Path] = []

    def counting_load_feeds(path: Path, **kwargs: Any) -> list[FeedSpec]:
        parsed.append(path)
        return load_feeds(path, **kwargs)

    monkeypatch.setattr(cli_status, "load_feeds", counting_load_feeds)
    runner = CliRunner()
    result = runner.invoke(app, ["--config", str(config), "status", "--json"])
    assert result.exit_code == 0, result.output
    assert [(f["url"], f["title"]) for f in json.loads(result.stdout)["feeds"]] == [
        ("https://a.example/feed", "A")
    ]
    assert parsed == []
    with settings.feeds_file.open("a", encoding="utf-8") as file:
        file.write("  - url: https://b.example/feed\n")
    result = runner.invoke(app, ["--config", str(config), "status", "--json"])
    assert result.exit_code == 0, result.output
    states = {f["url"]: f["state"] for f in json.loads(result.stdout)["feeds"]}
    assert states == {"https://a.example/feed": "active", "https://b.example/feed": "new"}
    assert parsed == [settings.feeds_file]


def test_status_json_says_why_the_feeds_file_cannot_be_read(tmp_path: Path) -> None:
    """A monitoring script reads ``status --json``; the broken feeds file was only a warning
    on stderr, which it does not read, while every feed looked fine."""
    config = write_project(tmp_path, ["https://a.example/feed"])
    settings = load_settings(config)
    settings.feeds_file.write_text("feeds:\n  - url: https://a.example/feed\n  - url: [\n")
    for created in (False, True):
        if created:
            asyncio.run(_open_and_close(settings))
        result = feedcollector("--config", str(config), "status", "--json", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        error = json.loads(result.stdout)["feeds_file_error"]
        assert f"{settings.feeds_file} line 4, column 1: YAML syntax error" in error
        assert f"new and removed feeds are not shown: {error}" in result.stderr


async def _open_and_close(settings: Settings) -> None:
    async with open_collector(settings):
        pass


def test_relative_times() -> None:
    now = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    assert [
        cli_status.relative(stamp, now)
        for stamp in (
            None,
            "2026-03-02T09:00:00Z",
            "2026-03-02T08:59:30Z",
            "2026-03-02T09:05:00Z",
            "2026-03-02T11:05:00Z",
            "2026-03-04T12:00:00Z",
        )
    ] == ["never", "now", "30s ago", "in 5m", "in 2h05m", "in 2d3h"]


def test_a_moved_feed_that_fails_shows_its_error_beside_the_hint() -> None:
    """Only the hint to put the new URL in the feeds file was shown, also when the new
    address itself failed (404): the error said why nothing came any more."""
    moved = FeedStatus(
        "http://a.example/old.xml",
        "failing",
        consecutive_failures=2,
        last_error="fetch: HTTP 404 Not Found from http://a.example/new.xml",
        moved_to="http://a.example/new.xml",
    )
    now = datetime(2026, 3, 2, tzinfo=UTC)
    assert cli_status._hint(moved, now) == (
        "moved to http://a.example/new.xml: put that URL in the feeds file; "
        "fetch: HTTP 404 Not Found from http://a.example/new.xml"
    )
    quiet = dataclasses.replace(moved, state="active", consecutive_failures=0)
    assert cli_status._hint(quiet, now).endswith("put that URL in the feeds file")


def test_only_a_feed_held_by_a_stopped_collector_of_this_namespace_says_so() -> None:
    """A live collector of another container of this host name (another pid namespace, its
    pid no process here) was said to be stopped, and to be taken back by the next one here;
    so was one of a version that did not name its namespace, whose leases now run out."""
    ended = subprocess.Popen(["true"])
    ended.wait()
    host = socket.gethostname()
    now = datetime(2026, 3, 2, tzinfo=UTC)
    held = FeedStatus("https://a.example/", "active", held_until="2026-03-02T00:10:00Z")
    hints = [
        cli_status._hint(dataclasses.replace(held, held_by=owner), now)
        for owner in (
            owner_name(ended.pid, "0f0f0f0f"),
            f"{host}:{ended.pid}@0badf00d:0f0f0f0f",
            f"{host}:{ended.pid}:0f0f0f0f",
        )
    ]
    assert hints[0].startswith("skipped until in 10m: held by a stopped collector of this machi")
    assert hints[1:] == ["", ""]
