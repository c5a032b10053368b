"""Finding a site's feeds for ``feedcollector add``.

Given a URL that is a feed, that is the answer. Given a web page, its ``<link
rel="alternate">`` tags of feed types name the candidates (relative ``href`` values resolved
against ``<base href>`` or the page URL); without any valid one, the common feed paths of the
site (``/feed``, ``/rss``, ``/atom.xml`` ...) are tried. Every candidate is validated the way
the collector will read it: fetched by the fetch stage (same User-Agent, timeouts, size caps
and redirect checks) and read by ``read_body.read_feed_body`` (decode, parse, normalize).

Finding links and listing paths are pure functions of bytes and URLs; :func:`discover_feeds`
is the I/O around them. Requests go one at a time: discovery is polite to the site.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urljoin, urlsplit

import aiohttp

from .errors import ConfigError, FetchError, ParseError
from .feed_links import FeedLink, feed_links
from .feed_urls import feed_url_key
from .fetch import FetchLimits, fetch_feed
from .read_body import read_feed_body

COMMON_FEED_PATHS = (
    "feed",
    "rss",
    "feed.xml",
    "rss.xml",
    "atom.xml",
    "index.xml",
    "feed.json",
    "feeds/posts/default",
    "index.rss",
    "?feed=rss2",
)
"""Where blog engines put their feed (WordPress, Hugo, Jekyll, Ghost, Blogger ...)."""


@dataclass(frozen=True, slots=True)
class FoundFeed:
    """A candidate that was fetched and read as a feed."""

    url: str
    title: str | None
    format: str
    items: int
    via: str
    """How it was found: ``given`` (the URL itself), ``link`` (announced) or ``path``."""


@dataclass(frozen=True, slots=True)
class Discovery:
    url: str
    feeds: tuple[FoundFeed, ...]
    announced: tuple[FeedLink, ...] = ()
    """Every feed the page announces (only some are validated unless all were wanted)."""
    rejected: tuple[tuple[str, str], ...] = ()
    """Announced feeds that are not usable, with the reason."""


# --- decisions (pure) ---------------------------------------------------------------------


def common_feed_urls(page_url: str) -> list[str]:
    """The common feed paths under the page's folder and under the site root, deduplicated."""
    parts = urlsplit(page_url)
    root = f"{parts.scheme}://{parts.netloc}/"
    folder = urljoin(page_url, "./") if parts.path not in ("", "/") else root
    urls: list[str] = []
    for base in dict.fromkeys((folder, root)):
        for path in COMMON_FEED_PATHS:
            url = urljoin(base, path)
            if url not in urls:
                urls.append(url)
    return urls


# --- I/O ----------------------------------------------------------------------------------


async def discover_feeds(
    client: aiohttp.ClientSession,
    url: str,
    limits: FetchLimits,
    *,
    now: datetime,
    want: int | None = 1,
) -> Discovery:
    """The feeds ``url`` is or leads to: at least ``want`` of them when there are (None: all).

    Raises ConfigError when ``url`` itself cannot be fetched."""
    try:
        page = await fetch_feed(client, url, etag=None, last_modified=None, limits=limits)
    except FetchError as exc:
        raise ConfigError(f"add: {url} cannot be fetched: {exc}") from exc
    try:
        parsed, records = read_feed_body(
            page.body, page.content_type, page.final_url, url, now, warn=False
        )
    except ParseError:
        pass
    else:
        where = page.permanent_url or url  # a feed that moved for good is added where it is
        found = FoundFeed(where, parsed.title, parsed.format, len(records), "given")
        return Discovery(url, (found,))
    feeds: list[FoundFeed] = []
    rejected: list[tuple[str, str]] = []
    seen = {feed_url_key(url), feed_url_key(page.final_url)}
    found_at: set[str] = set()
    links = feed_links(page.body, page.final_url)
    announced = [link.url for link in links]
    for pool, via in ((announced, "link"), (common_feed_urls(page.final_url), "path")):
        for candidate in pool:
            if want is not None and len(feeds) >= want:
                break
            if feed_url_key(candidate) in seen:
                continue
            seen.add(feed_url_key(candidate))
            checked = await _check(client, candidate, via, limits, now)
            if isinstance(checked, str):
                if via == "link":  # a missing common path is no news
                    rejected.append((candidate, checked))
            elif checked[1] not in found_at:  # two paths, one feed (a redirect)
                found_at.add(checked[1])
                feeds.append(checked[0])
        if feeds:
            break  # the page's own links win; common paths only when none of them works
    return Discovery(url, tuple(feeds), tuple(links), tuple(rejected))


async def _check(
    client: aiohttp.ClientSession, url: str, via: str, limits: FetchLimits, now: datetime
) -> tuple[FoundFeed, str] | str:
    """The feed at ``url`` with the key of where it really is, or why it is not one."""
    try:
        response = await fetch_feed(client, url, etag=None, last_modified=None, limits=limits)
        parsed, records = read_feed_body(
            response.body, response.content_type, response.final_url, url, now, warn=False
        )
    except (FetchError, ParseError) as exc:
        return str(exc)
    found = FoundFeed(response.permanent_url or url, parsed.title, parsed.format, len(records), via)
    return found, feed_url_key(response.final_url)
