"""The feeds a web page announces (``<link rel="alternate" type="application/rss+xml">``).

Pure: HTML bytes and the page's URL in, links out. ``feedcollector add`` follows them
(:mod:`.discover`), and the parse stage names them when a feed URL answers with such a page.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from selectolax.lexbor import LexborHTMLParser

from .feed_urls import feed_url_key

FEED_TYPES = {
    "application/rss+xml": "RSS",
    "application/atom+xml": "Atom",
    "application/feed+json": "JSON Feed",
    "application/rdf+xml": "RSS 1.0",
}
"""``<link type>`` values that announce a feed."""


@dataclass(frozen=True, slots=True)
class FeedLink:
    """A feed a page announces."""

    url: str
    title: str | None
    kind: str


def feed_links(html: bytes, page_url: str) -> list[FeedLink]:
    """The feeds a page announces with ``<link rel="alternate" type=...>``, in page order."""
    tree = LexborHTMLParser(html)
    base = page_url
    base_node = tree.css_first("base[href]")
    if base_node is not None:
        base = _joined(page_url, base_node.attributes.get("href") or "") or page_url
    links: list[FeedLink] = []
    seen: set[str] = set()
    for node in tree.css("link[href]"):
        attributes = node.attributes
        rel = (attributes.get("rel") or "").lower().split()
        kind = FEED_TYPES.get((attributes.get("type") or "").split(";")[0].strip().lower())
        href = (attributes.get("href") or "").strip()
        if "alternate" not in rel or kind is None or not href:
            continue
        url = _joined(base, href)
        if url is None or (key := feed_url_key(url)) in seen:
            continue
        seen.add(key)
        title = " ".join((attributes.get("title") or "").split()) or None
        links.append(FeedLink(url, title, kind))
    return links


def _joined(base: str, href: str) -> str | None:
    """``href`` made absolute, or None when it is no web address (``javascript:``) or one
    urllib refuses (``http://[``, a host NFKC turns into a slash): pages are untrusted."""
    try:
        url = urljoin(base, href.strip())
        web = urlsplit(url).scheme in ("http", "https")
    except ValueError:
        return None
    return url if web else None
