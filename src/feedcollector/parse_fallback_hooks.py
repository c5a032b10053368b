"""Corrections to feedparser's reading, installed on its parser class for :mod:`.parse_fallback`
(feedparser serves only that module), so that a feed broken one day and well-formed the next
gives its items the links and GUIDs of the fast path.

**The base an element declares ends with it.** feedparser restores the enclosing ``xml:base``
at an end tag only when that base is not empty; without a base URL of its own (none is given:
a link is made absolute against the feed's link later, as the fast path does) every base is
empty until an ``xml:base`` is declared, so the base of an item, or of a description, stayed
in effect for the rest of the feed, and the relative links after it were joined to it. The
``xml:base`` in effect at each entry is recorded too (:data:`BASE_KEY`): feedparser's details
hold a content's own base, which is no base for the entry's link.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import feedparser.mixin

BASE_KEY = "feedcollector_base"
"""Entry key of the ``xml:base`` in effect at the entry ("" where none is)."""

_Mixin = feedparser.mixin._FeedParserMixin
_end_tag: Callable[[Any, str], None] = _Mixin.unknown_endtag
_start_item: Callable[[Any, dict[str, str]], None] = _Mixin._start_item


def _entry_start(parser: Any, attributes: dict[str, str]) -> None:
    _start_item(parser, attributes)
    parser.entries[-1][BASE_KEY] = parser.baseuri or ""


def _end_tag_base_restored(parser: Any, tag: str) -> None:
    """feedparser's end of an element, then the base in effect before it, empty or not."""
    _end_tag(parser, tag)
    if parser.basestack:
        parser.baseuri = parser.basestack[-1]


_Mixin.unknown_endtag = _end_tag_base_restored
_Mixin._start_item = _entry_start
_Mixin._start_entry = _entry_start
