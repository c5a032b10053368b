"""The parse stage: UTF-8 feed bytes -> :class:`ParsedFeed` (pure: no I/O, clock or logging).

Three tries, cheapest first:

1. strict lxml (no entity expansion, no network, no DTD loading, size and depth limits), the
   fast path for well-formed RSS/RDF/Atom (:mod:`.parse_xml`), names matched in any case; a
   feed whose root is in a namespace no RSS or Atom version uses (a misspelled or draft
   Atom URI) goes to step 3, which matches local names in any namespace;
2. the same after :func:`.parse_fallback.repair_xml` (C0 controls, undefined HTML entities,
   stray ``&``, undeclared namespace prefixes);
3. feedparser's lenient parser, mapped through the same rules (format gets ``-fallback``);
   a document cut off inside an item is read up to its last whole item
   (:func:`.parse_fallback.whole_items`).

A body starting with ``{`` is read as JSON Feed (C0 controls removed first). Anything that is
not a feed raises :class:`~feedcollector.errors.ParseError`; no other exception escapes.

The rules shared by every path (GUID chain, content choice, URL bases, dates) live in
:mod:`.parse_common`; element values are read by :mod:`.parse_text`, JSON Feed by
:mod:`.parse_json`.
"""

from __future__ import annotations

import re
import threading
from dataclasses import replace
from typing import cast

from lxml import etree

from .decode import without_controls
from .errors import LenientParseNeeded, ParseError
from .feed_links import feed_links
from .models import ParsedFeed
from .parse_fallback import parse_with_feedparser, repair_xml, whole_items
from .parse_json import parse_json_feed
from .parse_xml import NotAFeedRoot, ReadByLocalNames, feed_from_tree
from .safe_text import one_line

UTF8_BOM = b"\xef\xbb\xbf"

LENIENT_PARSE_LIMIT = 4 * 2**20
"""Largest document handed to feedparser. It is pure Python (about 3 s of CPU and 40 MiB of
memory per MiB of input), so a huge broken document ends in a ParseError rather than a minute
of CPU; well-formed or repairable documents are read up to the body cap."""

_local = threading.local()


def parse_feed(data: bytes, base_url: str, *, lenient: bool = True) -> ParsedFeed:
    """Parse a feed document; ``base_url`` is where it was fetched from (after redirects).

    With ``lenient=False`` a document that needs feedparser raises
    :class:`~feedcollector.errors.LenientParseNeeded` instead of being read.
    """
    body = data.removeprefix(UTF8_BOM).lstrip()
    if not body:
        raise ParseError("parse: empty document")
    if body.startswith(b"{"):
        return parse_json_feed(without_controls(body), base_url)
    root = _parse_strict(body)
    document = body
    if root is None:
        repaired = repair_xml(body)
        root = _parse_strict(repaired) if repaired != body else None
        document = repaired
    if root is None:
        return _read_leniently(document, base_url, "not well-formed XML", lenient=lenient)
    try:
        return feed_from_tree(root, base_url)
    except ReadByLocalNames as exc:
        feed = _read_leniently(document, base_url, exc.reason, lenient=lenient)
        if not feed.items and feed.title is None:  # feedparser calls any <feed> root Atom
            raise ParseError(
                f"parse: {exc.reason}, and the lenient parser found no title or entries in it"
            ) from exc
        return feed
    except NotAFeedRoot as exc:
        raise ParseError(_not_a_feed(exc.root, document, base_url)) from exc


def _read_leniently(document: bytes, base_url: str, why: str, *, lenient: bool) -> ParsedFeed:
    """feedparser's reading of a document the fast path cannot read, within its size limit.

    A document with nothing feedparser would take for a feed is refused without it: an HTML
    page (a login wall, a "moved" notice, a site redesign) is the usual one, and its error
    says so, with the page's title, instead of quoting an XML syntax error. The size limit
    comes first: the search for signs of a feed is linear but not free (about 0.1 s a MiB
    at worst).
    """
    if len(document) > LENIENT_PARSE_LIMIT:
        page = _html_page(document, base_url)
        if page is not None:
            raise ParseError(f"parse: not a feed ({page})")
        raise ParseError(
            f"parse: {why}, and at {len(document)} bytes too big for the lenient parser "
            f"(limit {LENIENT_PARSE_LIMIT} bytes)"
        )
    if FEED_SIGNS.search(document) is None:
        found = _html_page(document, base_url) or "no RSS, RDF or Atom element in it"
        raise ParseError(f"parse: not a feed ({found})")
    if not lenient:
        raise LenientParseNeeded(f"parse: {why}; {len(document)} bytes for the lenient parser")
    whole = whole_items(document)
    if whole is None:
        return parse_with_feedparser(document, base_url)
    return replace(parse_with_feedparser(whole, base_url), cut_off=True)


FEED_SIGNS = re.compile(
    rb"<(?:[\w.-]+:)?(?:rss|feed|channel|item|entry|rdf)[\s/>]"
    rb"|purl\.org/rss/1\.0|netscape\.com/rdf/simple/0\.9|w3\.org/2005/atom",
    re.IGNORECASE,
)
"""What feedparser needs to find a feed: an element it reads as a feed, channel or entry (in any
case, with any prefix), or a namespace that makes it call the document RSS or Atom. Without
any of them it finds no version and no entries, and refuses the document."""
_HTML_START = re.compile(
    rb"(?:\s|<\?xml[^>]*>|<!--.*?-->)*+<(?:!doctype\s+html|html|head|body)[\s>]", re.I | re.S
)
"""Possessive (``*+``): a comment is never re-read as reaching past its ``-->``, which made
a document of a few dozen comments take exponential time to refuse."""
_HTML_TITLE = re.compile(rb"<title[^>]{0,300}>([^<]{1,300})", re.I)
HTML_HEAD_BYTES = 256 * 1024
"""Where a page's title and feed links are looked for (they belong in its head)."""
TITLE_SHOWN = 80
"""Characters of an HTML page's title quoted in its error."""
FEEDS_SHOWN = 3
"""Feeds a page announces that its error names."""


ROOT_TEXT_SHOWN = 120
"""Characters of a non-feed document's text quoted in its error (an S3 or API error says why)."""


def _not_a_feed(root: etree._Element, document: bytes, page_url: str) -> str:
    """The error for a well-formed document that is no feed, saying what it is instead: an
    OPML list of feeds, an (XHTML) page, or whatever its text starts with."""
    name = etree.QName(root).localname
    if name.lower() == "opml":
        return (
            "parse: not a feed but an OPML list of feeds; `feedcollector import-opml FILE` "
            "adds the feeds it lists"
        )
    page = _html_page(document, page_url)
    if page is not None:
        return f"parse: not a feed ({page})"
    said = _text_start(root)
    return f"parse: not a feed (root element <{name}>{': ' + said if said else ''})"


def _text_start(root: etree._Element) -> str:
    """The start of the document's text as an error quotes it (read lazily: the document may
    be large)."""
    pieces: list[str] = []
    length = 0
    for piece in root.itertext():
        pieces.append(cast(str, piece))  # text, never bytes, in a parsed document
        length += len(pieces[-1])
        if length > 4 * ROOT_TEXT_SHOWN:
            break
    return one_line(" ".join(pieces), ROOT_TEXT_SHOWN)


def _html_page(document: bytes, page_url: str) -> str | None:
    """How an error names ``document`` if it is an HTML page served where a feed was expected
    (else None): by its title, which usually says why (a login wall, "Just a moment...",
    "Document Moved"), and by the feeds it announces, where the feed may have moved."""
    if _HTML_START.match(document) is None:
        return None
    head = document[:HTML_HEAD_BYTES]
    found = _HTML_TITLE.search(head)
    title = one_line(found.group(1).decode("utf-8", "replace"), TITLE_SHOWN) if found else ""
    page = f"an HTML page titled {title!r}" if title else "an HTML page"
    feeds = [link.url for link in feed_links(head, page_url)]
    if not feeds:
        return page
    more = f" and {len(feeds) - FEEDS_SHOWN} more" if len(feeds) > FEEDS_SHOWN else ""
    return f"{page} that announces the feed {', '.join(feeds[:FEEDS_SHOWN])}{more}"


LXML_TEXT_LIMIT = 10_000_000
"""Longest text node libxml2 reads without ``huge_tree`` (``XML_MAX_TEXT_LENGTH``); a body
cap of 20 MiB lets a feed carry longer ones (an item with images inlined as data: URLs)."""


def _parse_strict(body: bytes) -> etree._Element | None:
    """The document's root, or None if it is not well-formed XML (the caller tries harder).

    A body that may hold a text node over :data:`LXML_TEXT_LIMIT` is tried again without that
    limit when the first parse fails; the body is already within ``[fetch] max_body_bytes``,
    and entities, DTDs and the network stay off."""
    try:
        return etree.fromstring(body, _strict_parser())
    except (etree.LxmlError, ValueError):
        if len(body) <= LXML_TEXT_LIMIT:
            return None
    try:
        return etree.fromstring(body, _strict_parser(huge_tree=True))
    except (etree.LxmlError, ValueError):
        return None


def _strict_parser(*, huge_tree: bool = False) -> etree.XMLParser:
    """One parser per thread (lxml parsers must not be shared across threads).

    ``ns_clean`` drops namespace declarations that repeat one in scope: podcast feeds often
    redeclare ``xmlns:itunes`` on every element, and not keeping those makes the parse about
    6% faster on the real-world corpus. The elements' namespaces are unchanged.
    """
    name = "huge_parser" if huge_tree else "parser"
    parser: etree.XMLParser | None = getattr(_local, name, None)
    if parser is None:
        parser = etree.XMLParser(
            encoding="utf-8",
            resolve_entities=False,
            no_network=True,
            load_dtd=False,
            huge_tree=huge_tree,
            collect_ids=False,
            ns_clean=True,
        )
        setattr(_local, name, parser)
    return parser


__all__ = ["parse_feed"]
