"""Elements of the XML fast path that its RSS and Atom readers (:mod:`.parse_xml`,
:mod:`.parse_atom`) share: the one walk per document that finds every item's fields
(:func:`item_fields`), items a channel wraps, ``xml:base`` chains, an item's Media RSS
descriptions and children by name.
"""

from __future__ import annotations

from collections.abc import Iterator

from lxml import etree

from .html import resolve_url
from .parse_tags import FieldTable, Slots, children_slots, element_name, is_blank, wildcards
from .parse_text import text_of

XML_BASE = "{http://www.w3.org/XML/1998/namespace}base"


def wrapped(parent: etree._Element, table: FieldTable[str], name: str) -> list[etree._Element]:
    """The items (``name``) below ``parent`` but not its children, outermost only: a channel
    with none of its own may wrap them (``<items><item>``), and feedparser reads those.
    Looked for only then, so a feed with items pays nothing."""
    found: list[etree._Element] = []
    open_items = 0  # counted from start and end events, not by looking up every ancestor
    for event, element in etree.iterwalk(parent, ("start", "end"), tag=wildcards((name,))):
        if element is parent or table.key(element.tag, element) != name:
            continue
        if event == "end":
            open_items -= 1
            continue
        if open_items == 0:
            found.append(element)
        open_items += 1
    return found


def item_fields(
    container: etree._Element,
    items: list[etree._Element],
    table: FieldTable[int],
    wildcards: tuple[str, ...],
    every: int | None = None,
) -> Iterator[tuple[etree._Element, list[etree._Element | None], list[etree._Element]]]:
    """Each item with its first child per slot of ``table`` (for its :attr:`~.parse_tags.
    FieldTable.texts` slots, its first with text), and all its children of slot ``every``
    (Atom links).

    Found in ONE walk of ``container`` filtered on ``wildcards`` in C: the tag matcher is built
    once per document rather than once per item (the dominant cost for podcast feeds), and
    only candidate elements become Python objects. Descendants that are not direct children of
    an item (channel fields, nested XHTML) are dropped by the parent check. Slots are list
    places rather than dict keys: one unpacking reads them all.

    Names in a case the filter lacks (``<pubDATE>``) are found by reading an item's children
    unfiltered (:func:`.parse_tags.children_slots`): the first item's whenever the walk did
    not take them all, and another item's when the walk found fewer fields in it than in the
    first. A feed writing names so writes them so in every item (a template does), and then
    every item is read so; an odd name in one item, of a field the first item lacks, is the
    case missed. Counting an item's empty slots costs about 0.2 % of the parse.
    """
    width = table.width
    by_item: dict[etree._Element | None, Slots] = {item: ([None] * width, []) for item in items}
    memo = table.memo
    texts = table.texts
    for element in container.iter(*wildcards):
        found = by_item.get(element.getparent())
        if found is None:
            continue
        tag = element.tag
        slot = memo[tag] if tag in memo else table.key(tag, element)
        if slot is None:
            continue
        if slot == every:
            found[1].append(element)
        elif found[0][slot] is None or (slot in texts and is_blank(found[0][slot])):
            found[0][slot] = element
    if not items:
        return
    first = items[0]
    fields, links = by_item[first]
    if len(first) != width - fields.count(None) + len(links):  # a child the walk did not take
        fields, links = children_slots(first, table, every)
    yield first, fields, links
    fewest = fields.count(None) + (not links)
    for item in items[1:]:
        fields, links = by_item[item]
        if fields.count(None) + (not links) > fewest:
            fields, links = children_slots(item, table, every)
        yield item, fields, links


def base_chain(element: etree._Element, parent_chain: str | None, base_url: str) -> str | None:
    """The xml:base in effect at ``element``, or None if no ancestor-or-self declares one."""
    declared = element.get(XML_BASE)
    if declared is None:
        return parent_chain
    return resolve_url(declared, parent_chain or base_url)


def own_base(element: etree._Element | None, chain: str | None, base_url: str) -> str | None:
    """The base of an element that declares its own xml:base, else None (use the item's)."""
    if element is None or element.get(XML_BASE) is None:
        return None
    return base_chain(element, chain, base_url)


def first_child(parent: etree._Element, name: str) -> etree._Element | None:
    """The first child named ``name`` (lowercase; matched in any case)."""
    for child in parent:
        if isinstance(child.tag, str) and element_name(child).lower() == name:
            return child
    return None


def media_description(
    description: etree._Element | None, group: etree._Element | None
) -> etree._Element | None:
    """An entry's ``media:description``, its own or its ``media:group``'s (YouTube's feeds
    describe their videos only there): read when it has neither content nor description."""
    if description is None and group is not None:
        return first_child(group, "media:description")
    return description


def media_content_description(
    entry: etree._Element, group: etree._Element | None
) -> etree._Element | None:
    """The ``media:description`` of an entry's first ``media:content`` that has one, its own
    or its ``media:group``'s (a photo feed's caption may be its only text; feedparser reads it
    as the summary). It describes one media object, not the entry: read last."""
    for parent in (entry, group):
        for child in () if parent is None else parent:
            if isinstance(child.tag, str) and element_name(child).lower() == "media:content":
                found = first_child(child, "media:description")
                if found is not None:
                    return found
    return None


def optional_text(element: etree._Element | None) -> str | None:
    return text_of(element) if element is not None else None
