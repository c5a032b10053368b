"""The ``feedcollector`` command: thin wrappers over the library.

Exit codes: 0 done (also when some feeds failed: that is recorded, not fatal), 1 the database
or object store is unusable, 2 a config or feeds file problem (the message says how to fix it).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer

from .backends import open_database
from .cli_output import item_fields, item_json, restore_progress
from .collector import Collector, open_collector
from .config import Settings, load_feeds, load_settings
from .errors import ConfigError, StorageError
from .logs import configure_logging
from .opml import channel_titles, export_opml, import_opml
from .pipeline import run_cycle
from .reading import (
    find_feed_id,
    iter_items,
    load_content,
    parse_since,
    read_item,
    sanitize_html,
)
from .restore import restore_from_backups
from .retention import record_cleanup, run_cleanup
from .service import run_forever, run_once
from .timestamps import utc_now

T = TypeVar("T")

app = typer.Typer(
    name="feedcollector",
    help="Collect RSS/Atom feeds into a database and object storage, reliably and fast.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@dataclass(frozen=True)
class GlobalOptions:
    config: Path | None
    log_level: str | None
    log_format: str | None


@app.callback()
def _global_options(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            envvar="FEEDCOLLECTOR_CONFIG",
            help="TOML config file (paths in it are relative to its folder). "
            "Without it: feeds.yaml, collector.db and objects/ in the current folder.",
        ),
    ] = None,
    log_level: Annotated[
        str | None, typer.Option(help="DEBUG, INFO, WARNING or ERROR (default from config: INFO).")
    ] = None,
    log_format: Annotated[
        str | None, typer.Option(help="console (default) or json (one object per line).")
    ] = None,
) -> None:
    ctx.obj = GlobalOptions(config, log_level, log_format)


def _settings(ctx: typer.Context) -> Settings:
    options: GlobalOptions = ctx.obj
    settings = _guard(lambda: load_settings(options.config))
    configure_logging(
        options.log_level or settings.log.level, options.log_format or settings.log.format
    )
    return settings


def _guard(action: Callable[[], T]) -> T:
    """Turn the errors a user can act on into a message and an exit code."""
    try:
        return action()
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except StorageError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


def _with_collector(settings: Settings, work: Callable[[Collector], Awaitable[Any]]) -> None:
    async def main() -> None:
        async with open_collector(settings) as collector:
            await work(collector)

    def run_main() -> None:
        coroutine: Coroutine[Any, Any, None] = main()
        try:
            asyncio.run(coroutine)
        except (KeyboardInterrupt, asyncio.CancelledError):  # a second Ctrl-C cancels the run
            typer.echo("interrupted", err=True)
            raise typer.Exit(130) from None

    _guard(run_main)


@app.command()
def run(
    ctx: typer.Context,
    once: Annotated[
        bool,
        typer.Option(
            "--once",
            help="Run one cycle (due feeds, then their images and pending image retries, then "
            "the daily cleanup if a day has passed) and exit 0, even if some feeds failed.",
        ),
    ] = False,
) -> None:
    """Run the scheduler: fetch due feeds, store items, download images; repeat until stopped."""
    settings = _settings(ctx)
    _with_collector(settings, run_once if once else run_forever)


@app.command()
def fetch(
    ctx: typer.Context,
    urls: Annotated[
        list[str] | None, typer.Argument(help="Feed URLs from the feeds file to fetch now.")
    ] = None,
    all_feeds: Annotated[
        bool, typer.Option("--all", help="Fetch every feed of the feeds file now.")
    ] = False,
) -> None:
    """Fetch feeds now, regardless of their schedule (then download their images)."""
    settings = _settings(ctx)
    if bool(urls) == all_feeds:
        typer.echo("error: give feed URLs or --all (not both)", err=True)
        raise typer.Exit(2)
    if urls:
        known = {spec.url for spec in _guard(lambda: load_feeds(settings.feeds_file))}
        unknown = [url for url in urls if url not in known]
        if unknown:
            typer.echo(
                f"error: not in the feeds file {settings.feeds_file}: {', '.join(unknown)}. "
                "Add them to the file first (it is the source of truth).",
                err=True,
            )
            raise typer.Exit(2)

    async def forced(collector: Collector) -> None:
        await run_cycle(collector, urls=urls or None, force=True)

    _with_collector(settings, forced)


@app.command()
def cleanup(
    ctx: typer.Context,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Only print what would be deleted (counts, sample keys)."),
    ] = False,
) -> None:
    """Delete old backups, and old items with their images ([retention] settings)."""
    settings = _settings(ctx)

    async def work(collector: Collector) -> None:
        now = collector.clock()
        report = await run_cleanup(
            collector.db,
            collector.objects,
            now=now,
            item_days=settings.retention.item_days,
            backup_days=settings.retention.backup_days,
            dry_run=dry_run,
        )
        if not dry_run:
            await record_cleanup(collector.db, started_at=now)
        typer.echo(report.summary())
        for label, keys in report.samples() if dry_run else ():
            if keys:
                typer.echo(f"  for example, {label}:")
                for key in keys:
                    typer.echo(f"    {key}")

    _with_collector(settings, work)


@app.command()
def restore(
    ctx: typer.Context,
    feed: Annotated[
        str | None, typer.Option("--feed", help="Only this feed (its URL as subscribed).")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(help="Only backups taken since: 2026-03-01, 2026-03-01T08:00:00Z or 7d."),
    ] = None,
) -> None:
    """Rebuild items from the raw XML backups (idempotent; schedules are left alone)."""
    settings = _settings(ctx)
    specs = _guard(lambda: load_feeds(settings.feeds_file))

    async def work(collector: Collector) -> None:
        since_at = _since(since, collector.clock())
        with restore_progress() as progress:
            report = await restore_from_backups(
                collector.db,
                collector.objects,
                specs,
                now=collector.clock(),
                feed_url=feed,
                since=since_at,
                progress=progress,
            )
        typer.echo(report.summary())

    _with_collector(settings, work)


@app.command()
def items(
    ctx: typer.Context,
    feed: Annotated[str | None, typer.Option("--feed", help="Only this feed's items.")] = None,
    since: Annotated[
        str | None,
        typer.Option(help="Only items stored since (inclusive): 2026-03-01, …T08:00:00Z or 7d."),
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="At most this many items.")] = None,
    jsonl: Annotated[
        bool, typer.Option("--jsonl", help="One JSON object per line, content included.")
    ] = False,
    newest_first: Annotated[
        bool, typer.Option("--newest-first", help="Newest first (default: oldest first).")
    ] = False,
) -> None:
    """List stored items (created_at order), as a table or a JSON Lines stream."""
    settings = _settings(ctx)

    async def work(collector: Collector) -> None:
        since_at = _since(since, collector.clock())
        if feed is not None and await find_feed_id(collector.db, feed) is None:
            _usage_error(f"items: no feed {feed} in the database (see the feeds file)")
        listed = iter_items(
            collector.db, feed_url=feed, since=since_at, limit=limit, newest_first=newest_first
        )
        if not jsonl:
            typer.echo("created_at            id                                title")
        async for item in listed:
            if jsonl:
                content = await load_content(collector.objects, item)
                typer.echo(json.dumps(item_json(item, content), ensure_ascii=False))
            else:
                title = " ".join((item.title or item.guid).split())
                typer.echo(f"{item.created_at}  {item.id:<32}  {title}  <{item.feed_url}>")

    _quiet_on_broken_pipe(lambda: _with_collector(settings, work))


@app.command()
def item(
    ctx: typer.Context,
    item_id: Annotated[str, typer.Argument(metavar="ID", help="The item's id (see `items`).")],
    render: Annotated[
        bool,
        typer.Option(
            "--render", help="Point archived images at their stored copies (public URLs)."
        ),
    ] = False,
    sanitize: Annotated[
        bool, typer.Option("--sanitize", help="Remove scripts and event handlers (nh3).")
    ] = False,
    html_only: Annotated[
        bool, typer.Option("--html", help="Print only the HTML (to save or open it).")
    ] = False,
) -> None:
    """Show one item: its fields, its images and its HTML."""
    settings = _settings(ctx)

    async def work(collector: Collector) -> None:
        found = await read_item(collector.db, collector.objects, item_id, sanitize=sanitize)
        if found is None:
            _usage_error(f"item: no item with id {item_id} (ids are listed by `items`)")
        content = found.content_html or ""
        if render:
            shown = found.rendered_html or ""
        else:
            shown = sanitize_html(content) if sanitize else content
        if not html_only:
            for label, value in item_fields(found.item):
                typer.echo(f"{label + ':':<11} {value if value is not None else '-'}")
            for image in found.images:
                where = image.r2_key or "-"
                typer.echo(
                    f"image {image.position}:    {image.status} {image.original_url} {where}"
                )
            typer.echo("")
        typer.echo(shown)

    _with_collector(settings, work)


@app.command("import-opml")
def import_opml_command(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="OPML exported by another reader.")],
) -> None:
    """Add the subscriptions of an OPML file to the feeds file (comments and order kept)."""
    settings = _settings(ctx)
    result = _guard(lambda: import_opml(file, settings.feeds_file))
    for feed in result.added:
        typer.echo(f"  + {feed.url}" + (f"  ({feed.title})" if feed.title else ""))
    for reason in result.skipped:
        typer.echo(f"  skipped {reason}", err=True)
    typer.echo(result.summary(settings.feeds_file))


@app.command("export-opml")
def export_opml_command(
    ctx: typer.Context,
    file: Annotated[
        Path | None, typer.Argument(help="Where to write it (default: standard output).")
    ] = None,
) -> None:
    """Write the feeds file as OPML 2.0, for other readers."""
    settings = _settings(ctx)
    specs = _guard(lambda: load_feeds(settings.feeds_file))
    document = export_opml(specs, now=utc_now(), titles=_known_titles(settings))
    if file is None:
        sys.stdout.buffer.write(document)
        sys.stdout.buffer.flush()
        return
    try:
        file.write_bytes(document)
    except OSError as exc:
        typer.echo(f"error: export-opml: cannot write {file}: {exc.strerror}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"export-opml: {len(specs)} feeds written to {file}", err=True)


def _known_titles(settings: Settings) -> dict[str, str]:
    """Channel titles from the database when there is one (names for the outlines)."""
    if settings.database.backend == "sqlite" and not settings.database.path.exists():
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
        typer.echo(f"warning: feed titles not available ({exc}); URLs name the feeds", err=True)
        return {}


def _since(text: str | None, now: datetime) -> datetime | None:
    if text is None:
        return None
    try:
        return parse_since(text, now)
    except ValueError as exc:
        _usage_error(str(exc))


def _usage_error(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _quiet_on_broken_pipe(action: Callable[[], None]) -> None:
    """``feedcollector items | head`` closes the pipe early; that is not an error."""
    try:
        action()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise typer.Exit(0) from None


def main() -> None:
    app(prog_name="feedcollector")


if __name__ == "__main__":
    main()
