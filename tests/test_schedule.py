from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from feedcollector.models import FeedSpec
from feedcollector.schedule import (
    KnownFeed,
    PostingStats,
    SchedulePolicy,
    backoff_delay,
    base_interval,
    cache_floor,
    capped_retry_after,
    deferred_until,
    feed_id_for,
    feed_interval,
    images_share,
    jitter_share,
    jittered,
    next_fetch_after_answer,
    next_fetch_after_failure,
    next_fetch_after_refusal,
    next_fetch_after_success,
    plan_feed_sync,
    posting_stats,
    unused_feed_id,
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


def test_a_moved_feed_listed_at_its_new_url_is_renamed_not_added() -> None:
    old = KnownFeed("id-old", "https://old.example/feed", True, None, None, "https://new.example/f")
    plan = plan_feed_sync({old.url: old}, [FeedSpec("https://new.example/f", title="New")])
    assert plan.renamed == ((old, FeedSpec("https://new.example/f", title="New")),)
    assert (plan.added, plan.removed) == ((), ())
    both = plan_feed_sync(
        {old.url: old}, [FeedSpec("https://old.example/feed"), FeedSpec("https://new.example/f")]
    )
    assert [s.url for s in both.added] == ["https://new.example/f"], "old still listed: two feeds"
    assert both.renamed == ()
    removed_earlier = KnownFeed(old.id, old.url, False, None, None, old.moved_to)
    again = plan_feed_sync({old.url: removed_earlier}, [FeedSpec("https://new.example/f")])
    assert [row.id for row, _ in again.renamed] == ["id-old"]


def test_a_url_spelled_otherwise_is_the_same_feed_renamed() -> None:
    """Scheme and host in other case, a fragment: the feeds file's own notion of one address
    (``add``, ``remove`` and ``fetch`` compare so); added, the feed was stored twice."""
    upper = KnownFeed("id-1", "HTTP://A.Example/feed", True, None, None, None)
    fragment = KnownFeed("id-2", "https://b.example/feed#top", True, None, None, None)
    plan = plan_feed_sync(
        {upper.url: upper, fragment.url: fragment},
        [FeedSpec("http://a.example/feed"), FeedSpec("https://b.example/feed")],
    )
    assert [(row.id, spec.url) for row, spec in plan.renamed] == [
        ("id-1", "http://a.example/feed"),
        ("id-2", "https://b.example/feed"),
    ]
    assert (plan.added, plan.removed) == ((), ())
    other_path = plan_feed_sync({upper.url: upper}, [FeedSpec("http://a.example/Feed")])
    assert [spec.url for spec in other_path.added] == ["http://a.example/Feed"], "paths keep case"


def test_a_feed_whose_password_changed_is_the_same_feed_renamed() -> None:
    """A rotated credential written over the old one: a new feed, it stored every item again.
    Another user name is another account's feed, and a feed listed beside it stays."""
    old = KnownFeed("id-1", "https://ann:old@a.example/feed", True, None, None, None)
    plan = plan_feed_sync({old.url: old}, [FeedSpec("https://ann:new@a.example/feed")])
    assert [(row.id, spec.url) for row, spec in plan.renamed] == [
        ("id-1", "https://ann:new@a.example/feed")
    ]
    assert (plan.added, plan.removed) == ((), ())
    other_user = plan_feed_sync({old.url: old}, [FeedSpec("https://bob:old@a.example/feed")])
    assert [spec.url for spec in other_user.added] == ["https://bob:old@a.example/feed"]
    assert other_user.removed == (old,)
    both = plan_feed_sync(
        {old.url: old}, [FeedSpec(old.url), FeedSpec("https://ann:new@a.example/feed")]
    )
    assert [spec.url for spec in both.added] == ["https://ann:new@a.example/feed"]
    assert both.renamed == ()


def test_an_id_a_renamed_feed_holds_is_not_taken_again() -> None:
    old_url = "https://old.example/feed"
    taken = {feed_id_for(old_url): "https://new.example/f"}  # renamed: id of its old URL
    twin = unused_feed_id(old_url, taken)
    assert twin == feed_id_for(old_url + "#2")
    assert unused_feed_id(old_url, {**taken, twin: "x"}) == feed_id_for(old_url + "#3")
    assert unused_feed_id("https://free.example/", taken) == feed_id_for("https://free.example/")


# --- the next fetch after an answer -----------------------------------------------------------

POLICY = SchedulePolicy(jitter=0.0)


def hours(n: float) -> timedelta:
    return timedelta(hours=n)


def test_posting_stats_average_the_newest_dated_items() -> None:
    dates = [NOW - hours(2 * n) for n in range(5)]
    assert posting_stats(dates, NOW) == PostingStats(gap=hours(2), newest=NOW)
    assert posting_stats([NOW], NOW) is None, "one date tells no rate"
    assert posting_stats([NOW, NOW, NOW], NOW) is None, "identical dates tell no rate"
    future = [NOW + timedelta(days=30), NOW - hours(1), NOW - hours(3)]
    assert posting_stats(future, NOW) == PostingStats(gap=hours(2), newest=NOW - hours(1))
    burst_daily = [NOW - timedelta(days=d, minutes=m) for d in range(4) for m in range(5)]
    stats = posting_stats(burst_daily, NOW)
    assert stats is not None
    assert hours(3.5) < stats.gap < hours(4), "5 posts a day: 19 gaps over 3 days, not 0"
    many = [NOW - hours(n) for n in range(100)]
    assert posting_stats(many, NOW) == PostingStats(gap=hours(1), newest=NOW)
    assert posting_stats([datetime(1, 1, 1, tzinfo=UTC), NOW - hours(1)], NOW) is None


@pytest.mark.parametrize(
    ("gap", "newest_age", "expected"),
    [
        (hours(1), timedelta(0), hours(1)),
        (timedelta(minutes=2), timedelta(0), timedelta(minutes=15)),
        (timedelta(days=7), timedelta(0), hours(2)),
        (hours(1), hours(3), hours(1.5)),
        (hours(1), timedelta(days=10), hours(2)),
    ],
    ids=["hourly", "faster-than-min", "weekly-capped", "quiet-grows", "silent-capped"],
)
def test_learned_interval_follows_posting_within_bounds(
    gap: timedelta, newest_age: timedelta, expected: timedelta
) -> None:
    stats = PostingStats(gap, NOW - newest_age)
    assert base_interval(POLICY, pinned_seconds=None, stats=stats, now=NOW) == expected


def test_pinned_default_and_non_adaptive_intervals() -> None:
    stats = PostingStats(hours(3), NOW)
    assert base_interval(POLICY, pinned_seconds=600, stats=stats, now=NOW) == timedelta(minutes=10)
    assert base_interval(POLICY, pinned_seconds=None, stats=None, now=NOW) == timedelta(minutes=30)
    fixed = replace(POLICY, adaptive=False, default_interval=hours(2))
    assert base_interval(fixed, pinned_seconds=None, stats=stats, now=NOW) == hours(2)


def test_jitter_is_fixed_per_feed_bounded_and_spread() -> None:
    ids = [feed_id_for(f"https://h{n}.example/feed") for n in range(200)]
    shares = [jitter_share(i) for i in ids]
    assert all(-1 <= s <= 1 for s in shares)
    assert jitter_share(ids[0]) == jitter_share(ids[0])
    delays = {jittered(timedelta(minutes=30), i, 0.1) for i in ids}
    assert all(timedelta(minutes=27) <= d <= timedelta(minutes=33) for d in delays)
    assert len(delays) > 100, "feeds fall due at many different seconds"
    assert min(shares) < -0.8, "the whole range is used"
    assert max(shares) > 0.8
    assert jittered(timedelta(minutes=30), ids[0], 0.0) == timedelta(minutes=30)


def test_next_fetch_after_an_answer_honours_floor_bounds_and_jitter() -> None:
    feed = feed_id_for("https://a.example/feed")
    policy = SchedulePolicy(jitter=0.5, min_interval=hours(1), max_interval=hours(4))

    def after(**kwargs: object) -> timedelta:
        arguments: dict[str, Any] = {
            "feed_id": feed,
            "policy": policy,
            "pinned_seconds": None,
            "stats": None,
            "floor": timedelta(0),
        }
        return next_fetch_after_answer(NOW, **(arguments | kwargs)) - NOW

    assert after() == jittered(timedelta(minutes=30), feed, 0.5), "no history: the default"
    for gap in (timedelta(minutes=50), hours(1), hours(4), hours(5)):
        learned = after(stats=PostingStats(gap, NOW))
        assert hours(1) <= learned <= hours(4), "jitter stays inside the bounds"
    assert after(pinned_seconds=60, floor=hours(2)) == hours(2), "the server's floor wins"
    assert after(pinned_seconds=7200) == jittered(hours(2), feed, 0.5), "pinned: jitter only"


def test_cache_floor_takes_the_longest_hint_and_caps_it() -> None:
    policy = SchedulePolicy(max_cache_floor=hours(6))
    floor = cache_floor(policy, http_fresh=hours(1), feed_ttl_seconds=None)
    assert floor == hours(1)
    assert cache_floor(policy, http_fresh=hours(1), feed_ttl_seconds=3 * 3600) == hours(3)
    assert cache_floor(policy, http_fresh=timedelta(days=30), feed_ttl_seconds=None) == hours(6)
    assert cache_floor(policy, http_fresh=timedelta(0), feed_ttl_seconds=10**15) == hours(6)
    ignored = SchedulePolicy(max_cache_floor=timedelta(0))
    assert cache_floor(ignored, http_fresh=hours(5), feed_ttl_seconds=3600) == timedelta(0)


def test_a_refusal_backs_off_but_never_before_retry_after() -> None:
    assert next_fetch_after_refusal(NOW, 1, None) == NOW + timedelta(minutes=30)
    assert next_fetch_after_refusal(NOW, 1, timedelta(minutes=5)) == NOW + timedelta(minutes=30)
    assert next_fetch_after_refusal(NOW, 1, hours(3)) == NOW + hours(3)
    assert next_fetch_after_refusal(NOW, 7, hours(3)) == NOW + hours(24)
    policy = SchedulePolicy(max_retry_after=hours(2))
    assert capped_retry_after(policy, timedelta(days=9)) == hours(2)
    assert capped_retry_after(policy, None) is None


def test_deferral_is_the_later_live_retry_after() -> None:
    assert deferred_until(None, None, NOW) is None
    assert deferred_until(NOW - hours(1), None, NOW) is None, "a past Retry-After is over"
    assert deferred_until(NOW + hours(1), None, NOW) == NOW + hours(1)
    assert deferred_until(NOW + hours(1), NOW + hours(2), NOW) == NOW + hours(2)
    assert deferred_until(None, NOW + hours(2), NOW) == NOW + hours(2)


def test_the_image_stage_of_a_service_runs_as_long_as_the_feeds_took_30_s_at_least() -> None:
    assert images_share(timedelta(seconds=2)) == timedelta(seconds=30)
    assert images_share(timedelta(minutes=4)) == timedelta(minutes=4)
