"""The scheduler's courtesy queries against a real SQLite file (D1 runs the same SQL; the
cloud path is covered in tests/test_schedule_cycle.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from feedcollector import store, store_schedule, store_sync
from feedcollector.database import Database
from feedcollector.models import FeedSpec
from feedcollector.timestamps import format_timestamp

from .test_store import LEASE, NOW, claim, db, run

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
"""Earlier than any due time: next_due_at after it is the earliest one."""

__all__ = ["db"]  # the fixture

A, B, C = "https://a.example/feed", "https://b.example/feed", "https://c.example/feed"


def feeds(database: Database) -> dict[str, dict[str, object]]:
    rows = run(database.query("SELECT * FROM feeds"))
    return {row["url"]: dict(row) for row in rows}


def test_gone_feeds_are_not_claimed_and_do_not_wake_the_scheduler(db: Database) -> None:
    run(store_sync.sync_feeds(db, [FeedSpec(A), FeedSpec(B)], NOW))
    a_id = feeds(db)[A]["id"]
    assert run(store_schedule.record_gone(db, str(a_id), at=NOW, error="410")) is True
    later = NOW + timedelta(hours=1)
    assert run(store_schedule.record_gone(db, str(a_id), at=later, error="410")) is False
    assert feeds(db)[A]["gone_at"] == format_timestamp(NOW), "the first time is kept"
    assert [f.url for f in claim(db)] == [B]
    run(store.release_feed(db, str(feeds(db)[B]["id"]), "a"))
    run(db.query("UPDATE feeds SET next_fetch_at = ? WHERE url = ?", (format_timestamp(later), B)))
    assert run(store.next_due_at(db, EPOCH)) == format_timestamp(later), "not the gone feed's"
    claimed = run(store.claim_feeds_by_id(db, [str(a_id)], now=NOW, owner="m", lease=LEASE))
    assert [f.gone_at for f in claimed] == [format_timestamp(NOW)], "a manual fetch still can"


def test_deferral_never_brings_a_feed_forward_and_needs_our_lease(db: Database) -> None:
    run(store_sync.sync_feeds(db, [FeedSpec(A)], NOW))
    (feed,) = claim(db, owner="us")
    soon, late = NOW + timedelta(minutes=5), NOW + timedelta(hours=5)
    run(store_schedule.defer_feed(db, feed.id, until=late, owner="them"))
    assert feeds(db)[A]["next_fetch_at"] == format_timestamp(NOW), "not our lease: untouched"
    run(store_schedule.defer_feed(db, feed.id, until=late, owner="us"))
    row = feeds(db)[A]
    assert (row["next_fetch_at"], row["lease_owner"]) == (format_timestamp(late), None)
    (feed,) = run(store.claim_feeds_by_id(db, [feed.id], now=NOW, owner="us", lease=LEASE))
    run(store_schedule.defer_feed(db, feed.id, until=soon, owner="us"))
    assert feeds(db)[A]["next_fetch_at"] == format_timestamp(late)


def test_leases_are_renewed_only_by_their_owner_and_released_in_bulk(db: Database) -> None:
    run(store_sync.sync_feeds(db, [FeedSpec(A), FeedSpec(B), FeedSpec(C)], NOW))
    claimed = claim(db, owner="us")
    ids = [f.id for f in claimed]
    until = NOW + timedelta(hours=1)
    assert run(store_schedule.renew_lease(db, ids[0], owner="us", until=until)) is True
    assert run(store_schedule.renew_lease(db, ids[0], owner="them", until=until)) is False
    assert feeds(db)[claimed[0].url]["lease_until"] == format_timestamp(until)
    run(db.query("UPDATE feeds SET lease_owner = 'them' WHERE id = ?", (ids[2],)))
    run(store_schedule.release_feeds(db, ids, "us"))
    owners = {url: row["lease_owner"] for url, row in feeds(db).items()}
    assert owners == {claimed[0].url: None, claimed[1].url: None, claimed[2].url: "them"}


def test_live_rate_limits_and_moves(db: Database) -> None:
    run(store_sync.sync_feeds(db, [FeedSpec(A), FeedSpec(B), FeedSpec(C)], NOW))
    ids = {url: str(row["id"]) for url, row in feeds(db).items()}
    hour = NOW + timedelta(hours=1)
    for url, status in ((A, 429), (B, 503)):
        run(
            store.record_failure(
                db, ids[url], failures=1, next_fetch_at=hour, error="x", status=status,
                retry_after_until=hour,
            )
        )  # fmt: skip
    run(store_schedule.record_move(db, ids[A], "https://a2.example/feed"))
    limits = run(store_schedule.live_rate_limits(db, NOW))
    assert limits == [
        store_schedule.HostDeferral("https://a2.example/feed", format_timestamp(hour))
    ]
    assert run(store_schedule.live_rate_limits(db, hour)) == [], "over once it ran out"
    held = run(store_schedule.held_feeds(db, [ids[C], ids[A]]))
    assert [feed.url for feed in held] == [A, C]
