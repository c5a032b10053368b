"""Which element is which field, for the XML fast path of the parse stage (:mod:`.parse_xml`).

Dispatch is on a canonical tag name (``title``, ``content:encoded``, ``atom:link``...).
Namespaces are recognized by URI, tolerating the common misspellings (missing trailing slash,
https), so ``content:encoded`` declared as ``http://purl.org/rss/1.0/modules/content`` counts.
Local names match in any case (``<Item>``, ``<pubdate>``, ``<TITLE>``), as feedparser matches
them: XML names are case-sensitive, but feeds in the wild are not.
Each table maps a raw lxml tag to a field name (channel and feed level) or to a slot (items and
entries, read by :func:`.parse_xml._item_fields` into a list), memoized per raw tag.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Generic, TypeVar

NAMESPACE_PREFIXES = {
    "http://purl.org/rss/1.0": "",
    "http://my.netscape.com/rdf/simple/0.9": "",
    "http://backend.userland.com/rss2": "",
    "http://blogs.law.harvard.edu/tech/rss": "",
    "http://www.w3.org/2005/atom": "atom",
    "http://purl.org/atom/ns": "atom",
    "http://purl.org/rss/1.0/modules/content": "content",
    "http://purl.org/dc/elements/1.1": "dc",
    "http://purl.org/dc/terms": "dcterms",
    "http://purl.org/rss/1.0/modules/syndication": "sy",
    "http://www.w3.org/1999/02/22-rdf-syntax-ns": "rdf",
    "http://search.yahoo.com/mrss": "media",
    "http://www.itunes.com/dtds/podcast-1.0.dtd": "itunes",
}
"""Namespace URI (lowercased, http, without trailing ``/`` or ``#``) -> canonical prefix."""

RSS_ITEM_SLOTS = {
    "title": 0,
    "link": 1,
    "guid": 2,
    "description": 3,
    "content:encoded": 4,
    "pubDate": 5,
    "dc:date": 6,
    "atom:link": 7,
    "media:description": 8,
    "media:group": 9,
    "atom:published": 10,
    "atom:issued": 10,
    "dcterms:issued": 10,
    "published": 10,
    "issued": 10,
    "atom:updated": 11,
    "atom:modified": 11,
    "dcterms:modified": 11,
    "updated": 11,
    "modified": 11,
}
"""An item's fields -> their place in the list the item walk fills (unpacked in one go).
``atom:link`` is read when the item has no ``<link>``; all of an item's are kept.
``media:description`` (Media RSS; YouTube puts it in a ``media:group``) when it has neither
content nor description. The dates after ``pubDate`` and ``dc:date`` are the others feedparser
reads in an RSS item (Atom's and DCMI terms' published and updated)."""
RSS_ATOM_LINKS = RSS_ITEM_SLOTS["atom:link"]


def wildcards(names: Iterable[str]) -> tuple[str, ...]:
    """The local names of ``names`` in any namespace, as written and in the usual other cases
    (lower, upper, first letter upper). lxml matches these in C, so the many extension elements
    of podcast feeds never become Python objects (the table checks the URI), and it drops the
    names a document does not use before it walks: the other cases cost nothing."""
    found: dict[str, None] = {}
    for name in names:
        local = name.rpartition(":")[2]
        for variant in (local, local.lower(), local.upper(), local[0].upper() + local[1:]):
            found["{*}" + variant] = None
    return tuple(found)


RSS_ITEM_WILDCARDS = wildcards(RSS_ITEM_SLOTS)
RSS_CHANNEL_FIELDS = {
    "item": "item",
    "title": "title",
    "link": "link",
    "ttl": "ttl",
    "sy:updatePeriod": "period",
    "sy:updateFrequency": "frequency",
}
ATOM_FIELDS = {
    "entry": "entry",
    "link": "link",
    "title": "title",
    "sy:updatePeriod": "period",
    "sy:updateFrequency": "frequency",
}
"""The feed-level names read (prefix ``atom:`` or none)."""
ATOM_ENTRY_SLOTS = {  # Atom 1.0 names plus the Atom 0.3 ones (issued, modified)
    "link": 0,
    "title": 1,
    "id": 2,
    "content": 3,
    "summary": 4,
    "published": 5,
    "issued": 5,
    "updated": 6,
    "modified": 6,
    "media:description": 7,
    "media:group": 8,
}
ATOM_LINKS = ATOM_ENTRY_SLOTS["link"]
"""The slot whose elements are all kept (an entry's every ``link``), not just the first."""
ATOM_ENTRY_WILDCARDS = wildcards(ATOM_ENTRY_SLOTS)


Field = TypeVar("Field", str, int)

MEMO_LIMIT = 4096
"""Distinct raw tags remembered per table (documents choose tag names; memory stays bounded)."""


class FieldTable(Generic[Field]):
    """Raw lxml tag -> field (name or slot), through :func:`canonical_tag` in any case,
    memoized per tag.

    Walking a child then costs one dict lookup; ``strip_atom`` lets Atom documents without
    the Atom namespace be read too.
    """

    __slots__ = ("folded", "memo", "strip_atom", "width")

    def __init__(self, fields: dict[str, Field], *, strip_atom: bool = False) -> None:
        self.folded: dict[str, Field] = {name.lower(): field for name, field in fields.items()}
        self.strip_atom = strip_atom
        self.memo: dict[str, Field | None] = {}
        self.width = len(set(fields.values()))

    def key(self, tag: str) -> Field | None:
        try:
            return self.memo[tag]
        except KeyError:
            name = canonical_tag(tag)
            if name.startswith("{"):  # a namespace this reader does not know
                key: Field | None = None
            else:
                name = name.lower()
                key = self.folded.get(name.removeprefix("atom:") if self.strip_atom else name)
            if len(self.memo) < MEMO_LIMIT:
                self.memo[tag] = key
            return key


@lru_cache(maxsize=1024)
def canonical_tag(tag: str) -> str:
    """``{uri}local`` -> ``prefix:local`` for the namespaces we read, else unchanged."""
    if not tag.startswith("{"):
        return tag
    uri, _, local = tag[1:].partition("}")
    key = uri.strip().rstrip("/#").lower()
    if key.startswith("https://"):
        key = "http://" + key[len("https://") :]
    prefix = NAMESPACE_PREFIXES.get(key)
    if prefix is None:
        return tag
    return f"{prefix}:{local}" if prefix else local


RSS_CHANNEL = FieldTable(RSS_CHANNEL_FIELDS)
RSS_ITEM = FieldTable(RSS_ITEM_SLOTS)
ATOM_FEED = FieldTable(ATOM_FIELDS, strip_atom=True)
ATOM_ENTRY = FieldTable(ATOM_ENTRY_SLOTS, strip_atom=True)
