"""The fast path of the parse stage: an lxml tree of RSS 0.9x/1.0/2.0 or Atom 0.3/1.0 -> model
(the RSS reader here, Atom's in :mod:`.parse_atom`).

Elements are told apart by the tables of :mod:`.parse_tags` (canonical tag names; namespaces
recognized by URI, common misspellings tolerated). The fields of all items are gathered in one
filtered walk per document (:func:`.parse_elements.item_fields`); values are read with
:mod:`.parse_text`.

URL bases: the ``xml:base`` chain where one is declared (resolved against the fetch URL, as
XML Base says), else the feed's link (channel ``<link>`` / Atom alternate link, itself made
absolute), else the fetch URL. The ``xml:base`` of the ``<div>`` that wraps Atom XHTML
content counts; one inside that content is followed by :mod:`.html_bases`.
"""

from __future__ import annotations

from lxml import etree

from .errors import ParseError
from .models import ParsedFeed, ParsedItem
from .parse_atom import atom_link, read_atom
from .parse_common import (
    channel_title,
    feed_base,
    finish_values,
    has_text,
    newest_end,
    permalink,
    ttl_minutes,
)
from .parse_elements import (
    base_chain,
    first_child,
    item_fields,
    media_content_description,
    media_description,
    optional_text,
    own_base,
    wrapped,
)
from .parse_tags import (
    RSS_ATOM_LINKS,
    RSS_CHANNEL,
    RSS_ITEM,
    RSS_ITEM_WILDCARDS,
    canonical_tag,
    date_text,
)
from .parse_text import markup_of, text_of, typed_markup

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
    root_chain = base_chain(root, None, base_url)
    if name in ("rss", "rdf:rdf", "rdf"):
        format_name = "rss" if name == "rss" else "rdf"
        channel = first_child(root, "channel")
        if channel is None:  # items right under the root, as feedparser reads them too
            return _read_rss(root, [], [], None, base_url, format_name)
        before, after = _items_beside(root, channel)
        return _read_rss(channel, before, after, root_chain, base_url, format_name)
    if name == "channel":
        return _read_rss(root, [], [], None, base_url, "rss")
    if name in ("atom:feed", "feed"):
        return read_atom(root, root_chain, base_url)
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
    chain = base_chain(channel, parent_chain, base_url)
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
        all_items = wrapped(channel, RSS_CHANNEL, "item")
    feed_link, default_base = feed_base(optional_text(found.get("link")), chain or base_url)
    outer = channel.getparent() if before or after else None
    walk_root = outer if outer is not None else channel
    all_items, dropped = newest_end(all_items, date_text)
    entries = tuple(
        _rss_item(item, fields, links, chain, default_base, base_url)
        for item, fields, links in item_fields(
            walk_root, all_items, RSS_ITEM, RSS_ITEM_WILDCARDS, RSS_ATOM_LINKS
        )
    )
    return ParsedFeed(
        title=channel_title(optional_text(found.get("title"))),
        link=feed_link,
        items=entries,
        format=format_name,
        ttl_minutes=ttl_minutes(
            optional_text(found.get("ttl")),
            optional_text(found.get("period")),
            optional_text(found.get("frequency")),
        ),
        items_dropped=dropped,
    )


def _rss_item(
    item: etree._Element,
    fields: list[etree._Element | None],
    atom_links: list[etree._Element],
    parent_chain: str | None,
    default_base: str,
    base_url: str,
) -> ParsedItem:
    chain = base_chain(item, parent_chain, base_url)
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
        link_text = atom_link(atom_links, chain, base_url)  # as feedparser reads it
    if guid is not None and not has_text(link_text):  # "true" only, as feedparser reads it
        link_text = permalink(text_of(guid), guid.get("isPermaLink", "true") == "true")
    content_html = None if content is None else markup_of(content)
    description_html = None
    if has_text(content_html):
        description = None  # not read: the content wins
    elif description is not None:  # elements are falsy without children: no `or` here
        description_html = markup_of(description)
    else:  # text constructs (Media RSS "plain" by default; iTunes: no HTML), as Atom's
        description = media_description(media, group)
        if description is None:
            description = first_child(item, "itunes:summary")
        if description is None:
            description = media_content_description(item, group)
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
        own_base(content, chain, base_url),  # content_base
        own_base(description, chain, base_url),  # description_base
        enclosure,  # enclosure
    )


def _lone_enclosure(item: etree._Element, texts: tuple[str | None, ...]) -> str | None:
    """The first enclosure's URL of an item none of whose ``texts`` (title, GUID, link,
    content, description, dates) has any: the GUID fallback's last resort, read only then."""
    if any(has_text(text) for text in texts):
        return None
    found = first_child(item, "enclosure")
    return None if found is None else found.get("url")
