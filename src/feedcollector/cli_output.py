"""How the reading and recovery commands present their results (kept out of ``cli.py``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from .reading import StoredItem
from .restore import ProgressCallback, RestoreProgress


def item_fields(item: StoredItem) -> list[tuple[str, str | None]]:
    return [
        ("id", item.id),
        ("title", item.title),
        ("link", item.link),
        ("guid", item.guid),
        ("feed", item.feed_url),
        ("published", item.pub_date),
        ("stored", item.created_at),
    ]


def item_json(item: StoredItem, content_html: str | None) -> dict[str, Any]:
    """One line of ``items --jsonl``: the row, the feed's URL and the full stored HTML."""
    return {
        "id": item.id,
        "feed_id": item.feed_id,
        "feed_url": item.feed_url,
        "guid": item.guid,
        "link": item.link,
        "title": item.title,
        "pub_date": item.pub_date,
        "created_at": item.created_at,
        "content_html": content_html,
    }


@contextmanager
def restore_progress() -> Iterator[ProgressCallback]:
    """A progress bar on an interactive terminal, else one plain line per finished feed."""
    if not sys.stderr.isatty():

        def line(step: RestoreProgress) -> None:
            if step.feed_done:
                typer.echo(
                    f"restore: [{step.feeds_done}/{step.feeds_total}] {step.feed_url} done, "
                    f"{step.items_recovered} items recovered so far",
                    err=True,
                )

        yield line
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("feeds, {task.fields[items]} items recovered"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task("restore", total=None, items=0)

        def update(step: RestoreProgress) -> None:
            done = step.feeds_done if step.feed_done else step.feeds_done - 1
            url = step.feed_url if len(step.feed_url) <= 50 else step.feed_url[:47] + "..."
            bar.update(
                task,
                total=step.feeds_total,
                completed=done,
                description=url,
                items=step.items_recovered,
            )

        yield update
