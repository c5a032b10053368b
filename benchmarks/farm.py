"""The feed farm: many synthetic feeds on loopback, served by one asyncio loop.

One listener per simulated host (127.0.0.2, 127.0.0.3, ...; Linux routes all of 127/8 to
the loopback interface), all driven by one event loop in a background thread, so 10k feeds
cost one thread and no per-feed state: bodies are generated on request by
:func:`benchmarks.feeds.feed_document`. The server speaks just enough HTTP/1.1 for a feed
reader: keep-alive, ``ETag``/``Last-Modified`` with 304 answers to matching conditional
requests (or, when told, none: the same body again), an optional fixed latency, and counters
of what it answered.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from .feeds import FeedDocument, feed_document

MAX_HEADER_BYTES = 16 * 1024


@dataclass
class FarmStats:
    """What the farm answered (read after a cycle; updated on the farm's thread)."""

    ok: int = 0
    not_modified: int = 0
    not_found: int = 0
    bytes_sent: int = 0
    connections: int = 0


@dataclass
class Farm:
    """A running farm: the feed URLs and the counters."""

    feeds: int
    items: int
    hosts: list[tuple[str, int]]
    latency_s: float
    documents: tuple[FeedDocument, ...] = ()
    """When set, feed ``i`` serves ``documents[i % len(documents)]`` (real-world bytes)."""
    honour_validators: bool = True
    """False: every request gets a 200 and the whole body, as from the many servers that send
    no validators or ignore them (set between cycles)."""
    stats: FarmStats = field(default_factory=FarmStats)
    connections: set[asyncio.StreamWriter] = field(default_factory=set)

    def url(self, index: int) -> str:
        host, port = self.hosts[index % len(self.hosts)]
        return f"http://{host}:{port}/feeds/{index}.xml"

    def urls(self) -> list[str]:
        return [self.url(index) for index in range(self.feeds)]


def _answer(farm: Farm, path: str, headers: dict[str, str]) -> bytes:
    """The whole HTTP response for one request (pure apart from the counters)."""
    name = path.split("?", 1)[0].rsplit("/", 1)[-1]
    number = name.removesuffix(".xml")
    if not path.startswith("/feeds/") or not number.isdigit() or int(number) >= farm.feeds:
        farm.stats.not_found += 1
        return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
    index = int(number)
    etag = f'"farm-{index}-0"'
    if farm.honour_validators and headers.get("if-none-match") == etag:
        farm.stats.not_modified += 1
        validators = f"ETag: {etag}\r\n"
        return f"HTTP/1.1 304 Not Modified\r\n{validators}\r\n".encode("ascii")
    if farm.documents:
        document = farm.documents[index % len(farm.documents)]
    else:
        document = feed_document(index, farm.items)
    if farm.honour_validators and headers.get("if-modified-since") == document.last_modified:
        farm.stats.not_modified += 1
        return (
            f"HTTP/1.1 304 Not Modified\r\nETag: {etag}\r\n"
            f"Last-Modified: {document.last_modified}\r\n\r\n"
        ).encode("ascii")
    farm.stats.ok += 1
    farm.stats.bytes_sent += len(document.body)
    head = (
        "HTTP/1.1 200 OK\r\n"
        f"Content-Type: {document.content_type}\r\n"
        f"Content-Length: {len(document.body)}\r\n"
        f"ETag: {document.etag}\r\nLast-Modified: {document.last_modified}\r\n\r\n"
    )
    return head.encode("ascii") + document.body


async def _serve_connection(
    farm: Farm, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    farm.connections.add(writer)
    farm.stats.connections += 1
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ")
            if len(parts) != 3:
                return
            headers = {}
            for line in lines[1:]:
                name, colon, value = line.partition(":")
                if colon:
                    headers[name.strip().lower()] = value.strip()
            if farm.latency_s:
                await asyncio.sleep(farm.latency_s)
            writer.write(_answer(farm, parts[1], headers))
            await writer.drain()
            if headers.get("connection", "").lower() == "close":
                return
    finally:
        farm.connections.discard(writer)
        writer.close()


@contextmanager
def run_farm(
    feeds: int,
    items: int,
    *,
    hosts: int = 8,
    latency_s: float = 0.0,
    documents: tuple[FeedDocument, ...] = (),
) -> Iterator[Farm]:
    """Serve ``feeds`` feeds of ``items`` items each (or the given ``documents``, in turn) on
    ``hosts`` loopback addresses."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    farm = Farm(feeds=feeds, items=items, hosts=[], latency_s=latency_s, documents=documents)
    servers: list[asyncio.Server] = []
    failure: list[BaseException] = []

    async def start() -> None:
        for number in range(hosts):
            address = f"127.0.0.{2 + number}"
            server = await asyncio.start_server(
                lambda r, w: _serve_connection(farm, r, w),
                address,
                0,
                limit=MAX_HEADER_BYTES,
                backlog=1024,
            )
            servers.append(server)
            farm.hosts.append((address, server.sockets[0].getsockname()[1]))

    def main() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(start())
        except BaseException as exc:
            failure.append(exc)
            ready.set()
            return
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=main, name="feed-farm", daemon=True)
    thread.start()
    ready.wait()
    if failure:
        raise RuntimeError(f"feed farm could not start: {failure[0]}") from failure[0]
    try:
        yield farm
    finally:

        async def stop() -> None:
            for server in servers:
                server.close()
            for writer in list(farm.connections):
                writer.close()
            others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            if others:
                await asyncio.wait(others, timeout=5)

        asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
