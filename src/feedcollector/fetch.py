"""The fetch stage: one conditional GET of a feed, answered with the raw body bytes.

Feeds travel over aiohttp (:mod:`.feedhttp`): a request costs about a tenth of the CPU it
costs through httpx, and a cycle is mostly requests (every unchanged feed is one 304).
Redirects are followed by hand so every hop is checked (scheme, loops, count); one deadline
wraps the whole exchange, so a server dripping a byte a second cannot hold a slot forever.
The body is read by :func:`feedcollector.httpbody.read_limited`, which bounds both the wire
bytes and the decompressed output. :func:`status_text` is shared with the image downloader.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from pathlib import Path

import aiohttp

from .config import DEFAULT_USER_AGENT, PACKAGE_VERSION
from .content_coding import unknown_encodings
from .errors import FetchError
from .feedhttp import (
    header_text,
    make_feed_session,
    open_feed_response,
    read_feed_body,
    validator,
)
from .http_hints import (
    MAX_HINT,
    kept_last_modified,
    list_field,
    permanent_target,
    readable_retry_after,
    response_hints,
    retry_after,
    wait_words,
)
from .httpbody import (
    TransferError,
    Unreachable,
    gunzip_undeclared,
    refuse_unreachable,
    remember_unreachable,
)
from .models import FetchedFeed, ResponseHints
from .safe_text import QUOTED_CHARS, one_line
from .timestamps import format_timestamp, utc_now

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class FetchLimits:
    """How long and how much one feed fetch may take."""

    timeout_s: float = 30.0
    """Connect and per-read timeout."""
    deadline_s: float = 120.0
    """The whole fetch, redirects and body included."""
    max_body_bytes: int = 20 * MIB
    """Applies to the bytes on the wire and again to the decompressed body."""
    max_redirects: int = 5
    user_agent: str | None = None
    """Overrides the client's User-Agent for this fetch; None keeps the client's."""


def make_http_client(
    user_agent: str = DEFAULT_USER_AGENT, *, max_connections: int = 20
) -> aiohttp.ClientSession:
    """A keep-alive HTTP/1.1 session for feeds (call it on the event loop that will use it)."""
    return make_feed_session(user_agent or DEFAULT_USER_AGENT, max_connections=max_connections)


async def fetch_feed(
    client: aiohttp.ClientSession,
    url: str,
    *,
    etag: str | None,
    last_modified: str | None,
    limits: FetchLimits,
    unreachable: Unreachable | None = None,
    now: datetime | None = None,
) -> FetchedFeed:
    """Conditional GET: 304 gives an empty body, 2xx the raw bytes, anything else FetchError.

    The answer carries the headers the scheduler reads and where the chain's leading permanent
    redirects (301/308) led; a 4xx/5xx FetchError carries its headers (Retry-After) too.
    An endpoint that takes no connection is added to ``unreachable``, and a request to one in
    it is not sent: a FetchError of kind ``NOT_TRIED`` (see :data:`.httpbody.Unreachable`).
    ``now`` (the caller's clock, else the current time) dates a Retry-After in the message.
    Messages say what happened; what the collector does next is the caller's to say.
    """
    dead: Unreachable = {} if unreachable is None else unreachable
    headers: dict[str, str] = {}
    if etag := validator(etag):  # checked again: one stored by an older version may not be
        headers["If-None-Match"] = etag
    now = now or utc_now()
    # One kept by an older version may be later than now: see kept_last_modified.
    if last_modified := kept_last_modified(validator(last_modified), ResponseHints(), now):
        headers["If-Modified-Since"] = last_modified
    conditional = bool(headers)
    if limits.user_agent:
        headers["User-Agent"] = limits.user_agent
    started = time.monotonic()
    hops: list[tuple[int, str]] = []
    answered: int | None = None
    """The status of an answer whose body then failed: the server did answer."""
    try:
        async with asyncio.timeout(limits.deadline_s):
            response = await open_feed_response(
                client,
                url,
                headers=headers,
                timeout_s=limits.timeout_s,
                max_redirects=limits.max_redirects,
                on_redirect=lambda status, target: hops.append((status, target)),
                check_url=lambda hop: refuse_unreachable(dead, hop),
            )
            answered = response.status
            try:
                return await _read_feed_response(
                    response,
                    url,
                    limits,
                    started,
                    permanent_target(hops),
                    conditional=conditional,
                    now=now,
                )
            finally:
                response.release()
    except TimeoutError as exc:
        raise FetchError(
            f"fetch: {url} did not finish within the {limits.deadline_s:g} s deadline "
            "(the server is too slow; [fetch] deadline sets it)",
            kind="deadline",
            status=answered,
        ) from exc
    except TransferError as exc:
        remember_unreachable(dead, exc)
        status = exc.status or answered
        setting = _SETTING_HINTS.get(exc.kind, "")
        raise FetchError(f"fetch: {exc.detail}{setting}", kind=exc.kind, status=status) from exc


_SETTING_HINTS = {
    "too_large": " (a feed this big needs a larger [fetch] max_body_bytes)",
    "timeout": " ([fetch] timeout sets how long to wait)",
}
"""The setting behind a failure of these kinds, said where a user may want to change it."""


async def _read_feed_response(
    response: aiohttp.ClientResponse,
    url: str,
    limits: FetchLimits,
    started: float,
    permanent_url: str | None,
    *,
    conditional: bool,
    now: datetime,
) -> FetchedFeed:
    """``conditional``: the request carried validators, so a 304 answers it; ``now``: when it
    was made (a Retry-After's wait is worded from it)."""
    status = response.status
    reason = header_text(response.reason or "")
    final_url = str(response.url)
    etag = validator(response.headers.get("ETag"))
    hints = response_hints(response.headers)
    last_modified = validator(response.headers.get("Last-Modified"))
    if status == 304 and not conditional:
        raise FetchError(
            f"fetch: {final_url} answered 304 Not Modified to an unconditional request (no "
            "If-None-Match or If-Modified-Since was sent, so there is no copy it can mean; a "
            "broken cache in front of the server?): nothing stored",
            kind="protocol",
            status=304,
            url=final_url,
        )
    if status == 304:
        return FetchedFeed(
            url=url,
            final_url=final_url,
            status=304,
            etag=etag,
            last_modified=last_modified,
            elapsed_s=time.monotonic() - started,
            hints=hints,
            permanent_url=permanent_url,
        )
    if not 200 <= status < 300:
        error = feed_status_error(status, reason, final_url, response.headers, now)
        raise FetchError(
            f"fetch: {error.detail}", kind=error.kind, status=status, hints=hints, url=final_url
        )
    if status == 206:
        raise FetchError(
            f"fetch: HTTP 206 {status_text(status, reason)} from {final_url} is a part of the "
            "feed, though no Range was asked for; nothing stored",
            kind="protocol",
            status=206,
            url=final_url,
        )
    body = await read_feed_body(
        response, max_bytes=limits.max_body_bytes, timeout_s=limits.timeout_s
    )
    body = gunzip_undeclared(body, final_url, response.headers, max_bytes=limits.max_body_bytes)
    if status != 200 and not body:
        raise TransferError(
            "http",
            f"HTTP {status} {status_text(status, reason)} from {final_url} carried no feed body",
            status=status,
        )
    return FetchedFeed(
        url=url,
        final_url=final_url,
        status=status,
        body=body,
        content_type=header_text(response.headers.get("Content-Type", "")) or None,
        etag=etag,
        last_modified=kept_last_modified(last_modified, hints, now),  # a 304 keeps the old one
        elapsed_s=time.monotonic() - started,
        hints=hints,
        permanent_url=permanent_url,
        unknown_codings=_unknown_codings(response.headers),
    )


def _unknown_codings(headers: Mapping[str, str]) -> str | None:
    names = unknown_encodings(list_field(headers, "Content-Encoding") or "")
    return one_line(header_text(", ".join(names)), QUOTED_CHARS) if names else None


def body_digest(response: FetchedFeed) -> str:
    """SHA-256 of everything reading a 200's body depends on: its bytes, its Content-Type
    (the charset), the URL it came from (relative links) and the code that reads it (a newer
    version may read more of it: :func:`code_fingerprint`).

    Equal to the digest stored with a feed's last items batch, it is the body read last time:
    reading it again would store nothing, so the cycle skips that work (many servers send
    no validators, or ignore them, and answer every poll with the same bytes).
    """
    context = f"{code_fingerprint()}\n{response.content_type or ''}\n{response.final_url}\n"
    digest = hashlib.sha256(context.encode("utf-8", "surrogatepass"))
    digest.update(response.body)
    return digest.hexdigest()


@functools.cache
def code_fingerprint() -> str:
    """The version and a digest of feedcollector's own source: any change of code, however
    small, reads every feed's body once more. The version alone never changed between
    versions that read feeds differently. Computed once a process, when a first body came
    (2-3 ms of CPU)."""
    return source_fingerprint(Path(__file__).parent)


def source_fingerprint(package: Path) -> str:
    """``PACKAGE_VERSION`` and the SHA-256 of the ``.py`` files under ``package`` (of none,
    in an installation without sources); the version alone where one cannot be read."""
    digest = hashlib.sha256()
    try:
        for path in sorted(package.rglob("*.py")):
            digest.update(path.relative_to(package).as_posix().encode("utf-8", "surrogatepass"))
            digest.update(path.read_bytes())
    except OSError:
        return PACKAGE_VERSION
    return f"{PACKAGE_VERSION}+{digest.hexdigest()[:16]}"


def feed_status_error(
    status: int, reason_phrase: str, url: str, headers: Mapping[str, str], now: datetime
) -> TransferError:
    """Word a 4xx/5xx answer so the log says what happened and what it asks for (a Retry-After
    in seconds and as a UTC time from ``now``); the log line adds when the next try is."""
    if status == 404:
        hint = "the feed is not there; check its URL"
    elif status == 410:
        hint = "the feed was removed for good"
    elif status in (401, 403):
        hint = "access denied; the feed needs credentials or blocks this client"
    elif status == 429:
        wait = _retry_after_words(headers, now)
        hint = f"rate limited, {wait}" if wait else "rate limited"
        hint += "; this host's feeds wait"
    elif status == 503 and (wait := _retry_after_words(headers, now)):
        hint = f"unavailable, {wait}"
    elif 500 <= status < 600:
        hint = "the server is failing"
    elif status >= 600:  # none HTTP defines (999: a site's bot block)
        hint = "a status HTTP does not define; the server may be blocking this client"
    else:
        hint = "the server refused the request"
    return TransferError(
        "http",
        f"HTTP {status} {status_text(status, reason_phrase)} from {url} ({hint})",
        status=status,
    )


def _retry_after_words(headers: Mapping[str, str], now: datetime) -> str | None:
    """What the answer's Retry-After asks, in seconds and until when (UTC, from ``now``; an
    HTTP-date is measured against the server's ``Date``), or None without one. Text in
    neither of its forms is quoted safely and called ignored, since it is: quoting it as a
    wait would claim it honoured."""
    text = headers.get("Retry-After", "")
    if not text.strip():
        return None
    quoted = one_line(header_text(text), QUOTED_CHARS)
    if not readable_retry_after(text):
        return f"its Retry-After {quoted!r} is neither seconds nor an HTTP-date, ignored"
    wait = retry_after(response_hints(headers), now)
    if wait is None:
        return f"its Retry-After {quoted!r} asks for no wait (zero or a past date)"
    if wait >= MAX_HINT:  # clipped: its own time would not be the one quoted
        return f"its Retry-After {quoted!r} asks to wait {wait_words(wait)}"
    return f"the server asks to wait {wait_words(wait)} (until {format_timestamp(now + wait)})"


def status_text(status: int, reason_phrase: str) -> str:
    """The server's reason phrase on one safe line (it is the server's text: an escape
    sequence in it would drive the terminal the log goes to), or the standard one when it
    sent none."""
    if reason_phrase := one_line(reason_phrase, QUOTED_CHARS):
        return reason_phrase
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "(no reason given)"
