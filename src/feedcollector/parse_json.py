"""JSON Feed 1.x (https://jsonfeed.org/version/1.1) -> the same model as RSS/Atom.

Mapping: ``id`` -> GUID (numbers accepted as text), ``url`` -> link, ``content_html`` ->
content, else ``content_text`` HTML-escaped (plain text must not be read as markup),
``date_published`` then ``date_modified`` -> dates, ``home_page_url`` -> feed link (and base).
Mis-encoded text is repaired in the content too, as in an XML feed's (:mod:`.text_repair`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from html import escape

from .errors import ParseError
from .models import ParsedFeed, ParsedItem
from .parse_common import RawEntry, cut_title, feed_base, finish_item, newest_end
from .safe_text import one_line, whole_pairs, xml_chars
from .text_repair import readable

JSON_FEED_VERSION_PREFIX = "https://jsonfeed.org/version/"


JSON_SHOWN = 120
"""Characters of a JSON document that is no feed quoted in its error (an API's error says
why)."""


def parse_json_feed(data: bytes, base_url: str) -> ParsedFeed:
    """Read a JSON Feed document; ParseError if it is not one."""
    try:
        document = json.loads(data, parse_int=_Integer)
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"parse: invalid JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise ParseError("parse: JSON document is not an object")
    version = document.get("version")
    if not isinstance(version, str) or not version.startswith(JSON_FEED_VERSION_PREFIX):
        raise ParseError(
            "parse: JSON document is not a JSON Feed (no jsonfeed.org version): "
            + one_line(data[: JSON_SHOWN * 4].decode("utf-8", "replace"), JSON_SHOWN)
        )
    items = document.get("items")
    if not isinstance(items, list):
        raise ParseError("parse: JSON Feed without an items list")
    feed_link, default_base = feed_base(_string(document.get("home_page_url")), base_url)
    title = _string(document.get("title"))
    kept, dropped = newest_end([entry for entry in items if isinstance(entry, dict)], _date_text)
    return ParsedFeed(
        title=cut_title(title.strip() or None) if title is not None else None,
        link=feed_link,
        items=tuple(_item(entry, default_base) for entry in kept),
        format="json",
        items_dropped=dropped,
    )


def _date_text(entry: dict[str, object]) -> str | None:
    return _string(entry.get("date_published")) or _string(entry.get("date_modified"))


def _item(entry: dict[str, object], base: str) -> ParsedItem:
    """An item as the fast path reads one: ``content_html``, else the plain ``content_text``
    or ``summary`` (escaped) as the description; ``url``, else ``external_url`` (a link
    post's target) as the link."""
    identifier = entry.get("id")
    if isinstance(identifier, _Integer):
        identifier = identifier.digits
    elif isinstance(identifier, float):
        identifier = str(identifier)
    text = _string(entry.get("content_text")) or _string(entry.get("summary"))
    content = _string(entry.get("content_html"))
    dates = tuple(
        value
        for value in (_string(entry.get("date_published")), _string(entry.get("date_modified")))
        if value
    )
    return finish_item(
        RawEntry(
            title=_string(entry.get("title")),
            link=_string(entry.get("url")) or _string(entry.get("external_url")),
            guid=_string(identifier),
            content=None if content is None else readable(content),
            description=None if text is None else readable(escape(text, quote=False)),
            dates=dates,
            base=base,
        )
    )


@dataclass(frozen=True, slots=True)
class _Integer:
    """A JSON integer kept as its digits: int() refuses more than 4,300 of them, and one such
    number anywhere in a feed made the whole document "invalid JSON". An integer id is the
    GUID as written."""

    digits: str


def _string(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    return whole_pairs(xml_chars(value))  # so a JSON Feed stores what an XML one could
