"""OPML import and export: move subscriptions between feedcollector and other readers.

Import merges an OPML file (Feedly, Inoreader, NetNewsWire, ... nested folders included) into
the feeds file, the single source of truth: new feeds are appended, feeds already there are
skipped (URLs compared the way the feeds file compares them). They are written as ``add``
writes one (:mod:`.feeds_yaml`: after the last entry, in the file's own style, nothing else
in the file touched; JSON keeps its key order and indentation). The title a reader gave a feed
becomes its ``title:``, and for YAML a comment names the reader's folder. The merged file is
checked by the feeds-file loader before it replaces the old one (it must list the old feeds
and the new ones, nothing else), so an import never leaves a file the collector cannot read.

Export writes OPML 2.0 of the feeds file. The XML is read with lxml first (no network, no
external entities) so malformed OPML gets a message with its line; listparser then reads the
outlines.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import format_datetime
from pathlib import Path

import listparser
from lxml import etree

from .config_values import Problem, check_http_url, config_error
from .database import Database
from .errors import ConfigError
from .feed_urls import feed_url_key
from .feeds_edit import (
    entry_spec,
    json_entry,
    json_rewrite,
    listed_feeds,
    read_feeds_text,
    replace_checked,
)
from .feeds_file_yaml import NOT_PRINTABLE
from .feeds_yaml import NewEntry, Style, UnsafeEdit, entry_lines, yaml_append_all
from .models import FeedSpec
from .report import counted
from .safe_text import QUOTED_CHARS, one_line, xml_chars

EXPORT_TITLE = "feedcollector subscriptions"
_REEXPORT = "Export the OPML file again from your reader, or fix it there."
_POSITION_RE = re.compile(r", line (?P<line>\d+), column (?P<column>\d+)$")


@dataclass(frozen=True, slots=True)
class OpmlFeed:
    """One subscription read from OPML."""

    url: str
    title: str | None = None
    folder: tuple[str, ...] = ()
    outlines: int = field(default=1, compare=False)
    """Outlines naming it with this very URL (a feed in two folders): read as one feed."""


@dataclass(frozen=True, slots=True)
class OpmlDocument:
    feeds: tuple[OpmlFeed, ...]
    skipped: tuple[str, ...]
    """Outlines that name a feed we cannot subscribe to, with the reason."""


@dataclass(frozen=True, slots=True)
class Duplicate:
    """Outlines naming a feed an earlier outline of the same OPML file names: not imported
    again, and not "already there" (the feeds file did not list it)."""

    feed: OpmlFeed
    first: OpmlFeed
    """The outline the feed is imported (or found already there) as."""
    outlines: int

    def describe(self) -> str:
        spelled = "" if self.feed.url == self.first.url else f" as {self.first.url}"
        times = "again" if self.outlines == 1 else f"{self.outlines} more times"
        return f"{self.feed.url}: listed {times} in the OPML file{spelled}; counted once"


@dataclass(frozen=True, slots=True)
class ImportPlan:
    added: tuple[OpmlFeed, ...]
    already_present: tuple[OpmlFeed, ...]
    duplicates: tuple[Duplicate, ...] = ()


@dataclass(frozen=True, slots=True)
class ImportResult:
    added: tuple[OpmlFeed, ...]
    already_present: tuple[OpmlFeed, ...]
    skipped: tuple[str, ...]
    duplicates: tuple[Duplicate, ...] = ()

    def summary(self, feeds_file: Path) -> str:
        """Every feed outline counted once: added, already there, a duplicate or skipped."""
        repeats = sum(duplicate.outlines for duplicate in self.duplicates)
        repeated = f", {counted(repeats, 'duplicate outline')}" if repeats else ""
        return (
            f"import-opml: {counted(len(self.added), 'feed')} added to {feeds_file}, "
            f"{len(self.already_present)} already there{repeated}, {len(self.skipped)} skipped"
        )


# --- reading OPML -------------------------------------------------------------------------


def read_opml(data: bytes, display: str) -> OpmlDocument:
    """Parse OPML bytes; a file that is not well-formed OPML raises ConfigError with its line."""
    parser = etree.XMLParser(
        resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False
    )
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        where = _POSITION_RE.search(exc.msg)
        message = exc.msg[: where.start()] if where else exc.msg
        what = f"the OPML file is not well-formed XML ({message})"
        line, column = (int(where["line"]), int(where["column"])) if where else (None, None)
        raise config_error(
            display, [Problem(what, _REEXPORT, line=line, column=column)], stage="import-opml"
        ) from exc
    name = etree.QName(root).localname
    line = root.sourceline if isinstance(root.sourceline, int) else None
    if name != "opml":
        what = f"the root element is <{name}>, not <opml>: this is not an OPML file"
        raise config_error(display, [Problem(what, _REEXPORT, line=line)], stage="import-opml")
    _local_names(root)
    if root.find("body") is None:
        what = "the OPML file has no <body> (the element holding the subscriptions)"
        raise config_error(display, [Problem(what, _REEXPORT, line=line)], stage="import-opml")
    skipped = _feed_urls_in_url_attributes(root)
    outlines = _feed_outlines(root)
    # Re-serialized as UTF-8 with a declaration: listparser misreads undeclared non-ASCII.
    parsed = listparser.parse(etree.tostring(root, encoding="UTF-8", xml_declaration=True))
    feeds: list[OpmlFeed] = []
    for entry in parsed.feeds:
        raw_url = str(entry.get("url") or "")
        try:
            url = check_http_url(_from_feed_scheme(raw_url))
        except ValueError as exc:
            skipped.append(f'"{raw_url}": the address {exc}')
            continue
        name = str(entry.get("title") or "").strip()
        title = None if name in ("", raw_url.strip(), url) else name
        categories = entry.get("categories") or [[]]
        folder = tuple(str(c) for c in categories[0])
        feeds.append(OpmlFeed(url, title, folder, max(outlines[raw_url.strip()], 1)))
    return OpmlDocument(tuple(feeds), tuple(skipped))


def _feed_outlines(root: etree._Element) -> Counter[str]:
    """How many outlines name each feed URL as written: listparser reads them as one feed
    (with the folders of all), and the import counted the repeats nowhere."""
    found: Counter[str] = Counter()
    for outline in root.iter("outline"):
        names = {name.lower(): name for name in outline.attrib if isinstance(name, str)}
        kind = (outline.get(names.get("type", "type")) or "").strip().lower()
        if "xmlurl" in names and kind != "source":  # listparser: "source" is a list of lists
            found[(outline.get(names["xmlurl"]) or "").strip()] += 1
    return found


_FEED_OUTLINE_TYPES = frozenset({"rss", "atom", "feed"})


def _feed_urls_in_url_attributes(root: etree._Element) -> list[str]:
    """Outlines that name their feed in ``url`` (podcast apps write ``type="rss" url=...``)
    get it as ``xmlUrl``, which listparser reads; those naming only a page (``htmlUrl``) are
    returned as skipped, with what to do: both were dropped without a word."""
    skipped: list[str] = []
    for outline in root.iter("outline"):
        names = {name.lower(): name for name in outline.attrib if isinstance(name, str)}
        if "xmlurl" in names:
            continue
        kind = (outline.get(names.get("type", "type")) or "").strip().lower()
        if "url" in names and kind in _FEED_OUTLINE_TYPES:
            outline.set("xmlUrl", outline.get(names["url"]) or "")
        elif "htmlurl" in names and len(outline) == 0:
            page = one_line(outline.get(names["htmlurl"]) or "", QUOTED_CHARS)
            skipped.append(
                f'"{page}": a site without its feed\'s address (htmlUrl only); '
                f"`feedcollector add {page}` finds its feed"
            )
    return skipped


def _local_names(root: etree._Element) -> None:
    """Elements renamed to their local names: some writers put OPML in a namespace
    (``<opml xmlns="http://opml.org/spec2">``), which no reader of OPML expects."""
    for element in root.iter():
        if isinstance(element.tag, str):
            element.tag = etree.QName(element).localname
    etree.cleanup_namespaces(root)


def _from_feed_scheme(url: str) -> str:
    """``feed://host/x`` and ``feed:https://host/x`` (old desktop readers) as http(s) URLs."""
    text = url.strip()
    if text.lower().startswith("feed:"):
        rest = text[5:]
        return rest if rest.lower().startswith(("http://", "https://")) else f"http:{rest}"
    return text


# --- merging into the feeds file ----------------------------------------------------------


def plan_import(existing: Sequence[FeedSpec], incoming: Sequence[OpmlFeed]) -> ImportPlan:
    """What becomes of each feed of the OPML file, in its order (pure): the first outline of a
    feed is added or already there; the later ones (the same URL in another folder, or the
    same request spelled otherwise) are duplicates, counted once."""
    listed = {feed_url_key(spec.url) for spec in existing}
    first: dict[str, OpmlFeed] = {}
    added: list[OpmlFeed] = []
    present: list[OpmlFeed] = []
    duplicates: list[Duplicate] = []
    for feed in incoming:
        key = feed_url_key(feed.url)
        earlier = first.get(key)
        if earlier is not None:
            duplicates.append(Duplicate(feed, earlier, feed.outlines))
            continue
        first[key] = feed
        (present if key in listed else added).append(feed)
        if feed.outlines > 1:
            duplicates.append(Duplicate(feed, feed, feed.outlines - 1))
    return ImportPlan(tuple(added), tuple(present), tuple(duplicates))


def import_opml(opml_path: Path, feeds_file: Path) -> ImportResult:
    """Merge the subscriptions of ``opml_path`` into ``feeds_file`` (created if missing)."""
    try:
        data = opml_path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"import-opml: cannot read the OPML file {opml_path} ({exc.strerror}). Check the path."
        ) from exc
    document = read_opml(data, str(opml_path))
    target = feeds_file.resolve()
    original, text = read_feeds_text(target)
    existing = listed_feeds(target, text)
    plan = plan_import(existing, document.feeds)
    added = plan.added
    if added:
        entries = _new_entries(added, after_import=IMPORTED_FOLDER in text)
        try:
            merged = (
                json_rewrite(text, lambda feeds: _extend_json(feeds, entries))
                if feeds_file.suffix.lower() == ".json"
                else yaml_append_all(text, entries)[0]
            )
        except UnsafeEdit as exc:
            raise ConfigError(
                f"import-opml: the feeds file {feeds_file} cannot be edited safely ({exc}), so "
                "it was left unchanged. Change that, then import again."
            ) from exc
        expected = [*existing, *map(entry_spec, entries)]
        replace_checked(
            target,
            merged,
            original,
            action="import-opml",
            display=feeds_file,
            expect=expected,
            by_hand=_by_hand(entries, feeds_file.suffix.lower() == ".json"),
        )
    return ImportResult(added, plan.already_present, document.skipped, plan.duplicates)


IMPORTED_FOLDER = " (imported from OPML)"
"""How the comment naming an imported folder ends."""


def _new_entries(added: Sequence[OpmlFeed], *, after_import: bool = False) -> list[NewEntry]:
    """The entries to append, each OPML folder named once in a comment above its first feed
    (written in YAML only: JSON has no comments), and the feeds outside any folder that come
    after one under a comment of their own: they read as the folder's otherwise. So do those
    appended first to a file an earlier import wrote folders into (``after_import``): its last
    entries may stand under a folder's comment."""
    entries: list[NewEntry] = []
    folder: tuple[str, ...] | None = None if after_import else ()
    for feed in added:
        comment = None
        if feed.folder and feed.folder != folder:
            label = " / ".join(_comment_text(name) for name in feed.folder)
            comment = f"{label}{IMPORTED_FOLDER}"
        elif folder != () and not feed.folder:
            comment = f"No folder{IMPORTED_FOLDER}"
        entries.append(NewEntry(feed.url, title=feed.title, comment=comment))
        folder = feed.folder
    return entries


def _by_hand(entries: Sequence[NewEntry], is_json: bool) -> str:
    """The entries to add, for a file the import could not edit safely."""
    if is_json:
        items = ",\n".join(json.dumps(json_entry(e, []), ensure_ascii=False) for e in entries)
        return f'add to "feeds":\n{items}'
    return "add after the last entry:\n" + "\n".join(
        line for entry in entries for line in entry_lines(entry, Style())
    )


def _extend_json(feeds: list[object], entries: Sequence[NewEntry]) -> None:
    values = [json_entry(entry, feeds) for entry in entries]
    feeds.extend(values)


def _comment_text(name: str) -> str:
    """A folder name fit for a one-line YAML comment: line breaks of any kind (CR, NEL, LS)
    would end the comment (``split`` takes them all), and C0/C1 controls are characters YAML
    refuses."""
    return NOT_PRINTABLE.sub("", " ".join(name.split()))


# --- export -------------------------------------------------------------------------------


def export_opml(
    specs: Sequence[FeedSpec],
    *,
    now: datetime,
    titles: Mapping[str, str] | None = None,
    title: str = EXPORT_TITLE,
) -> bytes:
    """OPML 2.0 of the feeds file; a feed's name is its ``title:``, else ``titles[url]``.

    A feed without a name gets its URL as ``text`` (required by OPML) and no ``title``; an
    import reads a name equal to the URL as no name, so the round trip adds no titles."""
    known = titles or {}
    root = etree.Element("opml", version="2.0")
    head = etree.SubElement(root, "head")
    etree.SubElement(head, "title").text = title
    etree.SubElement(head, "dateCreated").text = format_datetime(now, usegmt=True)
    body = etree.SubElement(root, "body")
    for spec in specs:
        name = xml_chars(spec.title or known.get(spec.url) or "")  # YAML can write controls
        outline = etree.SubElement(body, "outline", type="rss", text=name or spec.url)
        if name:
            outline.set("title", name)
        outline.set("xmlUrl", spec.url)
    return bytes(etree.tostring(root, xml_declaration=True, encoding="UTF-8", pretty_print=True))


async def channel_titles(db: Database) -> dict[str, str]:
    """Feed URL -> the title the feed itself gives (for naming exported outlines)."""
    rows = await db.query("SELECT url, title FROM feeds WHERE title IS NOT NULL")
    return {row["url"]: row["title"] for row in rows}
