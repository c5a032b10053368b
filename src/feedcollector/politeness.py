"""Per-host politeness within one collector process (seed 002's per-domain rate limit).

:class:`HostGate` lets at most one feed request per host be in flight and keeps ``host_gap``
between the end of one and the start of the next; it also remembers hosts that answered 429,
until their Retry-After runs out. :class:`PoliteQueue` hands the claimed feeds to the workers
in an order that keeps them busy: a feed whose host is free now goes before one whose host is
busy or still in its gap, so one large host (a self-hosted RSSHub, a blog platform) waits for
itself without holding up the others, and the global concurrency still bounds the total.

What holds across processes: each collector keeps its own gate. Two collectors sharing one
database never fetch the same feed twice (leases), but each may send one request to a host at
the same time, and a 429's Retry-After reaches another process only through the database
(the feed's ``next_fetch_at``, and the host deferrals read at the start of each cycle).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Generic, TypeVar
from urllib.parse import urlsplit

import yarl

T = TypeVar("T")

_DEFAULT_PORTS = {"http": 80, "https": 443}
PRUNE_AT = 4096
"""Hosts remembered before the idle ones are forgotten (memory stays bounded)."""


@functools.lru_cache(maxsize=PRUNE_AT)
def host_key(url: str) -> str:
    """The host a request goes to, named as the request names it: the host as yarl (so
    aiohttp) encodes it, lowercased, plus the port unless it is the scheme's default.

    Encoded, because one server has many spellings: ``bücher.example`` is sent as
    ``xn--bcher-kva.example``, full-width digits as ``127.0.0.1``; keyed by the spelling, each
    got a gate of its own and the server two requests at once (a trailing dot, the DNS root,
    is dropped for the same reason). Cached: it runs for every feed
    of every cycle, and encoding a Unicode name costs tens of microseconds."""
    try:
        parsed = yarl.URL(url)
        host = parsed.raw_host
        port = parsed.explicit_port
    except (ValueError, TypeError, IndexError):  # IndexError: yarl on ``http://]a[@``
        return _spelled_host_key(url)
    if not host:
        return _spelled_host_key(url)
    name = _without_root_dot(host.lower())
    if port is None or port == _DEFAULT_PORTS.get(parsed.scheme):
        return name
    return f"{name}:{port}"


def _without_root_dot(host: str) -> str:
    """``a.example.`` is ``a.example`` written as a fully qualified name: one server."""
    return host[:-1] if len(host) > 1 and host.endswith(".") else host


def _spelled_host_key(url: str) -> str:
    """:func:`host_key` from the URL's text as written, for a URL yarl cannot read."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return url.lower()
    host = (parts.hostname or "").lower()
    if port is None or port == _DEFAULT_PORTS.get(parts.scheme.lower()):
        return host
    return f"{host}:{port}"


class Signal:
    """ "Something changed": every waiter wakes; a waiter may also give up after a timeout."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout: float | None) -> None:
        event = self._event
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return


@dataclass(eq=False)
class HostClaim:
    """A host reserved for one worker from the moment its feed is picked until the request."""

    host: str


class HostGate:
    """One request per host at a time, ``gap`` apart; ``gap`` of zero turns both off."""

    def __init__(self, gap: timedelta, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.gap_s = gap.total_seconds()
        self._monotonic = monotonic
        self._locks: dict[str, asyncio.Lock] = {}
        self._free_at: dict[str, float] = {}
        self._claims: dict[str, HostClaim] = {}
        self._deferred: dict[str, datetime] = {}
        self.signal = Signal()

    @property
    def enabled(self) -> bool:
        return self.gap_s > 0

    def wait_s(self, host: str) -> float | None:
        """Seconds until a request to ``host`` may start; None while one is claimed or running."""
        if not self.enabled:
            return 0.0
        lock = self._locks.get(host)
        if host in self._claims or (lock is not None and lock.locked()):
            return None
        return max(0.0, self._free_at.get(host, 0.0) - self._monotonic())

    def try_claim(self, host: str) -> HostClaim | None:
        """Reserve a free host for the caller's next request (always granted when disabled)."""
        if not self.enabled:
            return HostClaim(host)
        if self.wait_s(host) != 0.0:
            return None
        claim = HostClaim(host)
        self._claims[host] = claim
        return claim

    def release(self, claim: HostClaim | None) -> None:
        """Give back a claim that led to no request (or whose request is over)."""
        if claim is not None and self._claims.get(claim.host) is claim:
            del self._claims[claim.host]
            self.signal.notify()

    @asynccontextmanager
    async def request(self, host: str) -> AsyncIterator[None]:
        """Around one HTTP exchange: waits its turn and the gap, then holds the host."""
        if not self.enabled:
            yield
            return
        lock = self._locks.setdefault(host, asyncio.Lock())
        async with lock:
            delay = self._free_at.get(host, 0.0) - self._monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                yield
            finally:
                self._free_at[host] = self._monotonic() + self.gap_s
                self._claims.pop(host, None)
                self._prune()
                self.signal.notify()

    def defer(self, host: str, until: datetime) -> None:
        """The host asked us to stay away (429) until ``until`` (wall clock)."""
        if until > self._deferred.get(host, until - timedelta(seconds=1)):
            self._deferred[host] = until
        self.signal.notify()

    def forget_deferrals(self) -> None:
        """The wall clock went back: the deadlines are ahead by the step. The stored ones
        (moved back with the rest) come again with the next cycle's rate limits."""
        self._deferred.clear()

    def deferred_until(self, host: str, now: datetime) -> datetime | None:
        until = self._deferred.get(host)
        if until is None:
            return None
        if until <= now:
            del self._deferred[host]
            return None
        return until

    def _prune(self) -> None:
        if len(self._free_at) < PRUNE_AT:
            return
        now = self._monotonic()
        for host in [h for h, at in self._free_at.items() if at <= now]:
            del self._free_at[host]
            lock = self._locks.get(host)
            if lock is not None and not lock.locked():
                del self._locks[host]


@dataclass(eq=False)
class Ticket(Generic[T]):
    """A feed handed to a worker, with its host's claim (None: the host is deferred)."""

    item: T
    host: str
    claim: HostClaim | None
    queued_at: float = field(default_factory=time.monotonic)


class PoliteQueue(Generic[T]):
    """The claimed feeds of one cycle, by host, handed out when their host may be asked.

    The producer adds pages and asks :meth:`wait_for_room` before claiming the next: it
    claims more while the backlog is small, or while every waiting feed's host is busy (so
    other hosts keep flowing), up to ``max_backlog`` feeds.
    """

    def __init__(
        self,
        gate: HostGate,
        host_of: Callable[[T], str],
        now: Callable[[], datetime],
        *,
        low_water: int,
        max_backlog: int,
    ) -> None:
        self._gate = gate
        self._host_of = host_of
        self._now = now
        self._low_water = low_water
        self._max_backlog = max_backlog
        self._pending: dict[str, deque[Ticket[T]]] = {}
        self._count = 0
        self._closed = False
        self._stopped = False

    def __len__(self) -> int:
        return self._count

    def extend(self, items: Iterable[T]) -> None:
        for item in items:
            host = self._host_of(item)
            self._pending.setdefault(host, deque()).append(Ticket(item, host, None))
            self._count += 1
        self._gate.signal.notify()

    def close(self) -> None:
        """No more items will come."""
        self._closed = True
        self._gate.signal.notify()

    def stop(self) -> list[T]:
        """Hand out nothing more; return what was never handed out."""
        self._stopped = True
        left = [ticket.item for tickets in self._pending.values() for ticket in tickets]
        self._pending.clear()
        self._count = 0
        self._gate.signal.notify()
        return left

    async def get(self) -> Ticket[T] | None:
        """The next feed whose host may be asked now (waiting if none); None when done."""
        while not self._stopped:
            ticket, wait = self._pick()
            if ticket is not None:
                return ticket
            if self._closed and not self._count:
                return None
            await self._gate.signal.wait(wait)
        return None

    def done(self, ticket: Ticket[T]) -> None:
        """The worker is finished with the ticket (its claim, if unused, goes back)."""
        self._gate.release(ticket.claim)

    async def wait_for_room(self) -> None:
        """Return when the producer should claim another page."""
        while not self._stopped and not self._closed:
            if self._count < self._low_water:
                return
            if self._count < self._max_backlog and not any(
                self._gate.wait_s(host) == 0.0 for host in self._pending
            ):
                return
            await self._gate.signal.wait(self._soonest())

    def _soonest(self) -> float | None:
        """Seconds until the first host in its gap may be asked again (None: none is)."""
        waits = [w for host in self._pending if (w := self._gate.wait_s(host))]
        return min(waits) if waits else None

    def _pick(self) -> tuple[Ticket[T] | None, float | None]:
        """The first pending feed (hosts in turn) that may go now, else how long to wait."""
        now = self._now()
        for host, tickets in self._pending.items():
            if self._gate.deferred_until(host, now) is not None:
                claim = None
            elif self._gate.wait_s(host) == 0.0:
                claim = self._gate.try_claim(host)
            else:
                continue
            ticket = tickets.popleft()
            ticket.claim = claim
            self._count -= 1
            del self._pending[host]
            if tickets:
                self._pending[host] = tickets  # to the back: hosts take turns
            self._gate.signal.notify()
            return ticket, None
        return None, self._soonest()
