"""The fetch stage: one conditional GET of a feed, answered with the raw body bytes.

Redirects are followed by hand so every hop is checked (scheme, loops, count); the body is
read raw and decompressed by bounded decoders, so neither a huge body nor a compression bomb
can exhaust memory; one deadline wraps the whole exchange, so a server dripping a byte a
second cannot hold a slot forever. The helpers below the stage (:func:`open_response`,
:func:`read_body`) are shared with the image downloader.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import socket
import ssl
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import IO, Protocol, cast

import brotli
import httpx
import zstandard

from .errors import FetchError
from .models import FetchedFeed

MIB = 1024 * 1024
FEED_ACCEPT = (
    "application/rss+xml, application/atom+xml, application/xml;q=0.9, text/xml;q=0.9, */*;q=0.8"
)
ACCEPT_ENCODING = "gzip, deflate, br, zstd"
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


class TransferError(Exception):
    """A failure at the HTTP edge, neutral so fetch and images can word it as their own error."""

    def __init__(self, kind: str, detail: str, status: int | None = None) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.status = status


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
    """Conditional GET: 304 gives an empty body, 2xx the raw bytes, anything else FetchError."""
    headers: dict[str, str] = {}
    if etag:
        headers["If-None-Match"] = etag
    if last_modified:
        headers["If-Modified-Since"] = last_modified
    if limits.user_agent:
        headers["User-Agent"] = limits.user_agent
    started = time.monotonic()
    try:
        async with asyncio.timeout(limits.deadline_s):
            response = await open_response(
                client,
                url,
                headers=headers,
                timeout_s=limits.timeout_s,
                max_redirects=limits.max_redirects,
            )
            try:
                return await _read_feed_response(response, url, limits, started)
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
    response: httpx.Response, url: str, limits: FetchLimits, started: float
) -> FetchedFeed:
    status = response.status_code
    final_url = str(response.url)
    etag = response.headers.get("ETag")
    last_modified = response.headers.get("Last-Modified")
    if status == 304:
        return FetchedFeed(
            url=url,
            final_url=final_url,
            status=304,
            etag=etag,
            last_modified=last_modified,
            elapsed_s=time.monotonic() - started,
        )
    if not 200 <= status < 300:
        raise feed_status_error(status, response.reason_phrase, final_url, response.headers)
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
    )


def feed_status_error(
    status: int, reason_phrase: str, url: str, headers: Mapping[str, str]
) -> TransferError:
    """Word a 4xx/5xx answer so the log says what happened and what the collector will do."""
    if status == 404:
        hint = "the feed is not there; check its URL"
    elif status == 410:
        hint = "the feed was removed for good; consider dropping it from the feeds file"
    elif status in (401, 403):
        hint = "access denied; the feed needs credentials or blocks this client"
    elif status == 429:
        retry_after = headers.get("Retry-After")
        wait = f", the server asks to wait {retry_after}" if retry_after else ""
        hint = f"rate limited{wait}; will retry with backoff"
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
) -> httpx.Response:
    """Send GET, following redirects by hand; the caller must ``aclose()`` the streaming answer.

    Every hop must be http(s), must not revisit a URL of the chain, and passes ``check_url``.
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


def describe_http_error(exc: httpx.HTTPError, url: str, timeout_s: float | None) -> TransferError:
    """Translate an httpx error into a kind and plain words (pure, so it is testable directly)."""
    host = httpx.URL(url).host
    root = _root_cause(exc)
    if isinstance(exc, httpx.TimeoutException):
        phase = {
            httpx.ConnectTimeout: "connecting to",
            httpx.ReadTimeout: "waiting for data from",
            httpx.WriteTimeout: "sending the request to",
            httpx.PoolTimeout: "waiting for a free connection to",
        }.get(type(exc), "talking to")
        after = f" after {timeout_s:g} s" if timeout_s else ""
        return TransferError("timeout", f"timed out{after} {phase} {url}")
    if isinstance(exc, httpx.ConnectError):
        if _caused_by(exc, socket.gaierror):
            return TransferError("dns", f"could not resolve the host {host} of {url} ({root})")
        if _caused_by(exc, ssl.SSLError):
            return TransferError("tls", f"TLS handshake with {host} failed for {url} ({root})")
        if _caused_by(exc, ConnectionRefusedError):
            return TransferError("connect", f"{host} refused the connection for {url} ({root})")
        return TransferError("connect", f"could not connect to {host} for {url} ({root})")
    if isinstance(exc, httpx.UnsupportedProtocol):
        return TransferError("scheme", f"{url} uses an unsupported scheme ({exc})")
    if isinstance(exc, httpx.NetworkError):
        return TransferError("connect", f"the connection to {host} broke during {url} ({root})")
    return TransferError("protocol", f"{host} broke the HTTP protocol for {url} ({root})")


def _causes(exc: BaseException) -> list[BaseException]:
    """The exception and what it was raised from, outermost first (cycles cut)."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    return any(isinstance(link, kind) for link in _causes(exc))


def _root_cause(exc: BaseException) -> str:
    deepest = _causes(exc)[-1]
    return str(deepest) or type(deepest).__name__


async def read_body(response: httpx.Response, *, max_bytes: int) -> bytes:
    """Read a streaming answer, undoing Content-Encoding, never holding more than ``max_bytes``."""
    url = str(response.url)
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise TransferError(
            "too_large", f"{url} declares {int(declared)} bytes, over the {max_bytes} byte limit"
        )
    encodings = _content_encodings(response.headers.get("Content-Encoding", ""))
    decoder = _decoder_chain(encodings, max_bytes)
    parts: list[bytes] = []
    received = 0
    try:
        async for chunk in response.aiter_raw():
            received += len(chunk)
            if received > max_bytes:
                raise TransferError("too_large", f"{url} sent more than the {max_bytes} byte limit")
            parts.append(decoder.decode(chunk))
        parts.append(decoder.flush())
    except _OutputTooLarge as exc:
        raise TransferError(
            "too_large",
            f"{url} decompresses ({', '.join(encodings)}) to more than the {max_bytes} byte limit",
        ) from exc
    except (zlib.error, brotli.error, zstandard.ZstdError) as exc:
        raise TransferError(
            "protocol", f"{url} sent a body that is not valid {', '.join(encodings)} data ({exc})"
        ) from exc
    except httpx.HTTPError as exc:
        timeouts = response.request.extensions.get("timeout", {})
        raise describe_http_error(exc, url, timeouts.get("read")) from exc
    return b"".join(parts)


def _content_encodings(header: str) -> list[str]:
    """Known codings in the order they were applied; unknown ones pass through like httpx does."""
    aliases = {"x-gzip": "gzip"}
    names = [aliases.get(n.strip().lower(), n.strip().lower()) for n in header.split(",")]
    return [n for n in names if n in ("gzip", "deflate", "br", "zstd")]


class _OutputTooLarge(Exception):
    """A decoder would produce more than its limit."""


class _Decoder(Protocol):
    def decode(self, data: bytes) -> bytes: ...

    def flush(self) -> bytes: ...


class _Budget:
    """Counts produced bytes and refuses to go past the limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.produced = 0

    @property
    def room(self) -> int:
        """One byte more than allowed, so a full buffer proves the limit was crossed."""
        return self.limit - self.produced + 1

    def take(self, data: bytes) -> bytes:
        self.produced += len(data)
        if self.produced > self.limit:
            raise _OutputTooLarge
        return data


class _ZlibDecoder:
    """gzip (several members allowed, trailing junk ignored) or deflate (zlib-wrapped or raw)."""

    def __init__(self, encoding: str, limit: int) -> None:
        self._gzip = encoding == "gzip"
        self._wbits = 16 + zlib.MAX_WBITS if self._gzip else zlib.MAX_WBITS
        self._obj = zlib.decompressobj(self._wbits)
        self._started = False
        self._budget = _Budget(limit)

    def decode(self, data: bytes) -> bytes:
        if not self._started and data:
            self._started = True
            if not self._gzip and not _looks_zlib_wrapped(data):
                self._obj = zlib.decompressobj(-zlib.MAX_WBITS)
        out: list[bytes] = []
        while data:
            if self._obj.eof:
                if not (self._gzip and data.startswith(b"\x1f\x8b")):
                    break
                self._obj = zlib.decompressobj(self._wbits)
            out.append(self._budget.take(self._obj.decompress(data, self._budget.room)))
            data = self._obj.unconsumed_tail or (self._obj.unused_data if self._obj.eof else b"")
        return b"".join(out)

    def flush(self) -> bytes:
        return self._budget.take(self._obj.flush())


def _looks_zlib_wrapped(data: bytes) -> bool:
    return len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0


class _BrotliDecoder:
    def __init__(self, limit: int) -> None:
        self._obj = brotli.Decompressor()
        self._budget = _Budget(limit)

    def decode(self, data: bytes) -> bytes:
        out = [self._budget.take(self._obj.process(data, output_buffer_limit=self._budget.room))]
        while not self._obj.can_accept_more_data():
            out.append(
                self._budget.take(self._obj.process(b"", output_buffer_limit=self._budget.room))
            )
        return b"".join(out)

    def flush(self) -> bytes:
        return b""


class _ZstdDecoder:
    """zstandard has no output cap per call, so it writes into a sink that stops at the limit."""

    def __init__(self, limit: int) -> None:
        self._budget = _Budget(limit)
        self._out: list[bytes] = []
        sink = cast(IO[bytes], self)  # only write() is called on it
        self._writer = zstandard.ZstdDecompressor().stream_writer(sink, write_size=64 * 1024)

    def write(self, data: bytes) -> int:
        self._out.append(self._budget.take(bytes(data)))
        return len(data)

    def decode(self, data: bytes) -> bytes:
        self._writer.write(data)
        produced, self._out = b"".join(self._out), []
        return produced

    def flush(self) -> bytes:
        return b""


class _Chain:
    """Undoes the codings last-applied first; the plain output is held to the limit too."""

    def __init__(self, decoders: list[_Decoder], limit: int) -> None:
        self._decoders = decoders
        self._budget = _Budget(limit)

    def decode(self, data: bytes) -> bytes:
        for decoder in self._decoders:
            data = decoder.decode(data)
        return self._budget.take(data)

    def flush(self) -> bytes:
        data = b""
        for decoder in self._decoders:
            data = (decoder.decode(data) if data else b"") + decoder.flush()
        return self._budget.take(data)


def _decoder_chain(encodings: list[str], limit: int) -> _Chain:
    decoders: list[_Decoder] = []
    for encoding in reversed(encodings):
        if encoding == "br":
            decoders.append(_BrotliDecoder(limit))
        elif encoding == "zstd":
            decoders.append(_ZstdDecoder(limit))
        else:
            decoders.append(_ZlibDecoder(encoding, limit))
    return _Chain(decoders, limit)
