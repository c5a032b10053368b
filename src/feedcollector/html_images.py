"""The ``src`` of every ``<img>`` of item HTML, as an HTML5 parser (lexbor) finds them.

A lexbor document costs about 15 us to create and free whatever its size, more than parsing a
typical item. :func:`image_sources_of_items` therefore reads the items of a feed in one
document, joined by marker images whose ``src`` holds a random nonce between NUL characters
(read as U+FFFD), so no item can forge one. Joining must not change what any item yields:

- After each marker's ``>`` the tokenizer is in its data state, as at the start of a document.
  An item that ends inside a tag, a quoted value, a comment or the text of a script, style,
  textarea, title, template... swallows the next marker, or leaves a select or frameset that
  drops it; then fewer markers are found and every item is parsed on its own instead.
- Tree construction inserts an ``<img>`` in body content in document order, whatever elements
  an earlier item left open, except where a table moves content (foster parenting) and where a
  frameset can replace the body; items with ``<table``, ``<frameset``, ``<svg`` or ``<math``
  (foreign content, kept apart for good measure) get their own document.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from selectolax.lexbor import LexborHTMLParser

_OWN_DOCUMENT_RE = re.compile(r"<(?i:table|frameset|svg|math)")
"""Constructs whose effect on image order could reach past the item (Unicode case folding
may also match a look-alike, which only costs a separate document)."""


def image_sources(html: str) -> list[str]:
    """The ``src`` of every ``<img>``, in document order, entities decoded and trimmed.

    Empty values and ``data:`` URIs are skipped; everything else is kept (the caller decides
    what is downloadable). Images inside ``<noscript>`` count (lazy-loading pages put the real
    image there); those inside ``<template>`` do not (they are not part of the document).
    """
    if "<" not in html:
        return []
    return _kept(_raw_sources(html))


def image_sources_of_items(htmls: Sequence[str]) -> list[list[str]]:
    """:func:`image_sources` of each of ``htmls``, read in as few documents as is safe."""
    joinable = [index for index, html in enumerate(htmls) if "<" in html]
    if len(joinable) > 1 and any(_OWN_DOCUMENT_RE.search(htmls[i]) for i in joinable):
        joinable = [index for index in joinable if not _OWN_DOCUMENT_RE.search(htmls[index])]
    found: dict[int, list[str]] = {}
    if len(joinable) > 1:
        groups = _joined_raw_sources([htmls[index] for index in joinable])
        if groups is not None:
            found = {index: _kept(raw) for index, raw in zip(joinable, groups, strict=True)}
    return [
        found[index] if index in found else image_sources(html) for index, html in enumerate(htmls)
    ]


_NONCE = os.urandom(16).hex()
"""The markers' nonce, one a process (drawn per feed, its system call cost about 30 us of a
cycle's CPU a feed): secret all the same, since neither it nor a marker leaves the process."""
_MARKER = f'<img src="\x00{_NONCE}\x00">'
_MARKER_SOURCE = f"\ufffd{_NONCE}\ufffd"
"""A marker's ``src`` as lexbor reads it (NUL becomes U+FFFD)."""


def _joined_raw_sources(htmls: list[str]) -> list[list[str]] | None:
    """The raw ``src`` values of each item, from one document; None if a marker was lost."""
    groups: list[list[str]] = [[]]
    for node in LexborHTMLParser(_MARKER.join(htmls)).tags("img"):
        value = node.attrs.get("src")
        if value == _MARKER_SOURCE:
            groups.append([])
        elif value is not None:
            groups[-1].append(value)
    return groups if len(groups) == len(htmls) else None


def _raw_sources(html: str) -> list[str]:
    values: list[str] = []
    for node in LexborHTMLParser(html).tags("img"):
        value = node.attrs.get("src")
        if value is not None:
            values.append(value)
    return values


_TAB_AND_LINE_BREAKS = str.maketrans("", "", "\t\n\r")


def attribute_url(value: str) -> str:
    """A URL as browsers read it from an attribute (entities decoded): trimmed, and without
    the tabs and line breaks the URL standard drops anywhere in it (an ``<img src>`` broken
    over two lines loads in a browser; kept, it failed all three attempts)."""
    value = value.strip()
    return (
        value.translate(_TAB_AND_LINE_BREAKS)
        if "\n" in value or "\t" in value or "\r" in value
        else value
    )


def _kept(raw: list[str]) -> list[str]:
    sources: list[str] = []
    for value in raw:
        value = attribute_url(value)
        if value and value[:5].lower() != "data:":
            sources.append(value)
    return sources
