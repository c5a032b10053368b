"""When strict XML parsing fails: a repair step for common breakage, then feedparser.

Repair (:func:`repair_xml`) removes the C0 control characters XML forbids (everywhere: the
decode stage leaves them to this step), and fixes, outside CDATA sections, comments and the
DOCTYPE:

- HTML named entities XML does not define (``&nbsp;``, ``&eacute;``) -> numeric references,
  also HTML's legacy names written without ``;`` (``&eacute``, ``&copy``, ``&amp``) where
  HTML reads them in an attribute: not before a letter, digit or ``=`` (``&copy=2``,
  ``&current=1``, ``&region=eu`` are query strings of URLs in link text, left as written);
  unknown names and stray ``&`` -> ``&amp;`` (the text keeps every character);
- numeric references to characters XML forbids (``&#1;``) -> kept as literal text;
- namespace prefixes used but never declared (``<media:content>`` without ``xmlns:media``) ->
  declared on the root element (well-known prefixes get their real URI).

If the repaired bytes still do not parse, :func:`parse_with_feedparser` reads them leniently
and maps feedparser's result through the same rules as the fast path (a document that ends
inside an item first loses that item: :func:`whole_items`; a big one is read in pieces of
whole items: :func:`item_pieces`). An entry's ``id`` (Atom) or ``<guid>`` (RSS) is taken as
written, as the fast path takes it: feedparser is told not to resolve it as a URL
(:data:`_NOT_RESOLVED`), and its loose parser's escaping is undone (:func:`_written_id`). Its
limits: entries inside badly broken markup may be lost (feedparser's own recovery decides).
"""

from __future__ import annotations

import re
import xml.sax
import xml.sax.saxutils
from collections.abc import Iterator
from html.entities import html5
from typing import Any

import feedparser
import feedparser.mixin

from .decode import without_controls
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
from .parse_text import text_html
from .text_repair import readable

PREDEFINED_ENTITIES = frozenset({b"amp", b"lt", b"gt", b"quot", b"apos"})
LEGACY_ENTITIES = {
    name.encode("ascii"): characters for name, characters in html5.items() if name[-1] != ";"
}
"""The entities HTML reads without their ``;`` (``&eacute``, ``&amp``): the 106 legacy ones."""

KNOWN_NAMESPACES = {
    b"content": b"http://purl.org/rss/1.0/modules/content/",
    b"dc": b"http://purl.org/dc/elements/1.1/",
    b"dcterms": b"http://purl.org/dc/terms/",
    b"atom": b"http://www.w3.org/2005/Atom",
    b"media": b"http://search.yahoo.com/mrss/",
    b"itunes": b"http://www.itunes.com/dtds/podcast-1.0.dtd",
    b"sy": b"http://purl.org/rss/1.0/modules/syndication/",
    b"slash": b"http://purl.org/rss/1.0/modules/slash/",
    b"wfw": b"http://wellformedweb.org/CommentAPI/",
    b"rdf": b"http://www.w3.org/1999/02/22-rdf-syntax-ns#",
    b"georss": b"http://www.georss.org/georss",
    b"feedburner": b"http://rssnamespace.org/feedburner/ext/1.0",
    b"googleplay": b"http://www.google.com/schemas/play-podcasts/1.0",
}
UNDECLARED_NAMESPACE = b"urn:feedcollector:undeclared:"
"""URI prefix given to unknown undeclared prefixes, so their elements parse (and are ignored)."""

FEEDPARSER_HEADERS = {"content-type": "application/xml; charset=utf-8"}
"""The decode stage hands over UTF-8: tell feedparser so, whatever the declaration says."""

_NOT_RESOLVED = "id"
"""What feedparser must not resolve as a URL: an entry's Atom ``<id>`` or RSS ``<guid>``,
which it joined to the ``xml:base`` in effect, to one it had left (its base is not reset when
an element without one ends) or to none (``http:///a`` became ``http://a``). The fast path
takes an id as written: reddit's ``t3_42tizy``, after a content of ``xml:base="/.rss"``, came
back ``/t3_42tizy``, and a feed broken one day stored its entries twice. The set is read from
the parser class per parse; feedparser serves only this module."""
feedparser.mixin._FeedParserMixin.can_be_relative_uri = frozenset(
    feedparser.mixin._FeedParserMixin.can_be_relative_uri
) - {_NOT_RESOLVED}

_REPAIR_RE = re.compile(
    rb"<!\[CDATA\[.*?(?:\]\]>|\Z)"
    rb"|<!--.*?(?:-->|\Z)"
    rb"|<!DOCTYPE[^\[>]*(?:\[.*?(?:\]|\Z))?\s*(?:>|\Z)"  # unclosed: to the end, read once
    rb"|&(?:#(?P<dec>[0-9]{1,8});|#[xX](?P<hex>[0-9a-fA-F]{1,8});|(?P<name>[A-Za-z_][\w.-]*);"
    rb"|(?P<bare>[A-Za-z][A-Za-z0-9]*+)(?!=))?",
    re.DOTALL,
)
_ENTITY_DECLARATION_RE = re.compile(rb"<!ENTITY\s+([A-Za-z_][\w.-]*)")
_DECLARED_PREFIX_RE = re.compile(rb"xmlns:([A-Za-z_][\w.-]*)\s*=")
_USED_PREFIX_RE = re.compile(rb"</?([A-Za-z_][\w.-]*):[A-Za-z_]|\s([A-Za-z_][\w.-]*):[\w.-]+\s*=")
_ROOT_TAG_RE = re.compile(
    rb"(?:\s|<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^\[>]*(?:\[.*?\])?\s*>)*+<[A-Za-z_][\w.:-]*",
    re.DOTALL,
)


def repair_xml(data: bytes) -> bytes:
    """``data`` with forbidden controls, undefined entities, stray ampersands and undeclared
    prefixes fixed."""
    data = without_controls(data)
    declared = frozenset(_ENTITY_DECLARATION_RE.findall(data))

    def fix(match: re.Match[bytes]) -> bytes:
        whole = match.group(0)
        if not whole.startswith(b"&"):
            return whole
        if match["dec"] is not None or match["hex"] is not None:
            code = int(match["dec"]) if match["dec"] is not None else int(match["hex"], 16)
            return whole if _is_xml_char(code) else b"&amp;" + whole[1:]
        name = match["name"]
        if name is None:
            characters = LEGACY_ENTITIES.get(match["bare"] or b"")
            return b"&amp;" + whole[1:] if characters is None else _references(characters)
        if name in PREDEFINED_ENTITIES or name in declared:
            return whole
        characters = html5.get(name.decode("ascii", "replace") + ";")
        if characters is None:
            return b"&amp;" + whole[1:]
        return _references(characters)

    repaired = _REPAIR_RE.sub(fix, data)
    return _declare_missing_prefixes(repaired)


def _references(characters: str) -> bytes:
    return b"".join(b"&#%d;" % ord(character) for character in characters)


def _is_xml_char(code: int) -> bool:
    return (
        code in (0x9, 0xA, 0xD)
        or 0x20 <= code <= 0xD7FF
        or 0xE000 <= code <= 0xFFFD
        or 0x10000 <= code <= 0x10FFFF
    )


def _declare_missing_prefixes(data: bytes) -> bytes:
    used = {name for pair in _USED_PREFIX_RE.findall(data) for name in pair if name}
    missing = used - set(_DECLARED_PREFIX_RE.findall(data)) - {b"xml", b"xmlns"}
    if not missing:
        return data
    root = _ROOT_TAG_RE.match(data)
    if root is None:
        return data
    declarations = b"".join(
        b' xmlns:%s="%s"' % (prefix, KNOWN_NAMESPACES.get(prefix, UNDECLARED_NAMESPACE + prefix))
        for prefix in sorted(missing)
    )
    return data[: root.end()] + declarations + data[root.end() :]


_REL_ENCLOSURE_RE = re.compile(rb"""\srel\s*=\s*["']\s*enclosure""", re.I)
"""A ``<link rel="enclosure">`` (Atom's, or an ``atom:link`` in RSS); ``<enclosure>`` has no rel."""
_ITEM_START_RE = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?(?:item|entry)(?=[\s/>])[^>]*+(?:>|\Z)", re.I)
_END_RE = re.compile(
    rb"</(?:[A-Za-z_][\w.-]*:)?(?P<name>item|entry|channel|rss|feed|rdf)\s*>", re.I
)


def whole_items(data: bytes) -> bytes | None:
    """``data`` up to the start of its last item when it ends inside that item (a body cut
    off in transfer: the server closed the connection early, or died mid-page), else None.

    feedparser reads a cut item as far as it goes: stored, it would keep its missing text
    for good (items are never updated), or come back a second time, whole, under its real
    GUID. Left out, it is stored from the next whole body. Nothing is cut from a document
    whose last item, channel or root closes after the last item starts.
    """
    starts = list(_ITEM_START_RE.finditer(data))
    if not starts or starts[-1].group().endswith(b"/>"):
        return None
    cut_item = starts[-1].start()
    if _END_RE.search(data, cut_item) is not None:
        return None
    return data[:cut_item]


_ITEM_TAG_RE = re.compile(
    rb"<!\[CDATA\[.*?(?:\]\]>|\Z)|<!--.*?(?:-->|\Z)"
    rb"|(?P<start><(?:[A-Za-z_][\w.-]*:)?(?:item|entry)(?=[\s/>]))"
    rb"|(?P<end></(?:[A-Za-z_][\w.-]*:)?(?:item|entry)\s*>)",
    re.DOTALL | re.IGNORECASE,
)
"""Item start and end tags, outside CDATA sections and comments (a post about feeds quotes
``<item>`` in its CDATA content)."""


def item_pieces(data: bytes, piece_bytes: int) -> Iterator[tuple[bytes, int]]:
    """``data`` as documents of about ``piece_bytes`` each, with how many items each holds:
    its head (all before the first item) and tail (all after the last item's end) around a
    run of whole items, cut only after an item's end tag (an item bigger than a piece is a
    piece of its own). Every piece thus has the feed's own fields and namespaces.

    feedparser needs tens of MiB of memory per MiB of input, all at once: read in pieces, a
    big broken feed needs that of one piece. A document it cannot cut (no item ends, or a
    head and tail of half a piece or more) comes back whole, as the only piece.
    """
    first: int | None = None
    ends: list[int] = []  # where a piece may end
    started_before: list[int] = []  # item start tags before each of those ends
    started = 0
    for tag in _ITEM_TAG_RE.finditer(data):
        if tag["start"] is not None:
            started += 1
            first = tag.start() if first is None else first
        elif tag["end"] is not None and first is not None:
            ends.append(tag.end())
            started_before.append(started)
    head_and_tail = (first or 0) + len(data) - (ends[-1] if ends else 0)
    if first is None or not ends or head_and_tail * 2 >= piece_bytes:
        yield data, started
        return
    head, tail = data[:first], data[ends[-1] :]
    run_bytes = piece_bytes - head_and_tail
    run_start, items_before = first, 0
    for index, end in enumerate(ends[:-1]):
        if ends[index + 1] - run_start > run_bytes:
            yield head + data[run_start:end] + tail, started_before[index] - items_before
            run_start, items_before = end, started_before[index]
    yield head + data[run_start:], started - items_before


def parse_with_feedparser(data: bytes, base_url: str) -> ParsedFeed:
    """Read a broken document leniently; ParseError if feedparser finds no feed in it either."""
    try:
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
    feed_link, default_base = feed_base(_string(_key(feed, "link")), base_url)
    format_name = _format_name(version)
    linked_enclosures = format_name == "atom" or _REL_ENCLOSURE_RE.search(data) is not None
    kept, dropped = newest_end(entries, _date_text)
    return ParsedFeed(
        title=channel_title(_string(_key(feed, "title"))),
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
    ``id``; the fast path reads ``<guid>``, then the link), and an Atom ``<id>`` is no link
    (feedparser's ``guidislink``: only an RSS ``<guid>`` is a permalink). ``loose``: read by
    feedparser's loose parser, which leaves the id escaped (:func:`_written_id`)."""
    contents = _key(entry, "content")
    content_detail = contents[0] if isinstance(contents, list) and contents else None
    summary_detail = _key(entry, "summary_detail")
    content = _detail_html(content_detail)
    summary = _detail_html(summary_detail) or _plain_html(_string(_key(entry, "summary")))
    dates = tuple(
        text
        for text in (_string(_key(entry, "published")), _string(_key(entry, "updated")))
        if text
    )
    entry_base = _detail_base(content_detail, base_url) or _detail_base(summary_detail, base_url)
    guid = None if format_name == "rdf" else _string(_key(entry, "id"))
    if loose and guid is not None:
        guid = _written_id(guid)
    link = _alternate_link(_key(entry, "links"), enclosures=linked_enclosures)
    if link is None and format_name == "rss":
        link = permalink(guid, bool(_key(entry, "guidislink")))
    return finish_item(
        RawEntry(
            title=_string(_key(entry, "title")),
            link=link,
            guid=guid,
            content=content,
            description=summary,
            dates=dates,
            base=entry_base or default_base,
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
    if _key(detail, "type") == "text/plain":
        return _plain_html(value)
    return None if value is None else readable(value)


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
