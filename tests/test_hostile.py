"""Hostile feeds, images and servers, each through one real collection cycle (issue 5).

Every case is served from loopback next to two well-behaved feeds and runs ``run_cycle`` on a
real config file, SQLite file and objects folder, with the private-address guard on. Each case
asserts that the cycle ended in bounded time (a generous "did not hang" bound), that peak
memory grew by a bounded amount, what was recorded (``feeds.last_error`` or
``image_tasks.last_error``, or what a best-effort reading stored), and that the well-behaved
feeds and their image came through as if nothing had happened.

Image URLs use names a test resolver answers: ``cdn.test`` is 127.0.0.1, which the test policy
treats as a public address, and ``intranet.test`` is 127.0.0.2, private as in production. The
server on 127.0.0.2 must never see a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import hashlib
import json
import re
import socket
import sqlite3
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import httpx
import pytest

from feedcollector.backends.local import LocalObjectStore
from feedcollector.backends.sqlite import SQLiteDatabase
from feedcollector.collector import open_collector
from feedcollector.config import load_settings
from feedcollector.errors import ConfigError
from feedcollector.images import make_image_client
from feedcollector.netguard import IPAddress, NetGuard, forbidden_reason, parse_ip_literal
from feedcollector.normalize import MAX_IMAGES_PER_ITEM
from feedcollector.parse_common import MAX_ITEMS_PER_FEED
from feedcollector.pipeline import run_cycle
from feedcollector.reading import read_item
from feedcollector.report import CycleReport
from feedcollector.schedule import feed_id_for
from feedcollector.spill import INLINE_CONTENT_LIMIT

from .feedserver import FeedServer
from .samples import (
    START,
    Entry,
    chunked_body,
    closed_port,
    compression_bomb,
    dripping_body,
    dripping_headers,
    endless_body,
    not_http,
    png,
    reset_connection,
    rss,
    write_project,
)

MIB = 2**20
HANG_LIMIT_S = 60.0
"""A cycle that takes longer than this hung (the configured deadlines are 3 s)."""
DEFAULT_MEMORY_MIB = 160
"""Peak memory growth allowed for a cycle: the 20 MiB body cap several times over, far below
what any unbounded case (a 256 MiB bomb, an expanded entity) would need."""
PUBLIC = IPv4Address("127.0.0.1")
PRIVATE_HOST = "127.0.0.2"
PRIVATE = IPv4Address(PRIVATE_HOST)
SECRET = "TOP-SECRET-0xfeedc0de"
CONFIG = (  # the first lines continue write_project's [images] section
    'timeout = "2s"\ndeadline = "3s"\n[fetch]\ntimeout = "2s"\ndeadline = "3s"\n'
)


# --- the world: two servers, a test resolver, the project folder --------------------------------


class LoopbackDns:
    """Fixed answers per name; a list of answers is served one lookup at a time (rebinding)."""

    def __init__(self) -> None:
        self.answers: dict[str, list[list[IPAddress]]] = {
            "cdn.test": [[PUBLIC]],
            "intranet.test": [[PRIVATE]],
        }

    async def __call__(self, host: str, port: int) -> Sequence[IPAddress]:
        literal = parse_ip_literal(host)
        if literal is not None:
            return [literal]
        queue = self.answers.get(host)
        if not queue:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return queue.pop(0) if len(queue) > 1 else queue[0]


def policy_calling_127_0_0_1_public(address: IPAddress) -> str | None:
    """Production policy, except that 127.0.0.1 (the ``cdn.test`` server) counts as public."""
    return None if address == PUBLIC else forbidden_reason(address)


@dataclass
class World:
    server: FeedServer
    private: FeedServer
    folder: Path
    dns: LoopbackDns = field(default_factory=LoopbackDns)

    @property
    def secret_file(self) -> Path:
        path = self.folder / "secret.txt"
        path.write_text(SECRET)
        return path

    def cdn(self, path: str) -> str:
        return f"http://cdn.test:{self.server.port}{path}"

    def serve(self, path: str, body: bytes, content_type: str = "application/rss+xml") -> str:
        return self.server.route(path, body=body, headers={"Content-Type": content_type})

    def images_feed(self, *sources: str) -> str:
        """A valid feed whose one item shows ``sources`` as images."""
        html = "".join(f'<img src="{source}">' for source in sources)
        return self.serve("/hostile", rss([Entry("Pictures", guid="pics", content=html)]))


@pytest.fixture
def world(feed_server: FeedServer, tmp_path: Path) -> Iterator[World]:
    with FeedServer(PRIVATE_HOST) as private:
        yield World(feed_server, private, tmp_path)


# --- running one cycle under watch --------------------------------------------------------------


class PeakMemory:
    """Peak resident-memory growth during a block, C allocations (libxml2, zlib) included.

    Linux lets a process reset its high-water mark (``/proc/self/clear_refs``); elsewhere the
    Python allocations traced by tracemalloc stand in.
    """

    def __enter__(self) -> PeakMemory:
        self.exact = _reset_peak_rss()
        if not self.exact:
            tracemalloc.start()
        self.baseline = _status_kib("VmRSS") * 1024 if self.exact else 0
        return self

    def __exit__(self, *exc: object) -> None:
        if self.exact:
            self.growth = _status_kib("VmHWM") * 1024 - self.baseline
        else:
            self.growth = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()


def _reset_peak_rss() -> bool:
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)  # glibc: give freed heap back, so growth shows
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return _status_kib("VmHWM") > 0
    except OSError:
        return False


def _status_kib(field_name: str) -> int:
    found = re.search(rf"^{field_name}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    return int(found.group(1)) if found else 0


@dataclass
class Cycle:
    world: World
    report: CycleReport
    elapsed_s: float
    memory_growth: int

    @property
    def db_path(self) -> Path:
        return self.world.folder / "collector.db"

    def rows(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        with contextlib.closing(sqlite3.connect(self.db_path)) as conn:
            conn.row_factory = sqlite3.Row
            return [dict(r) for r in conn.execute(sql, params)]

    def feed(self, url: str) -> dict[str, Any]:
        (row,) = self.rows("SELECT * FROM feeds WHERE url = ?", url)
        return row

    def items(self, url: str) -> list[dict[str, Any]]:
        return self.rows("SELECT * FROM items WHERE feed_id = ? ORDER BY guid", feed_id_for(url))

    def tasks(self, url: str) -> list[dict[str, Any]]:
        return self.rows(
            "SELECT t.* FROM image_tasks t JOIN items i ON i.id = t.item_id "
            "WHERE i.feed_id = ? ORDER BY t.position",
            feed_id_for(url),
        )

    def object(self, key: str) -> bytes:
        return (self.world.folder / "objects" / key).read_bytes()

    def everything_stored(self) -> str:
        """Every text value of every table, for "this must appear nowhere" checks."""
        tables = [r["name"] for r in self.rows("SELECT name FROM sqlite_master WHERE type='table'")]
        return "\n".join(
            str(value)
            for table in tables
            for row in self.rows(f"SELECT * FROM {table}")
            for value in row.values()
        )


def run_one_cycle(world: World, feeds: list[str]) -> Cycle:
    config = write_project(world.folder, feeds, allow_private_images=False, extra_toml=CONFIG)
    guard = NetGuard(resolver=world.dns, policy=policy_calling_127_0_0_1_public)

    async def go() -> CycleReport:
        settings = load_settings(config)
        async with open_collector(settings, clock=lambda: START) as collector:
            collector.image_http = make_guarded_client(guard)  # closed by open_collector
            return await run_cycle(collector)

    with PeakMemory() as memory:
        started = time.monotonic()
        report = asyncio.run(go())
        elapsed = time.monotonic() - started
    return Cycle(world, report, elapsed, memory.growth)


def make_guarded_client(guard: NetGuard) -> httpx.AsyncClient:
    return make_image_client("hostile-test/1.0", allow_private_addresses=False, guard=guard)


# --- the well-behaved neighbours ------------------------------------------------------------------


def serve_neighbours(world: World) -> list[str]:
    world.server.route("/neighbour.png", body=png(), headers={"Content-Type": "image/png"})
    image = world.cdn("/neighbour.png")
    first = rss(
        [
            Entry("Neighbour one", guid="n1", content=f'<p>fine</p><img src="{image}">'),
            Entry("Neighbour two", guid="n2", description="also fine"),
        ]
    )
    second = rss([Entry("Other neighbour", guid="o1", description="<b>ok</b>")])
    return [world.serve("/neighbour-a", first), world.serve("/neighbour-b", second)]


def assert_neighbours_unaffected(cycle: Cycle, neighbours: list[str]) -> None:
    first, second = neighbours
    for url, guids in ((first, ["n1", "n2"]), (second, ["o1"])):
        row = cycle.feed(url)
        assert (row["consecutive_failures"], row["last_error"]) == (0, None), row
        assert row["last_fetched_at"] == "2026-03-02T09:00:00Z"
        assert [item["guid"] for item in cycle.items(url)] == guids
    (task,) = cycle.tasks(first)
    assert (task["status"], task["last_error"]) == ("success", None)
    assert cycle.object(task["r2_key"]) == png()


# --- the cases ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    serve: Callable[[World], str]
    """Registers the hostile routes; returns the hostile feed's URL."""
    error: str | None = None
    """Regex for the feed's ``last_error``; None: the feed must be stored (best effort)."""
    image_error: str | None = None
    """Regex every image task of the hostile feed must have in ``last_error``."""
    check: Callable[[Cycle, str], None] | None = None
    memory_mib: int = DEFAULT_MEMORY_MIB
    partly: bool = False
    """Read in part (cut inside an item): its whole items stored, the feed failing all the
    same with ``error``."""


def only_item(cycle: Cycle, url: str) -> dict[str, Any]:
    (item,) = cycle.items(url)
    return item


def titles(cycle: Cycle, url: str) -> list[str | None]:
    return [item["title"] for item in cycle.items(url)]


def no_secret_and_no_probe(cycle: Cycle, url: str) -> None:
    assert SECRET not in cycle.everything_stored()
    assert cycle.world.server.hits("/probe") == [], "an external entity or DTD was fetched"


CASES: list[Case] = []


def case(
    name: str,
    *,
    error: str | None = None,
    image_error: str | None = None,
    check: Callable[[Cycle, str], None] | None = None,
    memory_mib: int = DEFAULT_MEMORY_MIB,
    partly: bool = False,
) -> Callable[[Callable[[World], str]], Callable[[World], str]]:
    def register(serve: Callable[[World], str]) -> Callable[[World], str]:
        CASES.append(Case(name, serve, error, image_error, check, memory_mib, partly))
        return serve

    return register


def raw_rss(items: str, *, prolog: str = "", title: str = "Hostile") -> bytes:
    return (
        f'{prolog}<rss version="2.0"><channel><title>{title}</title>'
        f"<link>http://site.test/</link>{items}</channel></rss>"
    ).encode()


def serve_probe(world: World) -> str:
    """A DTD that would leak the secret if the parser ever loaded it."""
    return world.serve("/probe", f'<!ENTITY xxe "{SECRET}">'.encode(), "application/xml-dtd")


# XML: entities, DTDs, structure -------------------------------------------------------------------


@case("xxe-local-file", check=no_secret_and_no_probe)
def _xxe_local_file(world: World) -> str:
    doctype = f'<!DOCTYPE rss [<!ENTITY xxe SYSTEM "{world.secret_file.as_uri()}">]>'
    item = "<item><guid>x</guid><title>&xxe;</title><description>a &xxe; b</description></item>"
    return world.serve("/hostile", raw_rss(item, prolog=doctype, title="t &xxe;"))


@case("xxe-in-a-broken-document", check=no_secret_and_no_probe)
def _xxe_broken(world: World) -> str:
    """Not well-formed, so the repair step and the lenient parser see the entities too."""
    doctype = (
        f'<!DOCTYPE rss [<!ENTITY xxe SYSTEM "{world.secret_file.as_uri()}">'
        f'<!ENTITY net SYSTEM "{serve_probe(world)}">]>'
    )
    item = "<item><guid>x</guid><title>&xxe; &net;</title><description>a &xxe; <b></item>"
    return world.serve("/hostile", raw_rss(item, prolog=doctype))


@case("xxe-network", check=no_secret_and_no_probe)
def _xxe_network(world: World) -> str:
    doctype = f'<!DOCTYPE rss [<!ENTITY xxe SYSTEM "{serve_probe(world)}">]>'
    return world.serve("/hostile", raw_rss("<item><title>&xxe;</title></item>", prolog=doctype))


@case("external-dtd", check=no_secret_and_no_probe)
def _external_dtd(world: World) -> str:
    doctype = f'<!DOCTYPE rss SYSTEM "{serve_probe(world)}">'
    return world.serve("/hostile", raw_rss("<item><title>&xxe;</title></item>", prolog=doctype))


@case("parameter-entity-dtd", check=no_secret_and_no_probe)
def _parameter_entity(world: World) -> str:
    doctype = f'<!DOCTYPE rss [<!ENTITY % remote SYSTEM "{serve_probe(world)}"> %remote;]>'
    return world.serve("/hostile", raw_rss("<item><title>&xxe;</title></item>", prolog=doctype))


def _not_expanded(cycle: Cycle, url: str) -> None:
    for item in cycle.items(url):
        assert len(str(item["title"])) + len(str(item["content_html"])) < 2 * MIB


@case("billion-laughs", check=_not_expanded)
def _billion_laughs(world: World) -> str:
    entities = '<!ENTITY lol0 "lol">' + "".join(
        f'<!ENTITY lol{n} "{f"&lol{n - 1};" * 10}">' for n in range(1, 10)
    )
    doctype = f"<!DOCTYPE rss [{entities}]>"
    item = "<item><guid>b</guid><title>&lol9;</title><description>&lol9;</description></item>"
    return world.serve("/hostile", raw_rss(item, prolog=doctype, title="&lol9;"))


@case("quadratic-blowup", check=_not_expanded)
def _quadratic_blowup(world: World) -> str:
    doctype = f'<!DOCTYPE rss [<!ENTITY a "{"A" * 100_000}">]>'
    item = f"<item><guid>q</guid><description>{'&a;' * 30_000}</description></item>"
    return world.serve("/hostile", raw_rss(item, prolog=doctype))


@case("deeply-nested-elements")
def _deeply_nested(world: World) -> str:
    depth = 100_000
    nested = "<div>" * depth + "deep" + "</div>" * depth
    items = f"<item><guid>deep</guid><description>{nested}</description></item>"
    return world.serve("/hostile", raw_rss(items + "<item><guid>flat</guid></item>"))


@case("text-node-of-50mb-streamed", error=r"^fetch: .* sent more than the 20971520 byte limit")
def _huge_text_node(world: World) -> str:
    head = b'<rss version="2.0"><channel><title>'
    tail = b"</title></channel></rss>"
    handler = chunked_body("application/rss+xml", head, b"A" * 65536, 50 * MIB, tail)
    return world.server.route("/hostile", handler=handler)


def _declares_50mb(request: BaseHTTPRequestHandler) -> None:
    request.close_connection = True
    request.send_response(200)
    request.send_header("Content-Type", "application/rss+xml")
    request.send_header("Content-Length", str(50 * MIB))
    request.end_headers()
    piece = b'<rss version="2.0"><channel><title>' + b"A" * 65536
    try:
        for _ in range(50 * MIB // len(piece)):
            request.wfile.write(piece)
    except OSError:
        return


@case("text-node-of-50mb-declared", error=r"^fetch: .* declares 52428800 bytes, over the")
def _huge_declared(world: World) -> str:
    return world.server.route("/hostile", handler=_declares_50mb)


def _titled(*expected: str) -> Callable[[Cycle, str], None]:
    def check(cycle: Cycle, url: str) -> None:
        assert titles(cycle, url) == list(expected)

    return check


@case("nul-bytes", check=_titled("NulTitle"))
def _nul_bytes(world: World) -> str:
    item = "<item><guid>n</guid><title>Nul\x00Title</title><description>a\x00b</description></item>"
    return world.serve("/hostile", raw_rss(item))


@case("illegal-xml-characters", check=_titled("abcdefgh"))
def _illegal_characters(world: World) -> str:
    title = "a\x01b\x08c\x0bd\x0ce\x1ff\uffffg\ufffeh"
    return world.serve("/hostile", raw_rss(f"<item><guid>i</guid><title>{title}</title></item>"))


@case("terminal-escapes-in-title", check=_titled("[31mred[0m and bell"))
def _terminal_escapes(world: World) -> str:
    title = "\x1b[31mred\x1b[0m and bell\x07"
    return world.serve("/hostile", raw_rss(f"<item><guid>e</guid><title>{title}</title></item>"))


@case("json-feed-escaped-controls-and-half-surrogates", check=_titled("[31mred, \ufffd half"))
def _json_escapes(world: World) -> str:
    """JSON escapes what XML cannot hold: a terminal escape, half of a UTF-16 pair (which
    no UTF-8 text holds: the store could not write the feed's batch)."""
    title = "\x1b[31mred, \ud800 half\x07"
    item = {"id": "j", "title": title, "content_text": "text \udc00"}
    document = {"version": "https://jsonfeed.org/version/1.1", "items": [item]}
    return world.serve("/hostile", json.dumps(document).encode(), "application/feed+json")


def _kept_without_validators(cycle: Cycle, url: str) -> None:
    assert titles(cycle, url) == ["Kept"]
    feed = cycle.feed(url)
    assert (feed["last_etag"], feed["last_modified"]) == (None, None)


@case("validators-in-bytes-no-utf-8-reads", check=_kept_without_validators)
def _undecodable_validators(world: World) -> str:
    """ETag and Last-Modified are stored for the next conditional GET: in bytes that are no
    UTF-8 (here sent as Latin-1) they failed the feed's batch, so its items were never stored;
    now they are not kept (a changed copy would never match) and the next GET is plain."""
    body = raw_rss("<item><guid>v</guid><title>Kept</title></item>")
    headers = {"Content-Type": "application/rss+xml", "ETag": '"caf\xe9"'}
    world.server.route("/hostile", body=body, headers=headers, last_modified="Mon\xff")
    return world.server.url("/hostile")


@case("validators-with-a-control-character", check=_kept_without_validators)
def _control_character_validators(world: World) -> str:
    """aiohttp reads control characters in an answer's headers but refuses them in a request:
    stored, they failed every later fetch of the feed as a bug."""
    body = raw_rss("<item><guid>v</guid><title>Kept</title></item>")
    headers = {"Content-Type": "application/rss+xml", "ETag": '"v\x01"'}
    world.server.route("/hostile", body=body, headers=headers, last_modified="Mon\x7f")
    return world.server.url("/hostile")


@case("expires-past-the-end-of-the-calendar", check=_titled("Kept"))
def _expires_past_the_calendar(world: World) -> str:
    """9999-12-31 at -23:59 is past year 9999 in UTC: the feed failed as a bug, never stored."""
    body = raw_rss("<item><guid>e</guid><title>Kept</title></item>")
    end = "Fri, 31 Dec 9999 23:59:59 -2359"
    headers = {"Content-Type": "application/rss+xml", "Expires": end, "Date": end}
    world.server.route("/hostile", body=body, headers=headers)
    return world.server.url("/hostile")


def _half_a_gzip_body_then_close(request: BaseHTTPRequestHandler) -> None:
    """No Content-Length: the body ends where the connection closes, here half-way."""
    items = "".join(f"<item><guid>c{n}</guid><title>Item {n}</title></item>" for n in range(50))
    packed = zlib.compressobj(wbits=31)
    whole = packed.compress(raw_rss(items)) + packed.flush()
    request.close_connection = True
    request.send_response(200)
    request.send_header("Content-Type", "application/rss+xml")
    request.send_header("Content-Encoding", "gzip")
    request.send_header("Connection", "close")
    request.end_headers()
    request.wfile.write(whole[: len(whole) // 2])


@case("gzip-body-cut-short", error=r"^fetch: \S+/hostile ended before its gzip data did")
def _cut_gzip(world: World) -> str:
    """A connection cut inside the compressed stream: storing what came (and its ETag, so
    later 304s kept the partial copy) would lose the rest of the feed."""
    return world.server.route("/hostile", handler=_half_a_gzip_body_then_close)


@case("content-type-in-bytes-no-utf-8-reads", check=_titled("Kept"))
def _undecodable_content_type(world: World) -> str:
    body = raw_rss("<item><guid>v</guid><title>Kept</title></item>")
    headers = {"Content-Type": "application/rss+xml; charset=caf\xe9"}
    world.server.route("/hostile", body=body, headers=headers)
    return world.server.url("/hostile")


def _latin1_reason(request: BaseHTTPRequestHandler) -> None:
    request.send_response(404, "Introuvable \xe9t\xe9")
    request.send_header("Content-Length", "0")
    request.end_headers()


@case("reason-phrase-in-bytes-no-utf-8-reads", error=r"^fetch: HTTP 404 Introuvable \ufffdt\ufffd ")
def _undecodable_reason(world: World) -> str:
    """The failure is recorded, its words as readable as the bytes allow."""
    return world.server.route("/hostile", handler=_latin1_reason)


@case("ttl-and-max-age-of-5000-digits", check=_titled("Kept"))
def _absurd_ttl(world: World) -> str:
    items = "<item><guid>t</guid><title>Kept</title></item>"
    channel = f"<ttl>{'9' * 5000}</ttl>"  # int() reads at most 4,300 digits
    body = raw_rss(items, title=f"Hostile</title>{channel}<title>x")
    headers = {"Content-Type": "application/rss+xml", "Cache-Control": f"max-age={'9' * 5000}"}
    world.server.route("/hostile", body=body, headers=headers)
    return world.server.url("/hostile")


@case("ttl-in-digits-int-cannot-read", check=_titled("Kept"))
def _superscript_ttl(world: World) -> str:
    """``"\u00b2".isdigit()`` is true, yet int() refuses it: the feed failed whole."""
    items = "<item><guid>t</guid><title>Kept</title></item>"
    return world.serve("/hostile", raw_rss(items, title="Hostile</title><ttl>\u00b2</ttl><title>x"))


@case("redirect-in-bytes-no-utf-8-reads", check=_titled("Kept"))
def _undecodable_location(world: World) -> str:
    """A Latin-1 Location is followed as browsers follow it, its bytes percent-encoded (yarl
    dropped them, and the redirect led to /moved)."""
    body = raw_rss("<item><guid>v</guid><title>Kept</title></item>")
    world.server.route("/moved%E9%20x", body=body)
    world.server.route("/hostile", status=301, headers={"Location": "/moved\xe9 x"})
    return world.server.url("/hostile")


def _both_kept_digits_as_guid(cycle: Cycle, url: str) -> None:
    guids = {item["title"]: item["guid"] for item in cycle.items(url)}
    assert guids == {"Kept": "k", "Numbered": "1" * 5000}


@case("json-feed-with-a-5000-digit-number", check=_both_kept_digits_as_guid)
def _json_big_number(world: World) -> str:
    """One number beyond int()'s 4,300 digits made the whole document "invalid JSON"."""
    kept = '{"id": "k", "title": "Kept", "_size": ' + "9" * 5000 + "}"
    numbered = '{"id": ' + "1" * 5000 + ', "title": "Numbered"}'
    document = '{"version": "https://jsonfeed.org/version/1.1", "items": [' + kept
    document += ", " + numbered + "]}"
    return world.serve("/hostile", document.encode(), "application/feed+json")


@case("illegal-character-references")
def _illegal_references(world: World) -> str:
    item = "<item><guid>r</guid><title>a&#1;b&#x1B;c&#0;d</title></item>"
    return world.serve("/hostile", raw_rss(item))


def _first_two_items(cycle: Cycle, url: str) -> None:
    assert {item["guid"] for item in cycle.items(url)} == {"t1", "t2"}
    assert "Item 3" not in titles(cycle, url), "the cut item waits for a whole body"


# Each of these took seconds to minutes of one thread (and bodies up to 2 MiB are read on the
# event loop, so the whole collector stood still): a regex that read the rest of the body
# again from every tag, or tried every way of splitting a run of comments.


@case("comments-before-a-root-that-is-no-feed", error=r"^parse: not a feed \(root element <x>\)")
def _comments_before_a_root(world: World) -> str:
    """Exponential: each comment more doubled the time (30: minutes)."""
    return world.serve("/hostile", b"<!-- a -->" * 30 + b"<x/>", "application/xml")


@case("tags-left-open-in-item-html")
def _open_tags_in_html(world: World) -> str:
    """Quadratic: 130 KB took 24 s."""
    return world.serve(
        "/hostile",
        raw_rss(
            f"<item><guid>o</guid><description>{'&lt;a href=x ' * 40_000}</description></item>"
        ),
    )


@case("internal-subsets-left-open-in-a-broken-document")
def _open_doctype_subsets(world: World) -> str:
    """Quadratic in the repair step: 88 KB took 2.7 s."""
    item = "<item><guid>d</guid><title>a & b</title></item>"
    return world.serve("/hostile", raw_rss(item) + b"<!DOCTYPE [" * 60_000)


@case("title-tags-left-open-in-an-html-page", error=r"^parse: not a feed \(an HTML page\)")
def _open_title_tags(world: World) -> str:
    """Quadratic in naming the page: every ``<title`` read the page's head to its end."""
    return world.serve("/hostile", b"<html><head>" + b"<title " * 30_000, "text/html")


@case(
    "truncated-document", check=_first_two_items, error="the body ends inside an item", partly=True
)
def _truncated(world: World) -> str:
    body = rss([Entry(f"Item {n}", guid=f"t{n}", description="x" * 200) for n in (1, 2, 3)])
    return world.serve("/hostile", body[: body.index(b"<guid>t3")])


CHINESE = "这是一个关于网络安全的中文订阅源，内容包括新闻、评论和技术文章。"


@case("declaration-lies-utf8-bytes-are-gbk", check=_titled(CHINESE))
def _lying_declaration(world: World) -> str:
    body = rss([Entry(CHINESE, guid="g", description=CHINESE * 3)], encoding="gbk")
    body = body.replace(b'encoding="gbk"', b'encoding="utf-8"')
    return world.serve("/hostile", body)


@case("utf16-with-bom-claiming-utf8", check=_titled(CHINESE))
def _utf16_claiming_utf8(world: World) -> str:
    text = rss([Entry(CHINESE, guid="u")]).decode()
    return world.serve("/hostile", text.encode("utf-16"), "application/xml; charset=utf-8")


@case("utf16-without-bom-claiming-utf8", check=_titled(CHINESE))
def _utf16_no_bom(world: World) -> str:
    text = rss([Entry(CHINESE, guid="u")]).decode()
    return world.serve("/hostile", text.encode("utf-16-le"), "application/xml; charset=utf-8")


def _mixed_kept(cycle: Cycle, url: str) -> None:
    first, second = cycle.items(url)
    assert first["title"] == CHINESE
    assert second["title"] is not None
    assert second["title"].startswith("Cr")
    assert second["title"].endswith("me br\u00fbl\u00e9e") or "\ufffd" in second["title"]


@case("mixed-encodings", check=_mixed_kept)
def _mixed_encodings(world: World) -> str:
    good = rss([Entry(CHINESE, guid="m1", description=CHINESE * 5)])
    latin1 = "<item><guid>m2</guid><title>Cr\u00e8me br\u00fbl\u00e9e</title></item>".encode(
        "latin-1"
    )
    return world.serve("/hostile", good.replace(b"</channel>", latin1 + b"</channel>"))


def _cdata_markers(cycle: Cycle, url: str) -> None:
    item = only_item(cycle, url)
    assert item["title"] == "x ]]> y"
    assert item["content_html"] == "<p>a ]]> b</p>"


@case("cdata-end-markers", check=_cdata_markers)
def _cdata_end_markers(world: World) -> str:
    item = (
        "<item><guid>c</guid><title>x ]]&gt; y</title>"
        "<description><![CDATA[<p>a ]]]]><![CDATA[> b</p>]]></description></item>"
    )
    return world.serve("/hostile", raw_rss(item))


@case("bare-cdata-end-in-text", check=_titled("a ]]> b"))
def _bare_cdata_end(world: World) -> str:
    return world.serve("/hostile", raw_rss("<item><guid>c</guid><title>a ]]> b</title></item>"))


# Not feeds --------------------------------------------------------------------------------------


@case("html-page-instead-of-a-feed", error=r"^parse: not a feed \(an HTML page titled 'Login'\)")
def _html_page(world: World) -> str:
    page = (
        b"<!DOCTYPE html><html><head><title>Login</title></head><body><form></form></body></html>"
    )
    return world.serve("/hostile", page, "text/html; charset=utf-8")


@case("json-garbage", error=r"^parse: invalid JSON")
def _json_garbage(world: World) -> str:
    return world.serve(
        "/hostile", b'{"version": "https://jsonfeed.org/version/1.1", "items": [1, 2,'
    )


@case("json-nested-100k-deep", error=r"^parse: invalid JSON")
def _json_deep(world: World) -> str:
    return world.serve("/hostile", b'{"items": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")


@case("binary-garbage", error=r"^(parse|decode): ")
def _binary_garbage(world: World) -> str:
    noise = bytes((n * 7919 + n // 3) % 256 for n in range(200_000))
    return world.serve("/hostile", noise, "application/octet-stream")


# Big but legitimate ------------------------------------------------------------------------------


def _first_items_kept(count: int) -> Callable[[Cycle, str], None]:
    def check(cycle: Cycle, url: str) -> None:
        guids = {item["guid"] for item in cycle.items(url)}
        assert len(guids) == MAX_ITEMS_PER_FEED
        assert guids == {f"g{n}" for n in range(MAX_ITEMS_PER_FEED)}, "the first ones, in order"
        assert count > MAX_ITEMS_PER_FEED

    return check


@case("rss-with-100k-items", check=_first_items_kept(100_000), memory_mib=256)
def _hundred_thousand_items(world: World) -> str:
    items = "".join(f"<item><guid>g{n}</guid><title>t{n}</title></item>" for n in range(100_000))
    return world.serve("/hostile", raw_rss(items))


@case("rss-of-20mb-tiny-items", check=_first_items_kept(630_000), memory_mib=512)
def _tiny_items(world: World) -> str:
    items = "".join(f"<item><guid>g{n}</guid></item>" for n in range(630_000))
    body = raw_rss(items)
    assert 19 * MIB < len(body) < 20 * MIB
    return world.serve("/hostile", body)


@case("broken-xml-too-big-for-the-lenient-parser-whole", check=_first_items_kept(100_000))
def _big_broken(world: World) -> str:
    """Read in pieces of whole items, up to the item cap (it failed whole: no items at all)."""
    items = "".join(f"<item><guid>g{n}</guid><title>t{n}</title></item>" for n in range(100_000))
    return world.serve("/hostile", raw_rss(items, title="<b>unclosed"))


BIG_HTML = "<p>" + "word " * (MIB // 5 * 5) + "</p>"


def _spilled(cycle: Cycle, url: str) -> None:
    item = only_item(cycle, url)
    assert item["content_html"] is None
    assert item["content_key"] is not None
    assert cycle.object(item["content_key"]) == BIG_HTML.encode()


@case("item-with-5mb-content", check=_spilled)
def _big_content(world: World) -> str:
    assert len(BIG_HTML) > 5 * INLINE_CONTENT_LIMIT
    return world.serve("/hostile", rss([Entry("Big", guid="big", description=BIG_HTML)]))


def _long_guid(cycle: Cycle, url: str) -> None:
    """Stored as its digest (a value D1 takes), the same on every shape."""
    digest = hashlib.sha256(b"g" * MIB).hexdigest()
    assert [item["guid"] for item in cycle.items(url)] == [f"sha256:{digest}"]


@case("guid-of-1mb", check=_long_guid)
def _huge_guid(world: World) -> str:
    return world.serve("/hostile", rss([Entry("Long guid", guid="g" * MIB)]))


def _capped_images(cycle: Cycle, url: str) -> None:
    tasks = cycle.tasks(url)
    assert len(tasks) == MAX_IMAGES_PER_ITEM
    assert [task["position"] for task in tasks] == list(range(MAX_IMAGES_PER_ITEM))
    assert {task["status"] for task in tasks} == {"success"}
    assert len(cycle.world.server.hits("/many.png")) == MAX_IMAGES_PER_ITEM


@case("item-with-5000-images", check=_capped_images)
def _thousands_of_images(world: World) -> str:
    world.server.route("/many.png", body=png(), headers={"Content-Type": "image/png"})
    return world.images_feed(*(world.cdn(f"/many.png?n={n}") for n in range(5000)))


def _only_web_images(cycle: Cycle, url: str) -> None:
    tasks = {task["original_url"]: task for task in cycle.tasks(url)}
    ok = cycle.world.cdn("/ok.png")
    assert tasks[ok]["status"] == "success"
    relative = tasks["https://blog.example/etc/passwd"]  # resolved against the feed's <link>
    assert "could not resolve the host blog.example" in relative["last_error"]
    assert all(task_url.startswith("http") for task_url in tasks)
    assert not any(bad in "".join(tasks) for bad in ("javascript:", "data:", "file:", "vbscript:"))
    for task_url, task in tasks.items():
        if task_url != ok:
            assert task["last_error"].startswith("image: "), task
            assert "internal" not in task["last_error"], task


@case("invalid-image-urls", check=_only_web_images)
def _invalid_image_urls(world: World) -> str:
    world.server.route("/ok.png", body=png(), headers={"Content-Type": "image/png"})
    ok = world.cdn("/ok.png")
    return world.images_feed(
        "javascript:alert(1)",
        "data:image/png;base64,iVBORw0KGgo=",
        "vbscript:msgbox",
        "file:///etc/passwd",
        "http://[::1",
        "http://",
        "https://:0/x.png",
        "../../../../etc/passwd",
        f"  {ok}  ",
        "&#106;avascript:alert(2)",
        "http://a.example:99999999/x.png",
        "http://cdn.test:99999/x.png",
        "http://\u2100.example/x.png",
        "http://[vx.y]/x.png",
        "http://a%00b.example/x.png",
        "http://xn--/x.png",
    )


def _no_file_base(cycle: Cycle, url: str) -> None:
    item = only_item(cycle, url)
    assert item["content_html"] == '<img src="passwd">', "a base without a host is not used"
    assert cycle.tasks(url) == []


@case("xml-base-pointing-at-file", check=_no_file_base)
def _xml_base_file(world: World) -> str:
    item = (
        '<item xml:base="file:///etc/"><guid>b</guid>'
        '<description>&lt;img src="passwd"&gt;</description></item>'
    )
    return world.serve("/hostile", raw_rss(item))


SCRIPTED = (
    '<p onclick="steal()">hi</p><script>alert(1)</script>'
    '<a href="javascript:alert(2)">x</a><img src="{image}" onerror="alert(3)">'
    '<iframe src="javascript:alert(4)"></iframe><svg onload="alert(5)"></svg>'
)


def _stored_raw_rendered_clean(cycle: Cycle, url: str) -> None:
    item = only_item(cycle, url)
    expected = SCRIPTED.format(image=cycle.world.cdn("/ok.png"))
    assert item["content_html"] == expected, "content_html is stored raw"

    async def render() -> str | None:
        db = SQLiteDatabase(cycle.db_path)
        try:
            read = await read_item(
                db, LocalObjectStore(cycle.world.folder / "objects"), item["id"], sanitize=True
            )
        finally:
            await db.close()
        assert read is not None
        return read.rendered_html

    rendered = asyncio.run(render())
    assert rendered is not None
    assert "hi" in rendered
    for bad in ("<script", "onclick", "onerror", "onload", "javascript:", "<iframe"):
        assert bad not in rendered.lower(), rendered


@case("script-in-content", check=_stored_raw_rendered_clean)
def _script_in_content(world: World) -> str:
    world.server.route("/ok.png", body=png(), headers={"Content-Type": "image/png"})
    html = SCRIPTED.format(image=world.cdn("/ok.png"))
    return world.serve("/hostile", rss([Entry("Scripted", guid="s", content=html)]))


# HTTP: sizes, bombs, time ------------------------------------------------------------------------


def _bomb(world: World, encoding: str, content_type: str = "application/rss+xml") -> str:
    return world.server.route(
        "/hostile",
        body=compression_bomb(encoding),
        headers={"Content-Type": content_type, "Content-Encoding": encoding},
    )


@case("gzip-bomb", error=r"^fetch: .* decompresses \(gzip\) to more than the 20971520 byte limit")
def _gzip_bomb(world: World) -> str:
    return _bomb(world, "gzip")


@case("brotli-bomb", error=r"^fetch: .* decompresses \(br\) to more than the 20971520 byte limit")
def _brotli_bomb(world: World) -> str:
    return _bomb(world, "br")


@case("zstd-bomb", error=r"^fetch: .* decompresses \(zstd\) to more than the 20971520 byte limit")
def _zstd_bomb(world: World) -> str:
    return _bomb(world, "zstd")


@case("gzip-inside-gzip-bomb", error=r"^fetch: .* decompresses \(gzip, gzip\) to more than")
def _nested_bomb(world: World) -> str:
    outer = zlib.compressobj(9, zlib.DEFLATED, 31)
    body = outer.compress(compression_bomb("gzip")) + outer.flush()
    return world.server.route(
        "/hostile",
        body=body,
        headers={"Content-Type": "text/xml", "Content-Encoding": "gzip, gzip"},
    )


@case("corrupt-gzip", error=r"^fetch: .* not valid gzip data")
def _corrupt_gzip(world: World) -> str:
    return world.server.route(
        "/hostile", body=b"\x1f\x8b\x08\x00garbage" * 100, headers={"Content-Encoding": "gzip"}
    )


@case("endless-body-without-length", error=r"^fetch: .* sent more than the 20971520 byte limit")
def _endless(world: World) -> str:
    return world.server.route("/hostile", handler=endless_body("application/rss+xml"))


@case("huge-content-length", error=r"^fetch: .* declares 99999999999999 bytes")
def _huge_length(world: World) -> str:
    return world.server.route("/hostile", headers={"Content-Length": "99999999999999"})


@case("dripping-body", error=r"^fetch: .* did not finish within the 3 s deadline")
def _dripping(world: World) -> str:
    return world.server.route("/hostile", handler=dripping_body("application/rss+xml"))


@case("dripping-headers", error=r"^fetch: .* did not finish within the 3 s deadline")
def _slowloris(world: World) -> str:
    return world.server.route("/hostile", handler=dripping_headers())


@case("silent-server", error=r"^fetch: timed out after 2 s waiting for data from")
def _silent(world: World) -> str:
    return world.server.route("/hostile", body=rss([]), delay_s=8)


# HTTP: redirects and schemes ---------------------------------------------------------------------


@case("redirect-loop", error=r"^fetch: redirect loop: .*/loop-b leads back to .*/loop-a")
def _redirect_loop(world: World) -> str:
    world.server.route("/loop-b", status=302, headers={"Location": "/loop-a"})
    return world.server.route("/loop-a", status=301, headers={"Location": "/loop-b"})


@case("redirect-chain-of-20", error=r"^fetch: more than 5 redirects starting at .*/hop/0")
def _redirect_chain(world: World) -> str:
    for hop in range(20):
        world.server.route(f"/hop/{hop}", status=302, headers={"Location": f"/hop/{hop + 1}"})
    world.serve("/hop/20", rss([Entry("End of the chain", guid="end")]))
    return world.server.url("/hop/0")


def _redirect_to(target: str) -> Callable[[World], str]:
    def serve(world: World) -> str:
        return world.server.route("/hostile", status=302, headers={"Location": target})

    return serve


for _scheme, _target in (
    ("file", "file:///etc/passwd"),
    ("ftp", "ftp://files.test/feed.xml"),
    ("data", "data:text/xml,<rss/>"),
    ("javascript", "javascript:alert(1)"),
):
    CASES.append(
        Case(
            f"redirect-to-{_scheme}",
            _redirect_to(_target),
            error=rf"^fetch: redirect from \S+/hostile to ({_scheme}:\S*|a Location that is no "
            r"usable URL) refused.*: only http and https are supported",
        )
    )


for _name, _target in (
    ("bad-idna-host", "http://xn--/feed.xml"),
    ("unclosed-ipv6", "http://[::1/feed.xml"),
    ("nfkc-slash-host", "http://a\u2100b.example/feed.xml"),
    ("port-out-of-range", "http://127.0.0.1:99999/feed.xml"),
    ("empty-host-label", "http://a..b.example/feed.xml"),
    ("64-character-host-label", f"http://{'a' * 64}.example/feed.xml"),
):
    CASES.append(Case(f"redirect-to-{_name}", _redirect_to(_target), error=r"^fetch: "))


# HTTP: broken servers ----------------------------------------------------------------------------


@case(
    "connection-reset",
    error=r"^fetch: (the connection to 127\.0\.0\.1 broke|127\.0\.0\.1 broke the HTTP protocol)",
)
def _reset(world: World) -> str:
    return world.server.route("/hostile", handler=reset_connection)


def _body_until_close(request: BaseHTTPRequestHandler, body: bytes) -> None:
    """A 200 whose end is the connection's (no Content-Length, not chunked)."""
    request.close_connection = True
    request.send_response(200)
    request.send_header("Content-Type", "application/rss+xml")
    request.send_header("Connection", "close")
    request.end_headers()
    request.wfile.write(body)
    request.wfile.flush()


CUT_FEED = raw_rss(
    "<item><guid>one</guid><title>One</title><description>whole</description></item>"
    f"<item><guid>two</guid><title>Two</title><description>{'word ' * 2000}end</description>"
    "</item>"
)
"""A feed cut inside its second item by the cases below (at the ``end`` of its text)."""


def _reset_inside_an_item(request: BaseHTTPRequestHandler) -> None:
    _body_until_close(request, CUT_FEED[: CUT_FEED.index(b"end") - 3000])
    time.sleep(0.1)  # the bytes reach the client before the reset
    reset_connection(request)


def _only_the_whole_item(cycle: Cycle, url: str) -> None:
    assert [(item["guid"], item["content_html"]) for item in cycle.items(url)] == [("one", "whole")]


@case(
    "connection-closed-inside-a-body-without-length",
    check=_only_the_whole_item,
    error="the body ends inside an item",
    partly=True,
)
def _closed_mid_body(world: World) -> str:
    """A clean close looks like the body's end: the document ends inside its second item,
    which is left for a whole body instead of being stored without its text."""
    cut = CUT_FEED[: CUT_FEED.index(b"end") - 3000]
    return world.server.route("/hostile", handler=lambda request: _body_until_close(request, cut))


@case("connection-reset-inside-a-body-without-length", error=r"^fetch: the connection to .* broke")
def _reset_mid_body(world: World) -> str:
    """aiohttp ends such a body alike at a reset and at a close: the half feed was stored as a
    whole one, its cut item without its text, for good (items are never updated)."""
    return world.server.route("/hostile", handler=_reset_inside_an_item)


@case("tls-error", error=r"^fetch: TLS handshake with 127\.0\.0\.1 failed")
def _tls_error(world: World) -> str:
    world.serve("/hostile", rss([]))
    return f"https://127.0.0.1:{world.server.port}/hostile"


@case("not-http-at-all", error=r"^fetch: 127\.0\.0\.1 broke the HTTP protocol")
def _not_http(world: World) -> str:
    return world.server.route("/hostile", handler=not_http)


@case("connection-refused", error=r"^fetch: 127\.0\.0\.1 refused the connection")
def _refused(world: World) -> str:
    return f"http://127.0.0.1:{closed_port()}/feed"


@case(
    "http-500",
    error=r"^fetch: HTTP 500 Internal Server Error from .*/hostile \(the server is failing",
)
def _http_500(world: World) -> str:
    return world.server.route("/hostile", status=500, body=b"<h1>oops</h1>")


@case("http-404", error=r"^fetch: HTTP 404 Not Found from .*/hostile \(the feed is not there")
def _http_404(world: World) -> str:
    return world.server.url("/hostile")


@case(
    "http-429-retry-after",
    error=r"^fetch: HTTP 429 Too Many Requests .*\(rate limited, the server asks to wait 3600",
)
def _http_429(world: World) -> str:
    return world.server.route("/hostile", status=429, headers={"Retry-After": "3600"})


# Images ------------------------------------------------------------------------------------------


def _image_case(
    name: str, error: str
) -> Callable[[Callable[[World], str]], Callable[[World], str]]:
    """An image case: ``serve`` returns the image URL; the feed around it is valid."""

    def register(serve: Callable[[World], str]) -> Callable[[World], str]:
        CASES.append(Case(name, lambda world: world.images_feed(serve(world)), image_error=error))
        return serve

    return register


def _secret_image(world: World) -> None:
    world.private.route("/secret.png", body=png(), headers={"Content-Type": "image/png"})


@_image_case(
    "image-301-to-a-private-address", r"^image: refused to contact 127\.0\.0\.2 \(a loopback"
)
def _image_to_private_literal(world: World) -> str:
    _secret_image(world)
    target = world.private.url("/secret.png")
    world.server.route("/img", status=301, headers={"Location": target})
    return world.cdn("/img")


@_image_case(
    "image-302-to-a-private-name",
    r"^image: refused to contact intranet\.test \(resolves to 127\.0\.0\.2",
)
def _image_to_private_name(world: World) -> str:
    _secret_image(world)
    target = f"http://intranet.test:{world.private.port}/secret.png"
    world.server.route("/img", status=302, headers={"Location": target})
    return world.cdn("/img")


@_image_case(
    "image-redirect-to-cloud-metadata",
    r"^image: refused to contact 169\.254\.169\.254 \(a link-local",
)
def _image_to_metadata(world: World) -> str:
    target = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"
    world.server.route("/img", status=307, headers={"Location": target})
    return world.cdn("/img")


@_image_case(
    "image-dns-rebinding", r"^image: refused to contact rebind\.test \(resolves to 127\.0\.0\.2"
)
def _image_rebinding(world: World) -> str:
    _secret_image(world)
    world.dns.answers["rebind.test"] = [[PUBLIC], [PRIVATE]]
    return f"http://rebind.test:{world.private.port}/secret.png"


@_image_case(
    "image-private-address-in-disguise",
    r"^image: refused to contact ::ffff:127\.0\.0\.2 \(.*a loopback address mapped",
)
def _image_mapped(world: World) -> str:
    _secret_image(world)
    return f"http://[::ffff:127.0.0.2]:{world.private.port}/secret.png"


@_image_case(
    "image-private-address-as-a-number", r"^image: refused to contact 2130706434 \(127\.0\.0\.2"
)
def _image_decimal(world: World) -> str:
    _secret_image(world)
    return f"http://2130706434:{world.private.port}/secret.png"


@_image_case("image-served-as-html", r"^image: .* answered with text/html, not an image")
def _image_html(world: World) -> str:
    world.server.route("/img", body=b"<html>hi</html>", headers={"Content-Type": "text/html"})
    return world.cdn("/img")


@_image_case(
    "image-with-a-lying-content-type", r"^image: .* declares image/png but its bytes are not"
)
def _image_lying(world: World) -> str:
    page = b"<html><script>alert(1)</script></html>"
    world.server.route("/img.png", body=page, headers={"Content-Type": "image/png"})
    return world.cdn("/img.png")


@_image_case("image-with-zero-bytes", r"^image: .* answered with an empty body")
def _image_empty(world: World) -> str:
    world.server.route("/img.png", body=b"", headers={"Content-Type": "image/png"})
    return world.cdn("/img.png")


@_image_case("image-endless-body", r"^image: .* sent more than the 26214400 byte limit")
def _image_endless(world: World) -> str:
    world.server.route("/img.png", handler=endless_body("image/png"))
    return world.cdn("/img.png")


@_image_case("image-huge-content-length", r"^image: .* declares 99999999999 bytes")
def _image_huge_length(world: World) -> str:
    world.server.route(
        "/img.png", headers={"Content-Type": "image/png", "Content-Length": "99999999999"}
    )
    return world.cdn("/img.png")


@_image_case("image-gzip-bomb", r"^image: .* decompresses \(gzip\) to more than the 26214400")
def _image_bomb(world: World) -> str:
    world.server.route(
        "/img.png",
        body=compression_bomb("gzip"),
        headers={"Content-Type": "image/png", "Content-Encoding": "gzip"},
    )
    return world.cdn("/img.png")


@_image_case("image-dripping", r"^image: .* did not finish within the 3 s deadline")
def _image_dripping(world: World) -> str:
    world.server.route("/img.png", handler=dripping_body("image/png"))
    return world.cdn("/img.png")


@_image_case("image-unresolvable-host", r"^image: could not resolve the host nowhere\.test")
def _image_unresolvable(world: World) -> str:
    return "http://nowhere.test/a.png"


@_image_case("image-redirect-to-file", r"^image: redirect from \S+/img to file:/etc/passwd refused")
def _image_to_file(world: World) -> str:
    world.server.route("/img", status=302, headers={"Location": "file:///etc/passwd"})
    return world.cdn("/img")


@_image_case("image-redirect-to-data", r"^image: redirect from \S+/img to a Location .* refused")
def _image_to_data(world: World) -> str:
    world.server.route("/img", status=302, headers={"Location": "data:image/png;base64,AAAA"})
    return world.cdn("/img")


@_image_case("image-redirect-loop", r"^image: redirect loop")
def _image_loop(world: World) -> str:
    world.server.route("/img-a", status=302, headers={"Location": "/img-b"})
    world.server.route("/img-b", status=302, headers={"Location": "/img-a"})
    return world.cdn("/img-a")


# --- the table-driven test ------------------------------------------------------------------------


@pytest.mark.parametrize("hostile", CASES, ids=lambda c: c.name)
def test_hostile_input_is_bounded_recorded_and_isolated(world: World, hostile: Case) -> None:
    neighbours = serve_neighbours(world)
    url = hostile.serve(world)
    cycle = run_one_cycle(world, [*neighbours, url])

    assert cycle.elapsed_s < HANG_LIMIT_S, f"the cycle took {cycle.elapsed_s:.0f} s"
    assert cycle.memory_growth < hostile.memory_mib * MIB, (
        f"peak memory grew by {cycle.memory_growth / MIB:.0f} MiB"
    )
    row = cycle.feed(url)
    if hostile.partly:
        assert row["consecutive_failures"] == 1
        assert re.search(hostile.error or "", row["last_error"] or ""), row["last_error"]
        assert row["last_fetched_at"] == "2026-03-02T09:00:00Z"
        assert cycle.items(url), "its whole items are stored"
    elif hostile.error is None:
        assert (row["consecutive_failures"], row["last_error"]) == (0, None), row["last_error"]
        assert row["last_fetched_at"] == "2026-03-02T09:00:00Z"
        assert cycle.items(url), "a best-effort reading stores what it could read"
    else:
        assert row["consecutive_failures"] == 1
        assert re.search(hostile.error, row["last_error"] or ""), row["last_error"]
        assert (row["last_fetched_at"], row["last_etag"]) == (None, None)
        assert cycle.items(url) == []
    if hostile.image_error is not None:
        tasks = cycle.tasks(url)
        assert tasks
        for task in tasks:
            assert (task["status"], task["attempts"], task["r2_key"]) == ("pending", 1, None)
            assert re.search(hostile.image_error, task["last_error"] or ""), task["last_error"]
    if hostile.check is not None:
        hostile.check(cycle, url)
    assert cycle.world.private.requests == [], "a private address was contacted"
    assert_neighbours_unaffected(cycle, neighbours)


def test_the_table_has_at_least_forty_cases() -> None:
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    assert len(names) >= 40


# --- config and feeds files: a precise message, nothing half-applied ------------------------------

YAML_ALIAS_BOMB = "\n".join(
    [
        'a0: &a0 ["https://lol.test/feed"]',
        *(f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 9)}]" for n in range(1, 9)),
        f"feeds: [{', '.join(['*a8'] * 9)}]",
    ]
)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("feeds.yaml", YAML_ALIAS_BOMB, "expands to more than 500000 values"),
        ("feeds.json", '{"feeds": ' + "[" * 100_000 + "]" * 100_000 + "}", "nests lists or"),
        (
            "feeds.yaml",
            "feeds:\n  - url: https://a.test/feed\n  - url: https://a.test/feed\n",
            "line 3",
        ),
        ("feeds.yaml", "feeds:\n  - url: https://a.test/feed\n    colour: red\n", "colour"),
        ("feeds.yaml", "feeds:\n  - url: https://a.test/feed\n  - url: ftp://b.test/\n", "line 3"),
        ("feeds.yaml", "feeds:\n  - url: https://a.test/feed\n  - [unclosed\n", "line 4"),
        ("feeds.json", '{"feeds": ["https://a.test/feed",]}', "line 1"),
    ],
)
def test_a_hostile_feeds_file_changes_nothing(
    world: World, name: str, text: str, message: str
) -> None:
    """The subscriptions stay exactly as they were; the message says where and what."""
    url = world.serve("/kept", rss([Entry("Kept", guid="k")]))
    config = write_project(world.folder, [url], allow_private_images=False, extra_toml=CONFIG)
    asyncio.run(_cycle_on(config))
    before = _feeds_table(world.folder)
    feeds_file = world.folder / name
    feeds_file.write_text(text, encoding="utf-8")
    config.write_text(config.read_text().replace('"feeds.yaml"', f'"{name}"'))
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        asyncio.run(_cycle_on(config))
    assert time.monotonic() - started < HANG_LIMIT_S
    assert str(feeds_file) in str(caught.value)
    assert message in str(caught.value)
    assert _feeds_table(world.folder) == before


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[fetch]\nconcurrency = 5\nconcurrency = 6\n", "line 3"),
        ("[fetch]\nmax_body_bytes = 'huge'\n", "max_body_bytes"),
        ("[images]\nallow_private_adresses = true\n", "allow_private_adresses"),
        ('[database]\nbackend = "d1"\nurl = "https://proxy.test"\n', "FEEDCOLLECTOR_D1_TOKEN"),
        ('[database]\ntoken = "s3cret"\n', "is a secret"),
        ("feeds_file = 'feeds.yaml'\n[fetch\n", "line 2"),
    ],
)
def test_a_broken_config_file_is_refused_whole(world: World, text: str, message: str) -> None:
    config = world.folder / "broken.toml"
    config.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(config, environ={})
    assert str(config) in str(caught.value)
    assert message in str(caught.value)
    assert not (world.folder / "collector.db").exists(), "nothing was opened or created"


async def _cycle_on(config: Path) -> CycleReport:
    async with open_collector(load_settings(config), clock=lambda: START) as collector:
        return await run_cycle(collector)


def _feeds_table(folder: Path) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(folder / "collector.db")) as conn:
        return conn.execute("SELECT * FROM feeds ORDER BY id").fetchall()
