"""Text-level editing of a YAML feeds file: the entries appended (``add``, ``import-opml``) or
the entry removed are the only change.

A new entry follows the file's own style (dash indentation, bare URL or ``url:`` mapping, key
column, quoting of the URL) after the last entry, before trailing comments; a removed entry
loses exactly its own lines (comments and blank lines around it stay). Layouts this cannot
edit with confidence (flow style, no ``feeds:`` key, entries not on their own lines, a tagged
list, CR and LF line endings mixed) raise :class:`UnsafeEdit`; :mod:`.feeds_edit` checks every
result with the loader anyway. Lines, columns and quoting come from the loader's own reading
(:func:`.feeds_file_yaml.parse_yaml`), so the editor finds the entries where the loader does.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import yaml

from .errors import ConfigError
from .feed_urls import feed_url_key
from .feeds_file import Node
from .feeds_file_yaml import parse_yaml

_DASH_RE = re.compile(r"^(?P<indent>[ ]*)-(?:[ ]+|$)")
_EMPTY_FEEDS_RE = re.compile(
    r"^feeds:[ \t]*(?:\[[ \t]*\]|~|null|Null|NULL)?[ \t]*(?P<comment>#.*)?$"
)
_DASH_ALONE_RE = re.compile(r"^[ ]*-[ ]*$")
_COMMENT_OR_BLANK_RE = re.compile(r"^[ \t]*(?:#.*)?$")
_OTHER_LINE_BREAKS_RE = re.compile("[\x85\u2028\u2029]")
_DOCUMENT_END_RE = re.compile(r"^\.\.\.(?:[ \t]|$)")


@dataclass(frozen=True, slots=True)
class NewEntry:
    """A feed to append; ``interval`` is written as the user gave it (already validated)."""

    url: str
    title: str | None = None
    interval: str | None = None
    comment: str | None = None
    """One line of comment written above the entry (``import-opml`` names OPML folders so)."""


class UnsafeEdit(ConfigError):
    """The file's layout is one this module does not edit (flow style, anchors, ...)."""


class FlowList(UnsafeEdit):
    """The feeds are a ``[flow, list]``: an entry to write by hand goes in it, not below."""


class AnchorRemoved(UnsafeEdit):
    """The entry to remove defines an anchor (``&name``) that another entry repeats."""

    def __init__(self, names: Sequence[str]) -> None:
        listed = ", ".join(f"&{name}" for name in names)
        super().__init__(f"its entry defines {listed}, which other entries repeat by an alias")
        self.aliases = ", ".join(f"*{name}" for name in names)


def _document(text: str) -> Node | None:
    """The file's document as the loader reads it (with positions and quoting), None when it
    holds none yet; UnsafeEdit for layouts this module does not edit."""
    if "\r" in text:  # CRLF and CR-only files come here as "\n"; a mix would shift lines
        raise UnsafeEdit("the file mixes line endings (carriage returns and line feeds)")
    if _OTHER_LINE_BREAKS_RE.search(text):  # YAML may count them as lines, this module cannot
        raise UnsafeEdit(
            "the file holds a NEL, LS or PS character, which YAML may read as a line end"
        )
    if not text.strip():
        return None
    try:
        document = parse_yaml(text, "the feeds file")
    except ConfigError as exc:
        raise UnsafeEdit(f"the file is not valid YAML ({exc})") from exc
    if document.value is None:
        return None
    if not isinstance(document.value, dict) or document.style == "flow":
        raise UnsafeEdit('the file is not a block mapping with a "feeds:" key')
    return document


def _feeds_sequence(document: Node | None) -> list[Node] | None:
    """The feeds list's items, None when there are none yet."""
    feeds = None if document is None else _members(document).get("feeds")
    if feeds is None or feeds.value is None:
        return None
    if not isinstance(feeds.value, list):
        raise UnsafeEdit('"feeds" is not a list')
    if feeds.style == "flow" and feeds.value:
        raise FlowList('"feeds" is written as a [flow, list]')
    return feeds.value or None


def _members(node: Node) -> dict[str, Node]:
    return node.value if isinstance(node.value, dict) else {}


def _scalar(value: str, quote: str) -> str:
    """``value`` as a YAML scalar: in the file's quoting when it has one, plain when safe;
    double-quoted with escapes when it holds a character YAML cannot keep as written."""
    if quote == "'" and not _ESCAPE_IN_YAML_RE.search(value) and "\n" not in value:
        return "'" + value.replace("'", "''") + "'"
    if quote or not _plain_is_safe(value):
        return _ESCAPE_IN_YAML_RE.sub(_escape, json.dumps(value, ensure_ascii=False))
    return value


_ESCAPE_IN_YAML_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff]")
"""Characters a YAML scalar cannot hold as written: not printable in YAML 1.2 (C0 and C1
controls, DEL, U+FFFE/U+FFFF), read as line ends (CR, NEL, LS, PS), or a byte order mark."""


def _escape(found: re.Match[str]) -> str:
    return f"\\u{ord(found.group()):04x}"


def _plain_is_safe(value: str) -> bool:
    if "\n" in value or value != value.strip():
        return False
    try:
        loaded = parse_yaml(f"k: {value}\n", "a value")
    except ConfigError:
        return False
    written = _members(loaded).get("k")
    return written is not None and written.value == value


@dataclass(frozen=True, slots=True)
class Style:
    """How the file writes its entries."""

    dash_indent: int = 2
    key_column: int = 4
    """Column of an entry's keys (``url`` follows the dash, the others align with it)."""
    bare: bool = False
    """Entries are bare URLs (``- https://...``)."""
    quote: str = ""


def entry_lines(entry: NewEntry, style: Style) -> list[str]:
    url = _scalar(entry.url, style.quote)
    dash = " " * style.dash_indent + "-"
    lines = [] if entry.comment is None else [" " * style.dash_indent + "# " + entry.comment]
    if style.bare and entry.title is None and entry.interval is None:
        return [*lines, f"{dash} {url}"]
    gap = " " * max(style.key_column - style.dash_indent - 1, 1)
    indent = " " * (style.dash_indent + 1 + len(gap))
    lines.append(f"{dash}{gap}url: {url}")
    if entry.interval is not None:
        lines.append(f"{indent}interval: {_scalar(entry.interval, '')}")
    if entry.title is not None:
        lines.append(f"{indent}title: {_scalar(entry.title, style.quote)}")
    return lines


def _item_start(lines: list[str], feeds: list[Node], index: int) -> int:
    """The line (0-based) holding the dash of item ``index``."""
    if not feeds[index].placed:  # no item positions in a tagged list ("feeds: !x")
        raise UnsafeEdit('the list carries a tag such as "!x", so its entries\' lines are unknown')
    line = feeds[index].line - 1
    if line >= len(lines):
        raise UnsafeEdit(f"entry {index + 1} of the list is not on the line YAML reports")
    if _DASH_RE.match(lines[line]):
        return line
    for above in range(line - 1, -1, -1):  # "-" alone on its line, the item below it
        if _DASH_ALONE_RE.match(lines[above]):
            return above
        if not _COMMENT_OR_BLANK_RE.match(lines[above]):
            break
    raise UnsafeEdit(f"entry {index + 1} of the list does not start its own line")


def _document_end(lines: list[str]) -> int:
    """The line (0-based) of the ``...`` document end marker, else ``len(lines)``: entries
    go before it."""
    return next((at for at, line in enumerate(lines) if _DOCUMENT_END_RE.match(line)), len(lines))


def _item_end(lines: list[str], start: int, stop: int) -> int:
    """The last line (0-based) of an item spanning [start, stop): trailing comments and
    blank lines belong to what follows, unless they are its text (a block scalar's or a
    quoted title's line starting with ``#``: an entry written before it split the title)."""
    end = stop - 1
    while end > start and _COMMENT_OR_BLANK_RE.match(lines[end]):
        end -= 1
    if end < stop - 1:
        ends = _value_ends("\n".join(lines))
        last = bisect_left(ends, stop) - 1  # the last value ending before what follows
        if last >= 0 and ends[last] > end:
            end = ends[last]
    return end


@lru_cache(maxsize=4)
def _value_ends(text: str) -> tuple[int, ...]:
    """The line (0-based) on which each scalar or alias of ``text`` ends, in order, as libyaml
    reads them (the text as a block scalar keeps it, trailing blank lines only where it keeps
    them); none when it cannot read them (the loader still checks every edit)."""
    lines = text.split("\n")
    ends: list[int] = []
    try:
        for event in yaml.parse(text, Loader=_EVENTS_LOADER):
            if not isinstance(event, yaml.ScalarEvent | yaml.AliasEvent):
                continue
            mark = event.end_mark  # a block scalar's ends on the line after its text
            line = mark.line if mark.column > 0 else mark.line - 1
            kept = isinstance(event, yaml.ScalarEvent) and event.value.endswith("\n\n")
            while not kept and line > event.start_mark.line and not lines[line].strip():
                line -= 1
            ends.append(line)
    except yaml.YAMLError:
        return ()
    return tuple(ends)


_EVENTS_LOADER = getattr(yaml, "CBaseLoader", None) or yaml.BaseLoader


def _style(lines: list[str], feeds: list[Node]) -> Style:
    """The style of the last entry written as a mapping (else of the last entry)."""
    last = len(feeds) - 1
    dash = _DASH_RE.match(lines[_item_start(lines, feeds, last)])
    assert dash is not None
    dash_indent = len(dash.group("indent"))
    key_column = dash_indent + 2
    for index in range(last, -1, -1):
        members = _members(feeds[index])
        if members:
            first = next(iter(members.values()))  # placed at its key
            if first.placed and first.line - 1 == _item_start(lines, feeds, index):
                key_column = first.column - 1  # merged keys (<<: ...) have no position
            break
    last_members = _members(feeds[last])
    url = last_members.get("url") if last_members else feeds[last]
    quote = url.style if url is not None and url.style in ('"', "'") else ""
    bare = all(isinstance(item.value, str) for item in feeds)
    return Style(dash_indent, key_column, bare, quote)


def yaml_append(text: str, entry: NewEntry) -> tuple[str, int]:
    """The YAML text with ``entry`` after the last feed; and the 1-based line it starts on."""
    return yaml_append_all(text, [entry])


def yaml_append_all(text: str, entries: Sequence[NewEntry]) -> tuple[str, int]:
    """The YAML text with ``entries`` after the last feed, in that order; and the 1-based line
    the first one (or its comment) starts on."""
    document = _document(text)
    feeds = _feeds_sequence(document)
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if feeds is None:
        at = _empty_feeds_line(lines, document)
    else:
        start = _item_start(lines, feeds, len(feeds) - 1)
        at = _item_end(lines, start, _document_end(lines))
    style = Style() if feeds is None else _style(lines, feeds)
    new = [line for entry in entries for line in entry_lines(entry, style)]
    return "\n".join([*lines[: at + 1], *new, *lines[at + 1 :]]) + "\n", at + 2


def _empty_feeds_line(lines: list[str], document: Node | None) -> int:
    """The ``feeds:`` line of a file without entries, made a bare ``feeds:``."""
    if document is None:
        if _document_end(lines) < len(lines):
            raise UnsafeEdit('the file ends its document ("...") before any "feeds:" key')
        lines.append("feeds:")
        return len(lines) - 1
    feeds = _members(document).get("feeds")
    if feeds is None or not feeds.placed:
        raise UnsafeEdit('the file has no "feeds:" key')
    at = feeds.line - 1
    match = _EMPTY_FEEDS_RE.match(lines[at])
    if match is None:
        raise UnsafeEdit(f'line {at + 1} ("feeds:") is not in a form this command edits')
    comment = match.group("comment")
    lines[at] = "feeds:" + (f"  {comment}" if comment else "")
    return at


def yaml_remove(text: str, url: str) -> tuple[str, int]:
    """The YAML text without the entry for ``url``; and the 1-based line it started on."""
    feeds = _feeds_sequence(_document(text)) or []
    index = _entry_index(feeds, url)
    if index is None:
        raise UnsafeEdit(f"no entry for {url} was found in the YAML")
    lines = text.split("\n")
    start = _item_start(lines, feeds, index)
    last = index + 1 == len(feeds)
    stop = _document_end(lines) if last else _item_start(lines, feeds, index + 1)
    end = _item_end(lines, start, stop)
    kept = "\n".join([*lines[:start], *lines[end + 1 :]])
    lost = _aliases_left_alone(kept) if "*" in kept else []
    if lost:
        raise AnchorRemoved(lost)
    return kept, start + 1


def _entry_index(feeds: Sequence[Node], url: str) -> int | None:
    key = feed_url_key(url)
    for index, item in enumerate(feeds):
        members = _members(item)
        value = members["url"].value if "url" in members else item.value
        if isinstance(value, str) and feed_url_key(value.strip()) == key:
            return index
    return None


def entry_line(text: str, url: str) -> int | None:
    """The line (1-based) of the entry for ``url`` as the loader reads the file, also in a
    layout this module does not edit (for the instructions to edit it by hand); else None."""
    try:
        feeds = _members(parse_yaml(text, "the feeds file")).get("feeds")
    except ConfigError:
        return None
    items = feeds.value if feeds is not None and isinstance(feeds.value, list) else []
    index = _entry_index(items, url)
    return None if index is None or not items[index].placed else items[index].line


def _aliases_left_alone(text: str) -> list[str]:
    """The names of the aliases (``*name``) of ``text`` that no anchor (``&name``) defines:
    an entry removed took its anchor away, and the file would no longer load."""
    defined: set[str] = set()
    used: set[str] = set()
    try:  # events only: libyaml's parser does not resolve aliases, its composer would
        for event in yaml.parse(text, Loader=_EVENTS_LOADER):
            if isinstance(event, yaml.AliasEvent):
                used.add(event.anchor)
            elif isinstance(event, yaml.NodeEvent) and event.anchor:
                defined.add(event.anchor)
    except yaml.YAMLError:  # the loader's check says what
        return []
    return sorted(used - defined)
