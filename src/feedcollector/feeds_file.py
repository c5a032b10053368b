"""The feeds file (YAML or JSON): the single source of truth for subscriptions.

The file is ``feeds:`` then a list of ``{url, interval, title}`` mappings or bare URLs. It is read
whole and checked whole, so a typo never drops or half-applies a subscription; every problem
names its line. The value grammar it shares with the settings lives in :mod:`.config_values`.
"""

from __future__ import annotations

import hashlib
import json
import re
from bisect import bisect_right
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from .config_values import (
    Problem,
    check_http_url,
    check_storable_text,
    config_error,
    describe_value,
    format_duration,
    long_number_problem,
    parse_duration,
)
from .errors import ConfigError
from .feed_urls import feed_url_key
from .models import FeedSpec

YAML_EXAMPLE = "feeds:\n  - url: https://example.com/feed.xml\n    interval: 30m"
JSON_EXAMPLE = '{"feeds": [\n  {"url": "https://example.com/feed.xml", "interval": "30m"}\n]}'
ENTRY_KEYS = ("url", "interval", "title")
MIN_FEED_INTERVAL = timedelta(seconds=1)
"""A feed's pinned interval is stored in whole seconds; a shorter one read as none at all."""
MAX_DOCUMENT_VALUES = 500_000
"""Values (mappings, lists, scalars) a feeds document may expand to. YAML aliases repeat what
an anchor holds, nine aliases of nine aliases... (a "billion laughs"): that must end in a
message, not a hang."""
FLAT_LIST_FIX = 'Write "feeds:" followed by a flat list of entries, without nested anchors.'


@dataclass(frozen=True, slots=True)
class Node:
    """A parsed value with its position; mappings map keys to nodes placed at the key.

    Made by the JSON reader here and the YAML reader (:mod:`.feeds_file_yaml`), whose nodes
    also say how the file writes them, for editing it in its own style (:mod:`.feeds_yaml`)."""

    value: object
    line: int
    column: int
    style: str = field(default="", compare=False)
    """``'"'`` or ``"'"`` for a quoted YAML scalar, ``"flow"`` for a YAML ``[list]`` or
    ``{mapping}``, else "" (JSON too)."""
    placed: bool = field(default=True, compare=False)
    """False where YAML gives no position of its own (a key merged from an anchor, an item of
    a tagged list): the node then carries its parent's."""


def feeds_file_digest(path: Path) -> str | None:
    """SHA-256 of the feeds file's bytes, as the database keeps it after a sync (None: the file
    cannot be read; :func:`load_feeds` says why). An equal digest means the file holds nothing
    the ``feeds`` table does not already follow, so it need not be parsed."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def load_feeds(
    path: Path, *, default_interval: timedelta | None = None, display: str | None = None
) -> list[FeedSpec]:
    """Read and check the whole feeds file; ``default_interval`` only improves error messages,
    ``display`` names the file in them (an edit checks a temporary copy of the real file)."""
    display = display or str(path)
    suffix = path.suffix.lower()
    if path.is_dir():
        raise ConfigError(
            f"config: feeds file {display} is a folder; point feeds_file in the config at a "
            "file of feeds (.yaml, .yml or .json)."
        )
    if suffix not in (".yaml", ".yml", ".json"):
        raise ConfigError(
            f"config: feeds file {display} must end in .yaml, .yml or .json so its format is "
            "known. If it is the feeds file, rename it (the content stays the same); else "
            "point feeds_file in the config at the feeds file."
        )
    kind = "json" if suffix == ".json" else "yaml"
    text = _read_feeds_text(path, display, kind)
    if kind == "json":
        root = _parse_json(text, display)
    else:
        from .feeds_file_yaml import parse_yaml  # on use: the YAML libraries, 40 ms

        root = parse_yaml(text, display)
    return _feed_specs(root, display, kind, default_interval)


def _example(kind: str) -> str:
    example = JSON_EXAMPLE if kind == "json" else YAML_EXAMPLE
    return "\n" + "\n".join(f"    {line}" for line in example.splitlines())


def _read_feeds_text(path: Path, display: str, kind: str) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise ConfigError(
            f"config: feeds file {display} does not exist. Create it: `feedcollector add URL` "
            "subscribes to a feed (or a site's), or write one entry per feed as below; or point "
            f"feeds_file in the config (--config) at the right file. For example:{_example(kind)}"
        ) from exc
    except OSError as exc:
        raise ConfigError(
            f"config: feeds file {display} cannot be read ({exc.strerror}). Check the path and "
            "its permissions."
        ) from exc
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise config_error(
            display, [Problem("the file is not UTF-8 text", "Save it as UTF-8.", line=line)]
        ) from exc
    if not text.strip():
        raise ConfigError(
            f"config: feeds file {display} is empty. Write the feeds into it, for example:"
            f"{_example(kind)}"
        )
    return text


def line_and_column(text: str, index: int) -> tuple[int, int]:
    """1-based line and column of ``text[index]``; CR LF, CR and LF each end a line."""
    breaks = list(_LINE_BREAK.finditer(text, 0, index))
    return len(breaks) + 1, index - (breaks[-1].end() if breaks else 0) + 1


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def too_deep(display: str) -> ConfigError:
    what = "the file nests lists or mappings too deeply to be a feeds file"
    return config_error(display, [Problem(what, FLAT_LIST_FIX)])


def _parse_json(text: str, display: str) -> Node:
    try:
        json.loads(text)
    except RecursionError as exc:
        raise too_deep(display) from exc
    except json.JSONDecodeError as exc:
        fix = (
            'Fix the syntax there: keys and text in "double quotes", commas between entries '
            "but not after the last one."
        )
        problem = Problem(f"JSON syntax error: {exc.msg}", fix, line=exc.lineno, column=exc.colno)
        raise config_error(display, [problem]) from exc
    except ValueError as exc:  # int() refuses over 4,300 digits, and json lets that out
        raise config_error(display, [long_number_problem(text)]) from exc
    walker = _JsonWalker(text)
    try:
        root, _ = walker.node(0)
    except RecursionError as exc:
        raise too_deep(display) from exc
    if walker.problems:
        raise config_error(display, walker.problems)
    return root


class _JsonWalker:
    """Re-reads JSON that is known to be valid, recording where each value starts.

    The json module gives positions only for syntax errors; semantic errors need them too.
    """

    _WHITESPACE = re.compile(r"[ \t\n\r]*")
    _DECODER = json.JSONDecoder()

    def __init__(self, text: str) -> None:
        self._text = text
        self._line_starts = [0, *(match.end() for match in re.finditer("\n", text))]
        self.problems: list[Problem] = []

    def _skip(self, index: int) -> int:
        match = self._WHITESPACE.match(self._text, index)
        return match.end() if match else index

    def _position(self, index: int) -> tuple[int, int]:
        line = bisect_right(self._line_starts, index)
        return line, index - self._line_starts[line - 1] + 1

    def node(self, index: int) -> tuple[Node, int]:
        index = self._skip(index)
        line, column = self._position(index)
        opener = self._text[index]
        if opener == "{":
            members: dict[str, Node] = {}
            index = self._skip(index + 1)
            while self._text[index] != "}":
                key_line, key_column = self._position(index)
                key, index = self._DECODER.raw_decode(self._text, index)
                child, index = self.node(self._skip(index) + 1)
                if key in members:
                    first = members[key].line
                    earlier = f" (first on line {first})" if first != key_line else ""
                    what = f'key "{key}" is given twice in one mapping{earlier}'
                    self.problems.append(Problem(what, "Keep one of the two.", line=key_line))
                members[key] = Node(child.value, key_line, key_column)
                index = self._skip(index)
                index = self._skip(index + 1) if self._text[index] == "," else index
            return Node(members, line, column), index + 1
        if opener == "[":
            items: list[Node] = []
            index = self._skip(index + 1)
            while self._text[index] != "]":
                child, index = self.node(index)
                items.append(child)
                index = self._skip(index)
                index = self._skip(index + 1) if self._text[index] == "," else index
            return Node(items, line, column), index + 1
        value, end = self._DECODER.raw_decode(self._text, index)
        return Node(value, line, column), end


def _feed_specs(
    root: Node, display: str, kind: str, default_interval: timedelta | None
) -> list[FeedSpec]:
    """Check a parsed feeds document whole and return its entries in file order."""
    example = _example(kind)
    if not isinstance(root.value, dict):
        got = describe_value(root.value)
        what = f'the file must be a mapping with a top-level "feeds" key, got {got}'
        raise config_error(
            display, [Problem(what, f"Write it like this:{example}", line=root.line)]
        )
    problems = [
        Problem(
            f'unknown top-level key "{key}"',
            'The only top-level key is "feeds"; remove this one.',
            line=node.line,
        )
        for key, node in root.value.items()
        if key != "feeds"
    ]
    feeds = root.value.get("feeds")
    entries: list[Node] = []
    if feeds is None:
        problems.append(
            Problem(
                'the top-level "feeds" key is missing',
                f"Write it like this:{example}",
                line=root.line,
            )
        )
    elif isinstance(feeds.value, list):
        entries = feeds.value
    elif feeds.value is not None:
        what = f'"feeds" must be a list of feeds, got {describe_value(feeds.value)}'
        problems.append(Problem(what, f"Write it like this:{example}", line=feeds.line))
    specs: list[FeedSpec] = []
    first: dict[str, tuple[int, str]] = {}
    for entry in entries:
        spec = _entry_spec(entry, problems, default_interval)
        if spec is None:
            continue
        key = feed_url_key(spec.url)
        if key in first:
            line, url = first[key]
            what = f'the feed "{spec.url}" on line {entry.line} is already listed on line {line}'
            if url != spec.url:  # the same request: feed_urls says why they are one feed
                what += f' as "{url}" (both request {key})'
            if entry.line == line:  # YAML places an alias (*x) at its anchor (&x)
                what = f'the feed "{spec.url}" on line {entry.line} is listed again by an alias'
            problems.append(Problem(what, "Remove one of the two entries.", line=entry.line))
            continue
        first[key] = (entry.line, spec.url)
        specs.append(spec)
    if problems:
        raise config_error(display, problems)
    return specs


_URL_FIX = "Write the feed's full address, e.g. https://example.com/feed.xml."


def _entry_spec(
    entry: Node, problems: list[Problem], default_interval: timedelta | None
) -> FeedSpec | None:
    """One list entry, a bare URL or a {url, interval, title} mapping; problems are appended."""
    if isinstance(entry.value, str):
        url = _checked_url("the feed address", entry.value, entry.line, problems)
        return None if url is None else FeedSpec(url=url)
    if not isinstance(entry.value, dict):
        what = (
            "each entry must be a feed address or a mapping with url, interval and title, "
            f"got {describe_value(entry.value)}"
        )
        problems.append(
            Problem(what, 'Write it as "- url: https://example.com/feed.xml".', line=entry.line)
        )
        return None
    members: dict[str, Node] = entry.value
    found = [
        Problem(
            f'unknown key "{key}" in this entry',
            f"Known keys: {', '.join(ENTRY_KEYS)}. Fix the spelling or remove it.",
            line=node.line,
        )
        for key, node in members.items()
        if key not in ENTRY_KEYS
    ]
    url = _entry_url(members.get("url"), entry.line, found)
    interval = _entry_interval(members.get("interval"), found, default_interval)
    title = _entry_title(members.get("title"), found)
    problems.extend(found)
    if found or url is None:
        return None
    return FeedSpec(url=url, interval=interval, title=title)


def _checked_url(subject: str, value: str, line: int, problems: list[Problem]) -> str | None:
    try:
        return check_http_url(value)
    except ValueError as exc:
        problems.append(Problem(f"{subject} {exc}", _URL_FIX, line=line))
        return None


def _entry_url(node: Node | None, entry_line: int, problems: list[Problem]) -> str | None:
    if node is None:
        problems.append(
            Problem(
                'this entry has no "url"',
                'Add "url:" with the feed\'s full address.',
                line=entry_line,
            )
        )
        return None
    if not isinstance(node.value, str):
        what = f'"url" must be the feed\'s address, got {describe_value(node.value)}'
        problems.append(Problem(what, _URL_FIX, line=node.line))
        return None
    return _checked_url('"url"', node.value, node.line, problems)


def _entry_interval(
    node: Node | None, problems: list[Problem], default: timedelta | None
) -> timedelta | None:
    if node is None or node.value is None:
        return None
    shown = format_duration(default) if default is not None else "[fetch] default_interval"
    fix = (
        "Fix the value, or remove the key: the collector then learns the interval from how "
        f"often the feed posts ({shown} until it knows, or always with [schedule] adaptive = "
        "false)."
    )
    try:  # kept in whole seconds: shorter would be 0, which means "not pinned"
        return parse_duration(node.value, shortest=MIN_FEED_INTERVAL)
    except ValueError as exc:
        problems.append(Problem(f'"interval" {exc}', fix, line=node.line))
        return None


def _entry_title(node: Node | None, problems: list[Problem]) -> str | None:
    if node is None or node.value is None:
        return None
    if not isinstance(node.value, str):
        what = f'"title" must be text, got {describe_value(node.value)}'
        problems.append(Problem(what, "Put the title in quotes.", line=node.line))
        return None
    try:
        return check_storable_text(node.value).strip() or None
    except ValueError as exc:
        problems.append(Problem(f'"title" {exc}', "Write the character itself.", line=node.line))
        return None
