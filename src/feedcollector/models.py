"""Frozen records handed from one stage of the pipeline to the next.

Frozen dataclasses, except the two built once per item on the hot path (:class:`ParsedItem`,
:class:`ItemRecord`): those are NamedTuples, as immutable and about three times cheaper to
build (a frozen dataclass sets each field through ``object.__setattr__``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple


@dataclass(frozen=True, slots=True)
class FeedSpec:
    """One entry of the feeds file (the single source of truth for subscriptions)."""

    url: str
    interval: timedelta | None = None
    title: str | None = None


@dataclass(frozen=True, slots=True)
class Feed:
    """A feed row as the scheduler hands it to the pipeline."""

    id: str
    url: str
    title: str | None = None
    last_etag: str | None = None
    last_modified: str | None = None
    last_fetched_at: str | None = None
    consecutive_failures: int = 0
    next_fetch_at: str | None = None
    interval_seconds: int | None = None
    moved_to: str | None = None
    """Where a permanent redirect pointed: fetched from there instead of ``url``."""
    gone_at: str | None = None
    """When it answered 410 Gone (no longer scheduled; a manual fetch still tries it)."""
    retry_after_until: str | None = None
    """Until when the server's last Retry-After asks us to stay away."""
    feed_ttl_seconds: int | None = None
    """The feed's own ``<ttl>``/``sy:updatePeriod`` from its last 200, kept over 304s."""
    post_gap_seconds: int | None = None
    """Average gap between its newest dated items (None: too few to tell)."""
    newest_item_at: str | None = None
    """The publication time of its newest dated item."""
    body_digest: str | None = None
    """:func:`.fetch.body_digest` of the last body whose items were stored."""


@dataclass(frozen=True, slots=True)
class ResponseHints:
    """The response headers that say when to come back, as the server sent them."""

    retry_after: str | None = None
    cache_control: str | None = None
    expires: str | None = None
    date: str | None = None
    age: str | None = None


@dataclass(frozen=True, slots=True)
class FetchedFeed:
    """An HTTP answer for a feed: 304 (no body) or 200 with the raw bytes, never decoded."""

    url: str
    final_url: str
    status: int
    body: bytes = b""
    content_type: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    elapsed_s: float = 0.0
    hints: ResponseHints = field(default_factory=ResponseHints)
    permanent_url: str | None = None
    """Where the leading permanent redirects (301/308) of the chain led, if there were any."""
    unknown_codings: str | None = None
    """Content-Encoding names this client does not decode, as sent (the body is passed on as
    it came): said when the body then fails to parse."""

    @property
    def not_modified(self) -> bool:
        return self.status == 304


@dataclass(frozen=True, slots=True)
class DecodedFeed:
    """A body converted to UTF-8, with the encoding it was read as and why."""

    data: bytes
    encoding: str
    source: str
    """Where the encoding came from: bom, http, declaration, detected or default."""
    replaced: int = 0
    """Byte sequences no encoding could read, each replaced by U+FFFD (a lossy reading: the
    caller warns, naming the feed); 0 when every byte was read."""
    stray_windows_1252: int = 0
    """Bytes of a UTF-8 body that are no UTF-8, read as windows-1252 (Western text from a
    legacy source pasted into a UTF-8 template; the caller says so, naming the feed)."""


class ParsedItem(NamedTuple):
    """One entry, normalized: GUID chain applied, URLs in ``content_html`` absolute."""

    guid: str
    link: str | None
    title: str | None
    content_html: str | None
    pub_date: datetime | None
    """Aware UTC datetime, or None when the feed gave no date or one we cannot read."""
    raw_pub_date: str | None
    """The date text exactly as it appears in the feed (logged when unparseable)."""
    earlier_guid: str | None = None
    """The GUID versions before the repair of mis-encoded text (:mod:`.text_repair`) gave the
    item, when the repair changed it: stored under that one, the item is not stored again."""


@dataclass(frozen=True, slots=True)
class ParsedFeed:
    """A whole feed document, as the parse stage returns it."""

    title: str | None
    link: str | None
    items: tuple[ParsedItem, ...] = field(default_factory=tuple)
    format: str = "rss"
    """rss, rdf, atom or json; with ``-fallback`` when the lenient parser read it."""
    ttl_minutes: int | None = None
    """RSS ``<ttl>`` or ``sy:updatePeriod``/``sy:updateFrequency``, in minutes, if given."""
    items_dropped: int = 0
    """Items beyond ``MAX_ITEMS_PER_FEED`` that were not read (the pipeline warns)."""
    cut_off: bool = False
    """The document ends inside an item, which was left out (the pipeline warns; see
    :func:`.parse_repair.whole_items`)."""
    unclosed: bool = False
    """The document ends after a whole item without closing its channel or root: cut off
    between items (see :func:`.parse_repair.ends_unclosed`), a failure as ``cut_off``."""


@dataclass(frozen=True, slots=True)
class ImageTask:
    """A pending image download, with what its object key needs and its logs name."""

    id: str
    item_id: str
    feed_id: str
    guid: str
    original_url: str
    position: int
    attempts: int
    created_at: str
    retry_at: str = ""
    """When a failed attempt let it be tried again ('' for a task never failed): the claim
    cursor's first column."""
    feed_url: str = ""


class ItemRecord(NamedTuple):
    """An item ready for ``INSERT OR IGNORE``: id generated, date settled, images listed."""

    id: str
    guid: str
    link: str | None
    title: str | None
    pub_date: str
    content_html: str | None
    image_urls: tuple[str, ...]
    content_key: str | None = None
    """Object key holding the HTML when it was too big to store inline (``content_html``
    is then None); see :mod:`feedcollector.spill`."""
    earlier_guid: str | None = None
    """:attr:`ParsedItem.earlier_guid`: an item stored (or expired) under it is not new."""
