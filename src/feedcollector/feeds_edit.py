"""Editing the feeds file for ``add`` and ``remove`` without disturbing the rest of it.

YAML is edited as text (:mod:`.feeds_yaml`): a new entry is written after the last one in the
file's own style, and a removed entry loses exactly its own lines, so comments, order, blank
lines and formatting stay as the user wrote them. JSON has no comments: it is re-serialized
with its key order and detected indentation.

Every edit is checked before it lands: the new text is loaded by the feeds-file loader and
must list exactly the old feeds plus (or minus) the one edited, otherwise the file is refused
as one that cannot be edited safely, with the entry to write by hand. The file is then
replaced atomically (temporary file in the same folder, ``os.replace``), keeping its mode, and
not at all when someone else changed it in the meantime.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .config_values import check_http_url, check_storable_text, parse_duration
from .errors import ConfigError
from .feed_urls import feed_url_key
from .feeds_file import load_feeds
from .feeds_yaml import (
    AnchorRemoved,
    FlowList,
    NewEntry,
    Style,
    UnsafeEdit,
    entry_line,
    entry_lines,
    yaml_append,
    yaml_remove,
)
from .models import FeedSpec


def find_feed(specs: Sequence[FeedSpec], url: str) -> FeedSpec | None:
    """The subscribed entry for ``url``, compared the way the loader spots duplicates."""
    key = feed_url_key(url)
    return next((spec for spec in specs if feed_url_key(spec.url) == key), None)


# --- JSON ---------------------------------------------------------------------------------


def _json_indent(text: str) -> str | None:
    """The indentation unit of the file ("  ", "    ", a tab), None for one-line JSON."""
    match = re.search(r"\n([ \t]+)\S", text)
    return match.group(1) if match else None


def json_rewrite(text: str, change: Callable[[list[object]], None]) -> str:
    """The JSON text after ``change`` edits its feeds list; key order and indentation kept."""
    document = json.loads(text) if text.strip() else {}
    feeds = document.get("feeds")
    if feeds is None:
        feeds = document["feeds"] = []
    change(feeds)
    dumped = json.dumps(document, indent=_json_indent(text), ensure_ascii=False)
    return dumped + ("\n" if text.endswith("\n") or not text.strip() else "")


def json_entry(entry: NewEntry, feeds: Sequence[object]) -> object:
    if (
        entry.title is None
        and entry.interval is None
        and feeds
        and all(isinstance(item, str) for item in feeds)
    ):
        return entry.url
    value: dict[str, str] = {"url": entry.url}
    if entry.interval is not None:
        value["interval"] = entry.interval
    if entry.title is not None:
        value["title"] = entry.title
    return value


# --- the file -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EditResult:
    feeds_file: Path
    spec: FeedSpec
    line: int | None
    """Where the entry starts (YAML) or started; None for JSON."""


def add_feed(feeds_file: Path, entry: NewEntry) -> EditResult:
    """Append ``entry`` to the feeds file (created if missing); AlreadySubscribed if there."""
    target = feeds_file.resolve()
    original, text = read_feeds_text(target)
    before = listed_feeds(target, text) if original is not None else []
    present = find_feed(before, entry.url)
    if present is not None:
        raise AlreadySubscribed(present)
    spec = entry_spec(entry)
    line: int | None = None
    by_hand = _by_hand(entry, _is_json(target))
    try:
        if _is_json(target):
            merged = json_rewrite(text, lambda feeds: feeds.append(json_entry(entry, feeds)))
        else:
            merged, line = yaml_append(text, entry)
    except FlowList as exc:
        raise _refusal("add", feeds_file, exc, _by_hand_in_flow(entry)) from exc
    except UnsafeEdit as exc:
        raise _refusal("add", feeds_file, exc, by_hand) from exc
    replace_checked(
        target,
        merged,
        original,
        action="add",
        display=feeds_file,
        expect=[*before, spec],
        by_hand=by_hand,
    )
    return EditResult(feeds_file, spec, line)


def entry_spec(entry: NewEntry) -> FeedSpec:
    """The feed the loader will read from ``entry`` (ValueError for a bad URL, interval or
    title)."""
    interval = parse_duration(entry.interval) if entry.interval is not None else None
    title = check_storable_text(entry.title).strip() or None if entry.title is not None else None
    return FeedSpec(url=check_http_url(entry.url), interval=interval, title=title)


class AlreadySubscribed(ConfigError):
    def __init__(self, spec: FeedSpec) -> None:
        super().__init__(f"{spec.url} is already in the feeds file")
        self.spec = spec


class NotInFeedsFile(ConfigError):
    """``remove`` of a URL the feeds file does not list; ``listed`` is what it lists (so the
    caller can suggest a close match without reading the file again)."""

    def __init__(self, url: str, feeds_file: Path, listed: list[FeedSpec]) -> None:
        super().__init__(f"remove: {url} is not in the feeds file {feeds_file}")
        self.listed = listed


def remove_feed(feeds_file: Path, url: str) -> EditResult:
    """Remove the entry for ``url``; NotInFeedsFile when it is not there, ConfigError when the
    file is odd."""
    target = feeds_file.resolve()
    original, text = read_feeds_text(target)
    before = load_feeds(target) if original is not None else []
    spec = find_feed(before, url)
    if spec is None:
        raise NotInFeedsFile(url, feeds_file, before)
    line: int | None = None
    key = feed_url_key(spec.url)
    try:
        if _is_json(target):
            merged = json_rewrite(text, lambda feeds: _drop_json(feeds, key))
        else:
            merged, line = yaml_remove(text, spec.url)
    except UnsafeEdit as exc:
        raise _refusal("remove", feeds_file, exc, _remove_by_hand(exc, spec.url, text)) from exc
    expected = [item for item in before if item is not spec]
    replace_checked(
        target,
        merged,
        original,
        action="remove",
        display=feeds_file,
        expect=expected,
        by_hand=f"delete {_entry_of(spec.url, line)}.",
    )
    return EditResult(feeds_file, spec, line)


def _remove_by_hand(refused: UnsafeEdit, url: str, text: str) -> str:
    """What to do instead of an edit refused: where the entry is, read again only now (a
    second reading of a large file is for a refusal, not for every ``remove``)."""
    at = entry_line(text, url)
    if isinstance(refused, FlowList):
        where = "" if at is None else f" (line {at})"
        comma = "with the comma that separates it"
        return f"delete {url}{where} from the [list], {comma}. {_ONE_PER_LINE}"
    if isinstance(refused, AnchorRemoved):
        return (
            f"write the values that {refused.aliases} repeats from its entry into the entries "
            f"holding {refused.aliases}, then delete {_entry_of(url, at)}."
        )
    return f"delete {_entry_of(url, at)}."


def _entry_of(url: str, line: int | None) -> str:
    return f"the entry of {url}" + ("" if line is None else f" (from line {line})")


def _drop_json(feeds: list[object], key: str) -> None:
    for index, item in enumerate(feeds):
        value = item.get("url") if isinstance(item, dict) else item
        if isinstance(value, str) and feed_url_key(value.strip()) == key:
            del feeds[index]
            return


def _is_json(path: Path) -> bool:
    return path.suffix.lower() == ".json"


def listed_feeds(path: Path, text: str) -> list[FeedSpec]:
    """The feeds a file lists, as the loader reads them; none in a file that holds nothing
    yet but blank lines and comments (``touch feeds.yaml``, a header comment), which the
    loader refuses but an edit fills."""
    if not text.strip() or (
        not _is_json(path)
        and all(not line.strip() or line.lstrip().startswith("#") for line in text.splitlines())
    ):
        return []
    return load_feeds(path)


def read_feeds_text(path: Path) -> tuple[bytes | None, str]:
    """The file's bytes (None if missing) and its text without BOM, with ``\\n`` newlines."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, ""
    except OSError:
        load_feeds(path)  # the loader's message names the file and the fix
        raise
    text = data.decode("utf-8-sig", errors="replace").replace("\r\n", "\n")
    if "\n" not in text:  # old Mac files break lines with CR alone: edited as "\n" too
        text = text.replace("\r", "\n")
    return data, text


def _refusal(action: str, path: Path, why: Exception | str | None, by_hand: str) -> ConfigError:
    reason = f" ({why})" if why else ""
    return ConfigError(
        f"{action}: the feeds file {path} cannot be edited safely{reason}, so it was left "
        f"unchanged. Edit it by hand: {by_hand}"
    )


def _by_hand(entry: NewEntry, is_json: bool) -> str:
    if is_json:
        return "add " + json.dumps(json_entry(entry, []), ensure_ascii=False) + ' to "feeds".'
    return "add\n" + "\n".join(entry_lines(entry, Style()))


def _by_hand_in_flow(entry: NewEntry) -> str:
    """The entry as an item of a ``[flow, list]`` (JSON is YAML's flow style, quoting and all)."""
    item = json.dumps(json_entry(entry, []), ensure_ascii=False)
    return f'add {item} to the [list] of "feeds:", after a comma. {_ONE_PER_LINE}'


_ONE_PER_LINE = (
    'Or write the list one entry per line ("  - URL" under "feeds:"), which add and remove '
    "edit themselves."
)


def replace_checked(
    target: Path,
    text: str,
    original: bytes | None,
    *,
    action: str,
    display: Path | None = None,
    expect: Sequence[FeedSpec] | None = None,
    by_hand: str | None = None,
) -> list[FeedSpec]:
    """Write ``text`` next to ``target``, load it (it must list ``expect`` when given), then
    rename it into place, unless ``target`` no longer holds ``original``. Returns its feeds.
    Refused, it says what to do instead (``by_hand``) when given: the user's file is fine,
    the loader's advice for the edited one was no use to them."""
    shown = display or target
    if original is not None:
        if original.startswith(b"\xef\xbb\xbf"):
            text = "\ufeff" + text
        if b"\r\n" in original:
            text = text.replace("\n", "\r\n")
        elif b"\r" in original and b"\n" not in original:
            text = text.replace("\n", "\r")
    folder = target.parent
    folder.mkdir(parents=True, exist_ok=True)
    temp = folder / f".{action}-{secrets.token_hex(8)}{target.suffix}"
    try:
        # "x": created here or not at all, with the mode a new file gets (mkstemp's 0600 left
        # a new feeds file unreadable to a service running as another user)
        with open(temp, "x", encoding="utf-8", newline="") as handle:
            handle.write(text)
        try:
            specs = load_feeds(temp, display=f"{shown} (as edited)")
        except ConfigError as exc:
            message = f"{action}: the edited feeds file would not load, {shown} is left unchanged"
            instead = f" Edit it by hand: {by_hand}" if by_hand else ""
            raise ConfigError(f"{message}: {exc}{instead}") from exc
        if expect is not None and list(expect) != specs:
            why = "the edit would change other entries"
            raise _refusal(action, shown, why, by_hand or "make the change yourself.")
        current = target.read_bytes() if target.exists() else None
        if current != original:
            raise ConfigError(
                f"{action}: {shown} changed while it was being edited; it was left as it is "
                "now. Run the command again."
            )
        if original is not None:
            os.chmod(temp, target.stat().st_mode & 0o777)
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)
    return specs
