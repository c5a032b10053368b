"""One feed body read: decode -> parse -> normalize, with what the reading had to repair,
drop or guess logged under the feed's URL. The path of every fetch (:mod:`.pipeline`), of
every replayed backup (:mod:`.restore`) and of every candidate a subscription tries
(:mod:`.discover`)."""

from __future__ import annotations

import logging
from datetime import datetime

from .decode import decode_feed
from .models import ItemRecord, ParsedFeed
from .normalize import MAX_IMAGES_PER_ITEM, item_records
from .parse import parse_feed
from .parse_common import MAX_ITEMS_PER_FEED
from .safe_text import QUOTED_CHARS, one_line

log = logging.getLogger("feedcollector")

UNDATED_LOGGED = 20
"""Items per body whose unreadable date gets its own log line; a count says how many more
(a feed in a date format nobody reads would log every item on every change)."""


def read_feed_body(
    body: bytes,
    content_type: str | None,
    document_url: str,
    feed_url: str,
    fetched_at: datetime,
    *,
    warn: bool = True,
    lenient: bool = True,
) -> tuple[ParsedFeed, list[ItemRecord]]:
    """Decode, parse and normalize one body: the path of every fetch and of every replayed
    backup (:mod:`.restore`). Raises ParseError (LenientParseNeeded when not ``lenient``, see
    :func:`.parse.parse_feed`). What the reading had to repair, drop or guess is logged with
    the feed's URL unless ``warn`` is off (a replay or a probe repeats no warnings): bytes no
    encoding could read, items past the cap, and an unreadable pubDate, dated ``fetched_at``
    (seed section 5). A body cut off inside an item is said by the feed's own line, as the
    failure it counts (:attr:`.report.FeedOutcome.cut_off`)."""
    decoded = decode_feed(body, content_type)
    parsed = parse_feed(decoded.data, document_url, lenient=lenient)
    records, undated = item_records(parsed.items, fetched_at)
    if not warn:
        return parsed, records
    if decoded.replaced:
        log.warning(
            "decode: feed %s read as %s with %d undecodable byte sequence(s) replaced by U+FFFD "
            "(no encoding the feed names or its bytes suggest reads them all; its backup keeps "
            "the original bytes)",
            feed_url,
            decoded.encoding,
            decoded.replaced,
        )
    if decoded.stray_windows_1252:
        log.info(
            "decode: feed %s is UTF-8 with %d byte sequence(s) of windows-1252 text mixed in, "
            "read as such (its other text is Western; its backup keeps the original bytes)",
            feed_url,
            decoded.stray_windows_1252,
        )
    if parsed.items_dropped:
        log.warning(
            "parse: feed %s lists more than %d items; the %d at its newer end are stored (its "
            "last ones when they are dated later than its first), %d more were not read",
            feed_url,
            MAX_ITEMS_PER_FEED,
            MAX_ITEMS_PER_FEED,
            parsed.items_dropped,
        )
    for item in undated[:UNDATED_LOGGED]:
        log.warning(
            "parse: unreadable pubDate %r in feed %s, item %r: stored with the fetch time",
            one_line(item.raw_pub_date or "", QUOTED_CHARS),
            feed_url,
            one_line(item.title or "", QUOTED_CHARS),
        )
    if len(undated) > UNDATED_LOGGED:
        log.warning(
            "parse: %d more items of feed %s have unreadable dates (not listed), stored with "
            "the fetch time",
            len(undated) - UNDATED_LOGGED,
            feed_url,
        )
    for record in records:
        if len(record.image_urls) == MAX_IMAGES_PER_ITEM:
            log.info(
                "parse: item %r of feed %s has %d images or more: the first %d get image "
                "tasks when the item is new, the others keep their original URLs",
                one_line(record.title or record.guid, QUOTED_CHARS),
                feed_url,
                MAX_IMAGES_PER_ITEM,
                MAX_IMAGES_PER_ITEM,
            )
    return parsed, records
