"""Turn parsed items into the records the store writes (pure).

Item ids are random: the image tasks of an item are inserted only if the item row with *this*
id exists, which is exactly "the item was new in this batch" (``INSERT OR IGNORE`` keeps the
first row of a GUID). An item whose date cannot be read is dated at the fetch time (seed
section 5); the caller logs those.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterable
from datetime import UTC, datetime

from .html import image_sources
from .models import ItemRecord, ParsedItem
from .timestamps import format_timestamp

DOWNLOADABLE_SCHEMES = ("http://", "https://")
MAX_IMAGES_PER_ITEM = 200
"""Image tasks made per item: the first 200 downloadable ``<img>`` in document order. Feeds
are untrusted, and one item listing thousands of images must not queue thousands of downloads
(and objects); images past the cap keep their original URL when the item is rendered."""
ID_BYTES = 16
"""Random bytes per item id (rendered as 32 hex digits, as many as a UUID4 has)."""
_IMG_TAG_RE = re.compile(r"<img", re.IGNORECASE)
"""Cheaper than lowercasing a whole body to look for an image."""


def item_records(
    items: Iterable[ParsedItem], fetched_at: datetime
) -> tuple[list[ItemRecord], list[ParsedItem]]:
    """Records for every item, and the items whose pub_date fell back to the fetch time."""
    items = tuple(items)
    fetched = format_timestamp(fetched_at)
    ids = random_ids(len(items))
    records: list[ItemRecord] = []
    undated: list[ParsedItem] = []
    for item, item_id in zip(items, ids, strict=True):
        if item.pub_date is None:
            pub_date = fetched
            if item.raw_pub_date:
                undated.append(item)
        else:
            pub_date = utc_timestamp(item.pub_date)
        records.append(
            ItemRecord(
                id=item_id,
                guid=item.guid,
                link=item.link,
                title=item.title,
                pub_date=pub_date,
                content_html=item.content_html,
                image_urls=downloadable_images(item.content_html),
            )
        )
    return records, undated


def random_ids(count: int) -> list[str]:
    """``count`` random 32-hex-digit ids from one ``urandom`` call (one syscall per feed)."""
    digits = os.urandom(ID_BYTES * count).hex()
    step = 2 * ID_BYTES
    return [digits[start : start + step] for start in range(0, len(digits), step)]


def utc_timestamp(moment: datetime) -> str:
    """:func:`format_timestamp` for the aware UTC datetimes the date parser returns, faster.

    ``isoformat`` skips strftime's locale machinery; anything else (another zone, a year
    before 1000, which strftime does not pad) goes through ``format_timestamp`` itself.
    """
    if moment.tzinfo is UTC and moment.year >= 1000:
        return moment.isoformat(timespec="seconds")[:19] + "Z"
    return format_timestamp(moment)


def downloadable_images(content_html: str | None) -> tuple[str, ...]:
    """Every ``<img src>`` in document order that can be fetched over HTTP(S), at most
    :data:`MAX_IMAGES_PER_ITEM` of them."""
    if not content_html or _IMG_TAG_RE.search(content_html) is None:
        return ()
    downloadable = (
        url for url in image_sources(content_html) if url.lower().startswith(DOWNLOADABLE_SCHEMES)
    )
    return tuple(itertools.islice(downloadable, MAX_IMAGES_PER_ITEM))
