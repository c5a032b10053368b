"""Byte-level work on a document strict XML parsing refused, before the lenient reader.

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

A document that ends inside an item loses that item (:func:`whole_items`), one that ends
between items is told (:func:`ends_unclosed`), and a big one is
cut into pieces of whole items (:func:`item_pieces`) for the lenient reader
(:mod:`.parse_fallback`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.entities import html5

from .decode import without_controls

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


def ends_unclosed(data: bytes) -> bool:
    """Whether ``data`` ends after its last whole item (or before its first) without closing
    its channel or root: cut off between two items (a connection closed at a flush, a script
    that died after writing an item, its error message after it). Nothing is left out, but
    items may have followed: the whole body must come again, not a 304 to this one's
    validators. (One that ends inside an item: :func:`whole_items`.)"""
    last: bytes | None = None  # the name of the last end tag: an item's, or its container's
    for end in _END_RE.finditer(data):
        last = end["name"].lower()
    return last in (None, b"item", b"entry")


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
