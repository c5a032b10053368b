"""The fetch stage against real HTTP servers on 127.0.0.1, serving real bytes."""

from __future__ import annotations

import asyncio
import errno
import gzip
import socket
import ssl
import time
import tracemalloc
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from types import SimpleNamespace

import aiohttp
import brotli
import httpx
import pytest
import zstandard

from feedcollector.config import DEFAULT_USER_AGENT
from feedcollector.errors import FetchError
from feedcollector.feedhttp import describe_aiohttp_error
from feedcollector.fetch import FetchLimits, fetch_feed, make_http_client
from feedcollector.httpbody import MAX_ENCODINGS, Unreachable, describe_http_error, root_cause
from feedcollector.models import FetchedFeed
from feedcollector.safe_text import QUOTED_CHARS

from .conftest import CORPUS
from .feedserver import FeedServer
from .samples import closed_port

RSS_INPUT = CORPUS / "rss-parser" / "test" / "input"
LATIN1_FEED = (RSS_INPUT / "encoding.rss").read_bytes()
GUARDIAN_FEED = (RSS_INPUT / "guardian.rss").read_bytes()
GB2312_FEED = (CORPUS / "feedparser-encoding" / "chardet" / "gb2312.xml").read_bytes()
ETAG = '"v1-abc"'
LAST_MODIFIED = "Wed, 21 Oct 2015 07:28:00 GMT"


def fetch(
    url: str,
    *,
    etag: str | None = None,
    last_modified: str | None = None,
    limits: FetchLimits | None = None,
    user_agent: str = DEFAULT_USER_AGENT,
) -> FetchedFeed:
    async def go() -> FetchedFeed:
        async with make_http_client(user_agent) as client:
            return await fetch_feed(
                client, url, etag=etag, last_modified=last_modified, limits=limits or FetchLimits()
            )

    return asyncio.run(go())


def fetch_error(url: str, **kwargs: object) -> FetchError:
    with pytest.raises(FetchError) as caught:
        fetch(url, **kwargs)  # type: ignore[arg-type]
    message = str(caught.value)
    assert message.startswith("fetch: ")
    return caught.value


def serving(feed_server: FeedServer, path: str, body: bytes, **headers: str) -> str:
    return feed_server.route(
        path, body=body, headers={"Content-Type": "application/rss+xml", **headers}
    )


# --- 200, validators, conditional GET ---------------------------------------------------------


def test_200_returns_raw_body_validators_and_content_type(feed_server: FeedServer) -> None:
    url = feed_server.route(
        "/feed",
        body=GUARDIAN_FEED,
        headers={"Content-Type": "application/rss+xml; charset=utf-8"},
        etag=ETAG,
        last_modified=LAST_MODIFIED,
    )
    result = fetch(url)
    assert result.status == 200
    assert not result.not_modified
    assert result.body == GUARDIAN_FEED
    assert result.content_type == "application/rss+xml; charset=utf-8"
    assert (result.etag, result.last_modified) == (ETAG, LAST_MODIFIED)
    assert result.url == url
    assert result.final_url == url
    assert result.elapsed_s >= 0


def always_not_modified(request: BaseHTTPRequestHandler) -> None:
    """A cache in front of the server that answers 304 whatever the request carried."""
    request.send_response(304)
    request.end_headers()


def test_a_304_to_an_unconditional_request_is_a_protocol_failure(
    feed_server: FeedServer,
) -> None:
    """Taken as "unchanged", it left a feed never read looking healthy, with no items."""
    url = feed_server.route("/feed", handler=always_not_modified)
    error = fetch_error(url)
    assert (error.kind, error.status, error.url) == ("protocol", 304, url)
    assert "304 Not Modified to an unconditional request" in str(error)
    assert str(error).endswith("): nothing stored")
    assert fetch(url, etag=ETAG).not_modified, "asked with a validator, a 304 answers it"
    assert fetch(url, last_modified=LAST_MODIFIED).not_modified


def test_conditional_request_sends_validators_and_304_has_empty_body(
    feed_server: FeedServer,
) -> None:
    url = feed_server.route("/feed", body=GUARDIAN_FEED, etag=ETAG, last_modified=LAST_MODIFIED)
    result = fetch(url, etag=ETAG, last_modified=LAST_MODIFIED)
    assert result.status == 304
    assert result.not_modified
    assert result.body == b""
    sent = feed_server.hits("/feed")[0].headers
    assert sent["If-None-Match"] == ETAG
    assert sent["If-Modified-Since"] == LAST_MODIFIED


def test_stale_validators_get_the_new_body_and_new_validators(feed_server: FeedServer) -> None:
    url = feed_server.route("/feed", body=GUARDIAN_FEED, etag='"v2"', last_modified=LAST_MODIFIED)
    result = fetch(url, etag='"v1"', last_modified="Mon, 01 Jan 2001 00:00:00 GMT")
    assert result.status == 200
    assert result.body == GUARDIAN_FEED
    assert result.etag == '"v2"'


def test_a_stored_validator_aiohttp_cannot_send_is_left_out(feed_server: FeedServer) -> None:
    url = feed_server.route("/feed", body=GUARDIAN_FEED, etag=ETAG)
    assert fetch(url, etag='"v\x01"', last_modified="Mon\x7f").status == 200
    request = feed_server.hits("/feed")[0]
    assert "If-None-Match" not in request.headers
    assert "If-Modified-Since" not in request.headers


def test_a_last_modified_later_than_the_answers_date_is_not_sent_back(
    feed_server: FeedServer,
) -> None:
    """A server answering 304 whenever If-Modified-Since is not before its file's time
    answered every fetch 304 until 2100: the feed's new items never came. The ETag is kept,
    and so is a Last-Modified that is no date (servers that compare strings match it)."""
    future = "Fri, 01 Jan 2100 00:00:00 GMT"
    url = feed_server.route("/feed", body=GUARDIAN_FEED, etag=ETAG, last_modified=future)
    result = fetch(url)
    assert (result.etag, result.last_modified) == (ETAG, None)
    fetch(url, last_modified=future)  # as an older version kept it
    assert "If-Modified-Since" not in feed_server.hits("/feed")[-1].headers
    odd = feed_server.route("/odd", body=GUARDIAN_FEED, last_modified="yesterday-ish")
    assert fetch(odd).last_modified == "yesterday-ish"


def test_server_without_validators_gets_plain_requests(feed_server: FeedServer) -> None:
    url = serving(feed_server, "/feed", GUARDIAN_FEED)
    first = fetch(url)
    second = fetch(url, etag=first.etag, last_modified=first.last_modified)
    assert (first.etag, first.last_modified) == (None, None)
    assert second.status == 200
    assert second.body == GUARDIAN_FEED
    for request in feed_server.hits("/feed"):
        assert "If-None-Match" not in request.headers
        assert "If-Modified-Since" not in request.headers


# --- bodies: compression and bytes -------------------------------------------------------------


COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,
    "br": lambda data: brotli.compress(data, quality=5),
    "zstd": zstandard.ZstdCompressor().compress,
}


@pytest.mark.parametrize("encoding", sorted(COMPRESSORS))
def test_compressed_bodies_come_back_decompressed(feed_server: FeedServer, encoding: str) -> None:
    compressed = COMPRESSORS[encoding](GUARDIAN_FEED)
    assert compressed != GUARDIAN_FEED
    url = serving(feed_server, "/feed", compressed, **{"Content-Encoding": encoding})
    assert fetch(url).body == GUARDIAN_FEED
    accepted = feed_server.hits("/feed")[0].headers["Accept-Encoding"]
    assert {part.strip() for part in accepted.split(",")} >= {"gzip", "deflate", "br", "zstd"}


def test_raw_deflate_and_multi_member_gzip_are_read(feed_server: FeedServer) -> None:
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw_deflate = raw.compress(GUARDIAN_FEED) + raw.flush()
    half = len(GUARDIAN_FEED) // 2
    two_members = gzip.compress(GUARDIAN_FEED[:half]) + gzip.compress(GUARDIAN_FEED[half:])
    deflate_url = serving(feed_server, "/raw", raw_deflate, **{"Content-Encoding": "deflate"})
    gzip_url = serving(feed_server, "/members", two_members, **{"Content-Encoding": "gzip"})
    assert fetch(deflate_url).body == GUARDIAN_FEED
    assert fetch(gzip_url).body == GUARDIAN_FEED


def test_zlib_data_labelled_gzip_is_read_as_deflate(feed_server: FeedServer) -> None:
    """A server that mixes the labels up sends zlib-wrapped deflate as ``gzip``: it was taken
    as a plain body and failed as "not a feed", with no word of the coding."""
    url = serving(
        feed_server, "/zlib", zlib.compress(GUARDIAN_FEED), **{"Content-Encoding": "gzip"}
    )
    assert fetch(url).body == GUARDIAN_FEED


@pytest.mark.parametrize("label", ["gzip", "x-gzip"])
def test_a_plain_body_labelled_gzip_is_read_as_it_is(feed_server: FeedServer, label: str) -> None:
    """A doubly configured server sends the file as it is under Content-Encoding: gzip: it
    does not start as gzip data does, and the feed is there to read (it failed every fetch,
    unread and without a backup). Bytes that start as gzip and are not still fail."""
    url = serving(feed_server, "/plain", GUARDIAN_FEED, **{"Content-Encoding": label})
    assert fetch(url).body == GUARDIAN_FEED


def _dripping(body: bytes, coding: str) -> Callable[[BaseHTTPRequestHandler], None]:
    """``body`` under Content-Encoding ``coding``, its first 64 bytes one write each."""

    def handler(request: BaseHTTPRequestHandler) -> None:
        request.send_response(200)
        request.send_header("Content-Encoding", coding)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        for byte in body[:64]:
            request.wfile.write(bytes([byte]))
            request.wfile.flush()
            time.sleep(0.001)
        request.wfile.write(body[64:])

    return handler


@pytest.mark.parametrize("label", ["deflate", "br", "zstd"])
def test_a_plain_body_labelled_deflate_br_or_zstd_is_read_as_it_is(
    feed_server: FeedServer, label: str
) -> None:
    """As for gzip: the file sent as it is under another coding's label failed every fetch
    as invalid data, unread and without a backup. A body of that coding that is damaged, or
    any that does not start as a document does, still fails."""
    url = serving(
        feed_server, "/plain", b"\xef\xbb\xbf" + GUARDIAN_FEED, **{"Content-Encoding": label}
    )
    assert fetch(url).body == b"\xef\xbb\xbf" + GUARDIAN_FEED
    dripped = feed_server.route("/dripped", handler=_dripping(b"\n\n" + GUARDIAN_FEED, label))
    assert fetch(dripped).body == b"\n\n" + GUARDIAN_FEED  # text decodes as deflate a while
    damaged = b"\x00" + COMPRESSORS[label](GUARDIAN_FEED)[1:]
    error = fetch_error(serving(feed_server, "/damaged", damaged, **{"Content-Encoding": label}))
    assert error.kind == "protocol"
    assert f"is not valid {label} data" in str(error)


def test_gzip_data_without_a_content_encoding_is_read_within_the_limit(
    feed_server: FeedServer,
) -> None:
    """A ``.xml.gz`` file served as it is (or compressed twice by a proxy) failed as "not a
    feed (no RSS, RDF or Atom element in it)"; no feed starts as gzip data does."""
    url = serving(
        feed_server, "/gz", gzip.compress(GUARDIAN_FEED), **{"Content-Type": "application/gzip"}
    )
    assert fetch(url).body == GUARDIAN_FEED
    twice = serving(
        feed_server,
        "/twice",
        gzip.compress(gzip.compress(GUARDIAN_FEED)),
        **{"Content-Encoding": "gzip"},
    )
    assert fetch(twice).body == GUARDIAN_FEED
    bomb = serving(feed_server, "/bomb", gzip.compress(b" " * 100_000))
    error = fetch_error(bomb, limits=FetchLimits(max_body_bytes=50_000))
    assert (error.kind, str(error)) == (
        "too_large",
        f"fetch: {bomb} sent gzip data (without a Content-Encoding) that decompresses to more "
        "than the 50000 byte limit (a feed this big needs a larger [fetch] max_body_bytes)",
    )
    broken = fetch_error(serving(feed_server, "/broken", b"\x1f\x8b" + GUARDIAN_FEED))
    assert broken.kind == "protocol"
    assert "starts as gzip data does (without a Content-Encoding) but is not valid gzip" in str(
        broken
    )


def _half_of_an_undeclared_gzip_body_then_close(request: BaseHTTPRequestHandler) -> None:
    """No Content-Length, no Content-Encoding: the body ends where the connection closes."""
    packed = gzip.compress(GUARDIAN_FEED)
    request.close_connection = True
    request.send_response(200)
    request.send_header("Content-Type", "application/gzip")
    request.send_header("Connection", "close")
    request.end_headers()
    request.wfile.write(packed[: len(packed) // 2])


def test_undeclared_gzip_data_cut_short_fails_as_declared_gzip_does(
    feed_server: FeedServer,
) -> None:
    """A ``.xml.gz`` cut by a closed connection was read as far as it went, as a whole feed."""
    url = feed_server.route("/cut", handler=_half_of_an_undeclared_gzip_body_then_close)
    error = fetch_error(url)
    assert (error.kind, str(error)) == (
        "protocol",
        f"fetch: {url} ended before its gzip data (without a Content-Encoding) did (the "
        "connection closed early; the next fetch tries again)",
    )


def test_stacked_codings_are_undone_up_to_a_bound(feed_server: FeedServer) -> None:
    twice = gzip.compress(zlib.compress(GUARDIAN_FEED))
    url = serving(feed_server, "/twice", twice, **{"Content-Encoding": "deflate, gzip"})
    assert fetch(url).body == GUARDIAN_FEED
    layered = GUARDIAN_FEED
    for _ in range(MAX_ENCODINGS + 1):
        layered = gzip.compress(layered)
    codings = ", ".join(["gzip"] * (MAX_ENCODINGS + 1))
    error = fetch_error(serving(feed_server, "/layers", layered, **{"Content-Encoding": codings}))
    assert error.kind == "protocol"
    assert f"lists {MAX_ENCODINGS + 1} content codings" in str(error)


def test_list_headers_sent_on_several_lines_are_read_whole(feed_server: FeedServer) -> None:
    """RFC 9110 (5.3): field lines of one name are one list. aiohttp's ``get`` gave the first
    line alone, so a body coded gzip then br was left br-coded ("not a feed"), and a max-age on
    a second Cache-Control line was not heard."""
    body = brotli.compress(gzip.compress(GUARDIAN_FEED))

    def two_lines_each(request: BaseHTTPRequestHandler) -> None:
        request.send_response(200)
        for name, value in (
            ("Content-Type", "application/rss+xml"),
            ("Content-Encoding", "gzip"),
            ("Content-Encoding", "br"),
            ("Cache-Control", "public"),
            ("Cache-Control", "max-age=7200"),
            ("Content-Length", str(len(body))),
        ):
            request.send_header(name, value)
        request.end_headers()
        request.wfile.write(body)

    fetched = fetch(feed_server.route("/feed", handler=two_lines_each))
    assert fetched.body == GUARDIAN_FEED
    assert fetched.hints.cache_control == "public, max-age=7200"


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (LATIN1_FEED, "text/xml; charset=latin1"),
        (GB2312_FEED, "text/xml; charset=utf-8"),
        (b"\xff\xfe<\x00r\x00s\x00s\x00/\x00>\x00", "application/xml"),
    ],
    ids=["latin1", "gb2312-mislabelled-utf8", "utf16-bom"],
)
def test_non_utf8_bytes_are_returned_untouched(
    feed_server: FeedServer, body: bytes, content_type: str
) -> None:
    url = feed_server.route("/feed", body=body, headers={"Content-Type": content_type})
    result = fetch(url)
    assert result.body == body
    assert result.content_type == content_type


def test_corrupt_compressed_body_is_a_protocol_error(feed_server: FeedServer) -> None:
    corrupt = gzip.compress(GUARDIAN_FEED)[:10] + GUARDIAN_FEED
    url = serving(feed_server, "/feed", corrupt, **{"Content-Encoding": "gzip"})
    error = fetch_error(url)
    assert error.kind == "protocol"
    assert "gzip" in str(error)


def test_a_parsers_words_become_one_bounded_line() -> None:
    drawing = ValueError("400, message:\n  Duplicate Content-Length\n  ^\n" + "x" * 500)
    try:
        raise RuntimeError("outer") from drawing
    except RuntimeError as exc:
        words = root_cause(exc)
    assert "\n" not in words
    assert words.startswith("400, message: Duplicate Content-Length ^")
    assert len(words) <= QUOTED_CHARS


# --- HTTP errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (404, "HTTP 404 Not Found"),
        (410, "HTTP 410 Gone"),
        (500, "HTTP 500 Internal Server Error"),
        (503, "HTTP 503 Service Unavailable"),
        (999, "(a status HTTP does not define; the server may be blocking this client)"),
    ],
)
def test_error_statuses(feed_server: FeedServer, status: int, words: str) -> None:
    url = feed_server.route("/feed", status=status, body=b"<html>nope</html>")
    error = fetch_error(url)
    assert (error.kind, error.status) == ("http", status)
    assert words in str(error)
    assert url in str(error)


def test_503_message_says_what_happened_and_leaves_what_next_to_the_caller(
    feed_server: FeedServer,
) -> None:
    """A cycle's WARNING line says when it retries (tests/test_pipeline.py), worded alike for
    every failure; ``add`` does not retry at all, so the error itself promises nothing."""
    url = feed_server.route("/feed", status=503, body=b"busy")
    message = str(fetch_error(url))
    assert message.endswith(f"HTTP 503 Service Unavailable from {url} (the server is failing)")


def test_429_mentions_retry_after(feed_server: FeedServer) -> None:
    url = feed_server.route("/feed", status=429, body=b"slow down", headers={"Retry-After": "120"})
    error = fetch_error(url)
    assert (error.kind, error.status) == ("http", 429)
    assert "120" in str(error)


def raw_answer(head: bytes) -> Callable[[BaseHTTPRequestHandler], None]:
    """Sends ``head`` (status line and header lines) byte for byte, then an empty body."""

    def answer(request: BaseHTTPRequestHandler) -> None:
        request.wfile.write(head + b"\r\nContent-Length: 0\r\n\r\n")
        request.wfile.flush()

    return answer


ESCAPES = b"\x1b]0;PWNED\x07\x1b[2J\x1b[31m\x9b1m"
"""Set the terminal's title, clear the screen, turn it red (C0, then a C1 CSI byte)."""


def assert_one_safe_line(message: str) -> None:
    assert not [char for char in message if ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F]


def test_a_reason_phrase_reaches_the_message_as_one_bounded_line(
    feed_server: FeedServer,
) -> None:
    """The reason phrase is the server's text: an escape sequence in it drove the terminal
    the log went to."""
    reason = b"Not " + ESCAPES + b"here\tat all " + b"x" * 500
    url = feed_server.route("/feed", handler=raw_answer(b"HTTP/1.1 404 " + reason))
    message = str(fetch_error(url))
    assert_one_safe_line(message)
    assert "HTTP 404 Not ]0;PWNED [2J [31m\ufffd1mhere at all xxx" in message
    quoted = message.split("HTTP 404 ", 1)[1].split(f" from {url}", 1)[0]
    assert len(quoted) == QUOTED_CHARS


@pytest.mark.parametrize("status", [429, 503])
def test_a_retry_after_reaches_the_message_as_one_bounded_line(
    feed_server: FeedServer, status: int
) -> None:
    head = b"HTTP/1.1 %d Busy\r\nRetry-After: 120" % status + ESCAPES + b"x" * 500
    message = str(fetch_error(feed_server.route("/feed", handler=raw_answer(head))))
    assert_one_safe_line(message)
    assert "Retry-After '120 ]0;PWNED [2J [31m\ufffd1mxxx" in message
    assert "x" * QUOTED_CHARS not in message


@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize("retry_after", ["-5", "120.5", "soon"])
def test_a_retry_after_in_neither_form_is_said_to_be_ignored(
    feed_server: FeedServer, status: int, retry_after: str
) -> None:
    """It is ignored, so the message must not read as a wait the collector honours."""
    url = feed_server.route("/feed", status=status, headers={"Retry-After": retry_after})
    message = str(fetch_error(url))
    assert "asks to wait" not in message
    assert f"its Retry-After '{retry_after}' is neither seconds nor an HTTP-date, ignored" in (
        message
    )


@pytest.mark.parametrize("retry_after", ["0", "Thu, 01 Jan 2015 00:00:00 GMT"])
def test_a_retry_after_asking_for_no_wait_is_not_worded_as_a_wait(
    feed_server: FeedServer, retry_after: str
) -> None:
    """Zero or a past date asks for nothing: "asks to wait 0 s" would name a wait not kept."""
    url = feed_server.route("/feed", status=429, headers={"Retry-After": retry_after})
    message = str(fetch_error(url))
    assert "asks to wait" not in message
    assert f"(rate limited, its Retry-After {retry_after!r} asks for no wait (zero or a past " in (
        message
    )


@pytest.mark.parametrize("retry_after", ["Wed, 21 Oct 2099 07:28:00 GMT", "9" * 40])
def test_a_retry_after_beyond_ten_years_is_not_quoted_as_the_clipped_wait(
    feed_server: FeedServer, retry_after: str
) -> None:
    """A date in 2099 was worded "asks to wait 315360000 s (until 2036-...)": the ten years
    it is clipped to, not what the server said."""
    url = feed_server.route("/feed", status=503, headers={"Retry-After": retry_after})
    message = str(fetch_error(url))
    assert f"its Retry-After {retry_after!r} asks to wait ten years or more" in message
    assert "315360000" not in message


def test_an_error_from_a_redirect_target_names_the_url_that_answered() -> None:
    """A 429 there asks that host to wait, not the feed's own."""
    with FeedServer() as feeds, FeedServer() as limiter:
        limited = limiter.route("/limited", status=429, headers={"Retry-After": "60"})
        start = feeds.route("/feed", status=302, headers={"Location": limited})
        error = fetch_error(start)
    assert (error.status, error.url) == (429, limited)
    assert "the server asks to wait 60" in str(error)


def test_204_without_body_is_an_http_error(feed_server: FeedServer) -> None:
    def no_content(request: BaseHTTPRequestHandler) -> None:
        request.send_response(204)
        request.end_headers()

    url = feed_server.route("/feed", handler=no_content)
    error = fetch_error(url)
    assert (error.kind, error.status) == ("http", 204)


def test_206_partial_content_is_not_taken_for_the_feed(feed_server: FeedServer) -> None:
    """No Range is ever sent, so a part is a broken server's; stored, it was half a feed."""
    url = feed_server.route(
        "/feed",
        status=206,
        body=GUARDIAN_FEED[:100],
        headers={"Content-Range": f"bytes 0-99/{len(GUARDIAN_FEED)}"},
    )
    error = fetch_error(url)
    assert (error.kind, error.status) == ("protocol", 206)
    assert "HTTP 206 Partial Content" in str(error)
    assert "no Range was asked for" in str(error)
    assert "Range" not in feed_server.hits("/feed")[0].headers


def test_other_2xx_with_a_body_is_accepted(feed_server: FeedServer) -> None:
    url = feed_server.route("/feed", status=203, body=GUARDIAN_FEED)
    result = fetch(url)
    assert result.status == 203
    assert result.body == GUARDIAN_FEED


# --- network failures ----------------------------------------------------------------------------


def test_connection_refused() -> None:
    url = f"http://127.0.0.1:{closed_port()}/feed"
    error = fetch_error(url)
    assert error.kind == "connect"
    assert url in str(error)


def test_read_timeout(feed_server: FeedServer) -> None:
    url = feed_server.route("/feed", body=GUARDIAN_FEED, delay_s=1.5)
    error = fetch_error(url, limits=FetchLimits(timeout_s=0.2))
    assert error.kind == "timeout"
    assert str(error).endswith("([fetch] timeout sets how long to wait)"), "what to change"


def test_tls_to_a_plain_http_server_is_a_tls_error(feed_server: FeedServer) -> None:
    feed_server.route("/feed", body=GUARDIAN_FEED)
    error = fetch_error(f"https://127.0.0.1:{feed_server.port}/feed")
    assert error.kind == "tls"


def test_garbage_instead_of_http_is_a_protocol_error(feed_server: FeedServer) -> None:
    def garbage(request: BaseHTTPRequestHandler) -> None:
        request.wfile.write(b"this is not HTTP at all\r\n\r\n")
        request.close_connection = True

    error = fetch_error(feed_server.route("/feed", handler=garbage))
    assert error.kind == "protocol"


def test_a_bad_message_is_worded_without_aiohttps_own_400(feed_server: FeedServer) -> None:
    """aiohttp's parser error reads "400, message: ...", a status the server never sent."""
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4"
    error = fetch_error(feed_server.route("/feed", handler=raw_answer(head)))
    assert error.kind == "protocol"
    assert "127.0.0.1 broke the HTTP protocol for" in str(error)
    assert "(Duplicate Content-Length: b'Content-Length: 4' ^)" in str(error)
    assert "400" not in str(error)


@pytest.mark.parametrize(
    ("head", "body", "said"),
    [
        (b"Content-Length: 2000", b"<rss>" * 100, "(received 500 of 2000 bytes)"),
        (b"Transfer-Encoding: chunked", b"1f4\r\n" + b"<rss>" * 100 + b"\r\n", "transfer length"),
    ],
)
def test_a_body_whose_connection_closes_early_is_a_broken_connection(
    feed_server: FeedServer, head: bytes, body: bytes, said: str
) -> None:
    """It read "127.0.0.1 broke the HTTP protocol" (metrics: protocol) for a server or proxy
    that gave up mid-body, which is a connection that broke."""

    def answer(request: BaseHTTPRequestHandler) -> None:
        request.wfile.write(b"HTTP/1.1 200 OK\r\n" + head + b"\r\n\r\n" + body)
        request.close_connection = True

    error = fetch_error(feed_server.route("/feed", handler=answer))
    assert error.kind == "connect"
    assert str(error).startswith("fetch: the connection to 127.0.0.1 closed before http://")
    assert said in str(error)


def test_long_headers_are_read_and_endless_ones_refused(feed_server: FeedServer) -> None:
    """Some servers send a 10 KiB Set-Cookie; nobody needs a header field over 64 KiB."""
    long = serving(feed_server, "/long", GUARDIAN_FEED, **{"X-Padding": "a" * 10_000})
    assert fetch(long).body == GUARDIAN_FEED
    endless = serving(feed_server, "/endless", GUARDIAN_FEED, **{"X-Padding": "a" * 70_000})
    error = fetch_error(endless)
    assert error.kind == "protocol"


def test_feeds_go_through_the_proxy_the_environment_names(
    feed_server: FeedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As with httpx before: ``http_proxy`` / ``HTTP_PROXY`` are honoured for feeds."""
    target = "http://feeds.example/feed"
    feed_server.route(target, body=GUARDIAN_FEED, headers={"Content-Type": "application/rss+xml"})
    for name in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, feed_server.url(""))
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)

    assert fetch(target).body == GUARDIAN_FEED
    assert [request.path for request in feed_server.requests] == [target]


def test_dns_failures_are_classified_from_the_cause() -> None:
    cause = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    error = httpx.ConnectError("[Errno -2] Name or service not known")
    error.__cause__ = cause
    described = describe_http_error(error, "https://no-such-host.example/feed", 30)
    assert described.kind == "dns"
    assert "no-such-host.example" in described.detail


def with_cause(error: httpx.HTTPError, cause: BaseException) -> httpx.HTTPError:
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    ("error", "url", "unreachable"),
    [
        (
            with_cause(httpx.ConnectError("dns"), socket.gaierror(socket.EAI_NONAME, "unknown")),
            "https://cdn.example/a.png",
            "cdn.example:443",
        ),
        (
            with_cause(httpx.ConnectError("refused"), ConnectionRefusedError(111, "refused")),
            "http://cdn.example/a.png",
            "cdn.example:80",
        ),
        (httpx.ConnectError("unreachable"), "http://cdn.example:8080/a.png", "cdn.example:8080"),
        (httpx.ConnectTimeout("slow"), "https://cdn.example:443/a.png", "cdn.example:443"),
        (
            with_cause(httpx.ConnectError("tls"), ssl.SSLError("bad cert")),
            "https://a.example/",
            None,
        ),
        (
            with_cause(httpx.ConnectError("fds"), OSError(errno.EMFILE, "Too many open files")),
            "https://cdn.example/a.png",
            None,
        ),
        (httpx.ReadTimeout("no data"), "https://cdn.example/a.png", "cdn.example:443"),
        (httpx.WriteTimeout("no room"), "http://cdn.example/a.png", "cdn.example:80"),
        (httpx.PoolTimeout("busy"), "https://cdn.example/a.png", None),
        (httpx.ReadError("reset"), "https://cdn.example/a.png", None),
        (httpx.RemoteProtocolError("garbage"), "https://cdn.example/a.png", None),
    ],
)
def test_only_a_failure_to_connect_or_a_stalled_host_names_the_endpoint_unreachable(
    error: httpx.HTTPError, url: str, unreachable: str | None
) -> None:
    """The image stage skips the other images of an unreachable endpoint for the cycle: only
    an endpoint that took no connection at all, or stopped answering (no data within the
    timeout: its other images would wait as long), may be named (a TLS or a broken body is
    about that answer, and the host's other images may well load; running out of file
    descriptors or of pool connections is this machine's trouble)."""
    assert describe_http_error(error, url, 30).unreachable == unreachable


def test_dns_failures_of_the_feed_client_are_classified_too() -> None:
    """A name that does not resolve, as aiohttp reports it (no DNS query leaves the machine)."""
    key = SimpleNamespace(host="no-such-host.example", port=443, ssl=True)
    cause = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    error = aiohttp.ClientConnectorDNSError(key, cause)  # type: ignore[arg-type]
    described = describe_aiohttp_error(error, "https://no-such-host.example/feed", 30)
    assert described.kind == "dns"
    assert described.detail.startswith("could not resolve the host no-such-host.example")


@pytest.mark.parametrize(
    ("error", "unreachable"),
    [
        (aiohttp.ConnectionTimeoutError("connect"), "feeds.example:443"),
        (aiohttp.SocketTimeoutError("read"), None),
        (
            aiohttp.ClientConnectorDNSError(
                SimpleNamespace(host="feeds.example", port=443, ssl=True),  # type: ignore[arg-type]
                socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
            ),
            "feeds.example:443",
        ),
        (
            aiohttp.ClientConnectorError(
                SimpleNamespace(host="feeds.example", port=443, ssl=True),  # type: ignore[arg-type]
                ConnectionRefusedError(111, "Connection refused"),
            ),
            "feeds.example:443",
        ),
        (
            aiohttp.ClientConnectorSSLError(
                SimpleNamespace(host="feeds.example", port=443, ssl=True),  # type: ignore[arg-type]
                ssl.SSLError("bad certificate"),
            ),
            None,
        ),
        (
            aiohttp.ClientConnectorError(
                SimpleNamespace(host="feeds.example", port=443, ssl=True),  # type: ignore[arg-type]
                OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address"),
            ),
            None,
        ),
        (aiohttp.ServerDisconnectedError(), None),
    ],
)
def test_only_a_failure_to_connect_names_the_feed_endpoint_unreachable(
    error: aiohttp.ClientError, unreachable: str | None
) -> None:
    described = describe_aiohttp_error(error, "https://feeds.example/feed", 30)
    assert described.unreachable == unreachable


def test_a_fetch_to_an_endpoint_that_took_no_connection_this_cycle_is_not_sent(
    feed_server: FeedServer,
) -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    moved = feed_server.route("/moved", status=302, headers={"Location": f"{dead}/new"})
    live = serving(feed_server, "/live", GUARDIAN_FEED)
    unreachable: Unreachable = {}

    async def go() -> list[FetchedFeed | FetchError]:
        results: list[FetchedFeed | FetchError] = []
        async with make_http_client() as client:
            for url in (f"{dead}/a", f"{dead}/b", moved, live):
                try:
                    results.append(
                        await fetch_feed(
                            client,
                            url,
                            etag=None,
                            last_modified=None,
                            limits=FetchLimits(),
                            unreachable=unreachable,
                        )
                    )
                except FetchError as exc:
                    results.append(exc)
        return results

    first, second, redirected, ok = asyncio.run(go())
    assert isinstance(first, FetchError)
    assert "refused the connection" in str(first)
    assert list(unreachable) == [dead.removeprefix("http://")]
    for skipped in (second, redirected):
        assert isinstance(skipped, FetchError)
        assert skipped.kind == "not_tried"
        assert "not tried: 127.0.0.1:" in str(skipped)
        assert "failed earlier in this cycle" in str(skipped)
        assert f"refused the connection for {dead}/a" in str(skipped)
    assert str(redirected).startswith(f"fetch: {dead}/new not tried")
    assert isinstance(ok, FetchedFeed)
    assert ok.body == GUARDIAN_FEED


def dripping(request: BaseHTTPRequestHandler) -> None:
    """Declares a big body, then sends one byte every 50 ms: reads never time out, the deadline must."""
    request.send_response(200)
    request.send_header("Content-Type", "application/rss+xml")
    request.send_header("Content-Length", "100000")
    request.end_headers()
    try:
        for _ in range(100_000):
            request.wfile.write(b"x")
            request.wfile.flush()
            time.sleep(0.05)
    except OSError:
        return


def test_dripping_server_hits_the_deadline(feed_server: FeedServer) -> None:
    url = feed_server.route("/feed", handler=dripping)
    started = time.monotonic()
    error = fetch_error(url, limits=FetchLimits(timeout_s=1.0, deadline_s=0.6))
    assert (error.kind, error.status) == ("deadline", 200), "it answered, then dripped"
    assert url in str(error)
    assert str(error).endswith("(the server is too slow; [fetch] deadline sets it)")
    assert time.monotonic() - started < 10, "the deadline did not stop the fetch"


# --- size limits -----------------------------------------------------------------------------------


def chunked(size: int) -> Callable[[BaseHTTPRequestHandler], None]:
    def handler(request: BaseHTTPRequestHandler) -> None:
        request.send_response(200)
        request.send_header("Content-Type", "application/rss+xml")
        request.send_header("Transfer-Encoding", "chunked")
        request.end_headers()
        try:
            for start in range(0, size, 1000):
                piece = b"x" * min(1000, size - start)
                request.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            request.wfile.write(b"0\r\n\r\n")
        except OSError:
            return

    return handler


def test_body_over_the_cap_declared_by_content_length(feed_server: FeedServer) -> None:
    url = serving(feed_server, "/feed", b"x" * 5000)
    error = fetch_error(url, limits=FetchLimits(max_body_bytes=4000))
    assert error.kind == "too_large"
    assert "4000" in str(error)


def test_body_over_the_cap_without_content_length(feed_server: FeedServer) -> None:
    """The server answered 200: the failure keeps that status (the feed's line said "no
    response", and status showed none)."""
    url = feed_server.route("/feed", handler=chunked(50_000))
    error = fetch_error(url, limits=FetchLimits(max_body_bytes=20_000))
    assert (error.kind, error.status) == ("too_large", 200)


def test_chunked_body_under_the_cap_is_read_whole(feed_server: FeedServer) -> None:
    url = feed_server.route("/feed", handler=chunked(15_500))
    assert fetch(url, limits=FetchLimits(max_body_bytes=20_000)).body == b"x" * 15_500


@pytest.mark.parametrize("encoding", sorted(COMPRESSORS))
def test_compression_bomb_is_stopped_at_the_decompressed_cap(
    feed_server: FeedServer, encoding: str
) -> None:
    bomb = COMPRESSORS[encoding](b"\0" * (16 * 2**20))
    assert len(bomb) < 64 * 1024
    url = serving(feed_server, "/feed", bomb, **{"Content-Encoding": encoding})
    tracemalloc.start()
    try:
        error = fetch_error(url, limits=FetchLimits(max_body_bytes=2**20))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.kind == "too_large"
    assert "decompresses" in str(error)
    assert peak < 8 * 2**20, f"decompression was not bounded: {peak} bytes at peak"


# --- redirects -------------------------------------------------------------------------------------


def redirect(feed_server: FeedServer, path: str, location: str, status: int = 301) -> str:
    return feed_server.route(path, status=status, headers={"Location": location})


def test_redirects_are_followed_and_final_url_reported(feed_server: FeedServer) -> None:
    start = redirect(feed_server, "/old", "/middle")
    redirect(feed_server, "/middle", feed_server.url("/feed"), status=307)
    final = serving(feed_server, "/feed", GUARDIAN_FEED)
    result = fetch(start, etag=ETAG)
    assert (result.url, result.final_url) == (start, final)
    assert result.body == GUARDIAN_FEED
    assert feed_server.hits("/feed")[0].headers["If-None-Match"] == ETAG


def test_too_many_redirects(feed_server: FeedServer) -> None:
    for hop in range(4):
        redirect(feed_server, f"/hop{hop}", f"/hop{hop + 1}", status=302)
    serving(feed_server, "/hop4", GUARDIAN_FEED)
    start = feed_server.url("/hop0")
    assert fetch(start, limits=FetchLimits(max_redirects=4)).body == GUARDIAN_FEED
    error = fetch_error(start, limits=FetchLimits(max_redirects=3))
    assert error.kind == "redirect"
    assert "more than 3 redirects" in str(error)


def test_redirect_loop_is_detected(feed_server: FeedServer) -> None:
    start = redirect(feed_server, "/a", "/b")
    redirect(feed_server, "/b", "/a", status=302)
    error = fetch_error(start, limits=FetchLimits(max_redirects=20))
    assert error.kind == "redirect"
    assert "loop" in str(error)
    assert len(feed_server.hits("/a")) == 1


def test_redirect_to_ftp_is_refused(feed_server: FeedServer) -> None:
    start = redirect(feed_server, "/feed", "ftp://files.example/feed.xml")
    error = fetch_error(start)
    assert error.kind == "scheme"
    assert "ftp://files.example/feed.xml" in str(error)


def test_redirect_to_a_url_yarl_cannot_split_is_a_redirect_error(feed_server: FeedServer) -> None:
    """yarl raised IndexError on it, which failed the feed as a bug."""
    error = fetch_error(redirect(feed_server, "/feed", "http://]a[@/feed.xml"))
    assert error.kind == "redirect"
    assert "redirects to an invalid URL 'http://]a[@/feed.xml'" in str(error)


def test_credentials_follow_a_redirect_to_the_same_server_only(feed_server: FeedServer) -> None:
    """A Location written in full (a trailing slash added by the server) named no user, and
    the feed behind Basic authentication failed 401 for good; another host never gets them."""
    base = feed_server.url("")
    redirect(feed_server, "/private", f"{base}/private/")
    redirect(feed_server, "/elsewhere", f"http://localhost:{feed_server.port}/private/", 302)
    serving(feed_server, "/private/", GUARDIAN_FEED)
    url = base.replace("http://", "http://reader:p%40ss@") + "/private"
    result = fetch(url)
    assert result.permanent_url == url + "/"
    fetch(url.replace("/private", "/elsewhere"))
    sent = [hit.headers.get("Authorization") for hit in feed_server.hits("/private/")]
    assert sent == ["Basic cmVhZGVyOnBAc3M=", None]


@pytest.mark.parametrize("location", ["\\feeds\\rss.xml", "/feeds\\rss.xml?a\\b"])
def test_backslashes_in_a_location_are_read_as_slashes(
    feed_server: FeedServer, location: str
) -> None:
    """As browsers (and the image downloader) read them; the feed was asked for
    /feeds%5Crss.xml, a 404 on every fetch. A query keeps its own."""
    feed_server.route("/feeds/rss.xml", body=GUARDIAN_FEED)
    result = fetch(redirect(feed_server, "/old", location))
    assert result.body == GUARDIAN_FEED
    assert [hit.path for hit in feed_server.hits("/feeds/rss.xml")] == [
        "/feeds/rss.xml" + location.partition("rss.xml")[2].replace("\\", "%5C")
    ]


def test_redirect_without_location(feed_server: FeedServer) -> None:
    error = fetch_error(feed_server.route("/feed", status=302))
    assert (error.kind, error.status) == ("redirect", 302)


@pytest.mark.parametrize("location", ["", "  "])
def test_an_empty_location_is_a_redirect_without_one(
    feed_server: FeedServer, location: str
) -> None:
    """It was joined to the URL itself and called a redirect loop, sending the operator to
    look for a loop the server never made."""
    url = redirect(feed_server, "/feed", location)
    error = fetch_error(url)
    assert (error.kind, error.status) == ("redirect", 301)
    assert str(error) == f"fetch: HTTP 301 from {url} without a Location to follow"


def test_non_http_url_is_refused_without_a_request() -> None:
    assert fetch_error("file:///etc/passwd").kind == "scheme"


# --- request headers -----------------------------------------------------------------------------


def test_user_agent_and_accept_are_sent(feed_server: FeedServer) -> None:
    url = serving(feed_server, "/feed", GUARDIAN_FEED)
    fetch(url, user_agent="test-agent/1.0")
    fetch(url)
    fetch(url, limits=FetchLimits(user_agent="override/2.0"))
    agents = [request.headers["User-Agent"] for request in feed_server.hits("/feed")]
    assert agents == ["test-agent/1.0", DEFAULT_USER_AGENT, "override/2.0"]
    assert DEFAULT_USER_AGENT.startswith("feedcollector/")
    accept = feed_server.hits("/feed")[0].headers["Accept"]
    assert accept.startswith("application/rss+xml, application/atom+xml")
