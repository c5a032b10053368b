"""What a feed server says about when to come back, read from its response headers (pure).

``Retry-After`` (429/503: seconds or an HTTP-date), the freshness of the answer
(``Cache-Control: max-age`` minus ``Age``, else ``Expires`` minus ``Date``) and the permanent part
of a redirect chain. Dates in headers are measured against the server's own ``Date`` when it
sends one, so a server whose clock is off by an hour still means what it says. Nothing here
caps a value: the caps are policy (:mod:`.schedule`); here a value too large for ``timedelta``
is only clipped to ``MAX_HINT``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

from .models import ResponseHints
from .safe_text import clipped_int

MAX_HINT = timedelta(days=3650)
"""Larger values are clipped here, before any policy cap (a header may hold any number)."""
PERMANENT_REDIRECTS = frozenset({301, 308})
_DELTA_SECONDS = re.compile(r"\d+")
_MAX_AGE = re.compile(r'(?<![\w-])max-age\s*=\s*"?(\d+)"?')
_NO_FLOOR = re.compile(r"(?<![\w-])no-(?:cache|store)(?![\w-])(?!\s*=)")
"""``no-cache`` or ``no-store`` for the whole answer: ``no-cache="Set-Cookie"`` names header
fields to revalidate and leaves the body's freshness alone (RFC 9111, 5.2.2.4)."""


def list_field(headers: Mapping[str, str], name: str) -> str | None:
    """A list-valued header field (``Cache-Control``, ``Content-Encoding``...) with all its
    lines joined by commas, as RFC 9110 (5.3) reads them: aiohttp's ``get`` answers with the
    first line alone, so ``Content-Encoding: gzip`` and ``Content-Encoding: br`` sent on two
    lines left the body half decoded (httpx's ``get`` joins them already)."""
    every_line = getattr(headers, "getall", None)
    if every_line is None:
        return headers.get(name)
    lines: list[str] = every_line(name, [])
    return ", ".join(lines) if lines else None


def response_hints(headers: Mapping[str, str]) -> ResponseHints:
    """The headers the scheduler reads, as sent (case-insensitive lookup by the caller's map)."""
    return ResponseHints(
        retry_after=headers.get("Retry-After"),
        cache_control=list_field(headers, "Cache-Control"),
        expires=headers.get("Expires"),
        date=headers.get("Date"),
        age=headers.get("Age"),
    )


def http_date(text: str | None) -> datetime | None:
    """An HTTP-date (IMF-fixdate, RFC 850 or asctime) as an aware UTC datetime, else None."""
    if not text or not text.strip():
        return None
    try:
        moment = parsedate_to_datetime(text.strip())
        if moment.tzinfo is None:
            return moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC)  # 9999-12-31 -2359 is past the calendar's end in UTC
    except (ValueError, TypeError, IndexError, OverflowError):
        return None


def _seconds(digits: str) -> timedelta:
    """Seconds written in ``digits``, clipped to MAX_HINT (a header may hold 64 KiB of them)."""
    return timedelta(seconds=clipped_int(digits, int(MAX_HINT.total_seconds())))


def _server_now(hints: ResponseHints, now: datetime) -> datetime:
    """The server's idea of now (its ``Date``), else ours."""
    return http_date(hints.date) or now


def kept_last_modified(value: str | None, hints: ResponseHints, now: datetime) -> str | None:
    """A ``Last-Modified`` to send back as ``If-Modified-Since``, or None when it is later
    than the answer's ``Date`` (else ``now``). RFC 9110 (8.8.2.1) forbids such a value, and
    a server that answers 304 whenever If-Modified-Since is not before its file's time (many
    feed scripts) answered every later request 304 until that date came: a feed dated 2100
    by a clock or time-zone slip went silent, its new items never fetched. Text that is no
    date is kept (servers that compare it as a string still match it)."""
    moment = http_date(value)
    if value is None or moment is None or moment <= _server_now(hints, now):
        return value
    return None


def readable_retry_after(text: str) -> bool:
    """Whether a Retry-After is in one of its two forms, delta-seconds or an HTTP-date: any
    other text (``-5``, ``120.5``, ``soon``) is ignored, and a message must not quote it as a
    wait the collector honours."""
    text = text.strip()
    return _DELTA_SECONDS.fullmatch(text) is not None or http_date(text) is not None


def retry_after(hints: ResponseHints | None, now: datetime) -> timedelta | None:
    """How long the server asked us to wait, or None: no header, garbage, zero or a past date."""
    if hints is None or hints.retry_after is None:
        return None
    text = hints.retry_after.strip()
    if _DELTA_SECONDS.fullmatch(text):
        delay = _seconds(text)
    else:
        moment = http_date(text)
        if moment is None:
            return None
        delay = min(moment - _server_now(hints, now), MAX_HINT)
    return delay if delay > timedelta(0) else None


def wait_words(wait: timedelta) -> str:
    """A Retry-After's wait for a message: seconds, or "ten years or more" for one clipped to
    :data:`MAX_HINT` (its clipped length is not what the server asked)."""
    return "ten years or more" if wait >= MAX_HINT else f"{round(wait.total_seconds())} s"


def freshness(hints: ResponseHints | None, now: datetime) -> timedelta:
    """How long the answer stays fresh by HTTP caching rules; zero when it does not say.

    ``max-age`` wins over ``Expires`` (RFC 9111); ``no-cache``/``no-store`` mean no floor at
    all; an invalid or past ``Expires`` means already stale.
    """
    if hints is None or (hints.cache_control is None and hints.expires is None):
        return timedelta(0)
    directives = (hints.cache_control or "").lower()
    if _NO_FLOOR.search(directives):
        return timedelta(0)
    found = _MAX_AGE.search(directives)
    if found is not None:
        age = hints.age.strip() if hints.age else ""
        lifetime = _seconds(found[1]) - (
            _seconds(age) if _DELTA_SECONDS.fullmatch(age) else timedelta(0)
        )
    else:
        expires = http_date(hints.expires)
        if expires is None:
            return timedelta(0)
        lifetime = min(expires - _server_now(hints, now), MAX_HINT)
    return max(lifetime, timedelta(0))


def permanent_target(hops: Sequence[tuple[int, str]]) -> str | None:
    """Where the leading run of permanent redirects (301/308) of a chain leads, or None.

    ``hops`` are ``(status, target)`` in order. A temporary hop (302/303/307) ends the run: the
    URL it left from is the feed's address from then on, and the rest is a detour. The
    target's fragment is left out, as from every address of a feed (no request carries it).
    """
    target: str | None = None
    for status, location in hops:
        if status not in PERMANENT_REDIRECTS:
            break
        target = location
    return None if target is None else target.partition("#")[0]
