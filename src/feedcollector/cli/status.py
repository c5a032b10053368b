"""``feedcollector status``: the health of every feed, worst first, as a table or JSON."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from enum import StrEnum
from typing import Annotated

import typer
from rich import box
from rich.cells import cell_len, set_cell_size
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ..backends import no_database_file, open_database
from ..claims import last_feeds_sync
from ..config import Settings, load_feeds
from ..database import Database
from ..errors import ConfigError
from ..feeds_file import feeds_file_digest
from ..models import FeedSpec
from ..owners import owner_has_stopped
from ..report import counted
from ..safe_text import one_line
from ..schema import migrate_existing
from ..status import FeedStatus, StatusReport, build_status, read_status, select_feeds
from ..timestamps import format_timestamp, parse_timestamp, utc_now
from .app import app, load_command_settings, run_async, say_warning

STATE_STYLES = {"gone": "bold red", "failing": "red", "new": "cyan", "removed": "dim"}


class State(StrEnum):
    gone = "gone"
    failing = "failing"
    new = "new"
    active = "active"
    removed = "removed"


@app.command()
def status(
    ctx: typer.Context,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="One JSON document (keys listed in the README) for scripts."),
    ] = False,
    state: Annotated[
        list[State] | None,
        typer.Option(
            "--state",
            metavar="STATE",
            help="Only feeds in this state: gone, failing, new, active or removed (repeatable); "
            "the totals count all.",
        ),
    ] = None,
    limit: Annotated[
        int | None, typer.Option(min=1, metavar="N", help="Show at most N feeds (worst first).")
    ] = None,
) -> None:
    """Show every feed's health, worst first (gone, failing, new, active, removed), and totals.

    Columns: state, consecutive failures, last successful fetch, next fetch, items, image
    tasks pending/failed, title, URL and the last error (or where the feed moved to).
    """
    settings = load_command_settings(ctx)
    now = utc_now()
    reports: list[StatusReport] = []

    async def main() -> None:
        stamp = format_timestamp(now)
        if no_database_file(settings):
            reports.append(_before_the_first_run(settings, stamp))
            return
        db = open_database(settings)
        try:
            if not await migrate_existing(db):  # an empty D1: nothing collected or created
                reports.append(_before_the_first_run(settings, stamp))
                return
            listed, error = (None, None) if await _synced(db, settings) else _feeds_file(settings)
            report = await read_status(db, listed, generated_at=stamp)
            reports.append(replace(report, feeds_file_error=error))
        finally:
            await db.close()

    run_async(main)
    report = select_feeds(reports[0], [s.value for s in state or ()], limit)
    if as_json:
        typer.echo(json.dumps(report.to_json(), ensure_ascii=False, indent=2))
        return
    _print_table(report, now)


def _before_the_first_run(settings: Settings, stamp: str) -> StatusReport:
    """Every feed of the feeds file ``new``: no collector has opened the database yet."""
    listed, error = _feeds_file(settings)
    report = build_status([], {}, {}, {}, listed, generated_at=stamp)
    return replace(report, feeds_file_error=error)


def _feeds_file(settings: Settings) -> tuple[list[FeedSpec] | None, str | None]:
    """The feeds file's entries, or None and why it cannot be read: status still works (from
    the database) when it is broken."""
    try:
        return load_feeds(settings.feeds_file), None
    except ConfigError as exc:
        say_warning(f"new and removed feeds are not shown: {exc}")
        return None, str(exc)


async def _synced(db: Database, settings: Settings) -> bool:
    """Whether the feeds file is the one the ``feeds`` table last followed: then it holds no
    new feed, and its titles are in the table, so it need not be parsed (4 s for 30k feeds)."""
    digest = feeds_file_digest(settings.feeds_file)
    return digest is not None and digest == (await last_feeds_sync(db)).digest


COLUMNS = (
    "state",
    "fails",
    "last fetched",
    "next fetch",
    "items",
    "images p/f",
    "title",
    "url",
    "last error / hint",
)
RIGHT_ALIGNED = frozenset({"fails", "items", "images p/f"})
SHORT_HEADERS = ("state", "fails", "fetched", "next", "items", "images")
"""The first columns' headers in the stacked table, as narrow as their values."""
TITLE_WIDTH = 40
HINT_WIDTH = 70
UNBOUNDED = 100_000
"""A width no table reaches: measured in it, a table shows its natural width."""
RICH_TABLE_MAX_ROWS = 500
"""Longer tables are laid out by column widths alone (:func:`_print_long_table`): rich's
layout measures and wraps every cell, 9 s for 10,000 feeds, and a table that long is read in
a pager or with grep, where fitting the terminal's width does not help."""


def _print_table(report: StatusReport, now: datetime) -> None:
    stdout = Console(highlight=False)
    console = stdout if stdout.is_terminal else Console(highlight=False, width=1000)
    rows = [_cells(feed, now) for feed in report.feeds]
    styles = [STATE_STYLES.get(feed.state) for feed in report.feeds]
    if len(rows) > RICH_TABLE_MAX_ROWS:
        _print_long_table(console, rows, styles)
    elif rows:
        table = _rich_table(rows, styles, wrap_hints=console.is_terminal)
        unbounded = console.options.update_width(UNBOUNDED)
        if Measurement.get(console, unbounded, table).maximum > console.width:
            table = _stacked_table(rows, styles)
        console.print(table)
    totals = report.totals
    states = ", ".join(f"{count} {name}" for name, count in totals.feeds.items())
    tasks = totals.image_tasks
    console.print(
        f"{counted(totals.feed_count, 'feed')} ({states}); {counted(totals.items, 'item')}; "
        "image tasks: "
        f"{tasks.get('pending', 0)} pending, {tasks.get('success', 0)} stored, "
        f"{tasks.get('failed', 0)} failed"
    )


def _cells(feed: FeedStatus, now: datetime) -> tuple[str, ...]:
    """A feed's row; what feeds and servers wrote is put on one line without controls."""
    return (
        feed.state,
        str(feed.consecutive_failures),
        relative(feed.last_fetched_at, now),
        "-" if feed.next_fetch_at is None else relative(feed.next_fetch_at, now),
        str(feed.items),
        _images_cell(feed, now),
        one_line(feed.title or ""),
        feed.url,
        one_line(_hint(feed, now)),
    )


def _images_cell(feed: FeedStatus, now: datetime) -> str:
    """Pending/failed, and when the first waiting image is tried again (``2/0, next in 58m``)."""
    counts = f"{feed.images_pending}/{feed.images_failed}"
    if feed.images_retry_at is None:
        return counts
    return f"{counts}, next {relative(feed.images_retry_at, now)}"


def _rich_table(
    rows: list[tuple[str, ...]], styles: list[str | None], *, wrap_hints: bool
) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name in COLUMNS[:6]:
        table.add_column(name, justify="right" if name in RIGHT_ALIGNED else "left")
    widest_url = max(len(row[7]) for row in rows)
    table.add_column("title", max_width=TITLE_WIDTH, overflow="ellipsis", no_wrap=True)
    table.add_column("url", min_width=min(widest_url, 60), overflow="fold")
    table.add_column(
        "last error / hint",
        min_width=20,
        max_width=HINT_WIDTH,
        overflow="ellipsis",
        no_wrap=not wrap_hints,  # one line per feed for grep
    )
    for row, style in zip(rows, styles, strict=True):
        # Text, never markup: a title's ``[/]`` is text
        table.add_row(*row[:6], *(Text(cell) for cell in row[6:]), style=style)
    return table


def _stacked_table(rows: list[tuple[str, ...]], styles: list[str | None]) -> Table:
    """The table for a terminal too narrow for one line per feed: a feed's title, URL and
    last error or hint stacked in its last column, wrapped rather than cut. Squeezed into
    one line each, the hints were the column to go (blank lines where they wrapped to
    nothing), and the URLs were cut to their host."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name, short in zip(COLUMNS[:6], SHORT_HEADERS, strict=True):
        table.add_column(short, justify="right" if name in RIGHT_ALIGNED else "left")
    table.add_column("title, url, last error / hint", overflow="fold", ratio=1)
    for row, style in zip(rows, styles, strict=True):
        stacked = Text("\n".join(cell for cell in row[6:] if cell))  # Text, never markup
        table.add_row(*row[:6], stacked, style=style)
    return table


def _print_long_table(
    console: Console, rows: list[tuple[str, ...]], styles: list[str | None]
) -> None:
    """One line per feed, columns as wide as their widest cell (titles and hints cut with an
    ellipsis as in the short table; URLs whole), in the state's colour on a terminal."""
    limits = {"title": TITLE_WIDTH, "last error / hint": HINT_WIDTH}
    widths = [
        min(max(cell_len(name), *(cell_len(row[index]) for row in rows)), limits.get(name, 10**6))
        for index, name in enumerate(COLUMNS)
    ]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            _fitted(cell, width, right=name in RIGHT_ALIGNED)
            for cell, width, name in zip(cells, widths, COLUMNS, strict=True)
        ).rstrip()

    text = Text(line(COLUMNS) + "\n", style="bold")
    text.append(line(tuple("─" * width for width in widths)) + "\n")
    for row, style in zip(rows, styles, strict=True):
        text.append(line(row) + "\n", style=style or "")
    console.print(text, end="", soft_wrap=True)


def _fitted(cell: str, width: int, *, right: bool) -> str:
    if cell_len(cell) > width:
        return set_cell_size(cell, width - 1) + "…"
    padding = " " * (width - cell_len(cell))
    return padding + cell if right else cell + padding


def _hint(feed: FeedStatus, now: datetime) -> str:
    error = " ".join((feed.last_error or "").split())
    if feed.moved_to:
        moved = f"moved to {feed.moved_to}: put that URL in the feeds file"
        return f"{moved}; {error}" if error and feed.state == "failing" else moved
    if feed.state == "gone":
        return "gone for good: remove it from the feeds file"
    if feed.state == "new":
        return "registered by the next cycle"
    if feed.held_by is not None and feed.state != "removed" and owner_has_stopped(feed.held_by):
        held = (
            f"skipped until {relative(feed.held_until, now)}: held by a stopped collector of "
            f"this machine (killed?), {feed.held_by}; the next one started here takes it back"
        )
        return f"{held}; {error}" if error else held
    return error


def relative(stamp: str | None, now: datetime) -> str:
    """``5m ago`` / ``in 2h`` / ``now`` / ``never`` (pure)."""
    if not stamp:
        return "never"
    try:
        moment = parse_timestamp(stamp)
    except ValueError:
        return stamp
    seconds = int((moment - now).total_seconds())
    if seconds == 0:  # a new feed's next fetch: "0s ago" read as a fetch that went wrong
        return "now"
    span = abs(seconds)
    if span < 60:
        text = f"{span}s"
    elif span < 3600:
        text = f"{span // 60}m"
    elif span < 86400:
        text = f"{span // 3600}h{span % 3600 // 60:02d}m"
    else:
        text = f"{span // 86400}d{span % 86400 // 3600}h"
    return f"in {text}" if seconds > 0 else f"{text} ago"
