"""Image tasks: ``retry-images`` queues the images that failed for good again (and, asked,
makes those waiting for their next try due, or queues again those whose object is gone)."""

from __future__ import annotations

from typing import Annotated

import typer

from ..collector import Collector
from ..missing_objects import requeue_missing_images
from ..report import counted
from ..store_images import hasten_waiting_images, requeue_failed_images
from .app import (
    app,
    feeds_named,
    load_command_settings,
    require_database,
    text_argument,
    with_collector,
)


@app.command("retry-images")
def retry_images(
    ctx: typer.Context,
    feed: Annotated[
        str | None,
        typer.Option(
            "--feed",
            metavar="URL",
            help="Only this feed's images (URLs compare as in the feeds file).",
        ),
    ] = None,
    waiting: Annotated[
        bool,
        typer.Option(
            "--waiting",
            help="Also the pending images waiting for their next try (after a failed attempt, "
            "or their host's Retry-After): due at once, their attempts kept.",
        ),
    ] = False,
    missing: Annotated[
        bool,
        typer.Option(
            "--missing",
            help="Also the images stored whose object is gone from the object store (deleted "
            "by hand, a lost volume or bucket): the store is listed and each missing one "
            "downloaded again from its source.",
        ),
    ] = False,
) -> None:
    """Queue the images that failed for good (3 attempts) again; the next cycle downloads them.

    For an image host that was down longer than the retries waited (an hour, then a day):
    the tasks start over, pending with no attempt counted. With --waiting, for a host known
    to be back, the images still waiting to be tried again do not wait any longer. With
    --missing, after objects were lost: the stored images whose object the store no longer
    holds are queued again, while their sources may still have them.
    """
    settings = load_command_settings(ctx)
    feed = None if feed is None else text_argument(feed, "retry-images: --feed")
    require_database(settings, "retry-images")

    async def work(collector: Collector) -> None:
        urls = None
        if feed is not None:
            urls = await feeds_named(collector.db, feed, "retry-images")
        now = collector.clock()
        count = await requeue_failed_images(collector.db, now=now, feed_urls=urls)
        of = "" if urls is None else f" of {', '.join(urls)}"
        hastened = ""
        if waiting:
            due = await hasten_waiting_images(collector.db, now=now, feed_urls=urls)
            hastened = f", {counted(due, 'waiting image')} due now"
        if missing:
            found = await requeue_missing_images(
                collector.db, collector.objects, now=now, feed_urls=urls
            )
            examples = f", e.g. {', '.join(found.samples)}" if found.samples else ""
            hastened += (
                f"; of {counted(found.checked, 'stored image')}, {found.missing} missing from "
                f"the object store{examples}: {counted(found.requeued, 'task')} queued again"
            )
        typer.echo(
            f"retry-images: {counted(count, 'failed image')}{of} queued again{hastened}; the next "
            "cycle downloads them"
        )

    with_collector(settings, work)
