"""Keeping the data in shape: ``cleanup``, ``restore`` and ``backup-db``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from ..collector import Collector
from ..config import load_feeds
from ..dbbackup import backup_sqlite
from ..errors import ConfigError
from ..orphans import OrphanReport, sweep_orphans
from ..report import counted
from ..restore import restore_from_backups
from ..retention import run_cleanup
from ..retention_daily import record_cleanup, take_cleanup
from .app import (
    app,
    guard,
    load_command_settings,
    require_database,
    say_warning,
    since_option,
    text_argument,
    with_collector,
)
from .progress import ProgressDisplay, cleanup_callback, open_display, restore_callback


@app.command()
def cleanup(
    ctx: typer.Context,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Only print what would be deleted (counts, sample keys)."),
    ] = False,
    orphans: Annotated[
        bool,
        typer.Option(
            "--orphans",
            help="Then also delete images and spilled HTML that no row names, once a day old "
            "(objects left by crashes, failed batches, a lost database).",
        ),
    ] = False,
) -> None:
    """Delete old backups, and old items with their images ([retention] settings)."""
    settings = load_command_settings(ctx)
    require_database(settings, "cleanup")

    async def work(collector: Collector) -> None:
        now = collector.clock()
        owner = collector.owner
        display = open_display()
        try:
            if not dry_run:  # refused while a restore or another cleanup runs
                await take_cleanup(collector.db, now=now, owner=owner)
            report = await run_cleanup(
                collector.db,
                collector.objects,
                now=now,
                item_days=settings.retention.item_days,
                backup_days=settings.retention.backup_days,
                dry_run=dry_run,
                progress=cleanup_callback(display),
                owner=None if dry_run else owner,
            )
            if not dry_run:
                await record_cleanup(collector.db, started_at=now, owner=owner)
            swept = None
            if orphans:  # its lease counts from now, not from the start of the retention
                swept = await sweep_orphans(
                    collector.db,
                    collector.objects,
                    now=collector.clock(),
                    owner=owner,
                    dry_run=dry_run,
                    progress=_orphans_callback(display),
                    command=settings.command,
                )
        finally:
            display.close()
        typer.echo(report.summary())
        samples = report.samples()
        if swept is not None and swept.refusal is not None and not dry_run:
            say_warning(swept.summary())  # on stderr, where cron jobs keep what went wrong
        elif swept is not None:
            typer.echo(swept.summary())
            samples.append(("orphaned objects", swept.samples))
        for label, keys in samples if dry_run else ():
            if keys:
                typer.echo(f"  for example, {label}:")
                for key in keys:
                    typer.echo(f"    {key}")

    with_collector(settings, work)


def _orphans_callback(display: ProgressDisplay) -> Callable[[OrphanReport], None]:
    def update(report: OrphanReport) -> None:
        found = report.images + report.content
        display.update("cleanup: orphans", report.objects, None, counted(found, "orphaned object"))

    return update


@app.command()
def restore(
    ctx: typer.Context,
    feed: Annotated[
        str | None,
        typer.Option("--feed", metavar="URL", help="Only this feed (its URL as subscribed)."),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            metavar="WHEN", help="Only backups taken since: 2026-03-01, 2026-03-01T08:00:00Z or 7d."
        ),
    ] = None,
) -> None:
    """Rebuild items from the raw XML backups (idempotent; schedules are left alone)."""
    settings = load_command_settings(ctx)
    specs = guard(lambda: load_feeds(settings.feeds_file))
    restore_arguments = [
        *(["--feed", feed] if feed is not None else []),
        *(["--since", since] if since is not None else []),
    ]

    async def work(collector: Collector) -> None:
        since_at = since_option(since, collector.clock())
        display = open_display()
        try:
            report = await restore_from_backups(
                collector.db,
                collector.objects,
                specs,
                now=collector.clock(),
                owner=collector.owner,
                feed_url=feed,
                since=since_at,
                item_days=settings.retention.item_days,
                progress=restore_callback(display),
            )
        except asyncio.CancelledError:  # Ctrl-C: the items and images replayed so far stay
            display.close()
            again = settings.command("restore", *restore_arguments)
            say_warning(f"restore: stopped before its end; run `{again}` to finish it")
            raise
        finally:
            display.close()
        typer.echo(report.summary())

    with_collector(settings, work)


@app.command("backup-db")
def backup_db(
    ctx: typer.Context,
    target: Annotated[
        Path,
        typer.Argument(metavar="PATH", help="The backup file to write (must not exist yet)."),
    ],
) -> None:
    """Copy the SQLite database safely, also while collectors run (VACUUM INTO, checked).

    Never copy a live database with cp: its -wal file would be missed or torn. On the cloud
    shape (D1) use `wrangler d1 export` instead.
    """
    settings = load_command_settings(ctx)
    text_argument(str(target), "backup-db: PATH")
    if settings.database.backend != "sqlite":
        guard(_refuse_d1)
    size = guard(lambda: backup_sqlite(settings.database.path, target))
    typer.echo(f"backup-db: {settings.database.path} copied to {target} ({size / 2**20:.1f} MiB)")


def _refuse_d1() -> None:
    raise ConfigError(
        "backup-db: the database is D1 (cloud shape): back it up with `wrangler d1 export "
        "<database> --remote --output backup.sql`, or rely on D1 Time Travel (see "
        "docs/deployment.md)."
    )
