"""Keeps image downloads off private networks (a server-side request forgery guard).

Image URLs come from untrusted feeds, so a feed could point the collector at
``http://169.254.169.254/`` or an admin page on the LAN. The guard resolves every host
itself, refuses the request when any address is private, loopback, link-local, multicast,
reserved or unspecified, and checks again when a connection is opened: the network backend
connects to the very address it checked (TLS SNI and the Host header keep the hostname), so a
DNS answer that changes between the check and the connect (rebinding) cannot slip through.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Sequence,
)
from contextlib import contextmanager
from dataclasses import dataclass

import httpcore
import httpx

from .config import DEFAULT_USER_AGENT
from .content_coding import ACCEPT_ENCODING
from .errors import ImageError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[Sequence[IPAddress]]]
"""``(host, port) -> addresses``; raises :class:`socket.gaierror` when the name does not resolve."""
AddressPolicy = Callable[[IPAddress], str | None]
"""Returns why an address is off limits (e.g. ``"a loopback address"``), or None if allowed."""

IMAGE_ACCEPT = "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8"
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NUMERIC_HOST = re.compile(r"[0-9a-fA-FxX.]+")
_DEFAULT_PORTS = {"http": 80, "https": 443}


class BlockedAddressError(ImageError):
    """The URL's host is or resolves to an address the guard refuses."""


def forbidden_reason(address: IPAddress) -> str | None:
    """Why ``address`` must not be contacted from untrusted input, or None when it is public."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            reason = forbidden_reason(address.ipv4_mapped)
            return None if reason is None else f"{reason} mapped into IPv6"
        embedded = address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None and (reason := forbidden_reason(embedded)) is not None:
            return f"{reason} wrapped in IPv6"
    checks = (
        (address.is_unspecified, "an unspecified address"),
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "a link-local address"),
        (address.is_multicast, "a multicast address"),
        (address.is_private, "a private address"),
        (address.is_reserved, "a reserved address"),
        (not address.is_global, "a non-public address"),
    )
    return next((reason for hit, reason in checks if hit), None)


def parse_ip_literal(host: str) -> IPAddress | None:
    """The address a host string denotes by itself, including legacy forms like ``2130706433``."""
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if _NUMERIC_HOST.fullmatch(host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def is_localhost_name(host: str) -> bool:
    """``localhost`` and its subdomains (RFC 6761) always mean this machine."""
    name = host.rstrip(".").lower()
    return name == "localhost" or name.endswith(".localhost")


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """Resolve with the operating system, keeping the order it prefers and dropping duplicates."""
    literal = parse_ip_literal(host)
    if literal is not None:
        return [literal]
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except UnicodeError as exc:  # an empty or over-long label (a..b.example): no name to look up
        raise socket.gaierror(socket.EAI_NONAME, f"{host} is no valid host name ({exc})") from exc
    addresses: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    return addresses


@dataclass(frozen=True, slots=True)
class NetGuard:
    """Resolver and policy in one place, injectable so tests can call loopback addresses public."""

    resolver: Resolver = system_resolver
    policy: AddressPolicy = forbidden_reason

    def check_literal(self, url: httpx.URL) -> None:
        """Refuse without any DNS lookup when the host itself names a forbidden address."""
        if is_localhost_name(url.host):
            raise _blocked(url.host, "this machine (localhost)")
        literal = parse_ip_literal(url.host)
        if literal is not None and (reason := self.policy(literal)) is not None:
            raise _blocked(url.host, reason if str(literal) == url.host else f"{literal}, {reason}")

    async def checked_addresses(self, host: str, port: int) -> Sequence[IPAddress]:
        """Resolve ``host`` and return its addresses, refusing if any of them is forbidden."""
        addresses = await self.resolver(host, port)
        if not addresses:
            raise socket.gaierror(socket.EAI_NONAME, f"{host} resolved to no address")
        for address in addresses:
            reason = self.policy(address)
            if reason is not None:
                what = reason if str(address) == host else f"resolves to {address}, {reason}"
                raise _blocked(host, what)
        return addresses


def _blocked(host: str, what: str) -> BlockedAddressError:
    return BlockedAddressError(
        f"image: refused to contact {host} ({what}); image URLs come from untrusted feeds, so "
        "private networks are off limits (set [images] allow_private_addresses = true to allow)"
    )


class GuardedNetworkBackend(httpcore.AsyncNetworkBackend):
    """Resolves and checks at connect time, then connects to the checked address itself."""

    def __init__(self, guard: NetGuard, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self._guard = guard
        self._inner = inner if inner is not None else httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            addresses = await self._guard.checked_addresses(host, port)
        except socket.gaierror as exc:
            raise httpcore.ConnectError(f"DNS lookup of {host} failed: {exc}") from exc
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None  # checked_addresses never returns an empty list
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise BlockedAddressError(f"image: refused to open the local socket {path}")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedTransport(httpx.AsyncBaseTransport):
    """An httpx transport over an httpcore pool whose every connection goes through the guard.

    Each request (so each redirect hop too) is checked before it is sent, and again when a
    connection is opened, against a fresh lookup whose checked address is the one connected to.
    """

    def __init__(self, guard: NetGuard, *, max_connections: int) -> None:
        self._guard = guard
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=5.0,
            http1=True,
            http2=False,
            network_backend=GuardedNetworkBackend(guard),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in _DEFAULT_PORTS:
            raise BlockedAddressError(f"image: refused {url}: only http and https are allowed")
        self._guard.check_literal(url)
        try:
            await self._guard.checked_addresses(url.host, url.port or _DEFAULT_PORTS[url.scheme])
        except socket.gaierror as exc:
            raise httpx.ConnectError(f"DNS lookup of {url.host} failed: {exc}") from exc
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _as_httpx_errors():
            core_response = await self._pool.handle_async_request(core_request)
        assert isinstance(core_response.stream, AsyncIterable)
        return httpx.Response(
            status_code=core_response.status,
            headers=core_response.headers,
            stream=_ResponseStream(core_response.stream),
            extensions=core_response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, stream: AsyncIterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _as_httpx_errors():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        aclose = getattr(self._stream, "aclose", None)
        if aclose is not None:
            await aclose()


_ERROR_MAP: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextmanager
def _as_httpx_errors() -> Iterator[None]:
    """httpcore errors become their httpx twins, so callers handle one family of errors."""
    try:
        yield
    except Exception as exc:
        for core_error, httpx_error in _ERROR_MAP:
            if isinstance(exc, core_error):
                raise httpx_error(str(exc)) from exc
        raise


def make_image_client(
    user_agent: str = DEFAULT_USER_AGENT,
    *,
    allow_private_addresses: bool,
    max_connections: int = 10,
    guard: NetGuard | None = None,
) -> httpx.AsyncClient:
    """The client for image downloads: guarded unless private addresses are explicitly allowed.

    ``guard`` replaces the default resolver/policy (tests use it); ``allow_private_addresses``
    lifts the check altogether.
    """
    transport: httpx.AsyncBaseTransport
    if allow_private_addresses:
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        transport = httpx.AsyncHTTPTransport(http1=True, limits=limits)
    else:
        transport = GuardedTransport(guard or NetGuard(), max_connections=max_connections)
    return httpx.AsyncClient(
        transport=transport,
        headers={
            "User-Agent": user_agent or DEFAULT_USER_AGENT,
            "Accept": IMAGE_ACCEPT,
            "Accept-Encoding": ACCEPT_ENCODING,
        },
        timeout=httpx.Timeout(30.0),
        follow_redirects=False,
    )
