"""The feeds file from the command line: ``add``, ``remove``, ``import-opml``, ``export-opml``.

The feeds file stays the single source of truth: these commands edit it (keeping its
comments, order and formatting) and the next cycle registers the change through the normal
feeds-file diff.
"""

from __future__ import annotations

import asyncio
import difflib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..backends import no_database_file, open_database
from ..collector import fetch_limits
from ..config import Settings, load_feeds
from ..config_values import check_http_url, parse_duration
from ..dbbackup import SQLITE_COMPANIONS
from ..discover import Discovery, FoundFeed, discover_feeds
from ..errors import ConfigError, StorageError
from ..feed_urls import feed_url_key
from ..feeds_file import MIN_FEED_INTERVAL
from ..fetch import make_http_client
from ..models import FeedSpec
from ..report import counted
from ..safe_text import one_line
from ..timestamps import utc_now
from .app import (
    app,
    guard,
    load_command_settings,
    run_async,
    say_error,
    say_warning,
    text_argument,
    usage_error,
)

if TYPE_CHECKING:
    from ..feeds_edit import EditResult

TITLE_SHOWN = 100
"""Characters of a feed's own title shown beside its URL (titles are the feeds' words, any
length)."""
NEXT_CYCLE = (
    "The next cycle of `feedcollector run` (or `run --once`) registers the change from the "
    "feeds file"
)


@app.command()
def add(
    ctx: typer.Context,
    url: Annotated[
        str,
        typer.Argument(
            metavar="URL",
            help="A feed URL, or a web page or site whose feeds are discovered "
            "(https:// is assumed when no scheme is given).",
        ),
    ],
    title: Annotated[
        str | None,
        typer.Option(
            "--title",
            metavar="TITLE",
            help="Name of the feed (written as title:, overrides its own).",
        ),
    ] = None,
    interval: Annotated[
        str | None,
        typer.Option(
            "--interval",
            metavar="DURATION",
            help="How often to fetch it, e.g. 15m or 2h (default: learned from its posts, or "
            "[fetch] default_interval with [schedule] adaptive = false).",
        ),
    ] = None,
    pick: Annotated[
        int | None,
        typer.Option(
            "--pick", min=1, metavar="N", help="Add the N-th feed found (see --list), not the 1st."
        ),
    ] = None,
    list_only: Annotated[
        bool,
        typer.Option("--list", help="Only list the feeds found, numbered; change nothing."),
    ] = False,
) -> None:
    """Subscribe to a feed: discover it from a site if needed, check it, add it to the file.

    A page's <link rel="alternate"> feeds are tried first, then the usual paths (/feed, /rss,
    /atom.xml, ...). Each candidate is fetched and parsed like a collected feed. The entry is
    appended to the feeds file in its own style, comments and order kept.
    """
    from ..feeds_edit import AlreadySubscribed, add_feed, find_feed  # on use: the YAML libraries
    from ..feeds_yaml import NewEntry

    settings = load_command_settings(ctx)
    if list_only and (pick is not None or title is not None or interval is not None):
        usage_error(
            "add: --list only lists the feeds found; give --pick, --title and --interval "
            "without it, to add one"
        )
    url = _with_scheme(url)
    entry_interval = _checked_interval(interval)
    try:
        check_http_url(url)
    except ValueError as exc:
        usage_error(f"add: the address {exc}")
    text_argument(title or "", "add: --title")
    specs = _current_feeds(settings)
    present = find_feed(specs, url)
    if present is not None and not list_only:
        _already(url, present.url, settings, options=title is not None or interval is not None)
        return
    found = _discover(settings, url, None if list_only else (pick or 1))
    if list_only:
        _print_list(found, settings.command("add", "--pick", "N", found.url))
        return
    if not found.feeds:
        _nothing_found(found)
    listing = settings.command("add", "--list", url)
    if pick is not None and pick > len(found.feeds):
        usage_error(f"add: only {len(found.feeds)} feeds found at {url}; see `{listing}`")
    chosen = found.feeds[(pick or 1) - 1]
    try:
        result = add_feed(settings.feeds_file, NewEntry(chosen.url, title, entry_interval))
    except AlreadySubscribed as exc:  # the discovered feed is subscribed under another URL
        options = title is not None or interval is not None
        _already(chosen.url, exc.spec.url, settings, options=options)
        return
    except ConfigError as exc:
        usage_error(str(exc))
    where = f" line {result.line}" if result.line else ""
    typer.echo(f"add: {_describe(chosen)}")
    typer.echo(f"     added to {settings.feeds_file}{where}.")
    others = sum(  # those not subscribed yet
        1
        for link in found.announced
        if feed_url_key(link.url) != feed_url_key(chosen.url) and find_feed(specs, link.url) is None
    )
    if chosen.via == "link" and others > 0 and pick is None:
        typer.echo(f"     The page announces {others} more; see them with `{listing}`.")
    fetch_now = settings.command("fetch", chosen.url)
    typer.echo(f"{NEXT_CYCLE} and fetches it; `{fetch_now}` does it now.")


@app.command()
def remove(
    ctx: typer.Context,
    url: Annotated[
        str,
        typer.Argument(
            metavar="URL",
            help="The feed's URL, compared as the feeds file compares them (the same request).",
        ),
    ],
) -> None:
    """Unsubscribe: remove a feed from the feeds file (its items and history are kept)."""
    settings = load_command_settings(ctx)
    result = guard(lambda: _remove_or_suggest(settings.feeds_file, url))
    where = f" (line {result.line})" if result.line else ""
    typer.echo(f"remove: {result.spec.url} removed from {settings.feeds_file}{where}.")
    typer.echo(
        f"{NEXT_CYCLE} and stops fetching it; its items, images and backups are kept "
        f"(`{settings.command('status')}` lists it as removed once it has been collected)."
    )


def _remove_or_suggest(feeds_file: Path, url: str) -> EditResult:
    """:func:`.feeds_edit.remove_feed`, whose error for a URL the file does not list names the
    close ones it does. The file is read once for both (a few tenths of a second at 10k entries)."""
    from ..feeds_edit import NotInFeedsFile, remove_feed  # on use: the YAML libraries

    try:
        return remove_feed(feeds_file, url)
    except NotInFeedsFile as exc:
        listed = [spec.url for spec in exc.listed]
        # URLs of one host share most of their letters: only a near spelling is a suggestion
        close = difflib.get_close_matches(url, listed, n=3, cutoff=0.9)
        hint = f" Did you mean {' or '.join(close)}?" if close else ""
        raise ConfigError(f"{exc}.{hint}") from exc


def _with_scheme(url: str) -> str:
    text = url.strip()
    return text if "://" in text or not text else f"https://{text}"


def _checked_interval(interval: str | None) -> str | None:
    if interval is None:
        return None
    try:
        parse_duration(interval.strip(), shortest=MIN_FEED_INTERVAL)
    except ValueError as exc:
        usage_error(f"add: --interval {exc}")
    return interval.strip()


def _current_feeds(settings: Settings) -> list[FeedSpec]:
    from ..feeds_edit import listed_feeds, read_feeds_text

    original, text = guard(lambda: read_feeds_text(settings.feeds_file))
    return [] if original is None else guard(lambda: listed_feeds(settings.feeds_file, text))


def _already(asked: str, listed: str, settings: Settings, *, options: bool) -> None:
    """Said for a feed the file lists, with its spelling there when ``asked`` is another
    (``/%66eed`` for ``/feed``); with --title or --interval given, where they go."""
    spelled = "" if asked == listed else f" as {listed}"
    typer.echo(f"add: {asked} is already in {settings.feeds_file}{spelled}; nothing changed.")
    if options:
        typer.echo(
            "     To change its title or interval, edit its title: or interval: line there "
            "(add never rewrites an entry)."
        )


def _discover(settings: Settings, url: str, want: int | None) -> Discovery:
    found: list[Discovery] = []

    async def main() -> None:
        async with make_http_client(settings.fetch.user_agent) as client:
            limits = fetch_limits(settings)
            found.append(await discover_feeds(client, url, limits, now=utc_now(), want=want))

    run_async(main)
    return found[0]


def _describe(feed: FoundFeed) -> str:
    title = f'"{one_line(feed.title, TITLE_SHOWN)}"' if feed.title else "untitled"
    return f"{one_line(feed.url)} ({title}, {feed.format}, {counted(feed.items, 'item')})"


def _print_list(found: Discovery, pick_hint: str) -> None:
    if not found.feeds:
        _nothing_found(found)
    for number, feed in enumerate(found.feeds, start=1):
        typer.echo(f"[{number}] {_describe(feed)}")
    for candidate, reason in found.rejected:
        typer.echo(f"    not a usable feed: {candidate}: {reason}", err=True)
    typer.echo(f"Add one with `{pick_hint}`.", err=True)


def _nothing_found(found: Discovery) -> None:
    for candidate, reason in found.rejected:
        typer.echo(f"    not a usable feed: {candidate}: {reason}", err=True)
    announced = "its announced feeds do not work" if found.rejected else "it announces none"
    usage_error(
        f"add: no feed found at {found.url}: it is not a feed itself, {announced}, and none "
        "of the usual paths (/feed, /rss, /atom.xml, /index.xml, ...) answers with one. "
        "Give the feed's own URL."
    )


@app.command("import-opml")
def import_opml_command(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(metavar="FILE", help="OPML exported by another reader.")],
) -> None:
    """Add the subscriptions of an OPML file to the feeds file (comments and order kept)."""
    from ..opml import import_opml  # on use: listparser, the YAML libraries

    settings = load_command_settings(ctx)
    result = guard(lambda: import_opml(file, settings.feeds_file))
    for feed in result.added:
        title = f"  ({one_line(feed.title, TITLE_SHOWN)})" if feed.title else ""
        typer.echo(f"  + {feed.url}{title}")
    for duplicate in result.duplicates:
        typer.echo(f"  = {duplicate.describe()}")
    for reason in result.skipped:
        typer.echo(f"  skipped {reason}", err=True)
    typer.echo(result.summary(settings.feeds_file))


@app.command("export-opml")
def export_opml_command(
    ctx: typer.Context,
    file: Annotated[
        Path | None,
        typer.Argument(metavar="FILE", help="Where to write it (default: standard output)."),
    ] = None,
) -> None:
    """Write the feeds file as OPML 2.0, for other readers."""
    from ..opml import export_opml  # on use: listparser, the YAML libraries

    settings = load_command_settings(ctx)
    own = None if file is None else _collector_file(settings, file)
    if own is not None:
        usage_error(
            f"export-opml: refused to write over {file}: it is feedcollector's {own}. "
            "Name another file (e.g. feeds.opml), or leave the file out to print the OPML."
        )
    specs = guard(lambda: load_feeds(settings.feeds_file))
    document = export_opml(specs, now=utc_now(), titles=_known_titles(settings))
    if file is None:
        sys.stdout.buffer.write(document)
        sys.stdout.buffer.flush()
        return
    try:
        file.write_bytes(document)
    except OSError as exc:
        say_error(f"export-opml: cannot write {file}: {exc.strerror}")
        raise typer.Exit(2) from exc
    typer.echo(f"export-opml: {len(specs)} feeds written to {file}", err=True)


def _collector_file(settings: Settings, file: Path) -> str | None:
    """What ``file`` is to feedcollector, if it is one of its own files: written over with
    OPML, the feeds file (the one source of the subscriptions), the config or the database
    would be lost."""
    own = {"feeds file": settings.feeds_file, "config file": settings.config_path}
    database = settings.database.path
    if settings.database.backend == "sqlite" and database is not None:
        # Its side files too: OPML written into the live write-ahead log (in place) lost the
        # transactions a running collector had not checkpointed yet; one written where
        # none is yet, or where the database is not created yet, is garbage SQLite trips on.
        own["SQLite database"] = database
        for suffix in SQLITE_COMPANIONS:
            own[f"SQLite database's {_COMPANION_NAMES[suffix]}"] = database.with_name(
                database.name + suffix
            )
    for name, path in own.items():
        if path is not None and _same_file(file, path):
            return name
    return None


_COMPANION_NAMES = {
    "-wal": "write-ahead log",
    "-shm": "shared memory index",
    "-journal": "rollback journal",
}
"""What each of :data:`.dbbackup.SQLITE_COMPANIONS` is, as a refusal names it."""


def _same_file(file: Path, path: Path) -> bool:
    """The same file, or, while either is missing, the same place."""
    try:
        return os.path.samefile(file, path)
    except OSError:  # either is missing (or unreadable)
        return file.resolve() == path.resolve()


def _known_titles(settings: Settings) -> dict[str, str]:
    """Channel titles from the database when there is one (names for the outlines)."""
    from ..opml import channel_titles

    if no_database_file(settings):
        return {}

    async def query() -> dict[str, str]:
        db = open_database(settings)
        try:
            return await channel_titles(db)
        finally:
            await db.close()

    try:
        return asyncio.run(query())
    except StorageError as exc:
        say_warning(f"feed titles not available ({exc}); URLs name the feeds")
        return {}
