"""Reading an HTTP answer's body, and naming what went wrong at the HTTP edge.

The body is read raw and decompressed by the bounded decoders of :mod:`.content_coding`, so
neither a huge body nor a compression bomb can exhaust memory: the wire bytes and every
decoder's output are held to the same limit. Shared by the feed fetch and the image
downloader, which word a :class:`TransferError` as their own error; it lives here (not in
``fetch``) because :func:`read_body` raises it too, and ``fetch`` imports this module.
"""

from __future__ import annotations

import errno
import socket
import ssl
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from typing import Protocol

import httpx

from .content_coding import (
    GZIP_MAGIC,
    INVALID_DATA_ERRORS,
    OutputTooLarge,
    content_encodings,
    decoder_chain,
)
from .http_hints import list_field
from .safe_text import QUOTED_CHARS, one_line

MAX_ENCODINGS = 5
"""Content codings undone for one body, as urllib3 allows: servers apply one, rarely two,
and every decoder holds a window of up to 32 KiB, so 12,000 listed ones held 400 MB."""


class TransferError(Exception):
    """A failure at the HTTP edge, neutral so fetch and images can word it as their own error.

    ``unreachable`` names the endpoint (``host:port``) when no connection could be made to it
    at all (no address, refused, connect timeout), or, for images, the one made stopped
    answering (a read or write timeout): every other URL there would fail alike.
    ``retry_after``: how long the endpoint asked everyone to wait (a 429's Retry-After), for
    the requests it keeps from being sent.
    """

    def __init__(
        self,
        kind: str,
        detail: str,
        status: int | None = None,
        *,
        unreachable: str | None = None,
        retry_after: timedelta | None = None,
    ) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.status = status
        self.unreachable = unreachable
        self.retry_after = retry_after


class Located(Protocol):
    """A URL of either HTTP client (httpx's or yarl's), as far as :func:`endpoint` reads it."""

    @property
    def scheme(self) -> str: ...
    @property
    def host(self) -> str | None: ...
    @property
    def port(self) -> int | None: ...


def endpoint(url: Located) -> str:
    """``host:port`` of ``url``, the port spelled out even when it is the scheme's default."""
    port = url.port or (443 if url.scheme == "https" else 80)
    return f"{url.host}:{port}"


LOCAL_ERRNOS = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.EADDRNOTAVAIL}
)
"""Connect failures that are this machine's (out of file descriptors, buffers, local ports),
not the host's: they say nothing about the host's other URLs."""


def unreachable_endpoint(exc: BaseException, url: Located) -> str | None:
    """``url``'s endpoint for a failure to connect, unless this machine caused it."""
    local = any(isinstance(link, OSError) and link.errno in LOCAL_ERRNOS for link in causes(exc))
    return None if local else endpoint(url)


Unreachable = dict[str, TransferError]
"""Endpoints (``host:port``) that took no connection in this cycle (or, for images, answered
429 or stopped answering: no data within the timeout), with the first failure: shared by a
cycle's requests (feeds and images each keep one),
so that a dead host's other URLs are not sent at all (they wait for the next cycle,
uncharged) instead of each waiting out its own DNS or connect timeout."""
NOT_TRIED = "not_tried"
"""The kind of the TransferError for a request that was not sent (see :data:`Unreachable`)."""


def refuse_unreachable(unreachable: Unreachable, url: Located) -> None:
    """Raise a :data:`NOT_TRIED` TransferError when ``url``'s endpoint is in ``unreachable``."""
    where = endpoint(url)
    first = unreachable.get(where)
    if first is not None:
        raise TransferError(
            NOT_TRIED,
            f"{url} not tried: {where} failed earlier in this cycle ({first.detail})",
            retry_after=first.retry_after,
        )


def remember_unreachable(unreachable: Unreachable, error: TransferError) -> None:
    """Add ``error``'s endpoint if it took no connection (the first failure there is kept)."""
    if error.unreachable is not None:
        unreachable.setdefault(error.unreachable, error)


def describe_http_error(exc: httpx.HTTPError, url: str, timeout_s: float | None) -> TransferError:
    """Translate an httpx error into a kind and plain words (pure, so it is testable directly)."""
    parsed = httpx.URL(url)
    host = parsed.host
    root = root_cause(exc)
    if isinstance(exc, httpx.TimeoutException):
        phase = {
            httpx.ConnectTimeout: "connecting to",
            httpx.ReadTimeout: "waiting for data from",
            httpx.WriteTimeout: "sending the request to",
            httpx.PoolTimeout: "waiting for a free connection to",
        }.get(type(exc), "talking to")
        after = f" after {timeout_s:g} s" if timeout_s else ""
        # No connection, or one that stopped answering: its other URLs would wait as long
        stalled = isinstance(exc, httpx.ConnectTimeout | httpx.ReadTimeout | httpx.WriteTimeout)
        unreachable = unreachable_endpoint(exc, parsed) if stalled else None
        return TransferError("timeout", f"timed out{after} {phase} {url}", unreachable=unreachable)
    if isinstance(exc, httpx.ConnectError):
        if caused_by(exc, socket.gaierror):
            kind, detail = "dns", f"could not resolve the host {host} of {url} ({root})"
        elif caused_by(exc, ssl.SSLError):
            return TransferError("tls", f"TLS handshake with {host} failed for {url} ({root})")
        elif caused_by(exc, ConnectionRefusedError):
            kind, detail = "connect", f"{host} refused the connection for {url} ({root})"
        else:
            kind, detail = "connect", f"could not connect to {host} for {url} ({root})"
        return TransferError(kind, detail, unreachable=unreachable_endpoint(exc, parsed))
    if isinstance(exc, httpx.UnsupportedProtocol):
        return TransferError("scheme", f"{url} uses an unsupported scheme ({exc})")
    if isinstance(exc, httpx.NetworkError):
        return TransferError("connect", f"the connection to {host} broke during {url} ({root})")
    return TransferError("protocol", f"{host} broke the HTTP protocol for {url} ({root})")


def causes(exc: BaseException) -> list[BaseException]:
    """The exception and what it was raised from, outermost first (cycles cut)."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    return any(isinstance(link, kind) for link in causes(exc))


def root_cause(exc: BaseException) -> str:
    """The deepest cause's words on one line: HTTP parsers quote what the server sent (a
    multi-line drawing of the bad header, the raw headers of a cut answer)."""
    deepest = causes(exc)[-1]
    return one_line(str(deepest) or type(deepest).__name__, QUOTED_CHARS)


async def read_limited(
    chunks: AsyncIterator[bytes], url: str, headers: Mapping[str, str], *, max_bytes: int
) -> bytes:
    """Read raw body ``chunks``, undoing Content-Encoding, never holding more than ``max_bytes``.

    Client-neutral: the transport's own errors pass through for its caller to word.
    """
    declared = headers.get("Content-Length", "")
    if declared.isdecimal() and int(declared) > max_bytes:
        raise TransferError(
            "too_large", f"{url} declares {int(declared)} bytes, over the {max_bytes} byte limit"
        )
    encodings = content_encodings(list_field(headers, "Content-Encoding") or "")
    if len(encodings) > MAX_ENCODINGS:
        raise TransferError(
            "protocol",
            f"{url} lists {len(encodings)} content codings in Content-Encoding, more than the "
            f"{MAX_ENCODINGS} a client undoes",
        )
    decoder = decoder_chain(encodings, max_bytes)
    parts: list[bytes] = []
    received = 0
    try:
        async for chunk in chunks:
            received += len(chunk)
            if received > max_bytes:
                raise TransferError("too_large", f"{url} sent more than the {max_bytes} byte limit")
            parts.append(decoder.decode(chunk))
        parts.append(decoder.flush())
    except OutputTooLarge as exc:
        raise TransferError(
            "too_large",
            f"{url} decompresses ({', '.join(encodings)}) to more than the {max_bytes} byte limit",
        ) from exc
    except INVALID_DATA_ERRORS as exc:
        raise TransferError(
            "protocol", f"{url} sent a body that is not valid {', '.join(encodings)} data ({exc})"
        ) from exc
    if not decoder.finished and ends_at_close(headers):
        raise TransferError(
            "protocol",
            f"{url} ended before its {', '.join(encodings)} data did (the connection closed "
            "early; the next fetch tries again)",
        )
    return b"".join(parts)


def gunzip_undeclared(
    body: bytes, url: str, headers: Mapping[str, str], *, max_bytes: int
) -> bytes:
    """A feed body that is gzip data though no Content-Encoding said so (a ``.xml.gz`` file
    served as it is, a proxy that compressed twice), decompressed within ``max_bytes``; any
    other body as it is. Its stream cut short fails as a declared one does (only when the
    connection's close ended the body: see :func:`ends_at_close`)."""
    if not body.startswith(GZIP_MAGIC):
        return body
    decoder = decoder_chain(["gzip"], max_bytes)
    try:
        data = decoder.decode(body) + decoder.flush()
    except OutputTooLarge as exc:
        raise TransferError(
            "too_large",
            f"{url} sent gzip data (without a Content-Encoding) that decompresses to more than "
            f"the {max_bytes} byte limit",
        ) from exc
    except INVALID_DATA_ERRORS as exc:
        raise TransferError(
            "protocol",
            f"{url} sent a body that starts as gzip data does (without a Content-Encoding) but "
            f"is not valid gzip data ({exc})",
        ) from exc
    if not decoder.finished and ends_at_close(headers):
        raise TransferError(
            "protocol",
            f"{url} ended before its gzip data (without a Content-Encoding) did (the connection "
            "closed early; the next fetch tries again)",
        )
    return data


def ends_at_close(headers: Mapping[str, str]) -> bool:
    """Whether the body's end is only the connection closing (no Content-Length, not chunked),
    so a cut connection looks like a whole body: only a compressed stream left unfinished
    tells. Otherwise the client checks the length, and an unfinished stream is what the
    server made: what decodes is kept, as browsers keep it."""
    chunked = "chunked" in (list_field(headers, "Transfer-Encoding") or "").lower()
    return "Content-Length" not in headers and not chunked


async def read_body(response: httpx.Response, *, max_bytes: int) -> bytes:
    """:func:`read_limited` for a streaming httpx answer."""
    url = str(response.url)
    try:
        return await read_limited(response.aiter_raw(), url, response.headers, max_bytes=max_bytes)
    except httpx.HTTPError as exc:
        timeouts = response.request.extensions.get("timeout", {})
        raise describe_http_error(exc, url, timeouts.get("read")) from exc
