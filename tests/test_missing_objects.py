"""``retry-images --missing``: stored images whose object is gone are found beside the store's
listing and queued again, on both backend pairs (SQLite + folder, D1 Proxy Worker + S3)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from feedcollector.images import object_key
from feedcollector.missing_objects import MissingReport, requeue_missing_images
from feedcollector.schedule import feed_id_for
from feedcollector.timestamps import format_timestamp

from . import test_retention
from .test_retention import FEED_ID, FEED_URL, NOW, Pair, add_feed, add_item

pair = test_retention.pair

LATER = NOW + timedelta(hours=1)
OTHER_URL = "https://other.example.org/feed.xml"


def check(pair: Pair, *, feed_urls: list[str] | None = None, page: int = 500) -> MissingReport:
    return pair.run(
        requeue_missing_images(pair.db, pair.objects, now=LATER, feed_urls=feed_urls, page=page)
    )


def tasks(pair: Pair) -> dict[str, tuple[object, ...]]:
    rows = pair.rows("SELECT id, status, attempts, r2_key, retry_at FROM image_tasks ORDER BY id")
    return {str(row["id"]): (row["status"], row["attempts"], row["r2_key"]) for row in rows}


def test_a_stored_image_whose_object_is_gone_is_queued_again_and_nothing_else(pair: Pair) -> None:
    pair.run(add_feed(pair.db))
    pair.run(add_item(pair, "kept", NOW, images=(True,)))
    pair.run(add_item(pair, "lost", NOW, images=(True, True)))
    pair.run(add_item(pair, "failing", NOW, images=(False,)))
    lost = object_key(FEED_ID, "lost", 1, "png")
    pair.run(pair.objects.delete_many([lost]))
    pair.run(pair.objects.put(object_key(FEED_ID, "unnamed", 0, "png"), b"no row names it"))
    before = tasks(pair)

    report = check(pair)

    assert (report.checked, report.missing, report.requeued, report.samples) == (3, 1, 1, [lost])
    after = tasks(pair)
    assert after.pop("id-lost-1") == ("pending", 0, None)
    before.pop("id-lost-1")
    assert after == before
    assert pair.rows("SELECT retry_at, last_error FROM image_tasks WHERE id = 'id-lost-1'") == [
        {"retry_at": "", "last_error": None}
    ]
    again = check(pair)
    assert (again.checked, again.missing, again.requeued) == (2, 0, 0)


def test_an_empty_object_counts_as_missing(pair: Pair) -> None:
    """What a power cut leaves of a file written just before it (no image is ever empty)."""
    pair.run(add_feed(pair.db))
    pair.run(add_item(pair, "emptied", NOW, images=(True, True)))
    emptied = object_key(FEED_ID, "emptied", 0, "png")
    pair.run(pair.objects.put(emptied, b""))

    report = check(pair)

    assert (report.checked, report.missing, report.requeued, report.samples) == (2, 1, 1, [emptied])
    assert tasks(pair)["id-emptied-0"] == ("pending", 0, None)
    assert tasks(pair)["id-emptied-1"][0] == "success"


def test_pages_walk_beside_the_listing_in_key_order(pair: Pair) -> None:
    """Pages of two keys over nine images, every other object gone, objects no row names
    between them: each page meets the listing where the last one left it."""
    pair.run(add_feed(pair.db))
    for n in range(3):
        pair.run(add_item(pair, f"item{n}", NOW, images=(True, True, True)))
    keys = sorted(str(row["r2_key"]) for row in pair.rows("SELECT r2_key FROM image_tasks"))
    gone = keys[::2]
    pair.run(pair.objects.delete_many(gone))
    for key in keys[1::2]:
        pair.run(pair.objects.put(key + ".extra", b"between"))

    report = check(pair, page=2)

    assert (report.checked, report.missing, report.requeued) == (9, 5, 5)
    pending = pair.rows("SELECT id FROM image_tasks WHERE status = 'pending'")
    assert len(pending) == 5


def test_only_the_feeds_asked_for_and_not_tasks_recorded_since_the_check_began(pair: Pair) -> None:
    pair.run(add_feed(pair.db))
    pair.run(add_feed(pair.db, OTHER_URL))
    pair.run(add_item(pair, "mine", NOW, images=(True,)))
    pair.run(add_item(pair, "theirs", NOW, images=(True,), feed_url=OTHER_URL))
    pair.run(add_item(pair, "fresh", NOW, images=(True,)))
    pair.run(
        pair.db.query(
            "UPDATE image_tasks SET updated_at = ? WHERE id = 'id-fresh-0'",
            (format_timestamp(LATER),),
        )
    )
    pair.run(
        pair.objects.delete_many(
            [
                object_key(FEED_ID, "mine", 0, "png"),
                object_key(feed_id_for(OTHER_URL), "theirs", 0, "png"),
                object_key(FEED_ID, "fresh", 0, "png"),
            ]
        )
    )

    report = check(pair, feed_urls=[FEED_URL])

    assert (report.checked, report.missing, report.requeued) == (1, 1, 1)
    states = {k: v[0] for k, v in tasks(pair).items()}
    assert states == {"id-mine-0": "pending", "id-theirs-0": "success", "id-fresh-0": "success"}
    assert check(pair, feed_urls=[]).checked == 0


def test_a_key_two_tasks_name_queues_both(pair: Pair) -> None:
    pair.run(add_feed(pair.db))
    pair.run(add_item(pair, "one", NOW, images=(True,)))
    pair.run(add_item(pair, "two", NOW, images=(False,)))
    key = object_key(FEED_ID, "one", 0, "png")
    pair.run(
        pair.db.query(
            "UPDATE image_tasks SET status = 'success', r2_key = ? WHERE id = 'id-two-0'", (key,)
        )
    )
    pair.run(pair.objects.delete_many([key]))

    report = check(pair)

    assert (report.checked, report.missing, report.requeued) == (1, 1, 2)


def test_a_page_out_of_range_is_refused(pair: Pair) -> None:
    with pytest.raises(ValueError, match="page"):
        check(pair, page=0)
