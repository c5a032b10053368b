from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from feedcollector.models import FeedSpec
from feedcollector.schedule import (
    KnownFeed,
    backoff_delay,
    feed_id_for,
    feed_interval,
    next_fetch_after_failure,
    next_fetch_after_success,
    plan_feed_sync,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("failures", "expected"),
    [
        (0, timedelta(0)),
        (1, timedelta(minutes=30)),
        (2, timedelta(hours=1)),
        (3, timedelta(hours=2)),
        (4, timedelta(hours=4)),
        (5, timedelta(hours=8)),
        (6, timedelta(hours=16)),
        (7, timedelta(hours=24)),
        (10, timedelta(hours=24)),
        (500, timedelta(hours=24)),
    ],
)
def test_backoff_doubles_from_30_minutes_and_caps_at_a_day(
    failures: int, expected: timedelta
) -> None:
    assert backoff_delay(failures) == expected
    assert next_fetch_after_failure(NOW, failures) == NOW + expected


def test_success_uses_the_feed_interval_or_the_default() -> None:
    assert feed_interval(None, timedelta(minutes=30)) == timedelta(minutes=30)
    assert feed_interval(7200, timedelta(minutes=30)) == timedelta(hours=2)
    assert next_fetch_after_success(NOW, timedelta(minutes=15)) == NOW + timedelta(minutes=15)


def test_feed_ids_are_stable_and_distinct() -> None:
    assert feed_id_for("https://a.example/feed") == feed_id_for("https://a.example/feed")
    assert feed_id_for("https://a.example/feed") != feed_id_for("https://a.example/feed2")
    assert len(feed_id_for("https://a.example/feed")) == 16


def _known(
    url: str, *, active: bool = True, interval: int | None = None, title: str | None = None
) -> KnownFeed:
    return KnownFeed(feed_id_for(url), url, active, interval, title)


def test_sync_plan_diffs_the_file_against_the_table() -> None:
    known = {
        k.url: k
        for k in [
            _known("https://kept.example/"),
            _known("https://gone.example/"),
            _known("https://back.example/", active=False),
            _known("https://retimed.example/", interval=1800),
            _known("https://already-removed.example/", active=False),
        ]
    }
    specs = [
        FeedSpec("https://kept.example/"),
        FeedSpec("https://new.example/"),
        FeedSpec("https://back.example/"),
        FeedSpec("https://retimed.example/", interval=timedelta(hours=1)),
    ]
    plan = plan_feed_sync(known, specs)
    assert [s.url for s in plan.added] == ["https://new.example/"]
    assert [s.url for s in plan.reactivated] == ["https://back.example/"]
    assert [s.url for s in plan.changed] == ["https://retimed.example/"]
    assert [k.url for k in plan.removed] == ["https://gone.example/"]


def test_sync_plan_is_empty_when_nothing_changed() -> None:
    known = {"https://a.example/": _known("https://a.example/", interval=900, title="A")}
    plan = plan_feed_sync(known, [FeedSpec("https://a.example/", timedelta(minutes=15), "A")])
    assert plan.is_empty
