"""The feed fetch's HTTP client: an aiohttp session, hand-followed redirects, plain-word errors.

aiohttp parses HTTP in C and keeps little per-request state: on loopback a conditional GET
answered 304 costs about 0.2 ms of CPU against about 2 ms through httpx, and most of a steady
cycle is exactly that. Its own redirect following and decompression stay off: every hop is
checked here (:class:`~.redirects.RedirectChain`) and bodies are decompressed by the bounded
decoders of :mod:`.httpbody`. Cookies are not kept: a feed fetch carries no session state.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import ssl
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping

import aiohttp
import yarl
from aiohttp.http_exceptions import (
    ContentLengthError,
    HttpProcessingError,
    TransferEncodingError,
)

from .content_coding import ACCEPT_ENCODING
from .httpbody import (
    TransferError,
    caused_by,
    causes,
    ends_at_close,
    read_limited,
    root_cause,
    unreachable_endpoint,
)
from .redirects import RedirectChain, location_target, require_web_scheme
from .safe_text import QUOTED_CHARS, one_line

FEED_ACCEPT = (
    "application/rss+xml, application/atom+xml, application/xml;q=0.9, text/xml;q=0.9, */*;q=0.8"
)
MAX_HEADER_BYTES = 64 * 1024
"""Longest status line or header field accepted (aiohttp's default, 8 KiB, refuses some
servers' long ``Set-Cookie`` or ``Link`` headers that other clients read fine)."""
DNS_CACHE_S = 300
"""How long a resolved host name is reused: a cycle asks for the same few hosts again and
again."""


def header_text(value: str) -> str:
    """A header's text or the reason phrase, fit to store and to log.

    aiohttp keeps bytes that are no UTF-8 (a Latin-1 reason phrase, its é one byte E9) as
    lone surrogates, which no UTF-8 text holds: the database refused the feed's row, so
    such an answer was never recorded. They become U+FFFD.
    """
    if value.isascii():
        return value
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def validator(value: str | None) -> str | None:
    """An ETag or Last-Modified to send back in the next request, or None when aiohttp could
    not read it as text (a changed copy would never match) or will not send it (a control
    character: aiohttp reads them in answers but refuses them in requests, and the feed
    failed on every later fetch). That fetch goes unconditional."""
    if value is None or (header_text(value) == value and not _UNSENDABLE.search(value)):
        return value
    return None


_UNSENDABLE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
"""What aiohttp refuses in a request header's value (header injection)."""


def make_feed_session(user_agent: str, *, max_connections: int) -> aiohttp.ClientSession:
    """A keep-alive session with at most ``max_connections`` open connections."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=max_connections, ttl_dns_cache=DNS_CACHE_S),
        headers={
            "User-Agent": user_agent,
            "Accept": FEED_ACCEPT,
            "Accept-Encoding": ACCEPT_ENCODING,
        },
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=False,
        trust_env=_environment_has_proxies_or_netrc(),
        max_line_size=MAX_HEADER_BYTES,
        max_field_size=MAX_HEADER_BYTES,
    )


def _environment_has_proxies_or_netrc() -> bool:
    """Whether aiohttp should read ``*_PROXY`` variables and ``.netrc`` (as httpx does).

    It reads them again for every request, on two worker threads; without any of them set,
    that is half a steady cycle's CPU spent finding nothing.
    """
    netrc = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    return bool(urllib.request.getproxies()) or os.path.isfile(netrc)


async def open_feed_response(
    session: aiohttp.ClientSession,
    url: str,
    *,
    headers: Mapping[str, str],
    timeout_s: float,
    max_redirects: int,
    on_redirect: Callable[[int, str], None] | None = None,
    check_url: Callable[[yarl.URL], None] | None = None,
) -> aiohttp.ClientResponse:
    """Send GET, following redirects by hand; the caller must ``release()`` the answer.

    ``on_redirect`` hears each hop followed, as ``(status, target)``; ``check_url`` may refuse
    a hop (raising TransferError) before it is sent.
    """
    current = _parse_url(url)
    require_web_scheme(current.scheme, f"{url} is not an http(s) URL")
    chain = RedirectChain(str(current), max_redirects)
    timeout = aiohttp.ClientTimeout(total=None, connect=timeout_s, sock_read=timeout_s)
    for _ in chain.hops():
        if check_url is not None:
            check_url(current)
        response = await _send(session, current, headers, timeout, timeout_s)
        if not 300 <= response.status < 400 or response.status == 304:
            return response
        response.release()
        location = chain.location(response.status, str(current), response.headers.get("Location"))
        target = _redirect_target(current, location)
        chain.visit(str(current), str(target), target.scheme)
        if on_redirect is not None:
            on_redirect(response.status, str(target))
        current = target
    raise chain.too_long(str(current))


async def read_feed_body(
    response: aiohttp.ClientResponse, *, max_bytes: int, timeout_s: float
) -> bytes:
    """The whole body, decompressed and bounded (see :func:`.httpbody.read_limited`).

    A body that only the connection's close ends (no length, not chunked) is refused when
    the connection was reset instead of closed: aiohttp ends such a body alike either way,
    and a cut feed would be stored as a whole one, its cut item for good.
    """
    url = str(response.url)
    closed = _closed(response) if ends_at_close(response.headers) else None
    try:
        body = await read_limited(
            response.content.iter_any(), url, response.headers, max_bytes=max_bytes
        )
    except aiohttp.ClientError as exc:
        raise describe_aiohttp_error(exc, url, timeout_s) from exc
    lost = closed.exception() if closed is not None and closed.done() else None
    if lost is not None:
        raise TransferError(
            "connect",
            f"the connection to {response.url.host} broke before {url} ended ({root_cause(lost)}); "
            "without a Content-Length only a clean close ends the body, so it may be cut "
            "(the next fetch tries again)",
        )
    return body


def _closed(response: aiohttp.ClientResponse) -> asyncio.Future[None] | None:
    """The future aiohttp completes when the answer's connection goes: with an exception
    when it was lost (a reset), not closed."""
    connection = response.connection
    protocol = connection.protocol if connection is not None else None
    closed = protocol.closed if protocol is not None else None
    if closed is not None:  # read here or below: an unread exception is logged as a leak
        closed.add_done_callback(lambda done: done.cancelled() or done.exception())
    return closed


def describe_aiohttp_error(
    exc: aiohttp.ClientError, url: str, timeout_s: float | None
) -> TransferError:
    """Translate an aiohttp error into a kind and plain words (the kinds httpx's get too)."""
    parsed = yarl.URL(url)
    host = parsed.host
    root = root_cause(exc)
    if isinstance(exc, aiohttp.ServerTimeoutError):
        connecting = isinstance(exc, aiohttp.ConnectionTimeoutError)
        phase = "connecting to" if connecting else "waiting for data from"
        after = f" after {timeout_s:g} s" if timeout_s else ""
        return TransferError(
            "timeout",
            f"timed out{after} {phase} {url}",
            unreachable=unreachable_endpoint(exc, parsed) if connecting else None,
        )
    if isinstance(exc, aiohttp.ClientConnectorDNSError) or caused_by(exc, socket.gaierror):
        return TransferError(
            "dns",
            f"could not resolve the host {host} of {url} ({root})",
            unreachable=unreachable_endpoint(exc, parsed),
        )
    if isinstance(exc, aiohttp.ClientSSLError) or caused_by(exc, ssl.SSLError):
        return TransferError("tls", f"TLS handshake with {host} failed for {url} ({root})")
    if isinstance(exc, aiohttp.ClientConnectorError):
        if isinstance(exc.os_error, ConnectionRefusedError):
            detail = f"{host} refused the connection for {url} ({root})"
        else:
            detail = f"could not connect to {host} for {url} ({root})"
        return TransferError("connect", detail, unreachable=unreachable_endpoint(exc, parsed))
    if isinstance(exc, aiohttp.InvalidURL):
        return TransferError("protocol", f"{url!r} is not a usable URL ({exc})")
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)):
        return TransferError("connect", f"the connection to {host} broke during {url} ({root})")
    complaint = _parser_complaint(exc) or root
    if _closed_early(exc):
        return TransferError(
            "connect",
            f"the connection to {host} closed before {url} ended ({complaint}); nothing of it "
            "is kept (the next fetch tries again)",
        )
    return TransferError("protocol", f"{host} broke the HTTP protocol for {url} ({complaint})")


def _closed_early(exc: BaseException) -> bool:
    """Whether the body's connection closed before its ``Content-Length`` or last chunk came:
    a connection that broke (a server or proxy that gave up), not a server breaking HTTP."""
    for link in causes(exc):
        if isinstance(link, ContentLengthError):
            return True
        if isinstance(link, TransferEncodingError) and link.message.startswith("Not enough data"):
            return True
    return False


def _parser_complaint(exc: BaseException) -> str | None:
    """What aiohttp's HTTP parser found wrong, on one line. Its error reads ``400, message:
    ...``, as if the server had answered 400: that is aiohttp's own code for a bad message
    (the server sent no such status), so only the message is kept."""
    for link in causes(exc):
        if isinstance(link, HttpProcessingError) and link.message.strip():
            return one_line(link.message, QUOTED_CHARS)
    return None


def _parse_url(url: str) -> yarl.URL:
    return _valid_url(lambda: yarl.URL(url), "protocol", f"{url!r} is not a valid URL")


def _redirect_target(current: yarl.URL, location: str) -> yarl.URL:
    what = f"{current} redirects to an invalid URL {header_text(location)!r}"
    target = location_target(location.encode("utf-8", "surrogateescape"))
    return _keep_credentials(
        current, _valid_url(lambda: current.join(yarl.URL(target)), "redirect", what)
    )


def _keep_credentials(current: yarl.URL, target: yarl.URL) -> yarl.URL:
    """``target`` with the user and password of ``current`` when it stays on its server (the
    same scheme, host and port, or ``http`` upgraded to ``https`` on the default ports) and
    names none of its own, as browsers keep answering a server's Basic challenge: a Location
    written in full (``https://host/feed/`` for a trailing slash) dropped them, and the feed
    failed 401 for good. Another server never gets them."""
    if current.raw_user is None or target.raw_user is not None or target.host != current.host:
        return target
    same = (target.scheme, target.port) == (current.scheme, current.port)
    upgraded = (current.scheme, current.port, target.scheme, target.port) == (
        "http",
        80,
        "https",
        443,
    )
    if not (same or upgraded):
        return target
    return target.with_user(current.user).with_password(current.password)


def _valid_url(make: Callable[[], yarl.URL], kind: str, what: str) -> yarl.URL:
    """The URL ``make`` builds, with a host if it is a web one. The host is decoded here: yarl
    reads an IDNA host lazily, and a malformed one (``xn--``) failed the feed as a bug."""
    try:
        url = make()
        no_host = url.scheme in ("http", "https") and not url.host
    except (ValueError, TypeError, IndexError) as exc:  # idna: UnicodeError; yarl: IndexError
        raise TransferError(kind, f"{what} ({exc})") from exc
    if no_host:
        raise TransferError(kind, f"{what} (it names no host)")
    host = url.raw_host or ""
    try:  # as the resolver will encode it: it raised UnicodeError past every handler
        host.encode("idna")
    except UnicodeError as exc:
        reason = "its host has an empty name part or one longer than 63 characters"
        raise TransferError(kind, f"{what} ({reason})") from exc
    return url


async def _send(
    session: aiohttp.ClientSession,
    url: yarl.URL,
    headers: Mapping[str, str],
    timeout: aiohttp.ClientTimeout,
    timeout_s: float,
) -> aiohttp.ClientResponse:
    try:
        return await session.get(url, headers=headers, allow_redirects=False, timeout=timeout)
    except aiohttp.ClientError as exc:
        raise describe_aiohttp_error(exc, str(url), timeout_s) from exc
