"""Item records: ids that are UUIDv7s led by the fetch time."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from feedcollector.models import ParsedItem
from feedcollector.normalize import item_records, time_ordered_ids

FETCHED = datetime(2026, 3, 1, 12, 0, 0, 123000, tzinfo=UTC)


def test_item_ids_are_distinct_uuid7s_carrying_the_fetch_time() -> None:
    ids = time_ordered_ids(500, FETCHED)

    assert len(set(ids)) == 500
    for item_id in ids:
        parsed = uuid.UUID(item_id)
        assert parsed.hex == item_id
        assert parsed.version == 7
        assert parsed.variant == uuid.RFC_4122
        assert int(item_id[:12], 16) == int(FETCHED.timestamp() * 1000)


def test_later_fetches_get_ids_that_sort_after_earlier_ones() -> None:
    earlier = time_ordered_ids(50, FETCHED)
    later = time_ordered_ids(50, FETCHED + timedelta(milliseconds=1))

    assert max(earlier) < min(later)


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
