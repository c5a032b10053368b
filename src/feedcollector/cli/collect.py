"""Collecting: ``run`` (the scheduler, optionally serving metrics) and ``fetch``."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Annotated

import typer

from ..collector import Collector
from ..config import Settings, load_feeds
from ..feed_urls import feed_url_key
from ..pipeline import run_cycle
from ..report import CycleObserver, CycleObservers
from ..service import refuse_storage_down, run_forever, run_once, serve
from .app import (
    app,
    guard,
    load_command_settings,
    raise_open_file_limit,
    require_feeds_file,
    run_async,
    usage_error,
    with_collector,
)
from .progress import CycleProgress, open_display

log = logging.getLogger("feedcollector")


@app.command()
def run(
    ctx: typer.Context,
    once: Annotated[
        bool,
        typer.Option(
            "--once",
            help="Run one cycle (due feeds, then their images and pending image retries, then "
            "the daily cleanup if a day has passed) and exit 0, even if some feeds failed "
            "(1 if storage errors kept it from storing anything).",
        ),
    ] = False,
) -> None:
    """Run the scheduler: fetch due feeds, store items, download images; repeat until stopped.

    With [metrics] listen set, `run` serves Prometheus metrics at http://ADDRESS/metrics
    while it runs (not with --once). A first fetch of many feeds shows its progress.
    """
    settings = load_command_settings(ctx)
    require_feeds_file(settings)
    display = open_display()
    progress = CycleProgress(display)  # a cycle of many feeds (a first fetch) shows it
    try:
        if once:
            _serve(settings, run_once, observer=progress)
        elif settings.metrics.listen is None:
            _serve(settings, run_forever, observer=progress)
        else:
            _serve_with_metrics(settings, progress)
    finally:
        display.close()


def _serve_with_metrics(settings: Settings, progress: CycleProgress) -> None:
    """``run`` serving Prometheus metrics at ``[metrics] listen`` while it runs."""
    from ..metrics import CollectorMetrics, serve_metrics  # on use: off by default

    metrics = CollectorMetrics()
    server = guard(lambda: serve_metrics(settings.metrics.listen or "", metrics))
    log.info("metrics: serving Prometheus metrics at %s", server.url)
    try:
        _serve(settings, run_forever, observer=CycleObservers(metrics, progress))
    finally:
        server.close()


def _serve(
    settings: Settings,
    work: Callable[[Collector], Awaitable[None]],
    *,
    observer: CycleObserver | None = None,
) -> None:
    """``with_collector`` for ``run``: Ctrl-C and SIGTERM stop it cleanly from before its
    database is opened (:func:`.service.serve`), also while migrations run."""
    raise_open_file_limit(settings)
    run_async(lambda: serve(settings, work, observer=observer), signals=False)


@app.command()
def fetch(
    ctx: typer.Context,
    urls: Annotated[
        list[str] | None,
        typer.Argument(metavar="URL", help="Feed URLs from the feeds file to fetch now."),
    ] = None,
    all_feeds: Annotated[
        bool, typer.Option("--all", help="Fetch every feed of the feeds file now.")
    ] = False,
) -> None:
    """Fetch feeds now, regardless of their schedule (then download their images).

    A URL names the feed the feeds file lists as the file compares URLs (by the request they
    make: scheme and host in any case, no default port...), and is fetched as the file writes
    it: the database knows it by that spelling."""
    settings = load_command_settings(ctx)
    require_feeds_file(settings)
    if bool(urls) == all_feeds:
        usage_error("give feed URLs or --all (not both)")
    if urls:
        specs = guard(lambda: load_feeds(settings.feeds_file))
        listed = {feed_url_key(spec.url): spec.url for spec in specs}
        unknown = [url for url in urls if feed_url_key(url) not in listed]
        if unknown:
            usage_error(
                f"not in the feeds file {settings.feeds_file}: {', '.join(unknown)}. "
                "Add them to the file first (it is the source of truth), e.g. with "
                f"`{settings.command('add', 'URL')}`."
            )
        urls = list(dict.fromkeys(listed[feed_url_key(url)] for url in urls))

    async def forced(collector: Collector) -> None:
        refuse_storage_down(await run_cycle(collector, urls=urls or None, force=True))

    display = open_display()
    try:
        with_collector(settings, forced, observer=CycleProgress(display))
    finally:
        display.close()
