"""When strict XML parsing fails, even after :func:`.parse_repair.repair_xml`: feedparser.

:func:`parse_with_feedparser` reads a document leniently and maps feedparser's result through
the same rules as the fast path, so that a feed broken one day and well-formed the next stores
its items once. An entry's ``id`` (Atom) or ``<guid>`` (RSS) is taken as written, as the fast
path takes it: feedparser is told not to resolve it as a URL (:data:`_NOT_RESOLVED`), and its
loose parser's escaping is undone (:func:`_written_id`). Its limits: entries inside badly
broken markup may be lost (feedparser's own recovery decides).
"""

from __future__ import annotations

import html
import re
import xml.sax
import xml.sax.saxutils
from typing import Any

import feedparser

from .errors import ParseError
from .html import resolve_url
from .models import ParsedFeed, ParsedItem
from .parse_common import (
    RawEntry,
    channel_title,
    choose_link,
    feed_base,
    finish_item,
    newest_end,
    permalink,
    ttl_minutes,
)
from .parse_fallback_hooks import (
    BASE_KEY,
    FEED_LINK_KEY,
    PERMALINK_KEY,
    RECORD_KEY,
    corrected_parsers,
)
from .parse_text import text_html
from .text_repair import readable

FEEDPARSER_HEADERS = {"content-type": "application/xml; charset=utf-8"}
"""The decode stage hands over UTF-8: tell feedparser so, whatever the declaration says."""

_REL_ENCLOSURE_RE = re.compile(rb"""\srel\s*=\s*["']\s*enclosure""", re.I)
"""A ``<link rel="enclosure">`` (Atom's, or an ``atom:link`` in RSS); ``<enclosure>`` has no rel."""

_VOID_END_RE = re.compile(
    r"(<(area|base|br|col|embed|hr|img|input|link|meta|param|source|track|wbr)\b[^<>]*)></\2>",
    re.I,
)
"""A void element of markup (XHTML content, an unescaped description) as feedparser writes it
again: ``<br></br>``, which HTML reads as two line breaks; the fast path writes ``<br/>``."""


def parse_with_feedparser(data: bytes, base_url: str) -> ParsedFeed:
    """Read a broken document leniently; ParseError if feedparser finds no feed in it either."""
    try:
        with corrected_parsers():
            result = feedparser.parse(
                data,
                sanitize_html=False,
                resolve_relative_uris=False,
                response_headers=FEEDPARSER_HEADERS,
            )
    except Exception as exc:  # the library boundary: anything it raises means "unreadable"
        raise ParseError(f"parse: lenient parser failed: {exc!r}") from exc
    loose = isinstance(_key(result, "bozo_exception"), xml.sax.SAXException)
    version = _string(_key(result, "version")) or ""
    entries = [entry for entry in _key(result, "entries") or [] if isinstance(entry, dict)]
    if not version and not entries:
        reason = _key(result, "bozo_exception")
        raise ParseError(f"parse: not a feed ({reason or 'no channel or feed element'})")
    feed = _key(result, "feed") or {}
    format_name = _format_name(version)
    feed_link, default_base = feed_base(_feed_link(feed, format_name), base_url)
    linked_enclosures = format_name == "atom" or _REL_ENCLOSURE_RE.search(data) is not None
    kept, dropped = newest_end(entries, _date_text)
    return ParsedFeed(
        title=channel_title(_title(feed)),
        link=feed_link,
        items=tuple(
            _entry(
                entry,
                default_base,
                base_url,
                linked_enclosures=linked_enclosures,
                format_name=format_name,
                loose=loose,
            )
            for entry in kept
        ),
        format=format_name + "-fallback",
        items_dropped=dropped,
        ttl_minutes=ttl_minutes(
            _string(_key(feed, "ttl")),
            _string(_key(feed, "sy_updateperiod")),
            _string(_key(feed, "sy_updatefrequency")),
        ),
    )


def _entry(
    entry: dict[str, Any],
    default_base: str,
    base_url: str,
    *,
    linked_enclosures: bool,
    format_name: str,
    loose: bool,
) -> ParsedItem:
    """One entry, with the GUID and link the fast path would give the same item: a feed that
    is well-formed one day and broken the next must not store its items again under other
    GUIDs. So an RSS ``<enclosure>`` is no link (feedparser lists it among the links beside
    ``<link rel="enclosure">``, which the fast path does read: ``linked_enclosures`` says the
    document has such links), an RSS 1.0 item's ``rdf:about`` is no GUID (feedparser's
    ``id``; the fast path reads ``<guid>``, then the link), an entry's GUID, link and dates
    are its first with text (:mod:`.parse_fallback_hooks`), and an Atom ``<id>`` is no link
    (feedparser's ``guidislink``: only an RSS ``<guid>`` is a permalink). ``loose``: read by
    feedparser's loose parser, which leaves the id escaped (:func:`_written_id`)."""
    contents = _key(entry, "content")
    content_detail = contents[0] if isinstance(contents, list) and contents else None
    summary_detail = _key(entry, "summary_detail")
    content = _detail_html(content_detail)
    summary = _detail_html(summary_detail) or _plain_html(_string(_key(entry, "summary")))
    record = _key(entry, RECORD_KEY) or {}
    atom = format_name == "atom"
    dates = tuple(
        text for names in (ATOM_DATES if atom else RSS_DATES) if (text := _first(record, names))
    )
    guid = _first(record, ("id",) if atom else ("guid",))
    if loose and guid is not None:
        guid = _written_id(guid)
    link = None if atom else _first(record, ("link",))
    if link is None:
        link = _alternate_link(_key(entry, "links"), enclosures=linked_enclosures)
    if link is None and not atom:
        link = permalink(guid, _key(entry, PERMALINK_KEY) is not False)
    entry_base = _string(_key(entry, BASE_KEY))
    return finish_item(
        RawEntry(
            title=_title(entry),
            link=link,
            guid=guid,
            content=content,
            description=summary,
            dates=dates,
            base=base_url if entry_base else default_base,  # joined by feedparser
            content_base=_detail_base(content_detail, base_url),
            description_base=_detail_base(summary_detail, base_url),
            enclosure=_enclosure_url(entry),
        )
    )


def _written_id(escaped: str) -> str:
    """An id as the document means it, from feedparser's loose parser: it gives an element
    without a content type (``id``) with ``&``, ``<``, ``>``, ``"`` and ``'`` escaped, however
    written (``&amp;``, ``&#38;``, in CDATA), where the fast path and feedparser's strict parser
    give the characters: ``?p=1&amp;c=2`` was stored as ``?p=1&c=2`` and ``?p=1&amp;c=2``."""
    if "&" not in escaped:
        return escaped
    return xml.sax.saxutils.unescape(escaped, {"&quot;": '"', "&apos;": "'"})  # &amp; last


RSS_DATES = (
    ("pubdate",),
    ("dc:date",),
    ("published", "issued", "dcterms:issued", "dcterms:created"),
    ("updated", "modified", "dcterms:modified"),
)
"""An RSS item's dates in the fast path's order (:data:`.parse_tags.RSS_ITEM_SLOTS`), each
by the names feedparser gives them (Atom's without a prefix)."""
ATOM_DATES = (
    ("published", "issued", "created", "dcterms:created"),
    ("updated", "modified", "dc:date"),
)
"""An Atom entry's dates in the fast path's order (:data:`.parse_tags.ATOM_ENTRY_SLOTS`)."""


def _first(record: dict[str, tuple[int, str]], names: tuple[str, ...]) -> str | None:
    """The first text an entry has under any of ``names`` (:mod:`.parse_fallback_hooks`)."""
    found = [record[name] for name in names if name in record]
    return min(found)[1] if found else None


def _enclosure_url(entry: object) -> str | None:
    """The URL of the entry's first enclosure (:attr:`.parse_common.RawEntry.enclosure`):
    feedparser keeps an RSS ``<enclosure>`` as a link of ``rel="enclosure"``."""
    links = _key(entry, "links")
    for link in links if isinstance(links, list) else ():
        if _key(link, "rel") == "enclosure":
            return _string(_key(link, "href"))
    return None


def _key(mapping: object, key: str) -> Any:
    """A key of a feedparser result, read with plain dict semantics.

    FeedParserDict.get maps missing keys to others (``updated`` -> ``published``, with a
    deprecation warning); the chain rules must see only what the document said.
    """
    return dict.get(mapping, key) if isinstance(mapping, dict) else None


def _date_text(entry: object) -> str | None:
    return _string(_key(entry, "published")) or _string(_key(entry, "updated"))


def _alternate_link(links: object, *, enclosures: bool) -> str | None:
    """The href :func:`.parse_common.choose_link` picks, as the fast path does (never
    feedparser's guid-as-link); ``enclosures``: whether a ``rel="enclosure"`` link counts
    (an Atom one is a ``<link>``, an RSS ``<enclosure>`` is not)."""
    if not isinstance(links, list):
        return None
    if not enclosures:
        links = [link for link in links if _string(_key(link, "rel")) != "enclosure"]
    chosen = choose_link(links, lambda link, name: _string(_key(link, name)))
    return None if chosen is None else _string(_key(chosen, "href"))


def _detail_html(detail: object) -> str | None:
    """A content or summary as HTML, repaired as the fast path's readers repair it
    (finish_item repairs title, link and GUID). feedparser types a text ``text/plain``
    whether its type was written or not, so a text is taken as HTML where it looks like HTML
    (its own guess for RSS)."""
    value = _string(_key(detail, "value"))
    kind = _key(detail, "type")
    if kind == "text/plain":
        return _plain_html(value)
    if value is not None and kind == "application/xhtml+xml" and "></" in value:
        value = _VOID_END_RE.sub(r"\1/>", value)
    return None if value is None else readable(value)


def _feed_link(feed: object, format_name: str) -> str | None:
    """The feed's link as the fast path reads it: an Atom feed's by the entries' rule
    (feedparser reads an alternate only, not a feed's lone ``rel="self"``), an RSS channel's
    first ``<link>`` with text (feedparser's last, or an ``<atom:link>``)."""
    if format_name == "atom":
        return _alternate_link(_key(feed, "links"), enclosures=True)
    return _string(_key(feed, FEED_LINK_KEY))


def _title(mapping: object) -> str | None:
    """A title as the fast path reads it: one of markup (Atom's ``type="xhtml"``, an RSS title
    with elements in it) by its text (feedparser keeps the markup)."""
    title = _string(_key(mapping, "title"))
    if title and _key(_key(mapping, "title_detail"), "type") == "application/xhtml+xml":
        return html.unescape(_TAG_RE.sub("", title))
    return title


_TAG_RE = re.compile(r"<[^<>]*>")


def _plain_html(value: str | None) -> str | None:
    """A text as HTML (a summary without details is Media RSS's description, text too)."""
    return None if value is None else text_html(readable(value), typed=False)


def _detail_base(detail: object, base_url: str) -> str | None:
    """The xml:base feedparser tracked for a value, if the document declared one."""
    base = _string(_key(detail, "base"))
    return resolve_url(base, base_url) if base else None


def _format_name(version: str) -> str:
    if version.startswith("atom"):
        return "atom"
    if version in ("rss090", "rss10"):
        return "rdf"
    return "rss"


def _string(value: object) -> str | None:
    return value if isinstance(value, str) else None
