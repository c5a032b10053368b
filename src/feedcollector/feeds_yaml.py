"""Text-level editing of a YAML feeds file: the entry appended or removed is the only change.

A new entry follows the file's own style (dash indentation, bare URL or ``url:`` mapping, key
column, quoting of the URL) after the last entry, before trailing comments; a removed entry
loses exactly its own lines (comments and blank lines around it stay). Layouts this cannot
edit with confidence (flow style, no ``feeds:`` key, entries not on their own lines, a tagged
list, CR and LF line endings mixed) raise :class:`UnsafeEdit`; :mod:`.feeds_edit` checks every
result with the loader anyway.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, SingleQuotedScalarString

from .errors import ConfigError
from .feeds_file import _duplicate_key as feed_url_key

_DASH_RE = re.compile(r"^(?P<indent>[ ]*)-(?:[ ]+|$)")
_EMPTY_FEEDS_RE = re.compile(
    r"^feeds:[ \t]*(?:\[[ \t]*\]|~|null|Null|NULL)?[ \t]*(?P<comment>#.*)?$"
)
_COMMENT_OR_BLANK_RE = re.compile(r"^[ \t]*(?:#.*)?$")
_DOCUMENT_END_RE = re.compile(r"^\.\.\.(?:[ \t]|$)")


@dataclass(frozen=True, slots=True)
class NewEntry:
    """A feed to append; ``interval`` is written as the user gave it (already validated)."""

    url: str
    title: str | None = None
    interval: str | None = None


class UnsafeEdit(ConfigError):
    """The file's layout is one this module does not edit (flow style, anchors, ...)."""


def _load_round_trip(text: str) -> CommentedMap | None:
    if "\r" in text:  # CRLF and CR-only files come here as "\n"; a mix would shift lines
        raise UnsafeEdit("the file mixes line endings (carriage returns and line feeds)")
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    document = load_round_trip(yaml, text) if text.strip() else None
    if document is None:
        return None
    if not isinstance(document, CommentedMap) or document.fa.flow_style():
        raise UnsafeEdit('the file is not a block mapping with a "feeds:" key')
    return document


def load_round_trip(yaml: YAML, text: str) -> Any:
    """``yaml.load(text)``; UnsafeEdit when ruamel.yaml cannot read it back for editing: not
    valid YAML, or a comment its round trip cannot place (it raises NotImplementedError for
    some comments between a key and a value on a later line, where libyaml, which the loader
    may have read the file with, finds nothing wrong)."""
    try:
        return yaml.load(text)
    except YAMLError as exc:
        raise UnsafeEdit(f"the file is not valid YAML ({exc})") from exc
    except NotImplementedError as exc:
        raise UnsafeEdit(
            "it holds a comment between a key and its value that the YAML editor cannot keep; "
            "move it onto the key's line or a line of its own"
        ) from exc


def _feeds_sequence(document: CommentedMap | None) -> CommentedSeq | None:
    """The feeds list, None when there are no entries yet."""
    feeds = None if document is None else document.get("feeds")
    if feeds is None:
        return None
    if not isinstance(feeds, CommentedSeq):
        raise UnsafeEdit('"feeds" is not a list')
    if feeds.fa.flow_style() and len(feeds):
        raise UnsafeEdit('"feeds" is written as a [flow, list]')
    return feeds if len(feeds) else None


def _scalar(value: str, quote: str) -> str:
    """``value`` as a YAML scalar: in the file's quoting when it has one, plain when safe."""
    if quote == "'":
        return "'" + value.replace("'", "''") + "'"
    if quote == '"' or not _plain_is_safe(value):
        return json.dumps(value, ensure_ascii=False)
    return value


def _plain_is_safe(value: str) -> bool:
    if "\n" in value or value != value.strip():
        return False
    try:
        loaded = YAML(typ="safe").load(f"k: {value}\n")
    except YAMLError:
        return False
    return isinstance(loaded, dict) and loaded.get("k") == value


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
    if style.bare and entry.title is None and entry.interval is None:
        return [f"{dash} {url}"]
    gap = " " * max(style.key_column - style.dash_indent - 1, 1)
    indent = " " * (style.dash_indent + 1 + len(gap))
    lines = [f"{dash}{gap}url: {url}"]
    if entry.interval is not None:
        lines.append(f"{indent}interval: {_scalar(entry.interval, '')}")
    if entry.title is not None:
        lines.append(f"{indent}title: {_scalar(entry.title, style.quote)}")
    return lines


def _item_start(lines: list[str], feeds: CommentedSeq, index: int) -> int:
    """The line (0-based) holding the dash of item ``index``."""
    position = feeds.lc.item(index)
    if position is None:  # ruamel keeps no item positions for a tagged list ("feeds: !x")
        raise UnsafeEdit('the list carries a tag such as "!x", so its entries\' lines are unknown')
    line = int(position[0])
    if line >= len(lines):
        raise UnsafeEdit(f"entry {index + 1} of the list is not on the line YAML reports")
    if _DASH_RE.match(lines[line]):
        return line
    for above in range(line - 1, -1, -1):  # "-" alone on its line, the item below it
        if lines[above].strip() == "-":
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
    blank lines belong to what follows."""
    end = stop - 1
    while end > start and _COMMENT_OR_BLANK_RE.match(lines[end]):
        end -= 1
    return end


def _style(lines: list[str], feeds: CommentedSeq) -> Style:
    """The style of the last entry written as a mapping (else of the last entry)."""
    last = len(feeds) - 1
    dash = _DASH_RE.match(lines[_item_start(lines, feeds, last)])
    assert dash is not None
    dash_indent = len(dash.group("indent"))
    key_column = dash_indent + 2
    for index in range(last, -1, -1):
        item = feeds[index]
        if isinstance(item, CommentedMap) and len(item):
            try:
                position = item.lc.key(next(iter(item)))
            except KeyError:
                position = None
            if position is not None and position[0] == _item_start(lines, feeds, index):
                key_column = int(position[1])  # merged keys (<<: ...) have no position
            break
    value = feeds[last].get("url") if isinstance(feeds[last], CommentedMap) else feeds[last]
    quote = ""
    if isinstance(value, DoubleQuotedScalarString):
        quote = '"'
    elif isinstance(value, SingleQuotedScalarString):
        quote = "'"
    bare = all(isinstance(item, str) for item in feeds)
    return Style(dash_indent, key_column, bare, quote)


def yaml_append(text: str, entry: NewEntry) -> tuple[str, int]:
    """The YAML text with ``entry`` after the last feed; and the 1-based line it starts on."""
    document = _load_round_trip(text)
    feeds = _feeds_sequence(document)
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if feeds is None:
        at = _empty_feeds_line(lines, document)
    else:
        start = _item_start(lines, feeds, len(feeds) - 1)
        at = _item_end(lines, start, _document_end(lines))
    new = entry_lines(entry, Style() if feeds is None else _style(lines, feeds))
    return "\n".join([*lines[: at + 1], *new, *lines[at + 1 :]]) + "\n", at + 2


def _empty_feeds_line(lines: list[str], document: CommentedMap | None) -> int:
    """The ``feeds:`` line of a file without entries, made a bare ``feeds:``."""
    if document is None:
        if _document_end(lines) < len(lines):
            raise UnsafeEdit('the file ends its document ("...") before any "feeds:" key')
        lines.append("feeds:")
        return len(lines) - 1
    if "feeds" not in document:
        raise UnsafeEdit('the file has no "feeds:" key')
    at = int(document.lc.key("feeds")[0])
    match = _EMPTY_FEEDS_RE.match(lines[at])
    if match is None:
        raise UnsafeEdit(f'line {at + 1} ("feeds:") is not in a form this command edits')
    comment = match.group("comment")
    lines[at] = "feeds:" + (f"  {comment}" if comment else "")
    return at


def yaml_remove(text: str, url: str) -> tuple[str, int]:
    """The YAML text without the entry for ``url``; and the 1-based line it started on."""
    feeds = _feeds_sequence(_load_round_trip(text)) or CommentedSeq()
    key = feed_url_key(url)
    lines = text.split("\n")
    for index, item in enumerate(feeds):
        value = item.get("url") if isinstance(item, CommentedMap) else item
        if not isinstance(value, str) or feed_url_key(value.strip()) != key:
            continue
        start = _item_start(lines, feeds, index)
        last = index + 1 == len(feeds)
        stop = _document_end(lines) if last else _item_start(lines, feeds, index + 1)
        end = _item_end(lines, start, stop)
        return "\n".join([*lines[:start], *lines[end + 1 :]]), start + 1
    raise UnsafeEdit(f"no entry for {url} was found in the YAML")
