"""Turn parsed items into the records the store writes (pure).

Item ids are UUIDv7s (32 hex digits): random, so the image tasks of an item are inserted only
if the item row with *this* id exists, which is exactly "the item was new in this batch"
(``INSERT OR IGNORE`` keeps the first row of a GUID); and led by the fetch time, so new rows
land at the end of the ``items`` and ``image_tasks`` primary keys instead of on random pages
of an ever larger B-tree (about 3x less CPU per stored feed at 60k items, and the gap grows).
An item whose date cannot be read is dated at the fetch time (seed section 5); the caller
logs those.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterable
from datetime import datetime
from typing import TypeGuard

from .html_images import image_sources, image_sources_of_items
from .models import ItemRecord, ParsedItem
from .parse_common import MAX_FIELD_CHARS
from .timestamps import format_timestamp

DOWNLOADABLE_SCHEMES = ("http://", "https://")
MAX_IMAGES_PER_ITEM = 200
"""Image tasks made per item: the first 200 downloadable ``<img>`` in document order. Feeds
are untrusted, and one item listing thousands of images must not queue thousands of downloads
(and objects); images past the cap keep their original URL when the item is rendered."""
ID_RANDOM_BYTES = 10
"""Random bytes drawn per item id; a UUIDv7 keeps 74 of their bits."""
_IMG_TAG_RE = re.compile(r"<img", re.IGNORECASE)
"""Cheaper than lowercasing a whole body to look for an image."""


def item_records(
    items: Iterable[ParsedItem], fetched_at: datetime
) -> tuple[list[ItemRecord], list[ParsedItem]]:
    """Records for every item, and the items whose pub_date fell back to the fetch time."""
    items = tuple(items)
    fetched = format_timestamp(fetched_at)
    ids = time_ordered_ids(len(items), fetched_at)
    images = _images_of_items(items)
    records: list[ItemRecord] = []
    undated: list[ParsedItem] = []
    for item, item_id, image_urls in zip(items, ids, images, strict=True):
        if item.pub_date is None:
            pub_date = fetched
            if item.raw_pub_date:
                undated.append(item)
        else:
            pub_date = format_timestamp(item.pub_date)
        records.append(  # positional (faster): id, guid, link, title, pub_date, html, images,
            ItemRecord(  # content key, earlier GUID
                item_id,
                item.guid,
                item.link,
                item.title,
                pub_date,
                item.content_html,
                image_urls,
                None,
                item.earlier_guid,
            )
        )
    return records, undated


def time_ordered_ids(count: int, moment: datetime) -> list[str]:
    """``count`` UUIDv7s (RFC 9562) as 32 hex digits, from one ``urandom`` call per feed.

    48 bits of Unix milliseconds, the version digit 7, 12 random bits, the variant's two bits
    and 62 more random bits.
    """
    prefix = f"{int(moment.timestamp() * 1000) & 0xFFFF_FFFF_FFFF:012x}7"
    digits = os.urandom(ID_RANDOM_BYTES * count).hex()
    step = 2 * ID_RANDOM_BYTES
    return [
        f"{prefix}{digits[start : start + 3]}{_VARIANT[digits[start + 3]]}"
        f"{digits[start + 4 : start + 19]}"
        for start in range(0, len(digits), step)
    ]


_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}
"""A random hex digit to one whose two high bits are the RFC 9562 variant ``10``."""


def downloadable_images(content_html: str | None) -> tuple[str, ...]:
    """Every ``<img src>`` in document order that can be fetched over HTTP(S), at most
    :data:`MAX_IMAGES_PER_ITEM` of them."""
    if not _may_hold_images(content_html):
        return ()
    return _downloadable(image_sources(content_html))


def _images_of_items(items: tuple[ParsedItem, ...]) -> list[tuple[str, ...]]:
    """:func:`downloadable_images` of every item, the HTML of all of them read at once."""
    with_images = [index for index, item in enumerate(items) if _may_hold_images(item.content_html)]
    images: list[tuple[str, ...]] = [()] * len(items)
    htmls = [items[index].content_html or "" for index in with_images]
    for index, sources in zip(with_images, image_sources_of_items(htmls), strict=True):
        images[index] = _downloadable(sources)
    return images


def _may_hold_images(content_html: str | None) -> TypeGuard[str]:
    return content_html is not None and _IMG_TAG_RE.search(content_html) is not None


def _downloadable(sources: list[str]) -> tuple[str, ...]:
    downloadable = (
        url
        for url in sources
        if url.lower().startswith(DOWNLOADABLE_SCHEMES) and len(url) <= MAX_FIELD_CHARS
    )
    return tuple(itertools.islice(downloadable, MAX_IMAGES_PER_ITEM))
