"""Real bytes for tests: RSS/Atom documents in any encoding, a genuine PNG image, hostile
servers and bodies (endless, dripping, resetting, compression bombs), and odd feeds files."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import socket
import struct
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from xml.sax.saxutils import escape

import brotli
import zstandard

START = datetime(2026, 3, 2, 9, 0, 0, tzinfo=UTC)
"""The tests' fixed "now" (a Monday morning, far from a month's or a year's end)."""


@dataclass
class Clock:
    """A clock the tests set and move: what the collector's ``clock`` seam calls."""

    now: datetime = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def md5_8(text: str) -> str:
    """The first 8 hex digits of md5(text): the item's part of its image and content keys."""
    return hashlib.md5(text.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class Entry:
    title: str
    guid: str | None = None
    link: str | None = None
    pub_date: str | None = "Mon, 02 Mar 2026 08:00:00 GMT"
    description: str | None = None
    content: str | None = None


def rss(
    entries: Sequence[Entry],
    *,
    title: str = "Test feed",
    link: str = "https://blog.example/",
    encoding: str = "utf-8",
    declare: bool = True,
) -> bytes:
    """An RSS 2.0 document encoded with ``encoding`` (declared in the prolog when ``declare``)."""
    parts = []
    for entry in entries:
        fields = [f"<title>{escape(entry.title)}</title>"]
        if entry.guid is not None:
            fields.append(f"<guid>{escape(entry.guid)}</guid>")
        if entry.link is not None:
            fields.append(f"<link>{escape(entry.link)}</link>")
        if entry.pub_date is not None:
            fields.append(f"<pubDate>{escape(entry.pub_date)}</pubDate>")
        if entry.description is not None:
            fields.append(f"<description><![CDATA[{entry.description}]]></description>")
        if entry.content is not None:
            fields.append(f"<content:encoded><![CDATA[{entry.content}]]></content:encoded>")
        parts.append("<item>" + "".join(fields) + "</item>")
    prolog = f'<?xml version="1.0" encoding="{encoding}"?>\n' if declare else ""
    text = (
        f'{prolog}<rss version="2.0" xmlns:content="http://purl.org/rss/1.0/modules/content/">'
        f"<channel><title>{escape(title)}</title><link>{escape(link)}</link>"
        + "".join(parts)
        + "</channel></rss>"
    )
    return text.encode(encoding)


def png(width: int = 2, height: int = 2) -> bytes:
    """A valid PNG of the given size (grey pixels)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    raw = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


TEST_SCHEDULE = '[schedule]\nhost_gap = "0s"\njitter = 0\n'
"""Politeness gap and jitter off for the general tests: their feeds share one host (the
loopback server) and they assert exact times; tests/test_politeness.py turns them on."""


def write_project(
    folder: Path,
    feeds: Sequence[str | dict[str, str]],
    *,
    allow_private_images: bool = True,
    extra_toml: str = "",
    schedule_toml: str = TEST_SCHEDULE,
) -> Path:
    """A config file plus a feeds file in ``folder``; returns the config path."""
    lines = ["feeds:"]
    for feed in feeds:
        if isinstance(feed, str):
            lines.append(f"  - url: {feed}")
        else:
            lines.append("  - " + "\n    ".join(f"{k}: {v}" for k, v in feed.items()))
    (folder / "feeds.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = folder / "feedcollector.toml"
    config.write_text(
        'feeds_file = "feeds.yaml"\n'
        '[database]\nbackend = "sqlite"\npath = "collector.db"\n'
        '[storage]\nbackend = "local"\npath = "objects"\n'
        f"[images]\nallow_private_addresses = {'true' if allow_private_images else 'false'}\n"
        + extra_toml
        + schedule_toml,
        encoding="utf-8",
    )
    return config


def closed_port() -> int:
    """A loopback port nothing listens on (connections to it are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --- hostile servers and bodies (tests/test_hostile.py, tests/test_crash.py) --------------------

Handler = Callable[[BaseHTTPRequestHandler], None]
"""A FeedServer route handler: it writes the whole response itself."""


def _start(request: BaseHTTPRequestHandler, content_type: str, **headers: str) -> None:
    request.send_response(200)
    request.send_header("Content-Type", content_type)
    for name, value in headers.items():
        request.send_header(name.replace("_", "-"), value)
    request.end_headers()


def send_ok(request: BaseHTTPRequestHandler, body: bytes, content_type: str) -> None:
    """A whole 200 answer with its Content-Length, from a custom route handler."""
    _start(request, content_type, Content_Length=str(len(body)))
    request.wfile.write(body)


def endless_body(content_type: str, *, limit: int = 2**30) -> Handler:
    """No Content-Length, no chunking: the body runs until the client hangs up (or 1 GiB)."""
    piece = b"<p>" + b"x" * (64 * 1024 - 7) + b"</p>\n"

    def handler(request: BaseHTTPRequestHandler) -> None:
        request.close_connection = True
        request.send_response(200)
        request.send_header("Content-Type", content_type)
        request.send_header("Connection", "close")
        request.end_headers()
        with contextlib.suppress(OSError):
            for _ in range(limit // len(piece)):
                request.wfile.write(piece)

    return handler


def chunked_body(content_type: str, head: bytes, filler: bytes, total: int, tail: bytes) -> Handler:
    """``head``, then ``filler`` repeated up to ``total`` bytes, then ``tail``, chunked."""

    def handler(request: BaseHTTPRequestHandler) -> None:
        request.close_connection = True
        _start(request, content_type, Transfer_Encoding="chunked")
        with contextlib.suppress(OSError):
            sent = 0
            for piece in (head, *itertools.repeat(filler, max(0, total // len(filler))), tail):
                request.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                sent += len(piece)
            request.wfile.write(b"0\r\n\r\n")

    return handler


def dripping_body(content_type: str, *, every_s: float = 0.2, for_s: float = 60.0) -> Handler:
    """Promises 1 MB, then sends one byte per ``every_s``: reads never time out."""

    def handler(request: BaseHTTPRequestHandler) -> None:
        request.close_connection = True
        _start(request, content_type, Content_Length="1000000")
        with contextlib.suppress(OSError):
            for _ in range(int(for_s / every_s)):
                request.wfile.write(b"<")
                request.wfile.flush()
                time.sleep(every_s)

    return handler


def dripping_headers(*, every_s: float = 0.2, for_s: float = 60.0) -> Handler:
    """Slowloris in reverse: a status line, then one more header line per ``every_s``."""

    def handler(request: BaseHTTPRequestHandler) -> None:
        request.close_connection = True
        with contextlib.suppress(OSError):
            request.wfile.write(b"HTTP/1.1 200 OK\r\n")
            for n in range(int(for_s / every_s)):
                request.wfile.write(b"X-Drip-%d: x\r\n" % n)
                request.wfile.flush()
                time.sleep(every_s)

    return handler


def reset_connection(request: BaseHTTPRequestHandler) -> None:
    """Answers the request with a TCP reset (SO_LINGER 0, then close)."""
    request.close_connection = True
    request.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    request.connection.close()


def not_http(request: BaseHTTPRequestHandler) -> None:
    request.close_connection = True
    request.wfile.write(b"SSH-2.0-OpenSSH_9.6\r\nthis is not HTTP\r\n\r\n")


@functools.cache
def compression_bomb(encoding: str, size: int = 256 * 2**20) -> bytes:
    """``size`` zero bytes compressed with ``encoding`` (gzip, br, zstd): tiny on the wire."""
    block = b"\0" * (64 * 2**20)
    if encoding == "gzip":
        member = zlib.compressobj(9, zlib.DEFLATED, 31)
        one = member.compress(block) + member.flush()
        return one * (size // len(block))
    if encoding == "br":
        compressor = brotli.Compressor(quality=1)
        parts = [compressor.process(block) for _ in range(size // len(block))]
        return b"".join(parts) + compressor.finish()
    if encoding == "zstd":
        writer = zstandard.ZstdCompressor(level=1).compressobj()
        parts = [writer.compress(block) for _ in range(size // len(block))]
        return b"".join(parts) + writer.flush()
    raise ValueError(encoding)


COMMENT_RUAMEL_CANNOT_PLACE = (
    "feeds:\n  - url: # the address\n\n       # below\n      https://example.com/feed.xml\n\n"
)
"""A comment after ``url:``, the value two lines below: ruamel.yaml's round trip raises
NotImplementedError ("overlap in comment") on it, libyaml reads it."""
