"""Item records: ids that are UUIDv7s led by the time they were made."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

import pytest

from feedcollector.models import ParsedItem
from feedcollector.normalize import id_stamp, item_records, time_ordered_ids

FETCHED = datetime(2026, 3, 1, 12, 0, 0, 123000, tzinfo=UTC)
STAMP = 1_772_366_400_123 << 12 | 2048
"""2026-03-01T12:00:00.123Z and half a millisecond, as :func:`id_stamp` writes it."""


def test_item_ids_are_distinct_uuid7s_carrying_their_stamp() -> None:
    ids = time_ordered_ids(500, STAMP)

    assert len(set(ids)) == 500
    for item_id in ids:
        parsed = uuid.UUID(item_id)
        assert parsed.hex == item_id
        assert parsed.version == 7
        assert parsed.variant == uuid.RFC_4122
        assert int(item_id[:12], 16) == 1_772_366_400_123
        assert item_id[13:16] == "800"  # the millisecond's fraction: half of it


def test_later_stamps_get_ids_that_sort_after_earlier_ones() -> None:
    earlier = time_ordered_ids(50, STAMP)
    later = time_ordered_ids(50, STAMP + 1)  # a 4096th of a millisecond later

    assert max(earlier) < min(later)


def test_stamps_tell_the_time_and_never_repeat_or_go_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Many feeds are read within one millisecond; each feed's ids must still land after the
    last feed's (a feed's new rows together at the end of the indexes), even were the clock
    set back."""
    before = time.time_ns() // 1_000_000
    stamps = [id_stamp() for _ in range(1000)]
    after = time.time_ns() // 1_000_000

    assert stamps == sorted(set(stamps))
    assert before <= stamps[0] >> 12
    assert stamps[-1] >> 12 <= after + 1  # the stamps may run ahead a 4096th at a time
    monkeypatch.setattr(time, "time_ns", lambda: (after - 3_600_000) * 1_000_000)
    set_back = [id_stamp(), id_stamp()]
    assert stamps[-1] < set_back[0] < set_back[1]


def test_item_records_number_every_item_with_its_own_id() -> None:
    items = [
        ParsedItem(
            guid=f"g{n}", link=None, title=None, content_html=None, pub_date=None, raw_pub_date=None
        )
        for n in range(3)
    ]

    records, undated = item_records(items, FETCHED)

    assert [record.guid for record in records] == ["g0", "g1", "g2"]
    assert len({record.id for record in records}) == 3
    assert all(record.pub_date == "2026-03-01T12:00:00Z" for record in records)
    assert undated == []


def test_a_later_feeds_items_sort_after_an_earlier_ones_fetched_the_same_second() -> None:
    """Both fetched within one second (stored timestamps have whole seconds): the later
    feed's rows still go after the earlier feed's, not among them."""
    items = [
        ParsedItem(
            guid=f"g{n}", link=None, title=None, content_html=None, pub_date=None, raw_pub_date=None
        )
        for n in range(20)
    ]

    earlier, _ = item_records(items, FETCHED)
    later, _ = item_records(items, FETCHED)

    assert max(record.id for record in earlier) < min(record.id for record in later)
