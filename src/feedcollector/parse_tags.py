"""Which element is which field, for the XML fast path of the parse stage (:mod:`.parse_xml`).

Dispatch is on a canonical tag name (``title``, ``content:encoded``, ``atom:link``...).
Namespaces are recognized by URI, tolerating the common misspellings (https, ``www.``, missing
trailing slash, the mirrors and old versions of :data:`NAMESPACE_PREFIXES`), so
``content:encoded`` declared as ``http://purl.org/rss/1.0/modules/content`` counts. An element
in a namespace not known at all is named by its prefix when that is one of ours (``dc:date``
declared with any URI), and by its local name without one, as feedparser names it.
Local names match in any case (``<Item>``, ``<pubDATE>``, ``<TITLE>``), as feedparser matches
them: XML names are case-sensitive, but feeds in the wild are not.
Each table maps a raw lxml tag to a field name (channel and feed level) or to a slot (items and
entries, read by :func:`.parse_elements.item_fields` into a list), memoized per raw tag.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Generic, TypeVar

from lxml import etree

from .parse_text import text_of

NAMESPACE_PREFIXES = {
    "purl.org/rss/1.0": "",
    "my.netscape.com/rdf/simple/0.9": "",
    "backend.userland.com/rss": "",  # any URI starting so (rss2, rss092...), as in feedparser
    "blogs.law.harvard.edu/tech/rss": "",
    "purl.org/rss/1.0/modules/rss091": "",
    "w3.org/2005/atom": "atom",
    "purl.org/atom/ns": "atom",
    "purl.org/rss/1.0/modules/content": "content",
    "purl.org/dc/elements/1.1": "dc",
    "purl.org/dc/elements/1.0": "dc",
    "purl.org/dc/terms": "dcterms",
    "purl.org/rss/1.0/modules/syndication": "sy",
    "w3.org/1999/02/22-rdf-syntax-ns": "rdf",
    "search.yahoo.com/mrss": "media",
    "tools.search.yahoo.com/mrss": "media",
    "itunes.com/dtds/podcast-1.0.dtd": "itunes",
    "example.com/dtds/podcast-1.0.dtd": "itunes",  # copied from Apple's example; feedparser too
    "w3.org/1999/xhtml": "xhtml",
}
"""Namespace URI as :func:`namespace_key` spells it -> canonical prefix: feedparser's table
for the namespaces read here, and the misspellings it reads only by their prefix."""
URI_MIRRORS = {"web.resource.org/rss/1.0": "purl.org/rss/1.0"}
"""Hosts that served the RSS 1.0 namespaces before purl.org did; feeds still declare them."""
FALLBACK_PREFIXES = frozenset(prefix for prefix in NAMESPACE_PREFIXES.values() if prefix)
"""The prefixes that name an element whose namespace URI is not known at all (``dc:date``
declared as ``http://purl.org/dc/elements/1.2/``): feedparser reads any prefix so."""


def namespace_key(uri: str) -> str:
    """A namespace URI without what its misspellings vary: case, scheme, ``www.``, a trailing
    ``/`` or ``#``, a mirror host (:data:`URI_MIRRORS`)."""
    key = uri.strip().rstrip("/#").lower().removeprefix("http://").removeprefix("https://")
    key = key.removeprefix("www.")
    for mirror, home in URI_MIRRORS.items():
        if key.startswith(mirror):
            return home + key[len(mirror) :]
    if key.startswith("backend.userland.com/rss"):
        return "backend.userland.com/rss"
    return key


RSS_ITEM_SLOTS = {
    "title": 0,
    "dc:title": 0,
    "link": 1,
    "guid": 2,
    "description": 3,
    "dc:description": 3,
    "content:encoded": 4,
    "pubDate": 5,
    "dc:date": 6,
    "atom:link": 7,
    "media:description": 8,
    "media:group": 9,
    "atom:published": 10,
    "atom:issued": 10,
    "dcterms:issued": 10,
    "dcterms:created": 10,
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
reads in an RSS item (Atom's and DCMI terms' published and updated). ``dc:title`` and
``dc:description`` stand for ``title`` and ``description`` (RSS 1.0 feeds that write only
Dublin Core), the first of the two in the item counting, as feedparser reads them."""
RSS_ATOM_LINKS = RSS_ITEM_SLOTS["atom:link"]


def wildcards(names: Iterable[str]) -> tuple[str, ...]:
    """The local names of ``names`` in any namespace, as written and in the usual other cases
    (lower, upper, first letter upper). lxml matches these in C, so the many extension elements
    of podcast feeds never become Python objects (the table checks the URI), and it drops the
    names a document does not use before it walks: the other cases cost nothing. Any other
    case is found by :func:`.parse_elements.item_fields` reading an item's children unfiltered."""
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
    "dc:title": "title",
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
    "created": 5,
    "dcterms:created": 5,
    "updated": 6,
    "modified": 6,
    "dc:date": 6,
    "media:description": 7,
    "media:group": 8,
}
ATOM_LINKS = ATOM_ENTRY_SLOTS["link"]
"""The slot whose elements are all kept (an entry's every ``link``), not just the first."""
ATOM_ENTRY_WILDCARDS = wildcards(ATOM_ENTRY_SLOTS)


Field = TypeVar("Field", str, int)

MEMO_LIMIT = 4096
"""Distinct raw tags remembered per table (documents choose tag names; memory stays bounded)."""


PREFIX_MEMO_LIMIT = 16
"""Prefixes remembered per raw tag in a namespace not known at all (see :class:`FieldTable`)."""


class FieldTable(Generic[Field]):
    """Raw lxml tag -> field (name or slot), through :func:`canonical_tag` in any case,
    memoized per tag.

    Walking a child then costs one dict lookup; ``strip_atom`` lets Atom documents without
    the Atom namespace be read too. A tag in a namespace not known at all whose local name is
    one of ours is named :func:`by_prefix`, so its field depends on the element's prefix:
    those are memoized per tag and prefix in :attr:`prefixed`, never in :attr:`memo`.
    """

    __slots__ = ("folded", "local_names", "memo", "prefixed", "strip_atom", "texts", "width")

    def __init__(
        self,
        fields: dict[str, Field],
        *,
        strip_atom: bool = False,
        texts: Iterable[Field] = (),
    ) -> None:
        self.folded: dict[str, Field] = {name.lower(): field for name, field in fields.items()}
        self.texts: frozenset[Field] = frozenset(texts)
        """Slots whose first element WITH TEXT counts (a blank one before it is absent)."""
        self.local_names = frozenset(name.rpartition(":")[2] for name in self.folded)
        self.strip_atom = strip_atom
        self.memo: dict[str, Field | None] = {}
        self.prefixed: dict[str, dict[str | None, Field | None]] = {}
        self.width = len(set(fields.values()))

    def key(self, tag: str, element: etree._Element) -> Field | None:
        """The field of ``element``, whose tag is ``tag``."""
        memo = self.memo
        if tag in memo:
            return memo[tag]
        prefixes = self.prefixed.get(tag)
        if prefixes is not None and element.prefix in prefixes:
            return prefixes[element.prefix]
        return self._learn(tag, element)

    def _learn(self, tag: str, element: etree._Element) -> Field | None:
        """:meth:`key` for a tag not memoized yet (or a prefix not seen yet with it)."""
        name = canonical_tag(tag)
        if name.startswith("{") and name.partition("}")[2].lower() in self.local_names:
            prefix = element.prefix
            name = by_prefix(name, prefix)
            found = None if name.startswith("{") else self._field(name)
            prefixes = self.prefixed.get(tag)
            if prefixes is None and len(self.prefixed) < MEMO_LIMIT:
                prefixes = self.prefixed[tag] = {}
            if prefixes is not None and len(prefixes) < PREFIX_MEMO_LIMIT:
                prefixes[prefix] = found
            return found
        found = None if name.startswith("{") else self._field(name)  # else: whatever its prefix
        if len(self.memo) < MEMO_LIMIT:
            self.memo[tag] = found
        return found

    def _field(self, name: str) -> Field | None:
        name = name.lower()
        return self.folded.get(name.removeprefix("atom:") if self.strip_atom else name)


Slots = tuple[list[etree._Element | None], list[etree._Element]]
"""An item's first child per slot of a table, and all its children of the slot kept whole."""


def children_slots(item: etree._Element, table: FieldTable[int], every: int | None) -> Slots:
    """What :func:`.parse_elements.item_fields` finds for ``item``, from each of its children:
    no tag filter, so names in any case are found (at the cost of a Python object each)."""
    fields: list[etree._Element | None] = [None] * table.width
    links: list[etree._Element] = []
    memo = table.memo
    for child in item:
        tag = child.tag
        if tag.__class__ is not str:
            continue
        slot = memo[tag] if tag in memo else table.key(tag, child)
        if slot is None:
            continue
        if slot == every:
            links.append(child)
        elif fields[slot] is None or (slot in table.texts and is_blank(fields[slot])):
            fields[slot] = child
    return fields, links


def is_blank(element: etree._Element | None) -> bool:
    """Whether ``element`` has no text: read only for a field's second element, so an item
    whose first ``<guid>`` (title, link, date) is empty takes its next one, as feedparser
    takes the first non-empty title and link."""
    return element is not None and (not (text := text_of(element)) or text.isspace())


@lru_cache(maxsize=1024)
def canonical_tag(tag: str) -> str:
    """``{uri}local`` -> ``prefix:local`` for the namespaces we read, else unchanged."""
    if not tag.startswith("{"):
        return tag
    uri, _, local = tag[1:].partition("}")
    prefix = NAMESPACE_PREFIXES.get(namespace_key(uri))
    if prefix is None:
        return tag
    return f"{prefix}:{local}" if prefix else local


def element_name(element: etree._Element) -> str:
    """The canonical name of ``element``: :func:`canonical_tag`, or for a namespace not known
    at all, :func:`by_prefix`."""
    name = canonical_tag(element.tag)
    return by_prefix(name, element.prefix) if name.startswith("{") else name


def by_prefix(tag: str, prefix: str | None) -> str:
    """``{uri}local`` in a namespace not known at all, named as feedparser names it: by its
    prefix if that is one of ours, by its local name without a prefix, else unchanged."""
    if prefix is None:
        return tag.partition("}")[2]
    prefix = prefix.lower()
    return f"{prefix}:{tag.partition('}')[2]}" if prefix in FALLBACK_PREFIXES else tag


RSS_CHANNEL = FieldTable(RSS_CHANNEL_FIELDS)
RSS_ITEM = FieldTable(
    RSS_ITEM_SLOTS,
    texts=(
        RSS_ITEM_SLOTS[name]
        for name in (
            "title",
            "link",
            "guid",
            "pubDate",
            "dc:date",
            "atom:published",
            "atom:updated",
        )
    ),
)
"""Title, link, GUID and the dates: the values an item's identity is made of."""
ATOM_FEED = FieldTable(ATOM_FIELDS, strip_atom=True)
ATOM_ENTRY = FieldTable(
    ATOM_ENTRY_SLOTS,
    strip_atom=True,
    texts=(ATOM_ENTRY_SLOTS[name] for name in ("title", "id", "published", "updated")),
)


_DATE_NAMES = frozenset(("pubdate", "date", "published", "updated", "issued", "modified"))


def date_text(item: etree._Element) -> str | None:
    """The text of an item's first date (any namespace and case), for
    :func:`.parse_common.newest_end`."""
    for child in item:
        tag = child.tag
        if tag.__class__ is str and tag.rpartition("}")[2].lower() in _DATE_NAMES:
            return child.text
    return None
