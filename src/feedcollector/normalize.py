"""Turn parsed items into the records the store writes (pure but for the ids).

Item ids are UUIDv7s (32 hex digits): random, so the image tasks of an item are inserted only
if the item row with *this* id exists, which is exactly "the item was new in this batch"
(``INSERT OR IGNORE`` keeps the first row of a GUID); and led by the time they were made, to
a 4096th of a millisecond and never going back within a process (:func:`id_stamp`), so a
feed's new rows land together at the end of the ``items`` and ``image_tasks`` primary keys
and of the ``created_at`` indexes instead of on random pages of an ever larger B-tree (about
3x less CPU per stored feed at 60k items, and the gap grows). Led by the fetch time's whole
second, as they were, the feeds of one second shared a prefix and each item of a feed took a
page of its own in two indexes: the first cycle over the real-world corpus spent 40% more on
its SQLite batches. An item whose date cannot be read is dated at the fetch time (seed section
5); the caller logs those.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import time
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
ID_RANDOM_BYTES = 8
"""Random bytes drawn per item id; a UUIDv7 keeps 62 of their bits."""
_id_bits = random.Random()
"""The ids' random bits: seeded from the system's random source, reseeded in a forked child.
Not ``os.urandom``: its system call cost 30 us a feed in a cycle (2% of a first one), and
an id is a key, not a secret. Not the shared ``random`` module either: a program that seeds it
would repeat ids, and a repeated id is a row ignored."""
os.register_at_fork(after_in_child=_id_bits.seed)
_IMG_TAG_RE = re.compile(r"<im(?:g|age)", re.IGNORECASE)
"""Cheaper than lowercasing a whole body to look for an image. ``<image>`` is one: HTML5
parsers read it as ``<img>``, and an item whose only image was one had none archived."""


def item_records(
    items: Iterable[ParsedItem], fetched_at: datetime
) -> tuple[list[ItemRecord], list[ParsedItem]]:
    """Records for every item, and the items whose pub_date fell back to the fetch time."""
    items = tuple(items)
    fetched = format_timestamp(fetched_at)
    ids = time_ordered_ids(len(items), id_stamp())
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


_last_stamp = 0


def id_stamp() -> int:
    """Now as 60 bits for an id: Unix milliseconds, then the millisecond's fraction in 12 bits
    (RFC 9562's method 3), always above the last stamp of this process (a clock set back
    leaves the ids in order). Two threads may draw the same one: the random bits tell their
    ids apart."""
    global _last_stamp
    nanoseconds = time.time_ns()
    stamp = (nanoseconds // 1_000_000) << 12 | (nanoseconds % 1_000_000) * 4096 // 1_000_000
    _last_stamp = stamp = max(stamp, _last_stamp + 1)
    return stamp


def time_ordered_ids(count: int, stamp: int) -> list[str]:
    """``count`` UUIDv7s (RFC 9562) as 32 hex digits, led by ``stamp`` (:func:`id_stamp`).

    48 bits of Unix milliseconds, the version digit 7, 12 bits of the millisecond's fraction,
    the variant's two bits and 62 random bits.
    """
    prefix = f"{stamp >> 12 & 0xFFFF_FFFF_FFFF:012x}7{stamp & 0xFFF:03x}"
    digits = _id_bits.randbytes(ID_RANDOM_BYTES * count).hex()
    step = 2 * ID_RANDOM_BYTES
    return [
        f"{prefix}{_VARIANT[digits[start]]}{digits[start + 1 : start + step]}"
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
