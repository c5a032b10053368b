"""Image helpers, the download, and the private-address guard, against real loopback servers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sqlite3
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from http.server import BaseHTTPRequestHandler
from ipaddress import IPv4Address, ip_address
from pathlib import Path
from typing import Any

import httpx
import pytest

from feedcollector import image_results, image_stage, store_images
from feedcollector.collector import Collector, open_collector
from feedcollector.config import load_settings
from feedcollector.errors import ImageError, ImageNotTried
from feedcollector.httpbody import TransferError, Unreachable
from feedcollector.image_types import cut_short, extension_for, sniff_image_type
from feedcollector.images import (
    DownloadedImage,
    ImageLimits,
    download_image,
    make_image_client,
    object_key,
)
from feedcollector.netguard import (
    BlockedAddressError,
    IPAddress,
    NetGuard,
    forbidden_reason,
    parse_ip_literal,
)
from feedcollector.pipeline import run_cycle
from feedcollector.report import CycleReport
from feedcollector.safe_text import QUOTED_CHARS
from feedcollector.timestamps import format_timestamp, parse_timestamp

from .feedserver import FeedServer
from .samples import Clock, Entry, Handler, rss, send_ok, write_project


def png_bytes() -> bytes:
    """A real 1x1 RGB PNG, chunks and CRCs included."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x80\x00")
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


PNG = png_bytes()
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00\xff\xd9"
"""SOI, a JFIF APP0 segment, EOI: the marker layout every JPEG file starts with."""
OPEN = ImageLimits(allow_private_addresses=True)


def download(
    url: str, limits: ImageLimits = OPEN, guard: NetGuard | None = None
) -> DownloadedImage:
    async def go() -> DownloadedImage:
        client = make_image_client(
            "test-images/1.0",
            allow_private_addresses=limits.allow_private_addresses,
            max_connections=4,
            guard=guard,
        )
        async with client:
            return await download_image(client, url, limits=limits)

    return asyncio.run(go())


def refused(url: str, limits: ImageLimits = OPEN, guard: NetGuard | None = None) -> ImageError:
    with pytest.raises(ImageError) as caught:
        download(url, limits, guard)
    assert str(caught.value).startswith("image: ")
    return caught.value


# --- pure helpers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("feed_id", "guid", "position", "ext", "key"),
    [
        ("f1", "abc", 0, "jpg", "images/f1/90015098/0.jpg"),
        ("f1", "", 3, "png", "images/f1/d41d8cd9/3.png"),
        ("feed-x", "https://example.com/post/1", 12, "webp", "images/feed-x/66d2a3f9/12.webp"),
        ("f2", "文章-42", 1, "bin", "images/f2/c6ba4041/1.bin"),
    ],
)
def test_object_key(feed_id: str, guid: str, position: int, ext: str, key: str) -> None:
    assert object_key(feed_id, guid, position, ext) == key


@pytest.mark.parametrize(
    ("content_type", "url", "ext"),
    [
        ("image/jpeg", "https://x.example/a", "jpg"),
        ("IMAGE/JPEG; charset=binary", "https://x.example/a.png", "jpg"),
        ("image/png", "https://x.example/a.jpg", "png"),
        ("image/gif", "https://x.example/a", "gif"),
        ("image/webp", "https://x.example/a", "webp"),
        ("image/avif", "https://x.example/a", "avif"),
        ("image/svg+xml", "https://x.example/a", "svg"),
        ("image/bmp", "https://x.example/a", "bmp"),
        ("image/x-icon", "https://x.example/favicon", "ico"),
        ("image/vnd.microsoft.icon", "https://x.example/favicon", "ico"),
        ("image/tiff", "https://x.example/a", "tiff"),
        ("image/heic", "https://x.example/a", "heic"),
        (None, "https://x.example/photos/cat.JPEG?w=300#top", "jpg"),
        ("application/octet-stream", "https://x.example/a/b.webp", "webp"),
        ("image/x-unknown", "https://x.example/pic.gif", "gif"),
        (None, "https://x.example/page.php?img=a.png", "bin"),
        ("text/html", "https://x.example/a", "bin"),
        (None, "https://x.example/archive.tar.gz", "bin"),
    ],
)
def test_extension_for(content_type: str | None, url: str, ext: str) -> None:
    assert extension_for(content_type, url) == ext


@pytest.mark.parametrize(
    ("data", "media_type"),
    [
        (PNG, "image/png"),
        (JPEG, "image/jpeg"),
        (b"GIF89a\x01\x00\x01\x00\x00\x00\x00;", "image/gif"),
        (b"RIFF\x24\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00", "image/avif"),
        (b"BM" + b"\x00" * 12 + struct.pack("<I", 40) + b"\x00" * 8, "image/bmp"),
        (b"\x00\x00\x01\x00\x01\x00\x10\x10", "image/x-icon"),
        (b"\x00\x00\x02\x00\x01\x00\x20\x20", "image/x-icon"),  # a cursor (.cur)
        (
            b"\xef\xbb\xbf\n<?xml version='1.0'?>\n<svg xmlns='http://www.w3.org/2000/svg'/>",
            "image/svg+xml",
        ),
        (b"<!DOCTYPE html><html><body><svg></svg></body></html>", None),
        (b"<!DOCTYPE html>\n<head><title>404</title></head><body><svg width='2'/>", None),
        (b"<?xml version='1.0'?><feed xmlns='http://www.w3.org/2005/Atom'><svg/>", None),
        (
            b'<?xml version="1.0"?>\n<!-- drawn by hand -->\n<!DOCTYPE svg PUBLIC "-//W3C//DTD'
            b' SVG 1.1//EN" "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">\n<svg>',
            "image/svg+xml",
        ),
        (b"<!DOCTYPE svg [ <!ENTITY a 'b'> ]><svg:svg xmlns:svg='x'/>", "image/svg+xml"),
        (b"\x00\x00\x00\x18ftypmif1\x00\x00\x00\x00", "image/heic"),
        (b"\xff\x0a\xfa\x7f", "image/jxl"),
        (b"\x00\x00\x00\x0cJXL \r\n\x87\n\x00\x00", "image/jxl"),
        (b"BM is not a bitmap, it is text", None),
        (b"%PDF-1.7", None),
        (b"", None),
    ],
)
def test_sniff_image_type(data: bytes, media_type: str | None) -> None:
    assert sniff_image_type(data) == media_type


def test_many_comments_or_declarations_before_a_page_are_read_once() -> None:
    """Each part of the SVG root's pattern matches one way only: with a lazy ``.*?`` that
    could run past the next ``-->``, 40 comments took days (the event loop with it)."""
    assert sniff_image_type(b"<!-- cached page -->\n" * 40 + b"<html>") is None
    assert sniff_image_type(b"<?a?>" * 300 + b"<html>") is None
    assert sniff_image_type(b"<!doctype svg " + b"[a]" * 300 + b"><html>") is None
    assert sniff_image_type(b"<!-- a -->\n" * 40 + b"<svg/>") == "image/svg+xml"


def test_an_svg_whose_root_follows_a_long_prolog_is_an_svg(feed_server: FeedServer) -> None:
    """A license comment and a doctype of entities before the root: 4 KiB of them had the
    SVG refused as a web page behind an image type."""
    entities = "".join(f'<!ENTITY ns_{n} "http://ns.example/{n}/">' for n in range(60))
    svg = (
        f"<?xml version='1.0'?>\n<!-- {'Licensed under the terms below. ' * 150} -->\n"
        f"<!DOCTYPE svg [{entities}]>\n<svg xmlns='http://www.w3.org/2000/svg'/>"
    ).encode()
    assert len(svg) > 7000
    url = feed_server.route("/logo.svg", body=svg, headers={"Content-Type": "image/svg+xml"})
    assert download(url).content_type == "image/svg+xml"
    assert sniff_image_type(b"<!-- " + b"x" * 8000 + b" -->\n<html><svg/></html>") is None


@pytest.mark.parametrize(
    ("address", "blocked"),
    [
        ("127.0.0.1", True),
        ("127.255.0.9", True),
        ("10.1.2.3", True),
        ("172.16.0.1", True),
        ("192.168.1.1", True),
        ("169.254.169.254", True),
        ("100.64.0.1", True),
        ("0.0.0.0", True),
        ("224.0.0.1", True),
        ("239.255.255.250", True),
        ("240.0.0.1", True),
        ("255.255.255.255", True),
        ("::1", True),
        ("::", True),
        ("fe80::1", True),
        ("fc00::1", True),
        ("ff02::1", True),
        ("::ffff:127.0.0.1", True),
        ("::ffff:10.0.0.1", True),
        ("2002:7f00:1::", True),
        ("64:ff9b::a00:1", True),
        ("8.8.8.8", False),
        ("93.184.216.34", False),
        ("2606:4700:4700::1111", False),
        ("::ffff:8.8.8.8", False),
    ],
)
def test_forbidden_reason(address: str, blocked: bool) -> None:
    assert (forbidden_reason(ip_address(address)) is not None) is blocked


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("[::1]", "::1"),
        ("::ffff:127.0.0.1", "::ffff:127.0.0.1"),
        ("cafe.de", None),
        ("deadbeef", None),
        ("example.com", None),
    ],
)
def test_parse_ip_literal(host: str, address: str | None) -> None:
    expected = ip_address(address) if address is not None else None
    assert parse_ip_literal(host) == expected


# --- downloads (private addresses allowed, the server is on 127.0.0.1) -------------------------------


def test_png_is_downloaded(feed_server: FeedServer) -> None:
    url = feed_server.route("/img/cat", body=PNG, headers={"Content-Type": "image/png"})
    image = download(url)
    assert image == DownloadedImage(data=PNG, content_type="image/png", ext="png", final_url=url)
    request = feed_server.hits("/img/cat")[0]
    assert request.headers["User-Agent"] == "test-images/1.0"
    assert "image/" in request.headers["Accept"]


def test_jpeg_through_a_redirect(feed_server: FeedServer) -> None:
    final = feed_server.route("/cdn/photo", body=JPEG, headers={"Content-Type": "image/jpeg; q=1"})
    start = feed_server.route("/photo.jpg", status=302, headers={"Location": "/cdn/photo"})
    image = download(start)
    assert (image.data, image.content_type, image.ext, image.final_url) == (
        JPEG,
        "image/jpeg",
        "jpg",
        final,
    )


def test_404_is_refused_with_the_status(feed_server: FeedServer) -> None:
    error = refused(feed_server.url("/missing.png"))
    assert "HTTP 404" in str(error)


def test_a_reason_phrase_reaches_the_error_as_one_bounded_line(feed_server: FeedServer) -> None:
    """The server's words go to the log and the task's last_error: no escape sequence (this
    one would set the terminal's title and clear it) and no more than a log line quotes."""

    def escaping_reason(request: BaseHTTPRequestHandler) -> None:
        reason = b"Gone \x1b]0;PWNED\x07\x1b[2J\x9b1m\tfor good " + b"x" * 500
        request.wfile.write(b"HTTP/1.1 404 " + reason + b"\r\nContent-Length: 0\r\n\r\n")
        request.wfile.flush()

    message = str(refused(feed_server.route("/a.png", handler=escaping_reason)))
    assert not [char for char in message if ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F]
    assert "HTTP 404 Gone ]0;PWNED [2J" in message
    assert "x" * QUOTED_CHARS not in message


def test_html_instead_of_an_image_is_refused(feed_server: FeedServer) -> None:
    url = feed_server.route(
        "/a.png",
        body=b"<html>login first</html>",
        headers={"Content-Type": "text/html; charset=utf-8"},
    )
    assert "text/html, not an image" in str(refused(url))


@pytest.mark.parametrize("declared", ["video/mp4", "audio/mpeg", "font/woff2"])
def test_a_video_sound_or_font_is_refused_unread(feed_server: FeedServer, declared: str) -> None:
    """Only its type is needed: the body (up to the size limit) is not downloaded."""

    def endless(request: BaseHTTPRequestHandler) -> None:
        request.send_response(200)
        request.send_header("Content-Type", declared)
        request.end_headers()
        with contextlib.suppress(OSError):
            for _ in range(10_000):
                request.wfile.write(b"\0" * 65536)

    url = feed_server.route("/media", handler=endless)
    assert f"{declared}, not an image" in str(refused(url))


def test_octet_stream_that_sniffs_as_png_is_accepted(feed_server: FeedServer) -> None:
    url = feed_server.route("/blob", body=PNG, headers={"Content-Type": "application/octet-stream"})
    image = download(url)
    assert (image.content_type, image.ext) == ("image/png", "png")


SVG = b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"/>'


@pytest.mark.parametrize(
    ("declared", "body", "stored_as"),
    [
        ("text/plain", PNG, ("image/png", "png")),
        ("application/xml", SVG, ("image/svg+xml", "svg")),
        ("application/json", JPEG, ("image/jpeg", "jpg")),
    ],
)
def test_image_bytes_behind_a_wrong_content_type_are_accepted(
    feed_server: FeedServer, declared: str, body: bytes, stored_as: tuple[str, str]
) -> None:
    """Misconfigured servers label images text/plain or application/xml: the bytes decide,
    as for application/octet-stream. Only a web page is refused unread."""
    url = feed_server.route("/blob", body=body, headers={"Content-Type": declared})
    image = download(url)
    assert (image.content_type, image.ext) == stored_as
    text = feed_server.route("/t", body=b"Not found", headers={"Content-Type": "text/plain"})
    assert "answered with text/plain and its bytes are not a known image format" in str(
        refused(text)
    )


LOGIN_PAGE = b"<!doctype html><html><head><title>Login</title></head><body>log in</body></html>"


@pytest.mark.parametrize(
    ("declared", "body"),
    [
        ("image/avif", LOGIN_PAGE),
        ("image/heic", LOGIN_PAGE),
        ("image/jxl", LOGIN_PAGE),
        ("image/x-icon", LOGIN_PAGE),
        ("image/svg+xml", LOGIN_PAGE),
        ("image/*", LOGIN_PAGE),
        ("image/x-unknown", b"\n  " + LOGIN_PAGE),
        ("", b"<!DOCTYPE html>\n<head><title>404</title></head><body><svg/> Not found</body>"),
        ("text/plain", b"<html><svg/></html>"),
    ],
)
def test_a_web_page_is_no_image_whatever_image_type_it_declares(
    feed_server: FeedServer, declared: str, body: bytes
) -> None:
    """Stored as a success, the page would never be fetched again: the image was lost."""
    headers = {"Content-Type": declared} if declared else {}
    url = feed_server.route("/img", body=body, headers=headers)
    assert "not" in str(refused(url))


def test_an_image_type_without_a_signature_is_kept_as_declared(feed_server: FeedServer) -> None:
    tga = b"\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x01\x00\x18\x00\xff\xff\xff"
    url = feed_server.route("/a.tga", body=tga, headers={"Content-Type": "image/x-tga"})
    image = download(url)
    assert (image.content_type, image.data) == ("image/x-tga", tga)


def _close_delimited(body: bytes, content_type: str) -> Callable[[BaseHTTPRequestHandler], None]:
    """An answer without a length: its end is the connection closing."""

    def send(request: BaseHTTPRequestHandler) -> None:
        request.send_response(200)
        request.send_header("Content-Type", content_type)
        request.send_header("Connection", "close")
        request.end_headers()
        request.wfile.write(body)
        request.close_connection = True

    return send


def test_an_image_cut_short_by_a_closed_connection_is_not_stored(feed_server: FeedServer) -> None:
    """Without a length, a connection closed early looks like a whole body: a PNG without its
    IEND chunk is not archived (it would be for good), and the next attempt downloads it."""
    cut = feed_server.route("/cut.png", handler=_close_delimited(PNG[:-12], "image/png"))
    error = refused(cut)
    assert "ended before its image/png data did" in str(error)
    assert "the next attempt downloads it again" in str(error)
    whole = feed_server.route("/whole.png", handler=_close_delimited(PNG, "image/png"))
    assert download(whole).data == PNG
    sized = feed_server.route("/sized.png", body=PNG[:-12], headers={"Content-Type": "image/png"})
    assert download(sized).data == PNG[:-12], "a length the body matches: the server's file"


@pytest.mark.parametrize(
    ("content_type", "data", "cut"),
    [
        ("image/png", PNG, False),
        ("image/png", PNG[:-12], True),
        ("image/jpeg", JPEG, False),
        ("image/jpeg", JPEG + b"appended data", False),
        ("image/jpeg", JPEG[:-2], True),
        ("image/gif", b"GIF89a" + b"\x00" * 20 + b";", False),
        ("image/gif", b"GIF89a" + b"\x00" * 20 + b";\x00\x00", False),
        ("image/gif", b"GIF89a" + b"\x00" * 20, True),
        ("image/webp", b"RIFF" + (20).to_bytes(4, "little") + b"WEBP" + b"\x00" * 16, False),
        ("image/webp", b"RIFF" + (20).to_bytes(4, "little") + b"WEBP" + b"\x00" * 8, True),
        ("image/svg+xml", SVG[:20], False),
    ],
)
def test_cut_short(content_type: str, data: bytes, cut: bool) -> None:
    assert cut_short(content_type, data) is cut


def test_untyped_bytes_that_are_no_image_are_refused(feed_server: FeedServer) -> None:
    url = feed_server.route("/blob.png", body=b"%PDF-1.7 not an image", headers={})
    assert "not a known image format" in str(refused(url))


def test_empty_body_is_refused(feed_server: FeedServer) -> None:
    url = feed_server.route("/empty.png", body=b"", headers={"Content-Type": "image/png"})
    assert "empty body" in str(refused(url))


@pytest.mark.parametrize(
    ("content_range", "whole"),
    [("bytes 0-9/71", False), ("bytes 10-70/71", False), (None, False), ("bytes 0-70/71", True)],
)
def test_a_206_slice_is_refused_and_a_206_of_the_whole_image_kept(
    feed_server: FeedServer, content_range: str | None, whole: bool
) -> None:
    """No Range is sent: a 206 of a part (a misbehaving cache) was stored as the image."""
    headers = {"Content-Type": "image/png"}
    headers |= {"Content-Range": content_range} if content_range else {}
    body = PNG if whole else PNG[:10]
    url = feed_server.route("/part.png", status=206, body=body, headers=headers)
    if whole:
        assert download(url).data == PNG
    else:
        assert "206 Partial Content" in str(refused(url))


def test_too_large_declared_is_refused(feed_server: FeedServer) -> None:
    url = feed_server.route(
        "/big.png", body=PNG + b"\0" * 5000, headers={"Content-Type": "image/png"}
    )
    error = refused(url, ImageLimits(max_bytes=4000, allow_private_addresses=True))
    assert "4000 byte limit" in str(error)


def test_too_large_streamed_is_refused(feed_server: FeedServer) -> None:
    def chunked(request: BaseHTTPRequestHandler) -> None:
        request.send_response(200)
        request.send_header("Content-Type", "image/png")
        request.send_header("Transfer-Encoding", "chunked")
        request.end_headers()
        try:
            for _ in range(50):
                request.wfile.write(b"3e8\r\n" + b"\0" * 1000 + b"\r\n")
            request.wfile.write(b"0\r\n\r\n")
        except OSError:
            return

    url = feed_server.route("/big.png", handler=chunked)
    error = refused(url, ImageLimits(max_bytes=20_000, allow_private_addresses=True))
    assert "20000 byte limit" in str(error)


@pytest.mark.parametrize("url", ["ftp://files.example/a.png", "data:image/png;base64,iVBORw0KGgo="])
def test_non_http_urls_are_refused(url: str) -> None:
    assert "only http and https" in str(refused(url))


# --- the guard with its defaults: nothing may reach the loopback server ------------------------------


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "localhost",
        "LocalHost.",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "2130706433",
        "0x7f000001",
        "0.0.0.0",
    ],
)
def test_guard_refuses_this_machine(feed_server: FeedServer, host: str) -> None:
    feed_server.route("/a.png", body=PNG, headers={"Content-Type": "image/png"})
    error = refused(f"http://{host}:{feed_server.port}/a.png", ImageLimits())
    assert isinstance(error, BlockedAddressError)
    assert "allow_private_addresses" in str(error)
    assert feed_server.requests == []


@pytest.mark.parametrize("host", ["10.0.0.1", "169.254.169.254", "192.168.0.1", "[fe80::1]"])
def test_guard_refuses_private_networks_without_connecting(host: str) -> None:
    error = refused(f"http://{host}/latest/meta-data/", ImageLimits())
    assert isinstance(error, BlockedAddressError)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]", "2130706433"])
def test_guarded_client_refuses_even_without_download_image(
    feed_server: FeedServer, host: str
) -> None:
    feed_server.route("/a.png", body=PNG, headers={"Content-Type": "image/png"})

    async def go() -> httpx.Response:
        async with make_image_client(allow_private_addresses=False) as client:
            return await client.get(f"http://{host}:{feed_server.port}/a.png")

    with pytest.raises(BlockedAddressError):
        asyncio.run(go())
    assert feed_server.requests == []


# --- the guard with a test policy: 127.0.0.2 counts as public, 127.0.0.1 stays private ---------------


PUBLIC_HOST = "127.0.0.2"
"""The loopback address the test policy treats as a public host."""


@pytest.fixture
def public_server() -> Iterator[FeedServer]:
    with FeedServer(PUBLIC_HOST) as server:
        yield server


PUBLIC = IPv4Address(PUBLIC_HOST)
PRIVATE = IPv4Address("127.0.0.1")


def policy_calling_127_0_0_2_public(address: IPAddress) -> str | None:
    return None if address == PUBLIC else forbidden_reason(address)


class FakeDns:
    """A resolver with fixed answers per name; a list of answers is served one lookup at a time."""

    def __init__(self, answers: dict[str, list[list[IPAddress]]]) -> None:
        self.answers = answers
        self.lookups: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[IPAddress]:
        self.lookups.append(host)
        literal = parse_ip_literal(host)
        if literal is not None:
            return [literal]
        queue = self.answers.get(host)
        if not queue:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return queue.pop(0) if len(queue) > 1 else queue[0]


def guard_with(answers: dict[str, list[list[IPAddress]]]) -> tuple[NetGuard, FakeDns]:
    dns = FakeDns(answers)
    return NetGuard(resolver=dns, policy=policy_calling_127_0_0_2_public), dns


def test_public_host_is_fetched_from_the_checked_address_with_its_name(
    public_server: FeedServer,
) -> None:
    public_server.route("/a.png", body=PNG, headers={"Content-Type": "image/png"})
    guard, dns = guard_with({"cdn.test": [[PUBLIC]]})
    url = f"http://cdn.test:{public_server.port}/a.png"
    image = download(url, ImageLimits(), guard)
    assert image.data == PNG
    assert public_server.hits("/a.png")[0].headers["Host"] == f"cdn.test:{public_server.port}"
    assert dns.lookups.count("cdn.test") >= 2, "checked per request and again at connect time"


@pytest.mark.parametrize(
    ("location", "path"),
    [("/caf\xe9 photo", "/caf%E9%20photo"), ("/caf\xc3\xa9", "/caf%C3%A9")],
    ids=["latin-1", "utf-8"],
)
def test_a_location_beyond_ascii_is_followed_as_browsers_follow_it(
    feed_server: FeedServer, location: str, path: str
) -> None:
    """Its bytes percent-encoded as they came: httpx read a Latin-1 byte as a character and
    encoded it again as UTF-8, so the image was asked for at /caf%C3%A9 (404, three attempts
    spent). The feed side followed it right."""
    final = feed_server.route(path, body=JPEG, headers={"Content-Type": "image/jpeg"})
    start = feed_server.route("/photo.jpg", status=302, headers={"Location": location})
    assert download(start).final_url == final


def test_backslashes_in_an_image_path_are_read_as_slashes_as_browsers_read_them(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """Windows-written HTML (images\\a.png, ..\\up\\b.png) and a Location of one: browsers
    load them with slashes; the server was asked for the backslashes, a 404 three times."""
    feed_server.route("/blog/images/a.png", handler=send_png)
    feed_server.route("/up/b.png", handler=send_png)
    feed_server.route("/blog/old.png", status=301, headers={"Location": "\\up\\b.png"})
    html = '<img src="images\\a.png"><img src="..\\up\\b.png"><img src="old.png">'
    entry = Entry("windows", guid="w", content=html)
    feed = feed_server.route("/feed", body=rss([entry], link=feed_server.url("/blog/")))
    stage = Stage(tmp_path, feed)
    stage.cycle()
    assert stage.states() == [("success", 1, None)] * 3
    assert len(stage.objects()) == 3


def test_redirect_to_a_private_host_is_refused(
    public_server: FeedServer, feed_server: FeedServer
) -> None:
    feed_server.route("/secret.png", body=PNG, headers={"Content-Type": "image/png"})
    public_server.route(
        "/a.png",
        status=302,
        headers={"Location": f"http://intranet.test:{feed_server.port}/secret.png"},
    )
    guard, _ = guard_with({"cdn.test": [[PUBLIC]], "intranet.test": [[PRIVATE]]})
    error = refused(f"http://cdn.test:{public_server.port}/a.png", ImageLimits(), guard)
    assert isinstance(error, BlockedAddressError)
    assert "intranet.test" in str(error)
    assert len(public_server.hits("/a.png")) == 1
    assert feed_server.requests == []


def test_redirect_to_a_private_literal_is_refused(
    public_server: FeedServer, feed_server: FeedServer
) -> None:
    feed_server.route("/secret.png", body=PNG, headers={"Content-Type": "image/png"})
    public_server.route("/a.png", status=301, headers={"Location": feed_server.url("/secret.png")})
    guard, _ = guard_with({"cdn.test": [[PUBLIC]]})
    assert isinstance(
        refused(f"http://cdn.test:{public_server.port}/a.png", ImageLimits(), guard),
        BlockedAddressError,
    )
    assert feed_server.requests == []


def test_dns_rebinding_between_check_and_connect_is_refused(feed_server: FeedServer) -> None:
    feed_server.route("/a.png", body=PNG, headers={"Content-Type": "image/png"})
    guard, dns = guard_with({"rebind.test": [[PUBLIC], [PRIVATE]]})
    error = refused(f"http://rebind.test:{feed_server.port}/a.png", ImageLimits(), guard)
    assert isinstance(error, BlockedAddressError)
    assert dns.lookups == ["rebind.test", "rebind.test"]
    assert feed_server.requests == []


def test_any_private_address_in_the_answer_is_refused(feed_server: FeedServer) -> None:
    feed_server.route("/a.png", body=PNG, headers={"Content-Type": "image/png"})
    guard, _ = guard_with({"mixed.test": [[PUBLIC, PRIVATE]]})
    assert isinstance(
        refused(f"http://mixed.test:{feed_server.port}/a.png", ImageLimits(), guard),
        BlockedAddressError,
    )
    assert feed_server.requests == []


def test_unresolvable_host_is_an_image_error_not_a_block() -> None:
    guard, _ = guard_with({})
    error = refused("http://nowhere.test/a.png", ImageLimits(), guard)
    assert not isinstance(error, BlockedAddressError)
    assert "could not resolve the host nowhere.test" in str(error)


@pytest.mark.parametrize("host", ["www..example.com", ".example.com", "x" * 64 + ".example.com"])
def test_a_host_name_with_an_empty_or_too_long_label_is_unresolvable(host: str) -> None:
    """The guard's lookup raised the IDNA codec's UnicodeError out of the download: each
    attempt was logged as an internal bug with its traceback (never looked up: no network)."""
    error = refused(f"http://{host}/a.png", ImageLimits())
    assert f"could not resolve the host {host}" in str(error)
    assert "label empty or too long" in str(error)


def download_all(
    urls: list[str],
    guard: NetGuard,
    unreachable: Unreachable | None,
    limits: ImageLimits | None = None,
) -> list[DownloadedImage | ImageError]:
    """Each URL downloaded in turn through one client, sharing ``unreachable`` (or not)."""

    async def go() -> list[DownloadedImage | ImageError]:
        results: list[DownloadedImage | ImageError] = []
        client = make_image_client(
            "test-images/1.0", allow_private_addresses=False, max_connections=4, guard=guard
        )
        async with client:
            for url in urls:
                try:
                    results.append(
                        await download_image(
                            client, url, limits=limits or ImageLimits(), unreachable=unreachable
                        )
                    )
                except ImageError as exc:
                    results.append(exc)
        return results

    return asyncio.run(go())


def test_an_unreachable_endpoint_is_tried_once_per_shared_memo(public_server: FeedServer) -> None:
    """A dead image host used to cost each of its images its own DNS or connect timeout (with
    resolvers that time out, minutes for one feed's images); the second try is skipped."""
    public_server.route("/ok.png", body=PNG, headers={"Content-Type": "image/png"})
    public_server.route(
        "/moved.png", status=302, headers={"Location": "http://gone.test/elsewhere.png"}
    )
    guard, dns = guard_with({"cdn.test": [[PUBLIC]]})
    unreachable: Unreachable = {}
    live = f"http://cdn.test:{public_server.port}"
    urls = ["http://gone.test/a.png", "http://gone.test/b.png", f"{live}/moved.png"]
    first, second, redirected, ok = download_all([*urls, f"{live}/ok.png"], guard, unreachable)

    assert isinstance(first, ImageError)
    assert not isinstance(first, ImageNotTried)
    assert "could not resolve the host gone.test" in str(first)
    assert list(unreachable) == ["gone.test:80"]
    for skipped in (second, redirected):
        assert isinstance(skipped, ImageNotTried)
        assert "not tried: gone.test:80 failed earlier in this cycle" in str(skipped)
        assert "could not resolve the host gone.test of http://gone.test/a.png" in str(skipped)
    assert "http://gone.test/elsewhere.png not tried" in str(redirected)
    assert isinstance(ok, DownloadedImage), "other hosts are not affected"
    assert dns.lookups.count("gone.test") == 1
    assert len(public_server.hits("/moved.png")) == 1


def test_a_host_that_stops_answering_is_waited_for_once_per_shared_memo(
    public_server: FeedServer,
) -> None:
    """A host that takes the connection and never answers cost each of its images the whole
    timeout (200 images: two minutes with no feed fetched, at a 5 s timeout); the others
    now wait for the next cycle, uncharged."""
    public_server.route("/hang/a.png", body=PNG, delay_s=3.0)
    public_server.route("/hang/b.png", body=PNG, delay_s=3.0)
    guard, _ = guard_with({"slow.test": [[PUBLIC]]})
    unreachable: Unreachable = {}
    base = f"http://slow.test:{public_server.port}/hang"

    urls = [f"{base}/a.png", f"{base}/b.png"]
    first, second = download_all(urls, guard, unreachable, ImageLimits(timeout_s=0.5))
    assert isinstance(first, ImageError)
    assert not isinstance(first, ImageNotTried)
    assert "timed out after 0.5 s waiting for data from" in str(first)
    assert isinstance(second, ImageNotTried)
    assert f"not tried: slow.test:{public_server.port} failed earlier in this cycle" in str(second)
    assert len(public_server.hits("/hang/b.png")) == 0


def test_without_a_shared_memo_every_download_tries_again(public_server: FeedServer) -> None:
    guard, dns = guard_with({})
    results = download_all(["http://gone.test/a.png", "http://gone.test/b.png"], guard, None)
    assert all("could not resolve the host gone.test" in str(error) for error in results)
    assert dns.lookups == ["gone.test", "gone.test"]


def test_another_port_of_an_unreachable_host_is_still_tried() -> None:
    guard, dns = guard_with({})
    unreachable: Unreachable = {"gone.test:8080": TransferError("connect", "refused")}
    (error,) = download_all(["http://gone.test/a.png"], guard, unreachable)
    assert "could not resolve" in str(error)
    assert dns.lookups == ["gone.test"]
    assert set(unreachable) == {"gone.test:8080", "gone.test:80"}


# --- the stage's result writes against a real SQLite file another process locks ------------------


class Stage:
    """A project whose image stage runs against a real SQLite file, with a short ``[database]
    timeout`` (a write meeting another process's lock fails quickly), one image at a time
    unless told."""

    def __init__(
        self, folder: Path, feed: str, timeout: str = "200ms", concurrency: int = 1
    ) -> None:
        config = write_project(folder, [feed], extra_toml=f"concurrency = {concurrency}\n")
        text = config.read_text(encoding="utf-8")
        short = f'path = "collector.db"\ntimeout = "{timeout}"\n'
        config.write_text(text.replace('path = "collector.db"\n', short, 1), encoding="utf-8")
        self.config = config
        self.folder = folder
        self.clock = Clock()
        self.collector: Collector | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.running: asyncio.Task[CycleReport] | None = None

    def cycle(self) -> CycleReport:
        async def go() -> CycleReport:
            async with open_collector(load_settings(self.config), clock=self.clock) as collector:
                self.collector, self.loop = collector, asyncio.get_running_loop()
                self.running = asyncio.ensure_future(run_cycle(collector))
                return await self.running

        return asyncio.run(go())

    def tasks(self) -> list[dict[str, Any]]:
        with contextlib.closing(sqlite3.connect(self.folder / "collector.db")) as conn:
            conn.row_factory = sqlite3.Row
            sql = "SELECT position, status, attempts, lease_until FROM image_tasks ORDER BY 1"
            return [dict(row) for row in conn.execute(sql)]

    def states(self) -> list[tuple[str, int, str | None]]:
        return [(t["status"], t["attempts"], t["lease_until"]) for t in self.tasks()]

    def objects(self) -> list[str]:
        root = self.folder / "objects"
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.png"))


class WriteLock:
    """Another process's write transaction on the database file (``BEGIN IMMEDIATE``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn: sqlite3.Connection | None = None
        self.released = threading.Event()

    def take(self) -> None:
        self.conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        if self.conn is not None:
            self.conn.close()  # rolled back
            self.conn = None
        self.released.set()


@contextlib.contextmanager
def on_log(text: str, action: Callable[[], None]) -> Iterator[None]:
    """Run ``action`` once, as a callback of the event loop, after the collector first logs
    a line containing ``text``."""

    class Trigger(logging.Handler):
        fired = False

        def emit(self, record: logging.LogRecord) -> None:
            if not self.fired and text in record.getMessage():
                self.fired = True
                asyncio.get_running_loop().call_soon(action)

    trigger = Trigger()
    logger = logging.getLogger("feedcollector")
    logger.addHandler(trigger)
    try:
        yield
    finally:
        logger.removeHandler(trigger)


def image_feed(server: FeedServer, images: dict[str, Handler]) -> str:
    """A feed of one item showing ``/{name}.png`` for each name, in order (positions 0, 1...)."""
    for name, handler in images.items():
        server.route(f"/{name}.png", handler=handler)
    html = "".join(f'<img src="/{name}.png">' for name in images)
    entry = Entry("pictures", guid="p", content=html)
    return server.route("/feed", body=rss([entry], link=server.url("/")))


def send_png(request: BaseHTTPRequestHandler) -> None:
    send_ok(request, PNG, "image/png")


def messages(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records if text in record.getMessage()]


def test_results_a_locked_database_refused_are_written_later_in_the_page(
    feed_server: FeedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Another process held the SQLite write lock past ``[database] timeout`` when the first
    result was written: the stage stopped, that image stored but unrecorded and the whole page
    leased for half an hour. Now the results are kept, the page goes on, and a later write
    (the lock is free by then) records them, while the page's last image still downloads."""
    monkeypatch.setattr(image_results, "RECORD_EVERY", 1)
    monkeypatch.setattr(image_results, "RECORD_EVERY_S", 0.1)
    lock = WriteLock(tmp_path / "collector.db")
    seen: list[str] = []

    def lock_then_png(request: BaseHTTPRequestHandler) -> None:
        lock.take()
        send_png(request)

    def png_once_the_others_are_written(request: BaseHTTPRequestHandler) -> None:
        for _ in range(300):  # 30 s at most
            rows = stage.tasks()
            if [row["status"] for row in rows[:2]] == ["success"] * 2:
                break
            time.sleep(0.1)
        seen.extend(row["status"] for row in rows)
        send_png(request)

    images = {"a": lock_then_png, "b": send_png, "c": png_once_the_others_are_written}
    stage = Stage(tmp_path, image_feed(feed_server, images))
    try:
        with (
            caplog.at_level(logging.INFO, logger="feedcollector"),
            on_log("images: could not write", lock.release),
        ):
            report = stage.cycle()
    finally:
        lock.release()
    assert seen == ["success", "success", "pending"], "written while the page went on"
    assert stage.states() == [("success", 1, None)] * 3
    assert report.images_stored == 3
    assert [len(feed_server.hits(f"/{name}.png")) for name in "abc"] == [1, 1, 1]
    (refused,) = messages(caplog, "could not write")
    assert refused.levelno == logging.WARNING
    assert "could not write 1 image results" in refused.getMessage()
    assert "database is locked" in refused.getMessage()
    assert "they are kept and tried again" in refused.getMessage()
    assert messages(caplog, "wrote the 2 image results kept since a refused write")


def test_a_page_the_database_refuses_to_the_end_says_until_when_it_stays_leased(
    feed_server: FeedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The lock is held until the cycle is over: the page's end write fails too. The tasks
    stay leased (nothing else can be done), the log says so and until when ("the next one
    resumes" was untrue for half an hour), and the first cycle after that stores them, to
    the same keys as the images already stored."""
    monkeypatch.setattr(image_results, "RECORD_EVERY", 1)
    lock = WriteLock(tmp_path / "collector.db")

    def lock_once_then_png(request: BaseHTTPRequestHandler) -> None:
        if not lock.released.is_set():
            lock.take()
        send_png(request)

    stage = Stage(tmp_path, image_feed(feed_server, {"a": lock_once_then_png, "b": send_png}))
    try:
        with caplog.at_level(logging.INFO, logger="feedcollector"):
            report = stage.cycle()
    finally:
        lock.release()
    until = stage.tasks()[0]["lease_until"]
    assert until is not None
    assert stage.states() == [("pending", 0, until)] * 2
    assert report.images_stored == 0
    stored = stage.objects()
    assert len(stored) == 2
    (left,) = messages(caplog, "stay leased")
    assert left.levelno == logging.ERROR
    assert "could not write 2 image results" in left.getMessage()
    assert f"these 2 tasks stay leased until {until}" in left.getMessage()
    assert "database is locked" in left.getMessage()

    stage.cycle()
    assert stage.states() == [("pending", 0, until)] * 2, "leased: not taken before then"
    stage.clock.now = parse_timestamp(until)
    assert stage.cycle().images_stored == 2
    assert stage.states() == [("success", 1, None)] * 2
    assert stage.objects() == stored, "stored again under the same keys, no orphan"


def test_a_stop_after_a_refused_write_records_the_kept_results_and_hands_back_the_rest(
    feed_server: FeedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A stop (SIGTERM) comes after a refused write: the image in flight finishes, the kept
    results are written at the page's end and the task not tried is handed back at once."""
    monkeypatch.setattr(image_results, "RECORD_EVERY", 1)
    lock = WriteLock(tmp_path / "collector.db")
    stopped = threading.Event()

    def lock_then_png(request: BaseHTTPRequestHandler) -> None:
        lock.take()
        send_png(request)

    def png_after_the_stop(request: BaseHTTPRequestHandler) -> None:
        stopped.wait(30)
        send_png(request)

    def stop() -> None:
        lock.release()
        assert stage.collector is not None
        stage.collector.stopping.set()
        stopped.set()

    images = {"a": lock_then_png, "b": png_after_the_stop, "c": send_png}
    stage = Stage(tmp_path, image_feed(feed_server, images))
    try:
        with (
            caplog.at_level(logging.INFO, logger="feedcollector"),
            on_log("images: could not write", stop),
        ):
            report = stage.cycle()
    finally:
        lock.release()
        stopped.set()
    assert stage.states() == [("success", 1, None), ("success", 1, None), ("pending", 0, None)]
    assert report.images_stored == 2
    assert feed_server.hits("/c.png") == []
    assert messages(caplog, "wrote the 2 image results (2 images stored) kept since a refused")
    assert not messages(caplog, "stay leased")


def test_a_cancelled_page_records_what_it_kept_and_hands_back_the_tasks_in_flight(
    feed_server: FeedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A second Ctrl-C cancels the cycle during a download, after a refused write: the kept
    result is written and the download cut short and the one not started are handed back
    (they were left leased, and the stored image unrecorded)."""
    monkeypatch.setattr(image_results, "RECORD_EVERY", 1)
    lock = WriteLock(tmp_path / "collector.db")
    answer = threading.Event()

    def lock_then_png(request: BaseHTTPRequestHandler) -> None:
        lock.take()
        send_png(request)

    def cancel_the_cycle(request: BaseHTTPRequestHandler) -> None:
        lock.released.wait(30)
        assert stage.loop is not None
        assert stage.running is not None
        stage.loop.call_soon_threadsafe(stage.running.cancel)
        answer.wait(30)
        with contextlib.suppress(OSError):
            send_png(request)

    images = {"a": lock_then_png, "b": cancel_the_cycle, "c": send_png}
    stage = Stage(tmp_path, image_feed(feed_server, images))
    try:
        with (
            caplog.at_level(logging.INFO, logger="feedcollector"),
            on_log("images: could not write", lock.release),
            pytest.raises(asyncio.CancelledError),
        ):
            stage.cycle()
    finally:
        lock.release()
        answer.set()
    assert stage.states() == [("success", 1, None), ("pending", 0, None), ("pending", 0, None)]
    assert feed_server.hits("/c.png") == []
    assert messages(caplog, "wrote the 1 image results (1 images stored) kept since a refused")
    assert messages(caplog, "and handed back 2 tasks not done")


def test_a_cancelled_page_waits_a_moment_at_most_for_a_locked_database(
    feed_server: FeedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A second Ctrl-C means exit at once: another process holding the lock longer than that,
    the page's last write is given up after ``CANCELLED_PATIENCE_S`` (not ``[database]
    timeout``) and the log says the tasks stay leased, and until when."""
    monkeypatch.setattr(image_results, "RECORD_EVERY", 1)
    lock = WriteLock(tmp_path / "collector.db")
    answer = threading.Event()

    def lock_then_png(request: BaseHTTPRequestHandler) -> None:
        lock.take()
        send_png(request)

    def cancel_the_cycle(request: BaseHTTPRequestHandler) -> None:
        assert stage.loop is not None
        assert stage.running is not None
        stage.loop.call_soon_threadsafe(stage.running.cancel)
        answer.wait(30)
        with contextlib.suppress(OSError):
            send_png(request)

    images = {"a": lock_then_png, "b": cancel_the_cycle, "c": send_png}
    stage = Stage(tmp_path, image_feed(feed_server, images), timeout="5s")
    try:
        with (
            caplog.at_level(logging.INFO, logger="feedcollector"),
            on_log("stay leased", lock.release),
            pytest.raises(asyncio.CancelledError),
        ):
            stage.cycle()
    finally:
        lock.release()
        answer.set()
    until = stage.tasks()[0]["lease_until"]
    assert until is not None
    assert stage.states() == [("pending", 0, until)] * 3
    (left,) = messages(caplog, "stay leased")
    assert left.levelno == logging.ERROR
    assert (
        "could not write 1 image results nor hand back 2 tasks not done "
        f"(cancelled, no answer in {image_stage.CANCELLED_PATIENCE_S:g} s); "
        f"these 3 tasks stay leased until {until}"
    ) in left.getMessage()


# --- the retry schedule: a failed attempt waits, a Retry-After is honoured, retry-images --------


def refusing(status: int, **headers: str) -> Handler:
    """An image route answering ``status`` with an empty body and these headers (``Date``
    fixed when given, so an HTTP-date Retry-After means the same whenever the test runs)."""

    def handler(request: BaseHTTPRequestHandler) -> None:
        request.send_response_only(status)
        for name, value in {"Content-Length": "0", **headers}.items():
            request.send_header(name.replace("_", "-"), value)
        request.end_headers()

    return handler


def retry_states(stage: Stage) -> list[tuple[str, int, str]]:
    with contextlib.closing(sqlite3.connect(stage.folder / "collector.db")) as conn:
        sql = "SELECT status, attempts, retry_at FROM image_tasks ORDER BY position"
        return list(conn.execute(sql))


def test_a_failing_image_is_tried_again_an_hour_then_a_day_later_then_fails_with_a_warning(
    feed_server: FeedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A soak test: cycles seconds to a minute apart spent an image's three attempts within
    11 s, so an image host's outage of a few minutes failed its images for good. Now a failed
    attempt waits an hour, the next a day; each says when the image is tried next (INFO,
    naming the feed), and the third failure logs one WARNING saying how to queue it again."""
    feed = image_feed(feed_server, {"down": refusing(503)})
    image = feed_server.url("/down.png")
    stage = Stage(tmp_path, feed)
    start = stage.clock.now
    first_retry = start + store_images.RETRY_DELAYS[0]
    second_retry = first_retry + store_images.RETRY_DELAYS[1]
    assert (first_retry - start, second_retry - first_retry) == (
        timedelta(hours=1),
        timedelta(days=1),
    )
    with caplog.at_level(logging.INFO, logger="feedcollector"):
        stage.cycle()
        assert retry_states(stage) == [("pending", 1, format_timestamp(first_retry))]
        (tried,) = messages(caplog, image)
        assert tried.levelno == logging.INFO
        said = tried.getMessage()
        assert f"of feed {feed}, attempt 1 of 3 failed" in said
        assert "HTTP 503" in said
        assert f"tried again from {format_timestamp(first_retry)}" in said
        for moment in (start + timedelta(minutes=1), first_retry - timedelta(seconds=1)):
            stage.clock.now = moment
            stage.cycle()
            assert len(feed_server.hits("/down.png")) == 1, f"not tried again at {moment}"
        stage.clock.now = first_retry
        stage.cycle()
        assert retry_states(stage) == [("pending", 2, format_timestamp(second_retry))]
        stage.clock.now = second_retry - timedelta(minutes=1)
        stage.cycle()
        assert len(feed_server.hits("/down.png")) == 2
        caplog.clear()
        stage.clock.now = second_retry
        stage.cycle()
        assert retry_states(stage) == [("failed", 3, "")]
        (gave_up,) = messages(caplog, image)
        stage.clock.advance(days=30)
        stage.cycle()
    assert len(feed_server.hits("/down.png")) == 3, "a failed task is not tried again"
    assert gave_up.levelno == logging.WARNING
    said = gave_up.getMessage()
    assert f"{image} of feed {feed} failed for good after 3 attempts" in said
    assert f"(last: image: HTTP 503 Service Unavailable from {image})" in said
    pasted = f"`feedcollector --config {stage.config.resolve()} retry-images --feed {feed}`"
    assert pasted in said, "the command to paste names the config the service runs on"


@pytest.mark.parametrize(
    ("status", "retry_after", "waited"),
    [
        (503, "7200", timedelta(hours=2)),
        (429, "60", timedelta(hours=1)),
        (503, "Thu, 05 Mar 2026 09:00:00 GMT", timedelta(days=3)),
        (429, "99999999999", timedelta(days=7)),
    ],
    ids=["longer-than-the-schedule", "shorter", "http-date", "capped"],
)
def test_an_image_servers_retry_after_delays_the_next_attempt(
    feed_server: FeedServer, tmp_path: Path, status: int, retry_after: str, waited: timedelta
) -> None:
    """A 429 or 503 whose Retry-After asks for longer than the schedule's wait gets it (an
    HTTP-date measured against the server's Date), up to 7 days; a shorter one changes
    nothing. It was ignored, and the image tried again a minute later."""
    date = "Mon, 02 Mar 2026 09:00:00 GMT"
    handler = refusing(status, Retry_After=retry_after, Date=date)
    stage = Stage(tmp_path, image_feed(feed_server, {"busy": handler}))
    start = stage.clock.now
    stage.cycle()
    assert retry_states(stage) == [("pending", 1, format_timestamp(start + waited))]
    stage.clock.now = start + waited - timedelta(seconds=1)
    stage.cycle()
    assert len(feed_server.hits("/busy.png")) == 1
    stage.clock.now = start + waited
    stage.cycle()
    assert len(feed_server.hits("/busy.png")) == 2


def test_an_image_retry_after_beyond_ten_years_is_not_quoted_as_the_clipped_wait(
    feed_server: FeedServer,
) -> None:
    url = feed_server.route("/busy.png", status=503, headers={"Retry-After": "9" * 40})
    assert str(refused(url)).endswith("(the server asks to wait ten years or more)")


def test_a_429_rests_the_whole_image_host_for_the_cycle_and_charges_one_image(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """A rate-limited host was asked for every image of the page, each 429 charging its
    image an attempt: the host's other images now wait, uncharged, ten minutes (no
    Retry-After says how long)."""
    images = {"a": refusing(429), "b": send_png, "c": send_png}
    stage = Stage(tmp_path, image_feed(feed_server, images))
    stage.cycle()
    assert [len(feed_server.hits(f"/{name}.png")) for name in images] == [1, 0, 0]
    (charged, *rested) = retry_states(stage)
    assert charged[:2] == ("pending", 1)
    until = format_timestamp(stage.clock.now + image_stage.HOST_REST)
    assert rested == [("pending", 0, until), ("pending", 0, until)]
    stage.clock.advance(minutes=1)
    stage.cycle()
    assert [len(feed_server.hits(f"/{name}.png")) for name in images] == [1, 0, 0]
    stage.clock.advance(minutes=9)
    stage.cycle()
    assert [status for status, _, _ in retry_states(stage)] == ["pending", "success", "success"]


def test_a_429_with_retry_after_holds_the_hosts_other_images_back_as_long_uncharged(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """The host's other images were handed back for the next cycle, a minute later, where the
    next of them met the 429 again: one request a cycle to a host that asked for two hours'
    rest. Now they wait the two hours too, without an attempt charged."""
    answers = [refusing(429, Retry_After="7200"), send_png]

    def busy_once(request: BaseHTTPRequestHandler) -> None:
        answers.pop(0)(request)

    images = {"a": busy_once, "b": send_png, "c": send_png}
    stage = Stage(tmp_path, image_feed(feed_server, images))
    start = stage.clock.now
    stage.cycle()
    asked = format_timestamp(start + timedelta(hours=2))
    assert retry_states(stage) == [("pending", 1, asked)] + [("pending", 0, asked)] * 2
    stage.clock.now = start + timedelta(hours=2) - timedelta(seconds=1)
    stage.cycle()
    assert [len(feed_server.hits(f"/{name}.png")) for name in images] == [1, 0, 0]
    stage.clock.now = start + timedelta(hours=2)
    stage.cycle()
    assert [(status, n) for status, n, _ in retry_states(stage)] == [
        ("success", 2),
        ("success", 1),
        ("success", 1),
    ]


def test_a_429_asking_for_seconds_holds_the_others_back_for_a_later_cycle(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """A Retry-After of a few seconds set the held-back images due again within the image
    stage: a later page claimed them, found the host still rested, and held them back again."""
    images = {"a": refusing(429, Retry_After="2"), "b": send_png}
    stage = Stage(tmp_path, image_feed(feed_server, images))
    start = stage.clock.now
    stage.cycle()
    held_back = retry_states(stage)[1]
    assert held_back == ("pending", 0, format_timestamp(start + image_stage.DEFERRED_AT_LEAST))


def test_images_already_on_their_way_when_the_host_said_429_are_not_charged(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """Every image of a page to one host goes out at once (``[images] concurrency``): each met
    the 429 and each paid an attempt, three failures a cycle for one rate limit. One pays; the
    others wait as long, uncharged."""
    all_sent = threading.Barrier(3, timeout=10)

    def busy(request: BaseHTTPRequestHandler) -> None:
        all_sent.wait()  # each answer waits until the three requests are on their way
        refusing(429, Retry_After="7200")(request)

    images = {"a": busy, "b": busy, "c": busy}
    stage = Stage(tmp_path, image_feed(feed_server, images), concurrency=8)
    asked = format_timestamp(stage.clock.now + timedelta(hours=2))
    stage.cycle()
    states = retry_states(stage)
    assert sorted(attempts for _, attempts, _ in states) == [0, 0, 1], states
    assert {(status, retry_at) for status, _, retry_at in states} == {("pending", asked)}


def test_retry_images_queues_the_failed_images_of_one_feed_again(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """Images of a host down for longer than the retries waited failed for good; queued again
    (only the feed asked for), the next cycle stores them, a minute later, not a day later."""
    served: dict[str, bytes | None] = {"a": None}

    def png_once_back(request: BaseHTTPRequestHandler) -> None:
        if served["a"] is None:
            refusing(404)(request)
        else:
            send_ok(request, served["a"], "image/png")

    feed = image_feed(feed_server, {"a": png_once_back})
    other_entry = Entry("other", guid="o", content=f'<img src="{feed_server.url("/gone.png")}">')
    feed_server.route("/gone.png", status=404)
    other = feed_server.route("/other", body=rss([other_entry]))
    stage = Stage(tmp_path, feed)
    stage.config.parent.joinpath("feeds.yaml").write_text(
        f"feeds:\n  - url: {feed}\n  - url: {other}\n", encoding="utf-8"
    )
    stage.cycle()
    for delay in store_images.RETRY_DELAYS:
        stage.clock.advance(seconds=delay.total_seconds())
        stage.cycle()
    assert retry_states(stage) == [("failed", 3, "")] * 2
    served["a"] = PNG
    stage.clock.advance(minutes=1)

    async def requeue(urls: list[str] | None) -> int:
        async with open_collector(load_settings(stage.config), clock=stage.clock) as collector:
            return await store_images.requeue_failed_images(
                collector.db, now=stage.clock.now, feed_urls=urls
            )

    assert asyncio.run(requeue([feed])) == 1
    assert asyncio.run(requeue([feed])) == 0, "nothing failed is left in that feed"
    stage.clock.advance(minutes=1)
    report = stage.cycle()
    assert report.images_stored == 1
    with contextlib.closing(sqlite3.connect(stage.folder / "collector.db")) as conn:
        rows = conn.execute(
            "SELECT original_url, status, attempts, retry_at, last_error, r2_key "
            "FROM image_tasks ORDER BY original_url"
        ).fetchall()
    (key,) = stage.objects()
    assert rows == [
        (feed_server.url("/a.png"), "success", 1, "", None, key),
        (feed_server.url("/gone.png"), "failed", 3, "", rows[1][4], None),
    ]
    assert (stage.folder / "objects" / key).read_bytes() == PNG
    assert len(feed_server.hits("/gone.png")) == 3
    assert asyncio.run(requeue(None)) == 1, "without a feed, every failed image"
