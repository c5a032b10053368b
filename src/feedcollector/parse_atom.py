"""The Atom 0.3/1.0 reader of the XML fast path (:mod:`.parse_xml` hands it the root):
a feed's title, link and period, its entries' fields, and the link an entry or RSS item takes
among its links.
"""

from __future__ import annotations

from lxml import etree

from .html import resolve_url
from .models import ParsedFeed, ParsedItem
from .parse_common import (
    channel_title,
    choose_link,
    feed_base,
    finish_values,
    has_text,
    newest_end,
    ttl_minutes,
)
from .parse_elements import (
    XML_BASE,
    base_chain,
    item_fields,
    media_content_description,
    media_description,
    optional_text,
    own_base,
    wrapped,
)
from .parse_tags import ATOM_ENTRY, ATOM_ENTRY_WILDCARDS, ATOM_FEED, ATOM_LINKS, date_text
from .parse_text import atom_text, text_of, typed_markup, xhtml_container


def read_atom(feed: etree._Element, chain: str | None, base_url: str) -> ParsedFeed:
    """An Atom feed element (``chain``: the xml:base in effect at it) and its entries."""
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
        entries = wrapped(feed, ATOM_FEED, "entry")
    feed_link, default_base = feed_base(atom_link(links, chain, base_url), chain or base_url)
    title = found.get("title")
    entries, dropped = newest_end(entries, date_text)
    return ParsedFeed(
        title=channel_title(atom_text(title)) if title is not None else None,
        link=feed_link,
        items=tuple(
            _atom_entry(entry, fields, links, chain, default_base, base_url)
            for entry, fields, links in item_fields(
                feed, entries, ATOM_ENTRY, ATOM_ENTRY_WILDCARDS, ATOM_LINKS
            )
        ),
        format="atom",
        ttl_minutes=ttl_minutes(
            None, optional_text(found.get("period")), optional_text(found.get("frequency"))
        ),
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
    chain = base_chain(entry, parent_chain, base_url)
    _, title, guid, content, summary, published, updated, media, group = fields
    if published is None:
        dates: tuple[str, ...] = () if updated is None else (text_of(updated),)
    else:
        dates = (text_of(published),) if updated is None else (text_of(published), text_of(updated))
    content_html = typed_markup(content) if content is not None else None
    if summary is None and not has_text(content_html):
        summary = media_description(media, group)
        if summary is None:
            summary = media_content_description(entry, group)
    return finish_values(  # positional (faster), in RawEntry's order
        atom_text(title) if title is not None else None,  # title
        atom_link(links, chain, base_url),  # link
        optional_text(guid),  # guid
        content_html,  # content
        (  # description
            typed_markup(summary) if summary is not None and not has_text(content_html) else None
        ),
        dates,  # dates
        chain or default_base,  # base
        _text_base(content, chain, base_url),  # content_base
        _text_base(summary, chain, base_url),  # description_base
    )


def atom_link(links: list[etree._Element], chain: str | None, base_url: str) -> str | None:
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
    own = own_base(chosen, chain, base_url)
    return resolve_url(href, own) if own is not None else href


def _link_text(link: etree._Element) -> str:
    return text_of(link).strip()


def _text_base(element: etree._Element | None, chain: str | None, base_url: str) -> str | None:
    """:func:`own_base` of an Atom content or summary, or for ``type="xhtml"`` the base of the
    ``<div>`` that wraps it when that declares one: its children are the value, and XML Base
    gives them the div's base (feedparser leaves it out)."""
    own = own_base(element, chain, base_url)
    if element is None or element.get("type") != "xhtml":
        return own
    div = xhtml_container(element)
    if div is element or div.get(XML_BASE) is None:
        return own
    return base_chain(div, own or chain, base_url)
