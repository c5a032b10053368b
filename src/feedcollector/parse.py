"""The parse stage: UTF-8 feed bytes -> :class:`ParsedFeed` (pure: no I/O, clock or logging).

Three tries, cheapest first:

1. strict lxml (no entity expansion, no network, no DTD loading, size and depth limits), the
   fast path for well-formed RSS/RDF/Atom (:mod:`.parse_xml`), names matched in any case; a
   feed whose root is in a namespace no RSS or Atom version uses (a misspelled or draft
   Atom URI) goes to step 3, which matches local names in any namespace;
2. the same after :func:`.parse_repair.repair_xml` (C0 controls, undefined HTML entities,
   stray ``&``, undeclared namespace prefixes);
3. feedparser's lenient parser, mapped through the same rules (format gets ``-fallback``);
   a document cut off inside an item is read up to its last whole item
   (:func:`.parse_repair.whole_items`), one bigger than :data:`LENIENT_PARSE_LIMIT` in
   pieces of whole items (:func:`.parse_repair.item_pieces`), each read strictly if it can
   be (the breakage is often in one item), else by feedparser.

A body starting with ``{`` is read as JSON Feed (C0 controls removed first). Anything that is
not a feed raises :class:`~feedcollector.errors.ParseError`; no other exception escapes.

The rules shared by every path (GUID chain, content choice, URL bases, dates) live in
:mod:`.parse_common`; element values are read by :mod:`.parse_text`, JSON Feed by
:mod:`.parse_json`.
"""

from __future__ import annotations

import contextlib
import re
import threading
from dataclasses import replace
from typing import cast

from lxml import etree

from .decode import without_controls
from .errors import LenientParseNeeded, ParseError
from .feed_links import feed_links
from .models import ParsedFeed, ParsedItem
from .parse_common import MAX_ITEMS_PER_FEED
from .parse_fallback import parse_with_feedparser
from .parse_json import parse_json_feed
from .parse_repair import ends_unclosed, item_pieces, repair_xml, whole_items
from .parse_xml import NotAFeedRoot, ReadByLocalNames, feed_from_tree
from .safe_text import one_line

UTF8_BOM = b"\xef\xbb\xbf"

LENIENT_PARSE_LIMIT = 4 * 2**20
"""Largest broken document handed to feedparser whole; a bigger one is read in pieces of
:data:`LENIENT_PIECE_BYTES` (no item is lost). feedparser is pure Python: per MiB of input it
takes 0.5-0.9 s of CPU on real feeds (up to 2.5 s on dense markup: thousands of tiny items,
XHTML content) and 7-40 MiB of memory, held until it ends. So a whole document costs a few
seconds and at most about 150 MiB, one up to the body cap (20 MiB) in pieces about 15 s."""
LENIENT_PIECE_BYTES = 2**20
"""Size of the pieces of a broken document over :data:`LENIENT_PARSE_LIMIT`: at most about
40 MiB of memory at a time, and no more items read than the item cap needs."""

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
        wrapped = _wrapped_feed(exc.root)
        if wrapped is not None:
            with contextlib.suppress(ReadByLocalNames):  # in the page's XHTML namespace:
                return feed_from_tree(wrapped, base_url)  # feedparser reads nothing there
        raise ParseError(_not_a_feed(exc.root, document, base_url)) from exc


def _read_leniently(document: bytes, base_url: str, why: str, *, lenient: bool) -> ParsedFeed:
    """feedparser's reading of a document the fast path cannot read.

    A document with nothing feedparser would take for a feed is refused without it: an HTML
    page (a login wall, a "moved" notice, a site redesign) is the usual one, and its error
    says so, with the page's title, instead of quoting an XML syntax error. A big HTML page
    is refused on sight unless a feed's root element is in it: the search for signs of a
    feed is linear but not free (about 0.1 s a MiB at worst).
    """
    if len(document) > LENIENT_PARSE_LIMIT and _FEED_ROOT.search(document) is None:
        page = _html_page(document, base_url)
        if page is not None:
            raise ParseError(f"parse: not a feed ({page})")
    if FEED_SIGNS.search(document) is None:
        found = _html_page(document, base_url) or "no RSS, RDF or Atom element in it"
        raise ParseError(f"parse: not a feed ({found})")
    if not lenient:
        raise LenientParseNeeded(f"parse: {why}; {len(document)} bytes for the lenient parser")
    whole = whole_items(document)
    readable = document if whole is None else whole
    if len(readable) <= LENIENT_PARSE_LIMIT:
        feed = parse_with_feedparser(readable, base_url)
    else:
        feed = _read_in_pieces(readable, base_url, why)
    if whole is not None:
        return replace(feed, cut_off=True)
    return replace(feed, unclosed=True) if ends_unclosed(document) else feed


def _read_in_pieces(document: bytes, base_url: str, why: str) -> ParsedFeed:
    """A broken document over :data:`LENIENT_PARSE_LIMIT`, read in pieces of whole items up
    to ``MAX_ITEMS_PER_FEED`` items (its first ones: pieces past them are not read), each
    piece strictly if it is well-formed (the breakage is often in one item; the other pieces
    are read 10-20 times faster), else by feedparser.

    Each piece has the document's head and tail, so the feed's fields and every item's URL
    base come out as from the whole. Refused only when it has no item to cut it at: a big
    document that is no feed, or only its channel, is not worth the seconds of CPU.
    """
    pieces: list[ParsedFeed] = []
    items: list[ParsedItem] = []
    not_read = 0
    for piece, item_count in item_pieces(document, LENIENT_PIECE_BYTES):
        if piece is document and item_count == 0:
            raise ParseError(
                f"parse: {why}, and at {len(document)} bytes too big for the lenient parser "
                f"(limit {LENIENT_PARSE_LIMIT} bytes), with no <item> or <entry> to cut it "
                "into pieces at; the feed's publisher has to make it well-formed XML"
            )
        if len(items) >= MAX_ITEMS_PER_FEED:
            not_read += item_count
            continue
        pieces.append(_read_piece(piece, base_url, whole=piece is document))
        items += pieces[-1].items
        not_read += pieces[-1].items_dropped
    lenient_format = next((p.format for p in pieces if p.format.endswith("-fallback")), None)
    return replace(
        pieces[0],
        items=tuple(items[:MAX_ITEMS_PER_FEED]),
        items_dropped=not_read + max(0, len(items) - MAX_ITEMS_PER_FEED),
        format=lenient_format or pieces[0].format + "-fallback",
    )


def _read_piece(piece: bytes, base_url: str, *, whole: bool) -> ParsedFeed:
    """One piece of a broken document: on the fast path if it is well-formed and a feed,
    else by feedparser (which reads the ``whole`` document in one piece)."""
    root = None if whole else _parse_strict(piece)
    if root is not None:
        try:
            return feed_from_tree(root, base_url)
        except ParseError:
            pass  # a root in a foreign namespace, say: feedparser matches local names
    return parse_with_feedparser(piece, base_url)


FEED_SIGNS = re.compile(
    rb"<(?:[\w.-]+:)?(?:rss|feed|channel|item|entry|rdf)[\s/>]"
    rb"|purl\.org/rss/1\.0|netscape\.com/rdf/simple/0\.9|w3\.org/2005/atom",
    re.IGNORECASE,
)
"""What feedparser needs to find a feed: an element it reads as a feed, channel or entry (in any
case, with any prefix), or a namespace that makes it call the document RSS or Atom. Without
any of them it finds no version and no entries, and refuses the document."""
_FEED_ROOT = re.compile(rb"<(?:[\w.-]+:)?(?:rss|feed|rdf)[\s/>]", re.IGNORECASE)
"""A feed's root element (an HTML page may wrap one)."""
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


WRAPPED_ROOT_NAMES = ("feed", "rss", "rdf")


def _wrapped_feed(root: etree._Element) -> etree._Element | None:
    """The one feed root element (``<rss>``, ``<feed>``, ``<rdf:RDF>``) inside a document
    that is no feed, else None: some servers wrap the feed in an HTML page (an error page
    around it, a ``<pre>`` for browsers), and feedparser finds it there."""
    found: list[etree._Element] = []
    for element in root.iter():
        tag = element.tag
        if isinstance(tag, str) and etree.QName(tag).localname.lower() in WRAPPED_ROOT_NAMES:
            found.append(element)
            if len(found) > 1:
                return None
    return found[0] if found else None


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
    and external entities, DTDs and the network stay off. A document whose own DTD declares
    entities (``<!ENTITY author "Jane Doe">``) is parsed again with those resolved, by libxml2
    and within its amplification guard, unless that fails (it also uses entities its DTD does
    not declare, an external DTD's, which stay as written)."""
    huge = False
    try:
        root = etree.fromstring(body, _strict_parser())
    except (etree.LxmlError, ValueError):
        if len(body) <= LXML_TEXT_LIMIT:
            return None
        huge = True
    if huge:
        try:
            root = etree.fromstring(body, _strict_parser(huge_tree=True))
        except (etree.LxmlError, ValueError):
            return None
    if _declares_entities(root):
        try:
            return etree.fromstring(body, _xml_parser(huge_tree=huge, entities="internal"))
        except (etree.LxmlError, ValueError):
            pass
    return root


def _declares_entities(root: etree._Element) -> bool:
    subset = root.getroottree().docinfo.internalDTD
    if subset is None:
        return False
    return next(iter(subset.iterentities()), None) is not None  # type: ignore[attr-defined]


def _xml_parser(*, huge_tree: bool, entities: bool | str) -> etree.XMLParser:
    """UTF-8 in, no external entity, DTD or network, no id table, no repeated namespace
    declarations (see :func:`_strict_parser`); ``entities``: False, or ``"internal"`` for a
    document whose own DTD declares some (rare: such a parser is made when needed)."""
    return etree.XMLParser(
        encoding="utf-8",
        resolve_entities=entities,  # type: ignore[arg-type]  # lxml-stubs: bool only
        no_network=True,
        load_dtd=False,
        huge_tree=huge_tree,
        collect_ids=False,
        ns_clean=True,
    )


def _strict_parser(*, huge_tree: bool = False) -> etree.XMLParser:
    """One parser per thread (lxml parsers must not be shared across threads).

    ``ns_clean`` drops namespace declarations that repeat one in scope: podcast feeds often
    redeclare ``xmlns:itunes`` on every element, and not keeping those makes the parse about
    6% faster on the real-world corpus. The elements' namespaces are unchanged.
    """
    name = "huge_parser" if huge_tree else "parser"
    parser: etree.XMLParser | None = getattr(_local, name, None)
    if parser is None:
        parser = _xml_parser(huge_tree=huge_tree, entities=False)
        setattr(_local, name, parser)
    return parser


__all__ = ["parse_feed"]
