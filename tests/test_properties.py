"""Property-based tests of the untrusted-input boundary (issue 5).

The stage tests already throw arbitrary bytes at ``parse_feed`` and ``decode_feed`` alone and
arbitrary text at ``absolutize``. These go further along the path a feed body really takes:
decode then parse, on bytes shaped like hostile XML (DTDs, entities, CDATA, comments, deep
nesting, mixed encodings); URL resolution and image-source extraction; the bounded body reader
on arbitrary compressed bytes; and the private-address guard on arbitrary hosts and addresses.
The contract under test: nothing but the documented error ever escapes, and what comes out
obeys the rules (absolute http(s) image URLs, aware UTC dates, bounded sizes, valid keys).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import zlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import brotli
import httpx
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from feedcollector.decode import decode_feed
from feedcollector.errors import ParseError
from feedcollector.html import image_sources, is_absolute_url, resolve_url
from feedcollector.httpbody import TransferError, read_body
from feedcollector.image_types import (
    SIGNED_IMAGE_TYPES,
    extension_for,
    settle_image_type,
    sniff_image_type,
)
from feedcollector.images import object_key
from feedcollector.models import ParsedFeed
from feedcollector.netguard import forbidden_reason, parse_ip_literal
from feedcollector.normalize import MAX_IMAGES_PER_ITEM, downloadable_images
from feedcollector.parse import parse_feed
from feedcollector.parse_common import MAX_ITEMS_PER_FEED
from feedcollector.timestamps import format_timestamp, parse_timestamp

BASE = "http://feeds.example/blog/feed.xml"
SLOW = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- hostile XML, generated -----------------------------------------------------------------------

NAMES = st.sampled_from(
    ["rss", "channel", "item", "entry", "feed", "title", "link", "guid", "id", "description",
     "content:encoded", "summary", "content", "pubDate", "updated", "rdf:RDF", "div", "img", "x"]
)  # fmt: skip
TEXTS = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        ["&amp;", "&nbsp;", "&lol;", "&#0;", "&#x1F600;", "&#xD800;", "&", "<", "]]>", "\x00",
         "\ufffe", "&xxe;", "<![CDATA[<img src='a.png'>]]>", "<!-- c -->", "<?pi x?>",
         '<img src="/i.png">', "javascript:alert(1)", "Tue, 10 Jun 2003 04:00:00 GMT"]
    ),
)  # fmt: skip
ATTRIBUTES = st.lists(
    st.tuples(
        st.sampled_from(["href", "xml:base", "rel", "type", "src", "version", "xmlns", "a"]),
        st.sampled_from(
            ["", "/rel", "http://other.example/", "file:///etc/", "javascript:x", "//cdn/x",
             "2.0", "xhtml", "http://www.w3.org/2005/Atom", '"', "&amp;"]
        ),
    ),
    max_size=3,
)  # fmt: skip


def element(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.builds(
        lambda name, attrs, inner: (
            f"<{name}"
            + "".join(f' {key}="{value}"' for key, value in attrs)
            + f">{''.join(inner)}</{name}>"
        ),
        NAMES,
        ATTRIBUTES,
        st.lists(children, max_size=4),
    )


TREES = st.recursive(TEXTS, element, max_leaves=25)
PROLOGS = st.sampled_from(
    [
        "",
        '<?xml version="1.0"?>',
        '<?xml version="1.0" encoding="iso-8859-1"?>',
        '<?xml version="1.0" encoding="utf-16"?>',
        '<!DOCTYPE rss [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>',
        '<!DOCTYPE rss SYSTEM "http://127.0.0.1:9/evil.dtd">',
        '<!DOCTYPE rss [<!ENTITY % p SYSTEM "http://127.0.0.1:9/p.dtd"> %p;]>',
        '<!DOCTYPE r [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>',
        "<!DOCTYPE html>",
    ]
)
ENCODINGS = st.sampled_from(["utf-8", "utf-16", "utf-16-be", "gb18030", "cp1252", "latin-1"])
CONTENT_TYPES = st.sampled_from(
    [None, "application/rss+xml", "text/xml; charset=utf-8", "text/html; charset=gbk",
     "application/xml; charset=utf-16", "text/plain; charset=bogus", "application/json"]
)  # fmt: skip


@st.composite
def hostile_documents(draw: st.DrawFn) -> bytes:
    """A feed-shaped document, encoded in some encoding, maybe cut or spliced with junk."""
    feed = draw(
        st.one_of(
            st.builds(lambda tree: f'<rss version="2.0"><channel>{tree}</channel></rss>', TREES),
            st.builds(
                lambda tree: f'<feed xmlns="http://www.w3.org/2005/Atom">{tree}</feed>', TREES
            ),
            TREES,
        )
    )
    text = draw(PROLOGS) + feed
    data = text.encode(draw(ENCODINGS), "replace")
    cut = draw(st.integers(0, len(data)))
    junk = draw(st.binary(max_size=8))
    return data[:cut] + junk + data[cut:] if draw(st.booleans()) else data


def read(body: bytes, content_type: str | None) -> ParsedFeed | None:
    """The path every fetched body takes; None for the documented error."""
    try:
        decoded = decode_feed(body, content_type)
        return parse_feed(decoded.data, BASE)
    except ParseError as exc:
        error = str(exc)
    assert error.startswith(("decode: ", "parse: ")), error
    return None


def assert_well_formed(feed: ParsedFeed) -> None:
    assert len(feed.items) <= MAX_ITEMS_PER_FEED
    for item in feed.items:
        assert isinstance(item.guid, str)
        assert item.guid
        assert item.pub_date is None or item.pub_date.utcoffset() == timedelta(0)
        for url in downloadable_images(item.content_html):
            assert url.startswith(("http://", "https://"))
        assert "/etc/passwd" not in (item.title or ""), "an external entity was resolved"


@SLOW
@given(hostile_documents(), CONTENT_TYPES)
def test_hostile_xml_decodes_and_parses_or_raises_parse_error(
    body: bytes, content_type: str | None
) -> None:
    feed = read(body, content_type)
    if feed is not None:
        assert_well_formed(feed)


@SLOW
@given(st.binary(max_size=2000), CONTENT_TYPES)
def test_arbitrary_bytes_through_decode_and_parse(body: bytes, content_type: str | None) -> None:
    feed = read(body, content_type)
    if feed is not None:
        assert_well_formed(feed)


@SLOW
@given(st.integers(1, 3000), st.sampled_from(["rss", "atom"]))
def test_deep_nesting_never_escapes_as_recursion_error(depth: int, kind: str) -> None:
    nested = "<div>" * depth + "x" + "</div>" * depth
    if kind == "rss":
        body = f'<rss version="2.0"><channel><item><description>{nested}</description></item></channel></rss>'
    else:
        body = f'<feed xmlns="http://www.w3.org/2005/Atom"><entry><content type="xhtml">{nested}</content></entry></feed>'
    feed = read(body.encode(), "application/xml")
    if feed is not None:
        assert_well_formed(feed)


@SLOW
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                        st.sampled_from(["version", "items", "id", "url", "title",
                                         "content_html", "content_text", "date_published",
                                         "home_page_url"]), inner, max_size=5),
                    max_leaves=30))  # fmt: skip
def test_arbitrary_json_documents(document: object) -> None:
    import json

    body = json.dumps({"version": "https://jsonfeed.org/version/1.1", "items": document})
    feed = read(body.encode(), "application/feed+json")
    if feed is not None:
        assert_well_formed(feed)


# --- URL resolution and image sources --------------------------------------------------------------

URL_TEXT = st.one_of(
    st.text(max_size=40),
    st.builds(
        lambda scheme, rest: scheme + rest,
        st.sampled_from(["http://", "https://", "//", "/", "../", "?", "#", "javascript:",
                         "data:", "file://", "HTTP://", " http://", "http:", "mailto:", ""]),
        st.text(alphabet=st.characters(codec="utf-8"), max_size=30),
    ),
)  # fmt: skip
BASES = st.one_of(
    st.sampled_from(
        [BASE, "https://x.example", "http://[::1]:8080/a/b?c#d", "file:///etc/", "", "relative/",
         "javascript:alert(1)//", "http://", "https://xn--bcher-kva.example/ü/"]
    ),
    URL_TEXT,
)  # fmt: skip


@given(
    st.datetimes(
        min_value=datetime(2, 1, 1),
        max_value=datetime(9998, 12, 31),
        timezones=st.none() | st.just(UTC) | st.timezones(),
    )
)
def test_timestamps_are_utc_in_iso_8601_and_read_back(moment: datetime) -> None:
    """format_timestamp against the standard library's ISO 8601, whatever the zone (four-digit
    years: glibc's strftime wrote year 1 as ``1``)."""
    utc = (moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment).astimezone(UTC)
    text = format_timestamp(moment)
    assert text == utc.replace(microsecond=0, tzinfo=None).isoformat() + "Z"
    assert parse_timestamp(text) == utc.replace(microsecond=0)


@given(URL_TEXT, BASES)
def test_resolve_url_never_raises_and_keeps_absolute_urls(value: str, base: str) -> None:
    resolved = resolve_url(value, base)
    assert isinstance(resolved, str)
    if value.strip().lower().startswith(("http://", "https://")):
        assert resolved == value
    assert resolve_url(resolved, base) == resolved, "resolving is idempotent"
    assert isinstance(is_absolute_url(resolved), bool)


@given(
    st.text(alphabet=st.sampled_from("/.?#%:@ab"), max_size=20),
    st.sampled_from([BASE, "https://x.example/a/"]),
)
def test_a_relative_reference_against_a_web_base_stays_on_the_web(value: str, base: str) -> None:
    resolved = resolve_url(value, base)
    if resolved != value:
        assert resolved.startswith(("http://", "https://"))


IMG_SOURCES = st.lists(URL_TEXT | st.just("http://cdn.example/a.png"), max_size=8)


@given(IMG_SOURCES, st.sampled_from(['"', "'", ""]), st.text(max_size=20))
def test_image_sources_and_downloadable_images(sources: list[str], quote: str, noise: str) -> None:
    html = noise.join(f"<img src={quote}{source}{quote}>" for source in sources)
    found = image_sources(html)
    assert all(isinstance(url, str) and url == url.strip() and url for url in found)
    downloadable = downloadable_images(html)
    assert len(downloadable) <= MAX_IMAGES_PER_ITEM
    assert all(url.lower().startswith(("http://", "https://")) for url in downloadable)
    assert list(downloadable) == [u for u in found if u.lower().startswith(("http://", "https://"))]


def test_the_image_cap_keeps_the_first_ones() -> None:
    html = "".join(
        f'<img src="http://cdn.example/{n}.png">' for n in range(MAX_IMAGES_PER_ITEM + 50)
    )
    kept = downloadable_images(html)
    assert kept == tuple(f"http://cdn.example/{n}.png" for n in range(MAX_IMAGES_PER_ITEM))


KEY_RE = re.compile(r"images/[0-9a-f]+/[0-9a-f]{8}/[0-9]+\.[a-z0-9]+")


@given(st.text(max_size=200), st.integers(0, 10_000), st.text(max_size=40) | st.none(), URL_TEXT)
def test_object_keys_are_always_safe_paths(
    guid: str, position: int, content_type: str | None, url: str
) -> None:
    key = object_key("0123abcd", guid, position, extension_for(content_type, url))
    assert KEY_RE.fullmatch(key), key


@given(
    st.binary(max_size=64),
    st.sampled_from([*SIGNED_IMAGE_TYPES, "image/svg+xml", "image/avif", "text/html", ""]),
)
def test_the_bytes_decide_what_an_image_is(data: bytes, declared: str) -> None:
    sniffed = sniff_image_type(data)
    settled = settle_image_type(declared, data)
    if sniffed is None and declared in SIGNED_IMAGE_TYPES:
        assert settled is None, "a header naming a signed format over unsigned bytes is a lie"
    if settled is not None:
        assert settled.startswith("image/")


# --- the bounded body reader ------------------------------------------------------------------------

LIMIT = 64 * 1024


def compress(encoding: str, data: bytes) -> bytes:
    if encoding == "gzip":
        packer = zlib.compressobj(6, zlib.DEFLATED, 31)
        return packer.compress(data) + packer.flush()
    if encoding == "deflate":
        return zlib.compress(data)
    if encoding == "br":
        return bytes(brotli.compress(data))
    return zstandard.ZstdCompressor().compress(data)


class Pieces(httpx.AsyncByteStream):
    """A body that arrives in pieces of ``chunk`` bytes, as a slow connection delivers it."""

    def __init__(self, wire: bytes, chunk: int) -> None:
        self.pieces = [wire[i : i + chunk] for i in range(0, len(wire), chunk)]

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece


def read_with(encoding: str, wire: bytes, chunk: int, length: int | None = None) -> bytes:
    """The body as read from ``wire``; with ``length`` as its Content-Length, else ended by
    the connection closing."""

    async def go() -> bytes:
        sized = {} if length is None else {"Content-Length": str(length)}
        response = httpx.Response(
            200,
            headers={"Content-Encoding": encoding, **sized},
            stream=Pieces(wire, chunk),
            request=httpx.Request("GET", "http://feeds.example/feed"),
        )
        return await read_body(response, max_bytes=LIMIT)

    return asyncio.run(go())


ENCODING_NAMES = st.sampled_from(
    ["gzip", "deflate", "br", "zstd", "gzip, br", "identity", "x-gzip"]
)


@settings(max_examples=200, deadline=None)
@given(ENCODING_NAMES, st.binary(max_size=600), st.integers(1, 64))
def test_arbitrary_compressed_bytes_give_bounded_bytes_or_a_transfer_error(
    encoding: str, wire: bytes, chunk: int
) -> None:
    try:
        body = read_with(encoding, wire, chunk)
    except TransferError as exc:
        kind = exc.kind
    else:
        kind = "ok"
        assert len(body) <= LIMIT
    assert kind in {"ok", "protocol", "too_large"}


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(["gzip", "deflate", "br", "zstd"]),
    st.binary(max_size=3000),
    st.integers(0, 3),
    st.sampled_from([1, 2, 3, 7, 1024]),
)
def test_valid_compressed_bodies_round_trip_and_bombs_stop_at_the_cap(
    encoding: str, data: bytes, blowup: int, chunk: int
) -> None:
    payload = data * (10**blowup) if data else data
    wire = compress(encoding, payload)
    try:
        body: bytes | None = read_with(encoding, wire, chunk)
    except TransferError as exc:
        body, kind = None, exc.kind
    if body is None:
        assert kind == "too_large"
        assert len(payload) > LIMIT
    else:
        assert body == payload


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(["gzip", "deflate", "br", "zstd"]),
    st.binary(min_size=1, max_size=2000),
    st.sampled_from([1, 2, 5, 1024]),
    st.data(),
)
def test_a_compressed_body_cut_short_by_a_close_is_a_protocol_error_not_a_shorter_feed(
    encoding: str, payload: bytes, chunk: int, data: st.DataObject
) -> None:
    wire = compress(encoding, payload)
    cut = data.draw(st.integers(1, len(wire) - 1), label="cut")
    with pytest.raises(TransferError) as caught:
        read_with(encoding, wire[:cut], chunk)
    assert caught.value.kind == "protocol"
    kept = read_with(encoding, wire[:cut], chunk, length=cut)  # the length was checked:
    assert payload.startswith(kept)  # the server made this stream, what decodes is kept


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(["gzip", "zstd"]),
    st.lists(st.binary(max_size=300), min_size=2, max_size=4),
    st.sampled_from([1, 2, 3, 19]),
)
def test_gzip_members_and_zstd_frames_are_joined_and_a_cut_in_the_last_is_seen(
    encoding: str, parts: list[bytes], chunk: int
) -> None:
    wire = b"".join(compress(encoding, part) for part in parts)
    assert read_with(encoding, wire, chunk) == b"".join(parts)
    with pytest.raises(TransferError) as caught:
        read_with(encoding, wire[:-1], chunk)
    assert caught.value.kind == "protocol"


# --- the private-address guard ----------------------------------------------------------------------


@given(st.ip_addresses())
def test_every_non_public_address_is_refused_also_when_mapped(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    reason = forbidden_reason(address)
    if not address.is_global or address.is_multicast:
        assert reason is not None, address
    if isinstance(address, ipaddress.IPv4Address):
        mapped = ipaddress.IPv6Address(f"::ffff:{address}")
        assert (forbidden_reason(mapped) is None) == (reason is None), mapped


@given(st.text(max_size=40) | st.ip_addresses().map(str) | st.integers(0, 2**32).map(str))
def test_host_literals_never_raise(host: str) -> None:
    literal = parse_ip_literal(host)
    assert literal is None or isinstance(literal, ipaddress.IPv4Address | ipaddress.IPv6Address)
