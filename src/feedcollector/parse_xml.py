"""The fast path of the parse stage: an lxml tree of RSS 0.9x/1.0/2.0 or Atom 0.3/1.0 -> model.

Elements are told apart by the tables of :mod:`.parse_tags` (canonical tag names; namespaces
recognized by URI, common misspellings tolerated). The fields of all items are gathered in one
filtered walk per document (:func:`_item_fields`); values are read with :mod:`.parse_text`.

URL bases: the ``xml:base`` chain where one is declared (resolved against the fetch URL, as
XML Base says), else the feed's link (channel ``<link>`` / Atom alternate link, itself made
absolute), else the fetch URL. The ``xml:base`` of the ``<div>`` that wraps Atom XHTML
content counts; one inside that content is not followed.
"""

from __future__ import annotations

from collections.abc import Iterator

from lxml import etree

from .errors import ParseError
from .html import resolve_url
from .models import ParsedFeed, ParsedItem
from .parse_common import (
    channel_title,
    choose_link,
    feed_base,
    finish_values,
    has_text,
    newest_end,
    permalink,
    ttl_minutes,
)
from .parse_tags import (
    ATOM_ENTRY,
    ATOM_ENTRY_WILDCARDS,
    ATOM_FEED,
    ATOM_LINKS,
    RSS_ATOM_LINKS,
    RSS_CHANNEL,
    RSS_ITEM,
    RSS_ITEM_WILDCARDS,
    FieldTable,
    Slots,
    canonical_tag,
    children_slots,
    date_text,
    element_name,
    wildcards,
)
from .parse_text import atom_text, markup_of, text_of, typed_markup, xhtml_container

XML_BASE = "{http://www.w3.org/XML/1998/namespace}base"
FEED_ROOT_NAMES = ("feed", "rss", "rdf", "channel")


class ReadByLocalNames(ParseError):
    """A feed this reader does not read as written: its root element in a namespace no RSS
    or Atom version uses (a misspelled or draft Atom URI). The tables here match names in
    known namespaces; feedparser matches local names in any namespace, so
    :func:`.parse.parse_feed` hands the document to it, and words its own errors with
    :attr:`reason`."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"parse: {reason}")
        self.reason = reason


class NotAFeedRoot(ParseError):
    """A well-formed document whose root is no feed element; :func:`.parse.parse_feed` words
    the error, saying what the document is instead (:attr:`root`)."""

    def __init__(self, root: etree._Element) -> None:
        super().__init__(f"parse: not a feed (root element <{etree.QName(root).localname}>)")
        self.root = root


def feed_from_tree(root: etree._Element, base_url: str) -> ParsedFeed:
    """Read a parsed document; ParseError if its root is not a feed."""
    if not isinstance(root.tag, str):
        raise ParseError("parse: document has no root element")
    name = canonical_tag(root.tag).lower()  # names match in any case, as in parse_tags
    root_chain = _chain(root, None, base_url)
    if name in ("rss", "rdf:rdf", "rdf"):
        format_name = "rss" if name == "rss" else "rdf"
        channel = _first_child(root, "channel")
        if channel is None:  # items right under the root, as feedparser reads them too
            return _read_rss(root, [], [], None, base_url, format_name)
        before, after = _items_beside(root, channel)
        return _read_rss(channel, before, after, root_chain, base_url, format_name)
    if name == "channel":
        return _read_rss(root, [], [], None, base_url, "rss")
    if name in ("atom:feed", "feed"):
        return _read_atom(root, root_chain, base_url)
    qname = etree.QName(root)
    if qname.localname.lower() in FEED_ROOT_NAMES:
        raise ReadByLocalNames(
            f"root element <{qname.localname}> in the namespace {qname.namespace!r}, "
            "which no RSS or Atom version uses"
        )
    raise NotAFeedRoot(root)


def _items_beside(
    root: etree._Element, channel: etree._Element
) -> tuple[list[etree._Element], list[etree._Element]]:
    """The items that are siblings of the channel, before it and after it.

    RDF puts its items there; an RSS feed that closes its channel too early leaves some there
    too (feedparser reads them, and so does this reader).
    """
    before: list[etree._Element] = []
    after: list[etree._Element] = []
    found = before
    for child in root:
        if child is channel:
            found = after
        elif isinstance(child.tag, str) and RSS_CHANNEL.key(child.tag, child) == "item":
            found.append(child)
    return before, after


def _read_rss(
    channel: etree._Element,
    before: list[etree._Element],
    after: list[etree._Element],
    parent_chain: str | None,
    base_url: str,
    format_name: str,
) -> ParsedFeed:
    """A channel and its items, with any items beside the channel (``before`` and ``after``
    it) in document order."""
    chain = _chain(channel, parent_chain, base_url)
    found: dict[str, etree._Element] = {}
    all_items = list(before)
    for child in channel:
        tag = child.tag
        if tag.__class__ is not str:
            continue
        key = RSS_CHANNEL.key(tag, child)
        if key == "item":
            all_items.append(child)
        elif key is not None and (key not in found or not text_of(found[key]).strip()):
            found[key] = child
    all_items += after
    if not all_items:
        all_items = _wrapped(channel, RSS_CHANNEL, "item")
    feed_link, default_base = feed_base(_text(found.get("link")), chain or base_url)
    outer = channel.getparent() if before or after else None
    walk_root = outer if outer is not None else channel
    all_items, dropped = newest_end(all_items, date_text)
    entries = tuple(
        _rss_item(item, fields, links, chain, default_base, base_url)
        for item, fields, links in _item_fields(
            walk_root, all_items, RSS_ITEM, RSS_ITEM_WILDCARDS, RSS_ATOM_LINKS
        )
    )
    return ParsedFeed(
        title=channel_title(_text(found.get("title"))),
        link=feed_link,
        items=entries,
        format=format_name,
        ttl_minutes=ttl_minutes(
            _text(found.get("ttl")), _text(found.get("period")), _text(found.get("frequency"))
        ),
        items_dropped=dropped,
    )


def _wrapped(parent: etree._Element, table: FieldTable[str], name: str) -> list[etree._Element]:
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


def _item_fields(
    container: etree._Element,
    items: list[etree._Element],
    table: FieldTable[int],
    wildcards: tuple[str, ...],
    every: int | None = None,
) -> Iterator[tuple[etree._Element, list[etree._Element | None], list[etree._Element]]]:
    """Each item with its first child per slot of ``table``, and all its children of slot
    ``every`` (Atom links).

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
        elif found[0][slot] is None:
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


def _rss_item(
    item: etree._Element,
    fields: list[etree._Element | None],
    atom_links: list[etree._Element],
    parent_chain: str | None,
    default_base: str,
    base_url: str,
) -> ParsedItem:
    chain = _chain(item, parent_chain, base_url)
    (
        title,
        link,
        guid,
        description,
        content,
        pub_date,
        dc_date,
        _,
        media,
        group,
        published,
        updated,
    ) = fields
    link_text = None if link is None else text_of(link)
    if atom_links and not has_text(link_text):
        link_text = _atom_link(atom_links, chain, base_url)  # as feedparser reads it
    if guid is not None and not has_text(link_text):  # "true" only, as feedparser reads it
        link_text = permalink(text_of(guid), guid.get("isPermaLink", "true") == "true")
    content_html = None if content is None else markup_of(content)
    description_html = None
    if has_text(content_html):
        description = None  # not read: the content wins
    elif description is not None:  # elements are falsy without children: no `or` here
        description_html = markup_of(description)
    else:  # text constructs (Media RSS "plain" by default; iTunes: no HTML), as Atom's
        description = _media_description(media, group)
        if description is None:
            description = _first_child(item, "itunes:summary")
        if description is None:
            description = _media_content_description(item, group)
        description_html = None if description is None else typed_markup(description)
    if dc_date is None and published is None and updated is None:  # the usual item
        dates: tuple[str, ...] = () if pub_date is None else (text_of(pub_date),)
    else:  # in this order: the first one's text is what the GUID fallback hashes, as before
        dates = tuple(text_of(d) for d in (pub_date, dc_date, published, updated) if d is not None)
    title_text = None if title is None else text_of(title)
    guid_text = None if guid is None else text_of(guid)
    enclosure = None
    if not dates or not has_text(dates[0]):  # rare: an item without a date to hash
        texts = (title_text, guid_text, link_text, content_html, description_html, *dates)
        enclosure = _lone_enclosure(item, texts)
    return finish_values(  # positional (faster), in RawEntry's order
        title_text,  # title
        link_text,  # link
        guid_text,  # guid
        content_html,  # content
        description_html,  # description
        dates,  # dates
        chain or default_base,  # base
        _own_base(content, chain, base_url),  # content_base
        _own_base(description, chain, base_url),  # description_base
        enclosure,  # enclosure
    )


def _read_atom(feed: etree._Element, chain: str | None, base_url: str) -> ParsedFeed:
    found: dict[str, etree._Element] = {}
    links: list[etree._Element] = []
    entries: list[etree._Element] = []
    for child in feed:
        tag = child.tag
        if tag.__class__ is not str:
            continue
        key = ATOM_FEED.key(tag, child)
        if key == "entry":
            entries.append(child)
        elif key == "link":
            links.append(child)
        elif key is not None and key not in found:
            found[key] = child
    if not entries:
        entries = _wrapped(feed, ATOM_FEED, "entry")
    feed_link, default_base = feed_base(_atom_link(links, chain, base_url), chain or base_url)
    title = found.get("title")
    entries, dropped = newest_end(entries, date_text)
    return ParsedFeed(
        title=channel_title(atom_text(title)) if title is not None else None,
        link=feed_link,
        items=tuple(
            _atom_entry(entry, fields, links, chain, default_base, base_url)
            for entry, fields, links in _item_fields(
                feed, entries, ATOM_ENTRY, ATOM_ENTRY_WILDCARDS, ATOM_LINKS
            )
        ),
        format="atom",
        ttl_minutes=ttl_minutes(None, _text(found.get("period")), _text(found.get("frequency"))),
        items_dropped=dropped,
    )


def _atom_entry(
    entry: etree._Element,
    fields: list[etree._Element | None],
    links: list[etree._Element],
    parent_chain: str | None,
    default_base: str,
    base_url: str,
) -> ParsedItem:
    chain = _chain(entry, parent_chain, base_url)
    _, title, guid, content, summary, published, updated, media, group = fields
    if published is None:
        dates: tuple[str, ...] = () if updated is None else (text_of(updated),)
    else:
        dates = (text_of(published),) if updated is None else (text_of(published), text_of(updated))
    content_html = typed_markup(content) if content is not None else None
    if summary is None and not has_text(content_html):
        summary = _media_description(media, group)
        if summary is None:
            summary = _media_content_description(entry, group)
    return finish_values(  # positional (faster), in RawEntry's order
        atom_text(title) if title is not None else None,  # title
        _atom_link(links, chain, base_url),  # link
        _text(guid),  # guid
        content_html,  # content
        (  # description
            typed_markup(summary) if summary is not None and not has_text(content_html) else None
        ),
        dates,  # dates
        chain or default_base,  # base
        _text_base(content, chain, base_url),  # content_base
        _text_base(summary, chain, base_url),  # description_base
    )


def _atom_link(links: list[etree._Element], chain: str | None, base_url: str) -> str | None:
    """The href of the link :func:`.parse_common.choose_link` picks, made absolute against
    its own xml:base if it has one (the caller resolves it against the entry's). A link
    without an ``href`` has its text for one (``<link>https://...</link>``, as RSS writes it),
    as feedparser reads it."""
    chosen = choose_link(links, etree._Element.get, _link_text)
    if chosen is None:
        return None
    href = chosen.get("href")
    if href is None:
        href = _link_text(chosen)
    own = _own_base(chosen, chain, base_url)
    return resolve_url(href, own) if own is not None else href


def _link_text(link: etree._Element) -> str:
    return text_of(link).strip()


def _lone_enclosure(item: etree._Element, texts: tuple[str | None, ...]) -> str | None:
    """The first enclosure's URL of an item none of whose ``texts`` (title, GUID, link,
    content, description, dates) has any: the GUID fallback's last resort, read only then."""
    if any(has_text(text) for text in texts):
        return None
    found = _first_child(item, "enclosure")
    return None if found is None else found.get("url")


def _media_description(
    description: etree._Element | None, group: etree._Element | None
) -> etree._Element | None:
    """An entry's ``media:description``, its own or its ``media:group``'s (YouTube's feeds
    describe their videos only there): read when it has neither content nor description."""
    if description is None and group is not None:
        return _first_child(group, "media:description")
    return description


def _media_content_description(
    entry: etree._Element, group: etree._Element | None
) -> etree._Element | None:
    """The ``media:description`` of an entry's first ``media:content`` that has one, its own
    or its ``media:group``'s (a photo feed's caption may be its only text; feedparser reads it
    as the summary). It describes one media object, not the entry: read last."""
    for parent in (entry, group):
        for child in () if parent is None else parent:
            if isinstance(child.tag, str) and element_name(child).lower() == "media:content":
                found = _first_child(child, "media:description")
                if found is not None:
                    return found
    return None


def _first_child(parent: etree._Element, name: str) -> etree._Element | None:
    """The first child named ``name`` (lowercase; matched in any case)."""
    for child in parent:
        if isinstance(child.tag, str) and element_name(child).lower() == name:
            return child
    return None


def _chain(element: etree._Element, parent_chain: str | None, base_url: str) -> str | None:
    """The xml:base in effect at ``element``, or None if no ancestor-or-self declares one."""
    declared = element.get(XML_BASE)
    if declared is None:
        return parent_chain
    return resolve_url(declared, parent_chain or base_url)


def _own_base(element: etree._Element | None, chain: str | None, base_url: str) -> str | None:
    """The base of an element that declares its own xml:base, else None (use the item's)."""
    if element is None or element.get(XML_BASE) is None:
        return None
    return _chain(element, chain, base_url)


def _text_base(element: etree._Element | None, chain: str | None, base_url: str) -> str | None:
    """:func:`_own_base` of an Atom content or summary, or for ``type="xhtml"`` the base of the
    ``<div>`` that wraps it when that declares one: its children are the value, and XML Base
    gives them the div's base (feedparser leaves it out)."""
    own = _own_base(element, chain, base_url)
    if element is None or element.get("type") != "xhtml":
        return own
    div = xhtml_container(element)
    if div is element or div.get(XML_BASE) is None:
        return own
    return _chain(div, own or chain, base_url)


def _text(element: etree._Element | None) -> str | None:
    return text_of(element) if element is not None else None
