"""Reading what was collected: ``items`` (a table or JSON Lines) and ``item``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Annotated, Any

import typer

from ..config import Settings
from ..database import Database
from ..objectstore import ObjectStore
from ..reading import (
    StoredImage,
    StoredItem,
    Stores,
    items_images,
    iter_items,
    load_content,
    open_stores,
    read_item,
    sanitize_html,
)
from ..report import counted
from ..safe_text import one_line
from ..timestamps import utc_now
from .app import (
    app,
    feeds_named,
    load_command_settings,
    quiet_on_broken_pipe,
    run_async,
    since_option,
    text_argument,
    usage_error,
)

LINE_BREAKS_ESCAPED = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})
"""Line and paragraph separators and NEL, which JSON leaves raw but many line readers split
on (Python's ``splitlines``, JavaScript): escaped, every JSON Lines record is one line."""


@app.command()
def items(
    ctx: typer.Context,
    feed: Annotated[
        str | None,
        typer.Option(
            "--feed",
            metavar="URL",
            help="Only this feed's items (URLs compare as in the feeds file).",
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            metavar="WHEN",
            help="Only items stored since (inclusive): 2026-03-01, …T08:00:00Z or 7d.",
        ),
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, metavar="N", help="At most N items.")] = None,
    after: Annotated[
        str | None,
        typer.Option(
            metavar="ID",
            help="Only items past this one (the last a consumer took) in created_at, id order.",
        ),
    ] = None,
    jsonl: Annotated[
        bool, typer.Option("--jsonl", help="One JSON object per line, content included.")
    ] = False,
    newest_first: Annotated[
        bool, typer.Option("--newest-first", help="Newest first (default: oldest first).")
    ] = False,
) -> None:
    """List stored items (created_at order), as a table or a JSON Lines stream."""
    settings = load_command_settings(ctx)
    feed = None if feed is None else text_argument(feed, "items: --feed")

    async def work(stores: Stores) -> None:
        since_at = since_option(since, utc_now())
        feed_url = None if feed is None else await _stored_feed_url(stores.db, feed)
        listed = iter_items(
            stores.db,
            feed_url=feed_url,
            since=since_at,
            limit=limit,
            newest_first=newest_first,
            after=None if after is None else text_argument(after.strip(), "items: --after"),
        )
        if jsonl:
            await _print_jsonl(stores, listed, settings)
            return
        first = await anext(listed, None)  # an unknown --after is refused before the header
        typer.echo("created_at            id                                title")
        if first is not None:
            _print_row(first)
        async for item in listed:
            _print_row(item)

    quiet_on_broken_pipe(lambda: with_stores(settings, "items", work))


def _print_row(item: StoredItem) -> None:
    title = one_line(item.title or item.guid)
    typer.echo(f"{item.created_at}  {item.id:<32}  {title}  <{item.feed_url}>")


async def _stored_feed_url(db: Database, url: str) -> str:
    """The one feed of the database ``url`` names (see :func:`feeds_named`)."""
    alike = await feeds_named(db, url, "items")
    if len(alike) > 1:
        usage_error(
            f"items: {url} names {len(alike)} feeds of the database: {', '.join(alike)}. "
            "Give one as written."
        )
    return alike[0]


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
    as_json: Annotated[
        bool,
        typer.Option("--json", help="One JSON object, as `items --jsonl` writes the item."),
    ] = False,
) -> None:
    """Show one item: its fields, its images and its HTML."""
    settings = load_command_settings(ctx)
    text_argument(item_id, "item: ID")
    if as_json and (render or sanitize or html_only):
        usage_error(
            "item: --json prints the item as stored (as `items --jsonl` does); --render, "
            "--sanitize and --html print HTML for display: use one or the other"
        )

    async def work(stores: Stores) -> None:
        found = await read_item(
            stores.db, stores.objects, item_id, sanitize=sanitize, command=settings.command
        )
        if found is None:
            usage_error(f"item: no item with id {item_id} (ids are listed by `items`)")
        if as_json:
            document = item_json(found.item, found.content_html, found.images, stores.objects)
            typer.echo(json.dumps(document, ensure_ascii=False, indent=2))
            return
        content = found.content_html or ""
        if render:
            shown = found.rendered_html or ""
        else:
            shown = sanitize_html(content) if sanitize else content
        if not html_only:
            for label, value in item_fields(found.item):
                typer.echo(f"{label + ':':<11} {one_line(value) if value is not None else '-'}")
            for image in found.images:
                where = image.r2_key or "-"
                shown_url = one_line(image.original_url)
                line = f"image {image.position}:    {image.status} {shown_url} {where}"
                typer.echo(line + image_attempts(image))
            typer.echo("")
        typer.echo(shown)

    with_stores(settings, "item", work)


def with_stores(
    settings: Settings, command: str, work: Callable[[Stores], Awaitable[None]]
) -> None:
    """Open the database and object store for reading (refused, exit 2, when no collector
    made the database), run ``work``, close them."""

    async def main() -> None:
        async with open_stores(settings, command=command) as stores:
            await work(stores)

    run_async(main)


def image_attempts(image: StoredImage) -> str:
    """Why an image is not archived (yet): its failed attempts, the last error, when next."""
    if image.status == "success" or not image.attempts:
        return ""
    when = f"; tried again from {image.retry_at}" if image.retry_at else ""
    last = f"; last: {one_line(image.last_error)}" if image.last_error else ""
    return f" ({counted(image.attempts, 'failed attempt')}{when}{last})"


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


JSONL_BATCH = 100
"""Items whose images one query reads for ``items --jsonl``."""


async def _print_jsonl(
    stores: Stores, listed: AsyncIterator[StoredItem], settings: Settings
) -> None:
    """One JSON line per item, its images read a batch of items at a time."""
    batch: list[StoredItem] = []

    async def flush() -> None:
        images = await items_images(stores.db, [item.id for item in batch])
        for item in batch:
            content = await load_content(stores.objects, item, command=settings.command)
            line = item_json(item, content, images.get(item.id, ()), stores.objects)
            typer.echo(json.dumps(line, ensure_ascii=False).translate(LINE_BREAKS_ESCAPED))
        batch.clear()

    async for item in listed:
        batch.append(item)
        if len(batch) == JSONL_BATCH:
            await flush()
    await flush()


def item_json(
    item: StoredItem,
    content_html: str | None,
    images: Sequence[StoredImage],
    objects: ObjectStore,
) -> dict[str, Any]:
    """One line of ``items --jsonl``: the row, the feed's URL, the full stored HTML, and the
    images with their archived keys, so a reader shows the stored copies without asking
    ``item`` for each item."""
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
        "images": [
            {
                "position": image.position,
                "original_url": image.original_url,
                "status": image.status,
                "key": image.r2_key,
                "url": objects.public_url(image.r2_key) if image.r2_key else None,
            }
            for image in images
        ],
    }
