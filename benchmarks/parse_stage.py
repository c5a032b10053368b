"""The parse stage against feedparser and rss-parser, on the same bytes, in the same run.

"Parse stage" is the issue's definition: :func:`decode_feed` (charset settled, UTF-8 out)
and :func:`parse_feed` (GUID chain, content choice, dates, absolute URLs). A second figure
adds :func:`item_records` (ids, timestamps, the image URLs of every item, read with an HTML
parser), i.e. everything the collector does between the fetched bytes and the store.
The peers get the raw bytes: ``feedparser.parse`` with its defaults (and the HTTP
Content-Type where the farm sends one), and rss-parser's ``parseString`` on the bytes decoded
as UTF-8, which is what its ``parseURL`` does. Each figure is the CPU time of the fastest of
several rounds over all documents; the rounds of the three are interleaved, so a busy
machine disturbs them alike.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import feedparser

from feedcollector.decode import decode_feed
from feedcollector.errors import ParseError
from feedcollector.normalize import item_records
from feedcollector.parse import parse_feed

from .feeds import FeedDocument, feed_document
from .measure import best_cpu_seconds

NODE_DIR = Path(__file__).resolve().parent / "node"
FETCHED_FROM = "https://feeds.example.org/feed.xml"
"""The fetch URL the corpus documents are parsed as coming from (their base of last resort)."""


@dataclass(frozen=True, slots=True)
class Document:
    name: str
    path: Path
    body: bytes
    content_type: str | None


@dataclass(frozen=True, slots=True)
class ParseFigures:
    """MB/s of each parser on one set of documents, from the same run."""

    label: str
    documents: int
    megabytes: float
    ours_mb_s: float
    """decode + parse (GUIDs, dates, absolute URLs)."""
    ours_with_records_mb_s: float
    """decode + parse + item records (ids, timestamps, image URLs)."""
    feedparser_mb_s: float
    rss_parser_mb_s: float | None
    """None when Node is not installed."""
    ours_failed: int
    rss_parser_failed: int | None
    items: int

    @property
    def vs_feedparser(self) -> float:
        return self.ours_mb_s / self.feedparser_mb_s

    @property
    def vs_rss_parser(self) -> float | None:
        if self.rss_parser_mb_s is None:
            return None
        return self.ours_mb_s / self.rss_parser_mb_s


def corpus_documents(corpus: Path) -> list[Document]:
    """The real-world feeds of the shared corpus (rss-parser's test inputs), as files."""
    folder = corpus / "rss-parser" / "test" / "input"
    return [Document(path.name, path, path.read_bytes(), None) for path in sorted(folder.iterdir())]


def served_corpus(corpus: Path) -> tuple[FeedDocument, ...]:
    """The real-world corpus as the farm serves it: the bytes as they are, a Content-Type
    without charset (as the parse comparison passes none), fixed validators."""
    return tuple(
        FeedDocument(
            body=document.body,
            content_type="application/xml",
            etag=f'"corpus-{number}"',
            last_modified="Mon, 02 Mar 2026 09:00:00 GMT",
            items=0,
        )
        for number, document in enumerate(corpus_documents(corpus))
    )


def farm_documents(folder: Path, count: int, items: int) -> list[Document]:
    """``count`` farm feeds written to ``folder`` (Node reads them from there)."""
    folder.mkdir(parents=True, exist_ok=True)
    documents = []
    for index in range(count):
        document = feed_document(index, items)
        path = folder / f"farm-{index}.xml"
        path.write_bytes(document.body)
        documents.append(Document(path.name, path, document.body, document.content_type))
    return documents


def ours(documents: list[Document], *, records: bool = True) -> tuple[int, int]:
    """The collector's parse stage over every document: (items, documents that failed)."""
    fetched_at = datetime.now(UTC)
    items = failed = 0
    for document in documents:
        try:
            decoded = decode_feed(document.body, document.content_type)
            parsed = parse_feed(decoded.data, FETCHED_FROM)
        except ParseError:
            failed += 1
            continue
        if records:
            items += len(item_records(parsed.items, fetched_at)[0])
        else:
            items += len(parsed.items)
    return items, failed


def with_feedparser(documents: list[Document]) -> int:
    """``feedparser.parse`` with its defaults; returns the entries it found."""
    entries = 0
    for document in documents:
        headers = {"content-type": document.content_type} if document.content_type else None
        entries += len(feedparser.parse(document.body, response_headers=headers).entries)
    return entries


def ensure_node_packages() -> str | None:
    """The node executable with rss-parser installed next to the script; None without Node."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        return None
    if not (NODE_DIR / "node_modules" / "rss-parser").is_dir():
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=NODE_DIR, check=True
        )
    return node


class RssParserRounds:
    """rss-parser over the same files in one Node process, one round per :meth:`round`."""

    def __init__(self, node: str, documents: list[Document], scratch: Path) -> None:
        manifest = scratch / "manifest.json"
        manifest.write_text(json.dumps([str(document.path) for document in documents]))
        self.process = subprocess.Popen(
            [node, str(NODE_DIR / "bench.mjs"), str(manifest)],
            cwd=NODE_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._read()  # the warm-up round is done

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"rss-parser driver exited ({self.process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def round(self) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write("round\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=30)
        if self.process.stdout is not None:
            self.process.stdout.close()


def measure(
    label: str,
    documents: list[Document],
    *,
    node: str | None,
    scratch: Path,
    rounds: int,
    feedparser_rounds: int,
) -> ParseFigures:
    """Interleaved rounds (ours, feedparser, rss-parser); each parser's fastest round counts."""
    megabytes = sum(len(document.body) for document in documents) / 1e6
    items, failed = ours(documents)  # warm-up, and the counts
    rss_parser = RssParserRounds(node, documents, scratch) if node is not None else None
    best_ours = best_records = best_feedparser = best_rss_parser = float("inf")
    rss_parser_failed: int | None = None
    try:
        for number in range(rounds):
            best_ours = min(best_ours, best_cpu_seconds(lambda: ours(documents, records=False), 1))
            best_records = min(best_records, best_cpu_seconds(lambda: ours(documents), 1))
            if number < feedparser_rounds:
                best_feedparser = min(
                    best_feedparser, best_cpu_seconds(lambda: with_feedparser(documents), 1)
                )
            if rss_parser is not None:
                answer = rss_parser.round()
                best_rss_parser = min(best_rss_parser, float(answer["cpu_s"]))
                rss_parser_failed = int(answer["failed"])
    finally:
        if rss_parser is not None:
            rss_parser.close()
    return ParseFigures(
        label=label,
        documents=len(documents),
        megabytes=megabytes,
        ours_mb_s=megabytes / best_ours,
        ours_with_records_mb_s=megabytes / best_records,
        feedparser_mb_s=megabytes / best_feedparser,
        rss_parser_mb_s=megabytes / best_rss_parser if rss_parser is not None else None,
        ours_failed=failed,
        rss_parser_failed=rss_parser_failed,
        items=items,
    )
