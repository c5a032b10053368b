"""The fetch stage: one conditional GET of a feed, answered with the raw body bytes.

Redirects are followed by hand so every hop is checked (scheme, loops, count); one deadline
wraps the whole exchange, so a server dripping a byte a second cannot hold a slot forever.
The body is read by :func:`feedcollector.httpbody.read_body`, which bounds both the wire bytes
and the decompressed output. :func:`open_response` and :func:`status_text` are shared with the
image downloader.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus

import httpx

from .errors import FetchError
from .http_hints import permanent_target, response_hints
from .httpbody import ACCEPT_ENCODING, TransferError, describe_http_error, read_body
from .models import FetchedFeed

MIB = 1024 * 1024
FEED_ACCEPT = (
    "application/rss+xml, application/atom+xml, application/xml;q=0.9, text/xml;q=0.9, */*;q=0.8"
)
WEB_SCHEMES = frozenset({"http", "https"})


def _package_version() -> str:
    try:
        return importlib.metadata.version("feedcollector")
    except importlib.metadata.PackageNotFoundError:
        return "0"


DEFAULT_USER_AGENT = f"feedcollector/{_package_version()}"


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
) -> httpx.AsyncClient:
    """A keep-alive HTTP/1.1 client for feeds; redirects stay off so each hop gets checked."""
    return httpx.AsyncClient(
        http1=True,
        http2=False,
        headers={
            "User-Agent": user_agent or DEFAULT_USER_AGENT,
            "Accept": FEED_ACCEPT,
            "Accept-Encoding": ACCEPT_ENCODING,
        },
        limits=httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        ),
        timeout=httpx.Timeout(30.0),
        follow_redirects=False,
    )


async def fetch_feed(
    client: httpx.AsyncClient,
    url: str,
    *,
    etag: str | None,
    last_modified: str | None,
    limits: FetchLimits,
) -> FetchedFeed:
    """Conditional GET: 304 gives an empty body, 2xx the raw bytes, anything else FetchError.

    The answer carries the headers the scheduler reads and where the chain's leading permanent
    redirects (301/308) led; a 4xx/5xx FetchError carries its headers (Retry-After) too.
    """
    headers: dict[str, str] = {}
    if etag:
        headers["If-None-Match"] = etag
    if last_modified:
        headers["If-Modified-Since"] = last_modified
    if limits.user_agent:
        headers["User-Agent"] = limits.user_agent
    started = time.monotonic()
    hops: list[tuple[int, str]] = []
    try:
        async with asyncio.timeout(limits.deadline_s):
            response = await open_response(
                client,
                url,
                headers=headers,
                timeout_s=limits.timeout_s,
                max_redirects=limits.max_redirects,
                on_redirect=lambda status, target: hops.append((status, str(target))),
            )
            try:
                return await _read_feed_response(
                    response, url, limits, started, permanent_target(hops)
                )
            finally:
                await response.aclose()
    except TimeoutError as exc:
        raise FetchError(
            f"fetch: {url} did not finish within the {limits.deadline_s:g} s deadline "
            "(the server is too slow; will retry with backoff)",
            kind="deadline",
        ) from exc
    except TransferError as exc:
        raise FetchError(f"fetch: {exc.detail}", kind=exc.kind, status=exc.status) from exc


async def _read_feed_response(
    response: httpx.Response,
    url: str,
    limits: FetchLimits,
    started: float,
    permanent_url: str | None,
) -> FetchedFeed:
    status = response.status_code
    final_url = str(response.url)
    etag = response.headers.get("ETag")
    last_modified = response.headers.get("Last-Modified")
    hints = response_hints(response.headers)
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
        error = feed_status_error(status, response.reason_phrase, final_url, response.headers)
        raise FetchError(f"fetch: {error.detail}", kind=error.kind, status=status, hints=hints)
    body = await read_body(response, max_bytes=limits.max_body_bytes)
    if status != 200 and not body:
        raise TransferError(
            "http",
            f"HTTP {status} {status_text(status, response.reason_phrase)} from "
            f"{final_url} carried no feed body",
            status=status,
        )
    return FetchedFeed(
        url=url,
        final_url=final_url,
        status=status,
        body=body,
        content_type=response.headers.get("Content-Type"),
        etag=etag,
        last_modified=last_modified,
        elapsed_s=time.monotonic() - started,
        hints=hints,
        permanent_url=permanent_url,
    )


def feed_status_error(
    status: int, reason_phrase: str, url: str, headers: Mapping[str, str]
) -> TransferError:
    """Word a 4xx/5xx answer so the log says what happened and what the collector will do."""
    if status == 404:
        hint = "the feed is not there; check its URL"
    elif status == 410:
        hint = "the feed was removed for good; it is no longer fetched"
    elif status in (401, 403):
        hint = "access denied; the feed needs credentials or blocks this client"
    elif status == 429:
        retry_after = headers.get("Retry-After")
        wait = f", the server asks to wait {retry_after}" if retry_after else ""
        hint = f"rate limited{wait}; this host's feeds wait"
    elif status == 503 and headers.get("Retry-After"):
        hint = f"unavailable, the server asks to wait {headers['Retry-After']}"
    elif status >= 500:
        hint = "the server is failing; will retry with backoff"
    else:
        hint = "the server refused the request; will retry with backoff"
    return TransferError(
        "http",
        f"HTTP {status} {status_text(status, reason_phrase)} from {url} ({hint})",
        status=status,
    )


def status_text(status: int, reason_phrase: str) -> str:
    """The server's reason phrase, or the standard one when it sent none."""
    if reason_phrase:
        return reason_phrase
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "(no reason given)"


async def open_response(
    client: httpx.AsyncClient,
    url: str,
    *,
    headers: Mapping[str, str],
    timeout_s: float,
    max_redirects: int,
    check_url: Callable[[httpx.URL], None] | None = None,
    on_redirect: Callable[[int, httpx.URL], None] | None = None,
) -> httpx.Response:
    """Send GET, following redirects by hand; the caller must ``aclose()`` the streaming answer.

    Every hop must be http(s), must not revisit a URL of the chain, and passes ``check_url``;
    ``on_redirect`` hears each hop followed, as ``(status, target)``.
    """
    try:
        current = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise TransferError("protocol", f"{url!r} is not a valid URL ({exc})") from exc
    _require_web_scheme(current, f"{url} is not an http(s) URL")
    visited = {str(current)}
    for _ in range(max_redirects + 1):
        if check_url is not None:
            check_url(current)
        response = await _send(client, current, headers, timeout_s)
        if not 300 <= response.status_code < 400 or response.status_code == 304:
            return response
        await response.aclose()
        location = response.headers.get("Location")
        if location is None:
            raise TransferError(
                "redirect",
                f"HTTP {response.status_code} from {current} without a Location to follow",
                status=response.status_code,
            )
        target = _redirect_target(current, location)
        _require_web_scheme(target, f"redirect from {current} to {target} refused")
        if str(target) in visited:
            raise TransferError("redirect", f"redirect loop: {current} leads back to {target}")
        visited.add(str(target))
        if on_redirect is not None:
            on_redirect(response.status_code, target)
        current = target
    raise TransferError(
        "redirect", f"more than {max_redirects} redirects starting at {url} (last: {current})"
    )


def _require_web_scheme(url: httpx.URL, context: str) -> None:
    if url.scheme not in WEB_SCHEMES:
        raise TransferError("scheme", f"{context}: only http and https are supported")


def _redirect_target(current: httpx.URL, location: str) -> httpx.URL:
    try:
        return current.join(location)
    except httpx.InvalidURL as exc:
        raise TransferError(
            "redirect", f"{current} redirects to an invalid URL {location!r} ({exc})"
        ) from exc


async def _send(
    client: httpx.AsyncClient, url: httpx.URL, headers: Mapping[str, str], timeout_s: float
) -> httpx.Response:
    request = client.build_request("GET", url, headers=headers, timeout=httpx.Timeout(timeout_s))
    try:
        return await client.send(request, stream=True, follow_redirects=False)
    except httpx.HTTPError as exc:
        raise describe_http_error(exc, str(url), timeout_s) from exc
    except httpx.InvalidURL as exc:
        # httpx prepares the next request of a redirect even when it is not following it, and
        # a Location it cannot rebuild (``data:...``, ``javascript:...``) fails right there.
        raise TransferError(
            "redirect",
            f"redirect from {url} to a Location that is no usable URL refused ({exc}): "
            "only http and https are supported",
        ) from exc
