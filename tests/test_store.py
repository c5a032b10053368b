from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from feedcollector import spill, store, store_images, store_items, store_sync
from feedcollector.backends.local import LocalObjectStore
from feedcollector.backends.sqlite import SQLiteDatabase
from feedcollector.database import CountingDatabase, Database, Row, SqlValue, Statement
from feedcollector.errors import DatabaseError
from feedcollector.models import FeedSpec, ImageTask, ItemRecord
from feedcollector.schedule import feed_id_for
from feedcollector.schema import latest_version, migrate
from feedcollector.timestamps import format_timestamp

from .cloud import Live, d1_database, live, run_d1_proxy
from .stepping import SteppingDatabase

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
OWNER = "test-host:1@space:0f0f0f0f"
LEASE = timedelta(minutes=15)


@pytest.fixture
def db(tmp_path: Path) -> AsyncIterator[Database]:
    async def open_db() -> Database:
        database = SQLiteDatabase(tmp_path / "collector.db")
        await migrate(database)
        return database

    database = asyncio.run(open_db())
    yield database  # type: ignore[misc]
    asyncio.run(database.close())


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def item(guid: str, *images: str, item_id: str | None = None) -> ItemRecord:
    return ItemRecord(
        id=item_id or f"id-{guid}-{len(images)}",
        guid=guid,
        link=f"https://blog.example/{guid}",
        title=f"Title {guid}",
        pub_date="2026-02-28T10:00:00Z",
        content_html="".join(f'<img src="{u}">' for u in images),
        image_urls=images,
    )


def success(next_fetch: datetime = NOW + timedelta(minutes=30)) -> store.FetchSuccess:
    return store.FetchSuccess(
        title="Blog",
        etag='"v1"',
        last_modified="Sat, 28 Feb 2026 10:00:00 GMT",
        fetched_at=NOW,
        next_fetch_at=next_fetch,
        status=200,
    )


def claim(
    db: Database, owner: str = "a", now: datetime = NOW, after: store.ClaimCursor | None = None
) -> list:  # type: ignore[type-arg]
    return run(
        store.claim_due_feeds(
            db,
            due_by=now,
            now=now,
            owner=owner,
            lease=LEASE,
            limit=100,
            after=after or store.ClaimCursor(),
        )
    )


def test_sync_inserts_new_feeds_due_now_and_keeps_removed_ones(db: Database) -> None:
    report = run(
        store_sync.sync_feeds(
            db, [FeedSpec("https://a.example/"), FeedSpec("https://b.example/")], NOW
        )
    )
    assert (report.added, report.removed) == (2, 0)
    rows = run(db.query("SELECT url, next_fetch_at, active, created_at FROM feeds ORDER BY url"))
    assert rows == [
        {
            "url": "https://a.example/",
            "next_fetch_at": "2026-03-01T12:00:00Z",
            "active": 1,
            "created_at": "2026-03-01T12:00:00Z",
        },
        {
            "url": "https://b.example/",
            "next_fetch_at": "2026-03-01T12:00:00Z",
            "active": 1,
            "created_at": "2026-03-01T12:00:00Z",
        },
    ]
    report = run(store_sync.sync_feeds(db, [FeedSpec("https://a.example/")], NOW))
    assert report.removed == 1
    assert [f.url for f in claim(db)] == ["https://a.example/"]
    assert run(db.query("SELECT COUNT(*) AS n FROM feeds"))[0]["n"] == 2


def test_a_respelled_url_keeps_its_feed_and_an_old_address_listed_again_is_a_feed_of_its_own(
    db: Database,
) -> None:
    run(store_sync.sync_feeds(db, [FeedSpec("HTTP://A.EXAMPLE/feed#top")], NOW))
    [first] = run(db.query("SELECT id FROM feeds"))
    report = run(store_sync.sync_feeds(db, [FeedSpec("http://a.example/feed")], NOW))
    assert (report.added, report.removed, report.renamed) == (
        0,
        0,
        (("HTTP://A.EXAMPLE/feed#top", "http://a.example/feed"),),
    )
    assert run(db.query("SELECT id, url FROM feeds")) == [
        {"id": first["id"], "url": "http://a.example/feed"}
    ]
    # a feed moved and was renamed; its old address is listed again beside the new one
    old = "https://old.example/feed"
    run(store_sync.sync_feeds(db, [FeedSpec("http://a.example/feed"), FeedSpec(old)], NOW))
    run(db.query("UPDATE feeds SET moved_to = 'https://new.example/f' WHERE url = ?", (old,)))
    kept = FeedSpec("http://a.example/feed")
    run(store_sync.sync_feeds(db, [kept, FeedSpec("https://new.example/f")], NOW))
    both = [kept, FeedSpec("https://new.example/f"), FeedSpec(old)]
    report = run(store_sync.sync_feeds(db, both, NOW))
    assert (report.added, report.twins) == (1, ((old, "https://new.example/f"),))
    rows = run(db.query("SELECT id, url FROM feeds WHERE url <> ? ORDER BY url", (kept.url,)))
    assert rows == [
        {"id": feed_id_for(old), "url": "https://new.example/f"},
        {"id": feed_id_for(old + "#2"), "url": old},
    ]
    assert len(claim(db)) == 3


def test_a_shorter_interval_in_the_file_brings_the_next_fetch_forward(
    any_db: Live[Database],
) -> None:
    """Only the interval changed: the next fetch stayed where the old interval put it (24h cut
    to 15m waited up to a day). Not sooner than a Retry-After or the feed's own ``<ttl>``; a
    feed in backoff keeps it; a longer interval, or a title changed alone, leaves it be."""
    db = any_db.backend
    urls = [f"https://{name}.example/" for name in "abcdef"]
    day = timedelta(days=1)
    any_db.run(store_sync.sync_feeds(db, [FeedSpec(url, interval=day) for url in urls], NOW))
    fetched, tomorrow = format_timestamp(NOW), format_timestamp(NOW + day)
    any_db.run(
        db.query("UPDATE feeds SET last_fetched_at = ?, next_fetch_at = ?", (fetched, tomorrow))
    )
    any_db.run(db.query("UPDATE feeds SET consecutive_failures = 2 WHERE url = ?", (urls[1],)))
    asked = format_timestamp(NOW + timedelta(hours=2))
    any_db.run(db.query("UPDATE feeds SET retry_after_until = ? WHERE url = ?", (asked, urls[2])))
    any_db.run(db.query("UPDATE feeds SET feed_ttl_seconds = 21600 WHERE url = ?", (urls[5],)))
    shorter = timedelta(minutes=15)
    specs = [
        FeedSpec(urls[0], interval=shorter),
        FeedSpec(urls[1], interval=shorter),
        FeedSpec(urls[2], interval=shorter),
        FeedSpec(urls[3], interval=timedelta(days=2)),
        FeedSpec(urls[4], interval=day, title="renamed"),
        FeedSpec(urls[5], interval=shorter),
    ]
    report = any_db.run(store_sync.sync_feeds(db, specs, NOW))
    assert report.changed == 6
    rows = any_db.run(
        db.query("SELECT url, interval_seconds, next_fetch_at FROM feeds ORDER BY url")
    )
    assert [(r["interval_seconds"], r["next_fetch_at"]) for r in rows] == [
        (900, "2026-03-01T12:15:00Z"),
        (900, tomorrow),
        (900, asked),
        (172800, tomorrow),
        (86400, tomorrow),
        (900, "2026-03-01T18:00:00Z"),
    ]


def test_feeds_another_collectors_file_lists_stay_scheduled_when_asked(db: Database) -> None:
    run(
        store_sync.sync_feeds(
            db, [FeedSpec("https://a.example/"), FeedSpec("https://b.example/")], NOW
        )
    )
    report = run(
        store_sync.sync_feeds(db, [FeedSpec("https://a.example/")], NOW, keep_unlisted=True)
    )
    assert (report.removed, report.kept) == (0, 1)
    assert sorted(f.url for f in claim(db)) == ["https://a.example/", "https://b.example/"]


def test_a_collector_takes_again_a_feed_its_own_lease_holds(db: Database) -> None:
    """Its release did not reach the database (the Worker restarting): the feed was skipped
    for the whole lease by the very collector that held it; another still waits."""
    run(store_sync.sync_feeds(db, [FeedSpec("https://a.example/")], NOW))
    assert [f.url for f in claim(db, owner="a")] == ["https://a.example/"]
    assert claim(db, owner="b") == []
    assert [f.url for f in claim(db, owner="a")] == ["https://a.example/"]
    (feed,) = run(db.query("SELECT id FROM feeds"))
    forced = run(store.claim_feeds_by_id(db, [feed["id"]], now=NOW, owner="a", lease=LEASE))
    assert [f.url for f in forced] == ["https://a.example/"]
    assert run(store.claim_feeds_by_id(db, [feed["id"]], now=NOW, owner="b", lease=LEASE)) == []


def test_a_feed_back_in_the_file_is_due_again(db: Database) -> None:
    run(store_sync.sync_feeds(db, [FeedSpec("https://a.example/")], NOW))
    run(store_sync.sync_feeds(db, [], NOW))
    later = NOW + timedelta(days=3)
    run(
        store_sync.sync_feeds(
            db, [FeedSpec("https://a.example/", interval=timedelta(hours=2))], later
        )
    )
    feeds = claim(db, now=later)
    assert [(f.url, f.interval_seconds, f.next_fetch_at) for f in feeds] == [
        ("https://a.example/", 7200, "2026-03-04T12:00:00Z")
    ]


def test_unchanged_file_costs_one_query(db: Database) -> None:
    specs = [FeedSpec(f"https://{n}.example/") for n in range(50)]
    run(store_sync.sync_feeds(db, specs, NOW))
    counting = CountingDatabase(db)
    run(store_sync.sync_feeds(counting, specs, NOW))
    assert counting.round_trips == 1


def test_claims_are_leased_so_a_second_collector_gets_nothing(db: Database) -> None:
    run(store_sync.sync_feeds(db, [FeedSpec(f"https://{n}.example/") for n in range(5)], NOW))
    first = claim(db, owner="a")
    assert len(first) == 5
    assert claim(db, owner="b") == []
    assert len(claim(db, owner="b", now=NOW + LEASE)) == 5, "an expired lease frees the feed"


def test_claim_cursor_never_returns_a_feed_twice_in_one_cycle(db: Database) -> None:
    run(store_sync.sync_feeds(db, [FeedSpec(f"https://{n}.example/") for n in range(5)], NOW))
    page = run(
        store.claim_due_feeds(
            db, due_by=NOW, now=NOW, owner="a", lease=LEASE, limit=2, after=store.ClaimCursor()
        )
    )
    assert len(page) == 2
    for feed in page:
        run(store.release_feed(db, feed.id, "a"))
    cursor = store.ClaimCursor(page[-1].next_fetch_at or "", page[-1].id)
    rest = run(
        store.claim_due_feeds(
            db, due_by=NOW, now=NOW, owner="a", lease=LEASE, limit=10, after=cursor
        )
    )
    assert {f.id for f in rest}.isdisjoint({f.id for f in page})
    assert len(rest) == 3


def test_feeds_not_yet_due_are_not_claimed(db: Database) -> None:
    run(store_sync.sync_feeds(db, [FeedSpec("https://a.example/")], NOW + timedelta(minutes=5)))
    assert claim(db) == []


def test_save_items_is_one_batch_insert_or_ignore_and_tasks_only_for_new_items(
    db: Database,
) -> None:
    run(store_sync.sync_feeds(db, [FeedSpec("https://a.example/")], NOW))
    (feed,) = claim(db)
    counting = CountingDatabase(db)
    new = run(
        store_items.save_items(
            counting,
            feed,
            [item("g1", "https://img.example/1.png", "https://img.example/2.png"), item("g2")],
            success(),
        )
    )
    assert counting.round_trips == 1
    assert new == 2
    # The same GUIDs again, with other content and other ids: nothing changes.
    again = run(
        store_items.save_items(
            db,
            feed,
            [item("g1", "https://img.example/other.png", item_id="x1"), item("g3")],
            success(),
        )
    )
    assert again == 1
    rows = run(db.query("SELECT guid, content_html FROM items ORDER BY guid"))
    assert rows[0] == {
        "guid": "g1",
        "content_html": '<img src="https://img.example/1.png"><img src="https://img.example/2.png">',
    }
    tasks = run(
        db.query(
            "SELECT item_id, original_url, position, status, attempts FROM image_tasks ORDER BY position"
        )
    )
    assert tasks == [
        {
            "item_id": "id-g1-2",
            "original_url": "https://img.example/1.png",
            "position": 0,
            "status": "pending",
            "attempts": 0,
        },
        {
            "item_id": "id-g1-2",
            "original_url": "https://img.example/2.png",
            "position": 1,
            "status": "pending",
            "attempts": 0,
        },
    ]
    row = run(
        db.query(
            "SELECT title, last_etag, last_modified, last_fetched_at, next_fetch_at, consecutive_failures, lease_owner FROM feeds"
        )
    )[0]
    assert row == {
        "title": "Blog",
        "last_etag": '"v1"',
        "last_modified": "Sat, 28 Feb 2026 10:00:00 GMT",
        "last_fetched_at": "2026-03-01T12:00:00Z",
        "next_fetch_at": "2026-03-01T12:30:00Z",
        "consecutive_failures": 0,
        "lease_owner": None,
    }


def test_a_failing_batch_leaves_nothing_behind(db: Database) -> None:
    run(store_sync.sync_feeds(db, [FeedSpec("https://a.example/")], NOW))
    (feed,) = claim(db)
    run(
        db.exec(
            "CREATE TRIGGER boom BEFORE INSERT ON items WHEN NEW.guid = 'boom' "
            "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
        )
    )
    with pytest.raises(DatabaseError, match="disk on fire"):
        run(
            store_items.save_items(
                db, feed, [item("g1", "https://img.example/1.png"), item("boom")], success()
            )
        )
    assert run(db.query("SELECT COUNT(*) AS n FROM items"))[0]["n"] == 0
    assert run(db.query("SELECT COUNT(*) AS n FROM image_tasks"))[0]["n"] == 0
    assert run(db.query("SELECT last_fetched_at FROM feeds"))[0]["last_fetched_at"] is None


def test_config_title_wins_over_the_channel_title(db: Database) -> None:
    run(store_sync.sync_feeds(db, [FeedSpec("https://a.example/", title="My name")], NOW))
    (feed,) = claim(db)
    run(store_items.save_items(db, feed, [], success()))
    assert run(db.query("SELECT title FROM feeds"))[0]["title"] == "My name"


def titles(db: Database) -> dict[str, object]:
    return run(db.query("SELECT title, config_title, channel_title, last_etag FROM feeds"))[0]


def test_deleting_the_feeds_file_title_brings_back_the_channel_title(db: Database) -> None:
    """The feeds file's title wrote over ``feeds.title``: deleted from the file, it stayed
    (and was exported to OPML) until the feed sent a changed body, forever behind 304s."""
    url = "https://a.example/"
    run(store_sync.sync_feeds(db, [FeedSpec(url, title="My name")], NOW))
    (feed,) = claim(db)
    run(store_items.save_items(db, feed, [], success()))
    assert titles(db) == {
        "title": "My name",
        "config_title": "My name",
        "channel_title": "Blog",
        "last_etag": '"v1"',
    }

    run(store_sync.sync_feeds(db, [FeedSpec(url)], NOW))
    assert titles(db) == {
        "title": "Blog",
        "config_title": None,
        "channel_title": "Blog",
        "last_etag": '"v1"',
    }
    run(store_sync.sync_feeds(db, [FeedSpec(url, title="Renamed")], NOW))
    assert titles(db)["title"] == "Renamed"
    run(store_sync.sync_feeds(db, [], NOW))
    run(store_sync.sync_feeds(db, [FeedSpec(url)], NOW))  # back in the file, without its title
    assert titles(db)["title"] == "Blog"


def test_a_title_deleted_before_the_channel_title_was_kept_reads_the_body_again(
    db: Database,
) -> None:
    """A feed stored before ``channel_title`` existed: its own title is unknown, so the next
    fetch is unconditional and reads the body (a 304 or the same body would not name it)."""
    url = "https://a.example/"
    run(store_sync.sync_feeds(db, [FeedSpec(url, title="My name")], NOW))
    (feed,) = claim(db)
    run(store_items.save_items(db, feed, [], success()))
    run(db.query("UPDATE feeds SET channel_title = NULL, body_digest = 'digest'"))

    run(store_sync.sync_feeds(db, [FeedSpec(url)], NOW))
    assert titles(db) == {
        "title": "My name",
        "config_title": None,
        "channel_title": None,
        "last_etag": None,
    }
    assert run(db.query("SELECT body_digest, last_modified FROM feeds")) == [
        {"body_digest": None, "last_modified": None}
    ]
    (feed,) = claim(db, now=NOW + timedelta(hours=1))
    run(store_items.save_items(db, feed, [], success()))
    assert titles(db)["title"] == "Blog"


def test_failures_and_not_modified_bookkeeping(db: Database) -> None:
    run(
        store_sync.sync_feeds(
            db, [FeedSpec("https://a.example/"), FeedSpec("https://b.example/")], NOW
        )
    )
    a, b = sorted(claim(db), key=lambda f: f.url)
    run(
        store.record_failure(
            db,
            a.id,
            failures=3,
            next_fetch_at=NOW + timedelta(hours=2),
            error="fetch: HTTP 503",
            status=503,
        )
    )
    counting = CountingDatabase(db)
    run(
        store.record_not_modified(
            counting,
            [store.NotModified(b.id, NOW, NOW + timedelta(minutes=30), 304, '"v1"', None)],
        )
    )
    assert counting.round_trips == 1
    rows = run(
        db.query(
            "SELECT url, consecutive_failures, next_fetch_at, last_fetched_at, last_error, last_status, last_etag, lease_owner FROM feeds ORDER BY url"
        )
    )
    assert rows == [
        {
            "url": "https://a.example/",
            "consecutive_failures": 3,
            "next_fetch_at": "2026-03-01T14:00:00Z",
            "last_fetched_at": None,
            "last_error": "fetch: HTTP 503",
            "last_status": 503,
            "last_etag": None,
            "lease_owner": None,
        },
        {
            "url": "https://b.example/",
            "consecutive_failures": 0,
            "next_fetch_at": "2026-03-01T12:30:00Z",
            "last_fetched_at": "2026-03-01T12:00:00Z",
            "last_error": None,
            "last_status": 304,
            "last_etag": '"v1"',
            "lease_owner": None,
        },
    ]


def test_manual_claims_ignore_the_schedule_but_not_leases(db: Database) -> None:
    run(
        store_sync.sync_feeds(
            db,
            [FeedSpec("https://a.example/"), FeedSpec("https://b.example/")],
            NOW + timedelta(hours=1),
        )
    )
    ids = run(store.active_feed_ids(db, ["https://b.example/", "https://unknown.example/"]))
    assert ids == [feed_id_for("https://b.example/")]
    claimed = run(
        store.claim_feeds_by_id(db, run(store.active_feed_ids(db)), now=NOW, owner="a", lease=LEASE)
    )
    assert [f.url for f in claimed] == ["https://a.example/", "https://b.example/"]
    assert run(store.claim_feeds_by_id(db, ids, now=NOW, owner="b", lease=LEASE)) == []


def test_image_tasks_count_attempts_and_fail_at_three(db: Database) -> None:
    run(store_sync.sync_feeds(db, [FeedSpec("https://a.example/")], NOW))
    (feed,) = claim(db)
    run(
        store_items.save_items(
            db,
            feed,
            [item("g1", "https://img.example/ok.png", "https://img.example/bad.png")],
            success(),
        )
    )

    def claim_tasks(now: datetime) -> list:  # type: ignore[type-arg]
        return run(
            store_images.claim_image_tasks(
                db, now=now, lease=LEASE, limit=10, after=store_images.TaskCursor(), owner=OWNER
            )
        )

    for cycle in range(3):
        moment = NOW + sum(store_images.RETRY_DELAYS[:cycle], timedelta())  # due again then
        if cycle:
            assert claim_tasks(moment - timedelta(seconds=1)) == [], "not before its retry_at"
        tasks = claim_tasks(moment)
        assert claim_tasks(moment) == [], "leased tasks are not handed out twice"
        results = []
        for task in tasks:
            assert task.feed_id == feed.id
            assert task.guid == "g1"
            if task.original_url.endswith("ok.png") and cycle == 0:
                results.append(
                    store_images.ImageResult(
                        task.id, f"images/{feed.id}/x/{task.position}.png", None
                    )
                )
            elif task.original_url.endswith("bad.png"):
                results.append(
                    store_images.ImageResult(task.id, None, f"image: HTTP 404 (try {cycle})")
                )
        run(store_images.record_image_results(db, results, moment))
        # sent again, as after a D1 answer lost on the way: the attempts count once
        run(store_images.record_image_results(db, results, moment))
    rows = run(
        db.query(
            "SELECT original_url, status, attempts, r2_key, last_error FROM image_tasks ORDER BY position"
        )
    )
    assert rows == [
        {
            "original_url": "https://img.example/ok.png",
            "status": "success",
            "attempts": 1,
            "r2_key": f"images/{feed.id}/x/0.png",
            "last_error": None,
        },
        {
            "original_url": "https://img.example/bad.png",
            "status": "failed",
            "attempts": 3,
            "r2_key": None,
            "last_error": "image: HTTP 404 (try 2)",
        },
    ]
    assert claim_tasks(NOW + timedelta(days=1)) == []


def sized(guid: str, size: int, *images: str) -> ItemRecord:
    """An item whose content_html is exactly ``size`` bytes of UTF-8 (with multi-byte text)."""
    head = "".join(f'<img src="{u}">' for u in images) + "<p>"
    filler = "é" * ((size - len(head.encode()) - 4) // 2)
    html = head + filler + "</p>"
    html += "x" * (size - len(html.encode()))
    return ItemRecord(
        id=f"id-{guid}",
        guid=guid,
        link=None,
        title=f"Title {guid}",
        pub_date="2026-02-28T10:00:00Z",
        content_html=html,
        image_urls=images,
    )


def test_plan_spill_moves_only_oversized_content_out_and_keeps_its_images() -> None:
    records = [
        sized("small", 1000),
        sized("limit", 5000),
        sized("big", 5001, "https://img.example/a.png"),
        item("empty"),
    ]
    plan = spill.plan_spill("feed1", records, inline_limit=5000, batch_budget=10**9)
    assert [r.content_html for r in plan.records] == [
        records[0].content_html,
        records[1].content_html,
        None,
        "",
    ]
    big = plan.records[2]
    assert big.content_key == spill.content_key("feed1", "big")
    assert big.content_key == f"content/feed1/{hashlib.md5(b'big').hexdigest()[:8]}.html"
    assert big.image_urls == ("https://img.example/a.png",), "images come from the full HTML"
    assert [r.content_key for r in plan.records if r is not big] == [None, None, None]
    (spilled,) = plan.spilled
    assert spilled.key == big.content_key
    assert spilled.data == records[2].content_html.encode("utf-8")  # type: ignore[union-attr]
    assert "5001 bytes" in spilled.reason


def test_plan_spill_keeps_the_batch_under_its_budget_by_spilling_the_largest_first() -> None:
    records = [sized(f"g{n}", size) for n, size in enumerate([300, 900, 500, 700, 100])]
    plan = spill.plan_spill("f", records, inline_limit=1000, batch_budget=1200)
    inline = [r.guid for r in plan.records if r.content_html is not None]
    assert inline == ["g0", "g2", "g4"]
    assert sum(len(r.content_html.encode()) for r in plan.records if r.content_html) <= 1200
    assert [s.guid for s in plan.spilled] == ["g1", "g3"]
    assert all("budget" in s.reason for s in plan.spilled)
    other = sum(len(r.guid) + len(r.title or "") for r in records)  # sent beside the HTML
    untouched = spill.plan_spill("f", records, inline_limit=1000, batch_budget=2500 + other)
    assert untouched.spilled == ()
    assert untouched.records == tuple(records)


def test_spilled_items_are_stored_with_null_content_and_their_key(db: Database) -> None:
    run(store_sync.sync_feeds(db, [FeedSpec("https://a.example/")], NOW))
    (feed,) = claim(db)
    plan = spill.plan_spill(
        feed.id,
        [sized("big", 3000, "https://img.example/1.png"), sized("small", 10)],
        inline_limit=2000,
    )
    assert run(store_items.save_items(db, feed, plan.records, success())) == 2
    rows = run(db.query("SELECT guid, content_html, content_key FROM items ORDER BY guid"))
    assert rows == [
        {"guid": "big", "content_html": None, "content_key": spill.content_key(feed.id, "big")},
        {"guid": "small", "content_html": plan.records[1].content_html, "content_key": None},
    ]
    tasks = run(db.query("SELECT item_id, original_url FROM image_tasks"))
    assert tasks == [{"item_id": "id-big", "original_url": "https://img.example/1.png"}]


def test_a_refetch_over_the_budget_spills_only_the_items_it_will_insert(
    db: Database, tmp_path: Path
) -> None:
    """Stored items are kept by INSERT OR IGNORE: spilling them would write orphan objects."""
    run(store_sync.sync_feeds(db, [FeedSpec("https://a.example/")], NOW))
    (feed,) = claim(db)
    objects = LocalObjectStore(tmp_path / "objects")
    limits = {"inline_limit": 1000, "batch_budget": 8000}

    async def fetch(records: list[ItemRecord]) -> int:
        plan = await spill.plan_batch_spill(db, feed.id, records, **limits)
        sent = sum(len(r.content_html.encode()) for r in plan.records if r.content_html)
        assert sent <= limits["batch_budget"]
        async with spill.spilled_records(objects, db, feed.id, feed.url, plan) as stored:
            return await store_items.save_items(db, feed, stored, success())

    old = [sized(f"old{n}", 700) for n in range(10)]
    assert run(fetch(old)) == 10
    assert run(object_keys(objects)) == []
    new = [sized(f"new{n}", 600) for n in range(4)]
    assert run(fetch([*new, *old, new[0]])) == 4  # 9.4 of 8 units, and a repeated GUID
    rows = run(db.query("SELECT guid, content_html, content_key FROM items ORDER BY guid"))
    named = {row["content_key"] for row in rows if row["content_key"]}
    assert run(object_keys(objects)) == sorted(named), "every object belongs to a row"
    stored = {r.guid: r.content_html for r in [*old, *new]}
    for row in rows:
        html = row["content_html"]
        if html is None:
            html = run(objects.get(row["content_key"])).decode("utf-8")
        assert html == stored[row["guid"]], row["guid"]
    assert {row["guid"] for row in rows if row["content_key"]} <= {r.guid for r in new}


async def object_keys(objects: LocalObjectStore) -> list[str]:
    return [key async for key in objects.list("content/")]


class RefusingBatches:
    """A real database whose writing batches fail with the given error kind (D1's refusal of
    a row or a request over its size limit is ``too_large``; an outage has none); a batch of
    lookups goes through."""

    def __init__(self, inner: Database, kind: str | None) -> None:
        self.inner = inner
        self.kind = kind

    async def query(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        return await self.inner.query(sql, params)

    async def batch(self, statements: Sequence[Statement]) -> list[list[Row]]:
        if all(statement.sql.startswith("SELECT") for statement in statements):
            return await self.inner.batch(statements)
        raise DatabaseError("database: refused", kind=self.kind)

    async def exec(self, sql: str) -> None:
        await self.inner.exec(sql)

    async def close(self) -> None:
        await self.inner.close()


@pytest.mark.parametrize(("kind", "left"), [("too_large", ["reused"]), (None, ["new", "reused"])])
def test_objects_spilled_for_a_batch_refused_as_too_large_are_deleted_again(
    db: Database, tmp_path: Path, kind: str | None, left: list[str]
) -> None:
    """A batch refused as too large stores nothing, and is refused on every try: the objects
    written for it would belong to no row. Those it reused stay; after any other failure
    (the batch may have been stored) every object stays, for the retry to reuse."""
    run(store_sync.sync_feeds(db, [FeedSpec("https://a.example/")], NOW))
    (feed,) = claim(db)
    objects = LocalObjectStore(tmp_path / "objects")
    records = [sized("new", 3000), sized("reused", 3000), sized("small", 10)]
    plan = spill.plan_spill(feed.id, records, inline_limit=2000)
    earlier_try = next(content.data for content in plan.spilled if content.guid == "reused")
    run(objects.put(spill.content_key(feed.id, "reused"), earlier_try))

    async def refused() -> None:
        refusing = RefusingBatches(db, kind)
        async with spill.spilled_records(objects, refusing, feed.id, feed.url, plan) as stored:
            await store_items.save_items(refusing, feed, stored, success())

    with pytest.raises(DatabaseError):
        run(refused())
    assert run(object_keys(objects)) == sorted(spill.content_key(feed.id, g) for g in left)


def test_a_refused_batch_keeps_the_objects_a_row_names_meanwhile(
    db: Database, tmp_path: Path
) -> None:
    """Another collector (a restore, say) may store a row naming the object between this
    batch's write and its refusal: that object is the row's now and stays."""
    run(store_sync.sync_feeds(db, [FeedSpec("https://a.example/")], NOW))
    (feed,) = claim(db)
    objects = LocalObjectStore(tmp_path / "objects")
    plan = spill.plan_spill(feed.id, [sized("big", 3000), sized("other", 3000)], inline_limit=2000)

    async def refused_after_another_stored_one() -> None:
        async with spill.spilled_records(objects, db, feed.id, feed.url, plan) as stored:
            await store_items.save_items(db, feed, stored[:1], success())
            raise DatabaseError("database: refused", kind="too_large")

    with pytest.raises(DatabaseError):
        run(refused_after_another_stored_one())
    assert run(object_keys(objects)) == [spill.content_key(feed.id, "big")]


def test_rows_the_batch_will_ignore_are_sent_without_their_html() -> None:
    records = [sized("kept", 700), sized("new", 900), sized("stored", 800), sized("new", 500)]
    plan = spill.plan_spill(
        "f", records, inline_limit=1000, batch_budget=1000, ignored={"kept", "stored"}
    )
    assert [s.guid for s in plan.spilled] == []
    assert [r.content_html for r in plan.records] == [None, records[1].content_html, None, None]
    assert all(r.content_key is None for r in plan.records)


class PauseBeforeAlter:
    """A real database whose ``ALTER TABLE`` batch waits until the test lets it go."""

    def __init__(self, inner: Database) -> None:
        self.inner = inner
        self.reached = asyncio.Event()
        self.go_on = asyncio.Event()

    async def query(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        return await self.inner.query(sql, params)

    async def batch(self, statements: Sequence[Statement]) -> list[list[Row]]:
        if any(s.sql.startswith("ALTER TABLE") for s in statements):
            self.reached.set()
            await self.go_on.wait()
        return await self.inner.batch(statements)

    async def exec(self, sql: str) -> None:
        await self.inner.exec(sql)

    async def close(self) -> None:
        await self.inner.close()


def test_two_collectors_migrating_at_once_both_start(tmp_path: Path) -> None:
    """The second ``ALTER TABLE ... ADD COLUMN`` fails; its migrate sees the version and goes on."""

    async def race() -> tuple[list[int], list[int], list[Row], list[Row]]:
        first = PauseBeforeAlter(SQLiteDatabase(tmp_path / "shared.db"))
        second = SQLiteDatabase(tmp_path / "shared.db")
        try:
            slow = asyncio.create_task(migrate(first))
            await first.reached.wait()
            fast = await migrate(second)
            first.go_on.set()
            late = await slow
            versions = await second.query("SELECT version FROM schema_migrations ORDER BY 1")
            columns = await second.query("SELECT name FROM pragma_table_info('items')")
            return late, fast, versions, columns
        finally:
            await first.close()
            await second.close()

    late, fast, versions, columns = asyncio.run(race())
    assert (late[0], fast[0]) == (1, 2)
    assert 2 not in late, "the collector that lost the race did not apply migration 2"
    assert versions == [{"version": v} for v in range(1, latest_version() + 1)]
    assert sum(c["name"] == "content_key" for c in columns) == 1


def test_a_migration_that_fails_unrecorded_still_raises(tmp_path: Path) -> None:
    """Only "someone else applied it" is forgiven: here the column exists but no one recorded it."""

    async def broken() -> None:
        database = SQLiteDatabase(tmp_path / "broken.db")
        try:
            await migrate(database)
            await database.query("DELETE FROM schema_migrations WHERE version = 2")
            await migrate(database)
        finally:
            await database.close()

    with pytest.raises(DatabaseError, match="duplicate column name: content_key"):
        asyncio.run(broken())


def test_a_database_a_newer_version_migrated_is_said_at_every_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An older collector on a database a newer one migrated ran on in silence, storing an
    item twice where the two read a feed differently."""
    newer = latest_version() + 1

    async def open_twice() -> list[int]:
        database = SQLiteDatabase(tmp_path / "shared.db")
        try:
            await migrate(database)
            await database.query(
                "INSERT INTO schema_migrations VALUES (?, 'of a later version', '')", (newer,)
            )
            return await migrate(database) + await migrate(database)
        finally:
            await database.close()

    with caplog.at_level("WARNING", logger="feedcollector"):
        assert asyncio.run(open_twice()) == []
    first, again = caplog.messages
    assert first == again
    assert first.startswith(
        f"database: it holds migration {newer} of a newer feedcollector (this one knows up "
        f"to {latest_version()}): upgrade this collector"
    )


def test_an_item_stored_or_expired_under_its_earlier_guid_is_not_stored_again(
    any_db: Live[Database],
) -> None:
    """Versions before the text repair stored ``urn:CafÃ©`` (and expired ``urn:gone\x92``):
    read again, the feed's items carry those as their earlier GUIDs and are not new."""
    db = any_db.backend
    any_db.run(store_sync.sync_feeds(db, [FeedSpec("https://a.example/")], NOW))
    (feed,) = any_db.run(
        store.claim_due_feeds(
            db, due_by=NOW, now=NOW, owner="a", lease=LEASE, limit=1, after=store.ClaimCursor()
        )
    )
    assert (
        any_db.run(store_items.save_items(db, feed, [item("urn:Caf\u00c3\u00a9")], success())) == 1
    )
    any_db.run(
        db.query(
            "INSERT INTO item_tombstones (feed_id, guid, deleted_at) VALUES (?, ?, ?)",
            (feed.id, "urn:gone\x92", "2026-01-01T00:00:00Z"),
        )
    )
    renamed = [
        item("urn:Caf\u00e9", "https://img.example/a.png")._replace(
            earlier_guid="urn:Caf\u00c3\u00a9"
        ),
        item("urn:gone\u2019")._replace(earlier_guid="urn:gone\x92"),
        item("urn:new", "https://img.example/n.png")._replace(earlier_guid="urn:never-stored"),
    ]
    plain = [item(f"p{n}") for n in range(20)]  # past one statement's rows
    new = any_db.run(
        store_items.save_items(db, feed, [*plain[:10], *renamed, *plain[10:]], success())
    )
    assert new == 21
    guids = {row["guid"] for row in any_db.run(db.query("SELECT guid FROM items"))}
    assert guids == {"urn:Caf\u00c3\u00a9", "urn:new", *(f"p{n}" for n in range(20))}
    tasks = any_db.run(db.query("SELECT original_url FROM image_tasks"))
    assert tasks == [{"original_url": "https://img.example/n.png"}]


def test_migration_15_pads_the_pub_dates_of_years_before_1000(any_db: Live[Database]) -> None:
    """Stored by earlier versions as '1-01-01T00:00:00Z' (Go's zero time)."""
    db = any_db.backend
    stored = {
        "zero": "1-01-01T00:00:00Z",
        "y50": "50-06-01T12:00:00Z",
        "y999": "999-12-31T23:59:59Z",
        "fine": "2026-03-02T08:00:00Z",
        "undated": None,
    }
    any_db.run(db.query("DELETE FROM schema_migrations WHERE version = 15"))
    any_db.run(
        db.query(
            "INSERT INTO feeds (id, url, created_at) VALUES ('f', 'https://a.example/', ?)",
            ("2026-01-01T00:00:00Z",),
        )
    )
    for guid, pub_date in stored.items():
        any_db.run(
            db.query(
                "INSERT INTO items (id, feed_id, guid, pub_date, created_at) "
                "VALUES (?, 'f', ?, ?, '2026-01-01T00:00:00Z')",
                (guid, guid, pub_date),
            )
        )
    assert any_db.run(migrate(db)) == [15]
    rows = any_db.run(db.query("SELECT guid, pub_date FROM items ORDER BY pub_date, guid"))
    assert [(row["guid"], row["pub_date"]) for row in rows] == [
        ("undated", None),
        ("zero", "0001-01-01T00:00:00Z"),
        ("y50", "0050-06-01T12:00:00Z"),
        ("y999", "0999-12-31T23:59:59Z"),
        ("fine", "2026-03-02T08:00:00Z"),
    ]


@pytest.fixture(params=["sqlite", pytest.param("d1", marks=pytest.mark.cloud)])
def any_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Live[Database]]:
    """The store's SQL on the embedded database and on D1 through the real Proxy Worker."""
    if request.param == "sqlite":
        with live("sqlite", lambda: SQLiteDatabase(tmp_path / "collector.db")) as database:
            database.run(migrate(database.backend))
            yield database
        return
    with run_d1_proxy() as proxy, live("d1", lambda: d1_database(proxy)) as database:
        database.run(migrate(database.backend))
        yield database


def test_a_long_feed_is_stored_in_a_few_multi_row_statements(any_db: Live[Database]) -> None:
    db = any_db.backend
    any_db.run(store_sync.sync_feeds(db, [FeedSpec("https://a.example/")], NOW))
    (feed,) = any_db.run(
        store.claim_due_feeds(
            db, due_by=NOW, now=NOW, owner="a", lease=LEASE, limit=10, after=store.ClaimCursor()
        )
    )
    any_db.run(
        db.query(
            "INSERT INTO item_tombstones (feed_id, guid, deleted_at) VALUES (?, ?, ?)",
            (feed.id, "g07", "2026-01-01T00:00:00Z"),
        )
    )
    records = [
        item(f"g{n:02}", *(f"https://img.example/{n}/{k}.png" for k in range(3))) for n in range(40)
    ]
    records.insert(5, item("g03", "https://img.example/dup.png", item_id="dup"))
    statements = store_items.item_statements(feed.id, records, "2026-03-01T12:00:00Z")
    assert all(len(s.params) <= store_items.MAX_PARAMS for s in statements)
    # total_changes() before and after 41 items, 13 a statement; 121 image tasks, 24 a statement
    assert len(statements) == 2 + 4 + 6

    counting = CountingDatabase(db)
    new = any_db.run(store_items.save_items(counting, feed, records, success()))

    assert counting.round_trips == 1
    expected = [f"id-g{n:02}-3" for n in range(40) if n != 7]
    assert new == len(expected)
    rows = any_db.run(db.query("SELECT id FROM items ORDER BY guid"))
    assert [row["id"] for row in rows] == expected
    tasks = any_db.run(
        db.query("SELECT item_id, original_url FROM image_tasks ORDER BY item_id, position")
    )
    assert len(tasks) == 39 * 3
    assert {task["item_id"] for task in tasks} == set(expected)
    assert tasks[:3] == [
        {"item_id": "id-g00-3", "original_url": f"https://img.example/0/{k}.png"} for k in range(3)
    ]
    assert any_db.run(store_items.save_items(db, feed, records, success())) == 0


def test_failed_attempts_wait_for_their_retry_and_retry_images_requeues(
    any_db: Live[Database],
) -> None:
    """The schedule in SQL, on SQLite and on D1 alike: a failure's ``retry_at`` is the later of
    its delay and the server's Retry-After (capped), no claim takes a task before it, the
    third failure clears it, and ``retry-images`` counts what it queued (``total_changes()``), and
    with ``--waiting`` what it made due."""
    db = any_db.backend
    any_db.run(store_sync.sync_feeds(db, [FeedSpec("https://a.example/")], NOW))
    (feed,) = any_db.run(
        store.claim_due_feeds(
            db, due_by=NOW, now=NOW, owner="a", lease=LEASE, limit=10, after=store.ClaimCursor()
        )
    )
    urls = [f"https://img.example/{name}.png" for name in ("plain", "asks-3h", "asks-30d")]
    any_db.run(store_items.save_items(db, feed, [item("g1", *urls)], success()))

    def fail_all(now: datetime, hints: Sequence[datetime | None]) -> list[store_images.Counted]:
        tasks = any_db.run(
            store_images.claim_image_tasks(
                db, now=now, lease=LEASE, limit=10, after=store_images.TaskCursor(), owner=OWNER
            )
        )
        assert [task.feed_url for task in tasks] == ["https://a.example/"] * len(tasks)
        results = [
            store_images.ImageResult(task.id, None, "image: HTTP 503", not_before=hint)
            for task, hint in zip(tasks, hints, strict=True)
        ]
        recorded = any_db.run(store_images.record_image_results(db, results, now))
        assert any_db.run(store_images.record_image_results(db, results, now)).failures == []
        return recorded.failures

    first = fail_all(NOW, [None, NOW + timedelta(hours=3), NOW + timedelta(days=30)])
    assert [(c.failed, c.retry_at) for c in first] == [
        (False, format_timestamp(NOW + timedelta(hours=1))),
        (False, format_timestamp(NOW + timedelta(hours=3))),
        (False, format_timestamp(NOW + store_images.MAX_RETRY_AFTER)),
    ]
    assert fail_all(NOW + timedelta(minutes=59), []) == []
    second = NOW + timedelta(hours=1)
    assert [c.retry_at for c in fail_all(second, [None])] == [
        format_timestamp(second + timedelta(days=1))
    ]
    third = second + timedelta(days=1)  # the 3h one is due too (oldest due first)
    assert [(c.failed, c.retry_at) for c in fail_all(third, [None, None])] == [
        (False, format_timestamp(third + timedelta(days=1))),
        (True, ""),
    ]
    requeue = store_images.requeue_failed_images
    assert any_db.run(requeue(db, now=third, feed_urls=["https://b.example/"])) == 0
    assert any_db.run(requeue(db, now=third, feed_urls=["https://a.example/"])) == 1
    rows = any_db.run(
        db.query("SELECT status, attempts, retry_at, last_error FROM image_tasks ORDER BY position")
    )
    assert rows[0] == {"status": "pending", "attempts": 0, "retry_at": "", "last_error": None}
    assert any_db.run(requeue(db, now=third)) == 0
    hasten = store_images.hasten_waiting_images  # retry-images --waiting
    assert any_db.run(hasten(db, now=third, feed_urls=["https://b.example/"])) == 0
    assert any_db.run(hasten(db, now=third, feed_urls=["https://a.example/"])) == 2
    assert any_db.run(hasten(db, now=third)) == 0
    due = any_db.run(
        store_images.claim_image_tasks(
            db, now=third, lease=LEASE, limit=10, after=store_images.TaskCursor(), owner=OWNER
        )
    )
    assert sorted(task.attempts for task in due) == [0, 1, 2], "due at once, attempts kept"


def test_a_page_hands_back_only_the_tasks_that_still_hold_its_lease(
    any_db: Live[Database],
) -> None:
    """A page that outlived its lease handed its tasks back anyway: it cleared the lease of
    the process that took one over, and pushed the retry_at of one that process had failed
    for good (``status`` then said "next in 2h" of an image never tried again)."""
    db = any_db.backend
    any_db.run(store_sync.sync_feeds(db, [FeedSpec("https://a.example/")], NOW))
    (feed,) = any_db.run(
        store.claim_due_feeds(
            db, due_by=NOW, now=NOW, owner="a", lease=LEASE, limit=10, after=store.ClaimCursor()
        )
    )
    urls = [f"https://img.example/{n}.png" for n in range(3)]
    any_db.run(store_items.save_items(db, feed, [item("g1", *urls)], success()))

    def claim(now: datetime) -> list[ImageTask]:
        return any_db.run(
            store_images.claim_image_tasks(
                db, now=now, lease=LEASE, limit=10, after=store_images.TaskCursor(), owner=OWNER
            )
        )

    first = claim(NOW)
    later = NOW + LEASE + timedelta(minutes=1)
    taken_over = claim(later)  # the first page's lease ran out
    assert [task.id for task in taken_over] == [task.id for task in first]
    gone_for_good, still_leased, _ = taken_over
    any_db.run(
        db.query(
            "UPDATE image_tasks SET status = 'failed', attempts = 3, lease_until = NULL "
            "WHERE id = ?",
            (gone_for_good.id,),
        )
    )
    wait: dict[str, datetime | None] = {task.id: later + timedelta(hours=2) for task in first}
    stale = store_images.HandBack(wait, NOW + LEASE)
    any_db.run(store_images.record_image_results(db, [], later, release=stale))
    rows = any_db.run(
        db.query("SELECT id, status, retry_at, lease_until FROM image_tasks ORDER BY position")
    )
    assert [(row["status"], row["retry_at"], row["lease_until"]) for row in rows[:2]] == [
        ("failed", "", None),
        ("pending", "", format_timestamp(later + LEASE)),
    ], "the other process's tasks are left as it has them"
    ours = store_images.HandBack({still_leased.id: wait[still_leased.id]}, later + LEASE)
    any_db.run(store_images.record_image_results(db, [], later, release=ours))
    (row,) = any_db.run(
        db.query("SELECT retry_at, lease_until FROM image_tasks WHERE id = ?", (still_leased.id,))
    )
    assert row == {"retry_at": format_timestamp(later + timedelta(hours=2)), "lease_until": None}


def test_the_budget_counts_the_image_rows_beside_the_html() -> None:
    """2,300 items of twelve images each: their HTML alone fit the budget, but with 27,600
    image rows repeating every URL the Worker refused the batch (413) on every fetch."""
    urls = tuple(f"https://img.example/{'x' * 200}/{n}.png" for n in range(12))
    html = "".join(f'<img src="{url}">' for url in urls)
    records = [
        ItemRecord(f"id{n}", f"g{n}", None, "t", "2026-02-28T10:00:00Z", html, urls)
        for n in range(2300)
    ]
    assert len(html.encode()) * len(records) <= spill.BATCH_TEXT_BUDGET
    plan = spill.plan_spill("f", records)
    assert len(plan.spilled) == len(records), "the image rows alone fill the budget"
    fewer = [record._replace(image_urls=record.image_urls[:4]) for record in records]
    plan = spill.plan_spill("f", fewer)
    inline = sum(len(r.content_html.encode()) for r in plan.records if r.content_html)
    rows = sum(len(u) + spill.IMAGE_ROW_BYTES for r in fewer for u in r.image_urls)
    assert 0 < len(plan.spilled) < len(fewer)
    assert inline + rows + sum(len(r.guid) + 1 for r in fewer) <= spill.BATCH_TEXT_BUDGET


def test_small_contents_are_never_measured_for_spilling() -> None:
    """The fast path: even at 4 bytes a character, nothing could cross a limit (the budget
    counts each row's GUID, link, title and image rows beside its HTML)."""
    records = [item(f"g{n}", "https://img.example/x.png") for n in range(3)]
    per_row = 60 + len("g0https://blog.example/g0Title g0") + spill.IMAGE_ROW_BYTES + 25
    plan = spill.plan_spill("feed", records, inline_limit=4 * 60, batch_budget=4 * 3 * per_row)
    assert plan.records == tuple(records)
    assert plan.spilled == ()
    tight = spill.plan_spill("feed", records, inline_limit=4 * 60, batch_budget=4)
    assert [s.guid for s in tight.spilled] == ["g0", "g1", "g2"]


def test_image_tasks_are_found_by_item_through_the_unique_index(db: Database) -> None:
    """Migration 7 dropped the separate item_id index; lookups by item stay indexed."""
    plan = run(
        db.query(
            "EXPLAIN QUERY PLAN SELECT position FROM image_tasks WHERE item_id = ? "
            "ORDER BY position",
            ("x",),
        )
    )
    details = [row["detail"] for row in plan]
    assert any(d.startswith("SEARCH") and "sqlite_autoindex_image_tasks" in d for d in details)
    indexes = run(db.query("SELECT name FROM sqlite_master WHERE type = 'index'"))
    assert "image_tasks_item" not in {row["name"] for row in indexes}


def _pending_work(
    path: Path, tasks: int, feeds: int, *, one_second: bool = False
) -> SteppingDatabase:
    """``tasks`` pending image tasks and ``feeds`` due feeds, each at its own second (or all
    at the same one, as a feed's batch stores its tasks and a sync registers its feeds)."""
    db = SQLiteDatabase(path)
    asyncio.run(migrate(db))
    con = sqlite3.connect(path)
    con.execute(
        "INSERT INTO feeds (id, url, created_at) VALUES ('f', 'https://a.example/', '2026')"
    )
    stamps = [
        format_timestamp(NOW - timedelta(days=1) + timedelta(seconds=0 if one_second else n))
        for n in range(tasks)
    ]
    con.executemany(
        "INSERT INTO items (id, feed_id, guid, created_at) VALUES (?, 'f', ?, ?)",
        [(f"i{n:06d}", f"g{n}", stamp) for n, stamp in enumerate(stamps)],
    )
    con.executemany(
        "INSERT INTO image_tasks (id, item_id, original_url, created_at, updated_at, position) "
        "VALUES (?, ?, 'https://img.example/a.png', ?, ?, 0)",
        [(f"t{n:06d}", f"i{n:06d}", stamp, stamp) for n, stamp in enumerate(stamps)],
    )
    con.executemany(
        "INSERT INTO feeds (id, url, created_at, next_fetch_at) VALUES (?, ?, '2026', ?)",
        [(f"d{n:06d}", f"https://a.example/{n}", stamps[n]) for n in range(feeds)],
    )
    con.commit()
    con.close()
    return SteppingDatabase(db)


def test_tasks_waiting_for_their_retry_cost_a_claim_nothing(tmp_path: Path) -> None:
    """A failed attempt's task waits for its ``retry_at`` (an hour, then a day), and thousands
    may wait at once (a host down for a day). The claim is one range of ``image_tasks_status
    (status, retry_at, created_at, id)`` that ends at ``now``: with four times as many tasks
    waiting, the claim of the new ones and of the retries due does the same work."""
    most: list[int] = []
    for waiting in (400, 1600):
        db = _pending_work(tmp_path / f"{waiting}.db", waiting + 15, 0)
        later, earlier = NOW + timedelta(hours=1), NOW - timedelta(minutes=1)
        run(
            db.query(
                "UPDATE image_tasks SET retry_at = CASE WHEN id < ? THEN ? ELSE ? END WHERE id < ?",
                (
                    f"t{waiting:06d}",
                    format_timestamp(later),
                    format_timestamp(earlier),
                    f"t{waiting + 5:06d}",
                ),
            )
        )
        db.steps.clear()
        db.sql.clear()
        tasks = run(
            store_images.claim_image_tasks(
                db, now=NOW, lease=LEASE, limit=50, after=store_images.TaskCursor(), owner=OWNER
            )
        )
        assert [t.retry_at for t in tasks] == [""] * 10 + [format_timestamp(earlier)] * 5
        most.append(db.most())
        claim_sql = db.sql[0]
        plan = run(
            db.query(f"EXPLAIN QUERY PLAN {claim_sql}", (NOW.isoformat(),) * claim_sql.count("?"))
        )
        details = " ".join(row["detail"] for row in plan)
        assert (
            "USING INDEX image_tasks_status (status=? AND (retry_at,created_at,id)>(?,?,?) AND retry_at<?)"
            in details
        )
        assert "TEMP B-TREE" not in details, "the index gives the order"
        run(db.close())
    small, big = most
    assert big <= small * 1.5, most


@pytest.mark.parametrize("one_second", [False, True], ids=["spread", "one-second"])
def test_claiming_pages_costs_the_same_at_the_end_as_at_the_start(
    tmp_path: Path, one_second: bool
) -> None:
    """Image tasks and due feeds are claimed a page at a time from a cursor that SQLite reads
    as a range of its index: with only an OR, each page read every pending task (or due feed)
    before the cursor, so a cycle with 75,000 pending tasks spent 20 ms a page by the middle.
    Rows of one second (a feed's 40,000 image tasks, 20,000 feeds registered by one sync) are
    one range too: the index ends with the id. The most work one claim does is the same with
    four times as many to claim."""
    most: dict[str, list[int]] = {"tasks": [], "feeds": []}
    for size in (400, 1600):
        db = _pending_work(tmp_path / f"{size}.db", size, size, one_second=one_second)
        cursor = store_images.TaskCursor()
        claimed = 0
        while tasks := asyncio.run(
            store_images.claim_image_tasks(
                db, now=NOW, lease=timedelta(minutes=5), limit=50, after=cursor, owner=OWNER
            )
        ):
            claimed += len(tasks)
            cursor = store_images.TaskCursor(tasks[-1].created_at, tasks[-1].id)
        assert claimed == size
        most["tasks"].append(db.most())
        db.steps.clear()
        feed_cursor = store.ClaimCursor()
        claimed = 0
        while feeds := asyncio.run(
            store.claim_due_feeds(
                db,
                due_by=NOW,
                now=NOW,
                owner="me",
                lease=timedelta(minutes=5),
                limit=50,
                after=feed_cursor,
            )
        ):
            claimed += len(feeds)
            feed_cursor = store.ClaimCursor(feeds[-1].next_fetch_at or "", feeds[-1].id)
        assert claimed == size
        most["feeds"].append(db.most())
        asyncio.run(db.close())
    for name, (small, big) in most.items():
        assert big <= small * 1.5, (name, small, big)
