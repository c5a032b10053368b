"""Turn parsed items into the records the store writes (pure).

Item ids are random: the image tasks of an item are inserted only if the item row with *this*
id exists, which is exactly "the item was new in this batch" (``INSERT OR IGNORE`` keeps the
first row of a GUID). An item whose date cannot be read is dated at the fetch time (seed
section 5); the caller logs those.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime

from .html import image_sources
from .models import ItemRecord, ParsedItem
from .timestamps import format_timestamp

DOWNLOADABLE_SCHEMES = ("http://", "https://")


def item_records(
    items: Iterable[ParsedItem], fetched_at: datetime
) -> tuple[list[ItemRecord], list[ParsedItem]]:
    """Records for every item, and the items whose pub_date fell back to the fetch time."""
    fetched = format_timestamp(fetched_at)
    records: list[ItemRecord] = []
    undated: list[ParsedItem] = []
    for item in items:
        if item.pub_date is None:
            pub_date = fetched
            if item.raw_pub_date:
                undated.append(item)
        else:
            pub_date = format_timestamp(item.pub_date)
        records.append(
            ItemRecord(
                id=uuid.uuid4().hex,
                guid=item.guid,
                link=item.link,
                title=item.title,
                pub_date=pub_date,
                content_html=item.content_html,
                image_urls=downloadable_images(item.content_html),
            )
        )
    return records, undated


def downloadable_images(content_html: str | None) -> tuple[str, ...]:
    """Every ``<img src>`` in document order that can be fetched over HTTP(S)."""
    if not content_html or "<img" not in content_html.lower():
        return ()
    return tuple(
        url for url in image_sources(content_html) if url.lower().startswith(DOWNLOADABLE_SCHEMES)
    )
