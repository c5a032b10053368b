"""Rules every reader of the parse stage shares: GUID chain, content choice, dates, URL bases.

The XML fast path, the feedparser fallback and the JSON Feed reader each extract the raw
values of an entry into a :class:`RawEntry`; :func:`finish_item` applies the seed's rules to it,
so the three paths cannot drift apart.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import NamedTuple, TypeGuard, TypeVar

from .dates import parse_date
from .html import is_absolute_url, resolve_url
from .html_bases import absolutize_scoped
from .models import ParsedItem
from .safe_text import clipped_int
from .text_repair import readable

MAX_ITEMS_PER_FEED = 10_000
"""Items read from one document, from its newer end (:func:`newest_end`). Feeds are untrusted:
a 20 MiB body of tiny items is 800k of them (about 1 GB of objects and one enormous batch),
while real feeds, podcasts included, stay well under this."""

Entry = TypeVar("Entry")


def newest_end(
    entries: list[Entry], date_text: Callable[[Entry], str | None]
) -> tuple[list[Entry], int]:
    """At most :data:`MAX_ITEMS_PER_FEED` of ``entries`` and how many were left out: the last
    ones when the last entry is dated later than the first (an oldest-first feed, whose new
    items come at its end), else the first ones. Only the two ends' dates are read."""
    dropped = len(entries) - MAX_ITEMS_PER_FEED
    if dropped <= 0:
        return entries, 0
    first, last = (_date_or_none(date_text(entry)) for entry in (entries[0], entries[-1]))
    if first is not None and last is not None and last > first:
        return entries[dropped:], dropped
    return entries[:MAX_ITEMS_PER_FEED], dropped


def _date_or_none(text: str | None) -> datetime | None:
    return parse_date(text) if text else None


SYNDICATION_PERIOD_MINUTES = {
    "hourly": 60,
    "daily": 24 * 60,
    "weekly": 7 * 24 * 60,
    "monthly": 30 * 24 * 60,
    "yearly": 365 * 24 * 60,
}
"""``sy:updatePeriod`` values (RSS 1.0 syndication module); a month is taken as 30 days."""


class RawEntry(NamedTuple):
    """An entry's values as the document gives them, before the seed's rules are applied.

    A NamedTuple rather than a frozen dataclass: one is built per item on the hot path.
    """

    title: str | None = None
    link: str | None = None
    guid: str | None = None
    content: str | None = None
    """``content:encoded`` (RSS) or ``content`` (Atom): preferred when present and non-blank."""
    description: str | None = None
    """``description`` (RSS) or ``summary`` (Atom): used when there is no content."""
    dates: tuple[str, ...] = ()
    """Raw date texts in order of preference (pubDate, dc:date / published, updated)."""
    base: str = ""
    """Base URL for the entry's link and HTML (xml:base chain, else feed link, else fetch URL)."""
    content_base: str | None = None
    """Base for ``content`` when the content element has its own xml:base."""
    description_base: str | None = None
    """Base for ``description`` when that element has its own xml:base."""
    enclosure: str | None = None
    """The first enclosure's URL, read only for an item with no GUID, link, title, date or
    text (a podcast episode of an enclosure alone): the GUID fallback's last resort."""


def finish_item(raw: RawEntry) -> ParsedItem:
    """Apply the GUID chain, the content choice, URL absolutizing and date parsing."""
    return finish_values(*raw)


def finish_values(
    title: str | None,
    link: str | None,
    guid: str | None,
    content: str | None,
    description: str | None,
    dates: tuple[str, ...],
    base: str,
    content_base: str | None,
    description_base: str | None,
    enclosure: str | None = None,
) -> ParsedItem:
    """:func:`finish_item` on the values of a :class:`RawEntry`, for the XML fast path (no
    tuple built per item). Written inline (no helper calls for blank checks or absolute
    links): it runs once per item.

    Title, link and GUID go through :func:`.text_repair.readable` (only when not ASCII:
    ``isascii`` is O(1)) before the GUID fallback hashes them, so every path stores the same
    text for them whatever the fallback parser repaired on its own. ``content`` and
    ``description`` come repaired by the reader (:mod:`.parse_text` checks them on the bytes
    lxml holds, far cheaper than encoding a long text here; the fallback repairs its own).
    """
    repaired = False
    title = written_title = (title.strip() or None) if title else None
    if title is not None and not title.isascii():
        title = readable(title)
        repaired = title is not written_title
    link = written_link = (link.strip() or None) if link else None
    if link is not None:
        if not link.isascii():
            link = readable(link)
            repaired = repaired or link is not written_link
        if not link.startswith(("http://", "https://")):
            link = resolve_url(link, base)
    pub_date, raw_pub_date = choose_date(dates)
    guid = written_guid = (guid.strip() or None) if guid else None
    if guid is not None and not guid.isascii():
        guid = readable(guid)
    html: str | None
    html_base: str | None
    if content and not content.isspace():
        html, html_base = content, content_base
    elif description and not description.isspace():
        html, html_base = description, description_base
    else:
        html = html_base = None
    earlier = None
    if guid is None:
        guid = link or fallback_guid(title, raw_pub_date, html, enclosure)
        if link is None and raw_pub_date is not None and raw_pub_date != raw_pub_date.strip():
            earlier = fallback_guid(title, raw_pub_date, html, date_trimmed=False)  # until now
        elif repaired:
            earlier = _unrepaired_guid(written_link, written_title, raw_pub_date, html, base)
    elif written_guid is not guid:
        earlier = written_guid
    if len(guid) > MAX_FIELD_CHARS or (title and len(title) > MAX_FIELD_CHARS):
        guid, title = bounded(guid, title)
    if link is not None and len(link) > MAX_FIELD_CHARS:
        link = None
    if earlier == guid or (earlier is not None and len(earlier) > MAX_FIELD_CHARS):
        earlier = None
    content_html = None if html is None else absolutize_scoped(html, html_base or base)
    return ParsedItem(guid, link, title, content_html, pub_date, raw_pub_date, earlier)


def _unrepaired_guid(
    link: str | None, title: str | None, raw_pub_date: str | None, html: str | None, base: str
) -> str:
    """The fallback GUID of an item as versions before :mod:`.text_repair` made it, from the
    link and title as written."""
    if link is not None:
        return link if link.startswith(("http://", "https://")) else resolve_url(link, base)
    return fallback_guid(title, raw_pub_date, html)


MAX_FIELD_CHARS = 250_000
"""The longest GUID, title, link or image URL stored (1 MB of UTF-8 at most). D1 refuses a
value of about 2 MB and a feed's items travel in one batch, so one item with a megabytes-long
title failed its whole feed on the cloud shape (stored on SQLite): every shape now stores the
same bounded values. The raw XML backup keeps the whole text. Far above any real value, so a
GUID stored whole before keeps its identity."""


def bounded(guid: str, title: str | None) -> tuple[str, str | None]:
    """A GUID too long to store becomes ``sha256:`` and its digest (unique all the same); a
    title is cut, with an ellipsis."""
    if len(guid) > MAX_FIELD_CHARS:
        guid = "sha256:" + hashlib.sha256(guid.encode("utf-8", "surrogatepass")).hexdigest()
    return guid, cut_title(title)


def cut_title(title: str | None) -> str | None:
    """A title within :data:`MAX_FIELD_CHARS`, cut with an ellipsis when longer."""
    if title is not None and len(title) > MAX_FIELD_CHARS:
        return title[: MAX_FIELD_CHARS - 1] + "…"
    return title


HTML_TYPES = ("text/html", "application/xhtml+xml")
Link = TypeVar("Link")


def choose_link(
    links: Iterable[Link],
    attribute: Callable[[Link, str], str | None],
    text: Callable[[Link], str] | None = None,
) -> Link | None:
    """Which of an entry's links is its page: the first alternate of an HTML type (no rel means
    alternate, no type means HTML), else the first alternate, else the first link; links
    without an href are skipped. ``attribute(link, name)`` reads a link's attribute, so the
    fast path's elements and feedparser's dicts are chosen from by the same rule (feedparser
    itself takes an HTML alternate too). ``text(link)``, when given, is the href of a link
    without one (feedparser's dicts have it in their href already); only such links pay for
    the call."""
    first: Link | None = None
    first_alternate: Link | None = None
    for link in links:
        href = attribute(link, "href")
        if href is None and text is not None:
            href = text(link)
        if href is None or not href.strip():
            continue
        rel = attribute(link, "rel")
        if rel is None or rel.strip() == "alternate":
            kind = attribute(link, "type")
            if kind is None or kind.split(";")[0].strip().lower() in HTML_TYPES:
                return link
            if first_alternate is None:
                first_alternate = link
        elif first is None:
            first = link
    return first_alternate if first_alternate is not None else first


def permalink(guid: str | None, is_permalink: bool) -> str | None:
    """An RSS ``<guid>`` as the item's link when it has none: RSS 2.0 makes a guid a permalink
    unless ``isPermaLink`` says otherwise, and some feeds give their items no other URL. Only
    an absolute web URL is taken (a guid is often a tag: or urn: name despite the default)."""
    if guid is None or not is_permalink:
        return None
    text = guid.strip()
    return text if text[:8].lower().startswith(("http://", "https://")) else None


def has_text(value: str | None) -> TypeGuard[str]:
    """Not None and not blank; ``isspace`` stops at the first visible character, while
    ``strip`` would copy a whole content body to find out."""
    return value is not None and value != "" and not value.isspace()


def fallback_guid(
    title: str | None,
    raw_pub_date: str | None,
    text: str | None,
    enclosure: str | None = None,
    *,
    date_trimmed: bool = True,
) -> str:
    """MD5 hex of ``title + pubDate`` (UTF-8): the last link of the seed's GUID chain.

    ``title`` is the trimmed title the item is stored with; ``raw_pub_date`` is the date text
    as it appears in the feed, trimmed (``date_trimmed=False``: as written, what versions
    before made of it). Either is the empty string when absent. Trimmed, because feedparser
    trims what it reads: a body cut off or broken, read by the fallback parser, must give an
    item the GUID the fast path gave it (``<pubDate>`` on a line of its own was stored twice).

    An item with neither (RSS allows an item of a description alone) would get md5("") like
    every other such item, and a feed of them would keep only its first: then the item's
    ``text`` (the content or description it is stored with, before URLs are made absolute,
    trimmed) is hashed instead, and without text its ``enclosure`` URL (podcast episodes of
    an enclosure alone). Only GUIDs that were md5("") change.
    """
    date = raw_pub_date or ""
    key = (title or "") + (date.strip() if date_trimmed else date)
    if not key and text:
        key = text.strip()
    if not key and enclosure:
        key = enclosure.strip()
    return hashlib.md5(key.encode("utf-8")).hexdigest()


def choose_date(texts: tuple[str, ...]) -> tuple[datetime | None, str | None]:
    """(first readable date among ``texts``, first raw text), blank texts counting as absent.

    The raw text is always the preferred element's (pubDate / published), as it appears in the
    feed, even when a later one (dc:date / updated) is what could be read: the GUID fallback
    hashes it, and a GUID must not change when the date parser improves.
    """
    if len(texts) == 1:  # the usual case, without the loop
        text = texts[0]
        return (parse_date(text), text) if text.strip() else (None, None)
    present = [text for text in texts if text.strip()]
    if not present:
        return None, None
    for text in present:
        moment = parse_date(text)
        if moment is not None:
            return moment, present[0]
    return None, present[0]


def ttl_minutes(ttl: str | None, period: str | None, frequency: str | None) -> int | None:
    """RSS ``<ttl>`` if it is a positive integer, else ``sy:updatePeriod``/``updateFrequency``."""
    minutes = _count(ttl)
    if minutes:
        return minutes
    if period is None:
        return None
    period_minutes = SYNDICATION_PERIOD_MINUTES.get(period.strip().lower())
    if period_minutes is None:
        return None
    times = 1
    if frequency is not None and frequency.strip():
        times = _count(frequency) or 0
        if times < 1:
            return None
    return max(1, round(period_minutes / times))


MAX_COUNT = 10**9
"""Where a count a feed writes is clipped (int() refuses more than 4,300 digits)."""


def _count(text: str | None) -> int | None:
    """A whole number written in decimal digits (any script's, as int() reads them), or None."""
    digits = "" if text is None else text.strip()
    return clipped_int(digits, MAX_COUNT) if digits.isdecimal() else None


def feed_base(feed_link: str | None, base_url: str) -> tuple[str | None, str]:
    """The feed link made absolute, and the default base for relative URLs in the feed."""
    link_text = _blank_to_none(feed_link)
    if link_text is None:
        return None, base_url
    link = resolve_url(link_text, base_url)
    return link, link if is_absolute_url(link) else base_url


def channel_title(text: str | None) -> str | None:
    """The feed's own title, stripped and repaired as an item's is
    (:func:`.text_repair.readable`), on every path alike."""
    stripped = text.strip() if text else None
    return cut_title(readable(stripped)) if stripped else None


def _blank_to_none(text: str | None) -> str | None:
    if text is None:
        return None
    stripped = text.strip()
    return stripped or None
