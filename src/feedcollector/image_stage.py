"""The image stage of a cycle: download every pending image task into the object store.

Runs after the cycle's items are stored, so it never delays them. Each attempt counts
(``attempts += 1``); the third failure marks the task ``failed`` (seed section 6), with a
WARNING; an earlier one leaves it pending until its ``retry_at`` (an hour, then a day, or the
server's longer Retry-After; see :data:`.store_images.RETRY_DELAYS`), with an INFO line. A
host that took no connection (no address, refused, connect timeout) is tried once a cycle:
its other images are handed back uncharged, to wait :data:`HOST_REST`, instead of each
waiting out a timeout; so are a host's after it answered 429, or for as long as its
Retry-After asks. An
object-store or database failure is the infrastructure's fault, not the image's: the stage
stops for this cycle and the interrupted tasks are handed back without being charged. A
result write the database refuses (another process holding the SQLite write lock, a network
error on D1) stops nothing: the results are kept and written later; whatever a page ends
with (done, a stop, cancelled) gets one last write, and only when that fails too
are its tasks left to their lease, and the log says until when.
"""

from __future__ import annotations

import asyncio
import logging
import time
from asyncio import FIRST_COMPLETED
from datetime import timedelta

from . import store, store_images
from .collector import Collector
from .config_values import format_duration
from .errors import ImageError, ImageNotTried, StorageError
from .httpbody import Unreachable
from .image_results import Outcome, ResultPage
from .images import ImageRetryLater, download_image
from .models import ImageTask
from .report import CycleReport
from .timestamps import parse_timestamp

log = logging.getLogger("feedcollector")

CANCELLED_PATIENCE_S = 1.0
"""How long a cancelled page (a second Ctrl-C: exit at once) waits for its last write: SQLite
takes it in milliseconds unless another process holds the lock, and D1 is given up by then."""
DEFERRED_AT_LEAST = timedelta(minutes=1)
"""How long an image held back by its host's 429 waits at least: one asking for a few seconds
is asked again by a later cycle, not by a later page of this one (which would claim the task
again as soon as its time came, and refuse it again)."""
HOST_REST = timedelta(minutes=10)
"""How long the images of a host that took no connection (or answered 429 without a
Retry-After) wait, uncharged, before a cycle claims them again: handed back for the very next
cycle, a dead host's backlog was claimed and handed back whole every minute, its CPU growing
with it (5,400 images: 0.45 s a cycle)."""
IMAGE_LEASE = timedelta(minutes=15)
"""How long claimed image tasks stay reserved at least (see :func:`image_lease`)."""


def page_size(concurrency: int) -> int:
    """Tasks claimed a page at a time: 50, or 8 per download slot."""
    return max(50, concurrency * 8)


def image_lease(page: int, concurrency: int, deadline: timedelta) -> timedelta:
    """How long a claimed page of tasks stays reserved: long enough for every task of it to
    use its whole ``[images] deadline``, ``concurrency`` at a time, with as much again to spare
    (at concurrency 1, 50 slow images took 100 min, and another collector took them over)."""
    rounds = -(-page // concurrency)
    return max(IMAGE_LEASE, 2 * rounds * deadline)


async def download_pending_images(
    collector: Collector, report: CycleReport, share: timedelta | None = None
) -> None:
    """Work through the pending tasks (new and retries) page by page, each task once a cycle.

    With a ``share`` (a running service), no page is claimed once the stage ran that long
    and a feed fell due since the cycle began: the next cycle goes on with the rest."""
    began = time.monotonic()
    settings = collector.settings.images
    limit = asyncio.Semaphore(settings.concurrency)
    page = page_size(settings.concurrency)
    lease = image_lease(page, settings.concurrency, settings.deadline)
    cursor = store_images.TaskCursor()
    reserved: dict[str, str] = {}  # object key -> item id, see store_images.image_key
    unreachable: Unreachable = {}
    try:
        while not collector.stopping.is_set():
            now = collector.clock()
            if share is not None and await _feeds_waiting(collector, report, began, share):
                return
            tasks = await store_images.claim_image_tasks(
                collector.db, now=now, lease=lease, limit=page, after=cursor, owner=collector.owner
            )
            if not tasks:
                return
            cursor = store_images.TaskCursor.past(tasks[-1])
            state = ResultPage(collector, tasks, now + lease, report)
            if not await _download_page(state, limit, reserved, unreachable):
                return
    except StorageError as exc:
        log.error(
            "images: %s; could not claim image tasks, image downloads stopped for this cycle "
            "(the next one resumes)",
            exc,
        )


async def _feeds_waiting(
    collector: Collector, report: CycleReport, began: float, share: timedelta
) -> bool:
    ran = timedelta(seconds=time.monotonic() - began)
    if ran < share:
        return False
    due = await store.next_due_at(collector.db, after=report.started)
    if due is None or parse_timestamp(due) > collector.clock():
        return False
    log.info(
        "images: feeds fell due after %s of image downloads: the next cycle fetches them, "
        "then goes on with the images left",
        format_duration(timedelta(seconds=round(ran.total_seconds()))),
    )
    return True


async def _download_page(
    page: ResultPage, limit: asyncio.Semaphore, reserved: dict[str, str], unreachable: Unreachable
) -> bool:
    """Download a page of tasks, recording the results as they come (:mod:`.image_results`).
    A process killed mid-page once left every image it had stored unrecorded, to be
    downloaded again, and its object to no row when the retries then failed.

    However the page ends (done, a storage failure, a stop, cancelled), its results not yet
    written and its tasks not done get one more write (:meth:`.ResultPage.settle`): a refused
    write once left the whole page leased for half an hour, its downloaded images unrecorded.
    Returns whether the stage goes on with the next page."""
    collector = page.collector
    pending = {
        asyncio.ensure_future(_attempt(collector, task, limit, reserved, unreachable)): task
        for task in page.tasks
    }
    patience: float | None = None
    try:
        while pending:
            finished, _ = await asyncio.wait(
                pending, timeout=page.wait_s(), return_when=FIRST_COMPLETED
            )
            for attempt in finished:
                page.take(pending.pop(attempt), attempt.result())
            if page.write_due():
                await page.flush()
    except asyncio.CancelledError:
        patience = CANCELLED_PATIENCE_S
        raise
    finally:
        for attempt, task in pending.items():
            finished_well = attempt.done() and not attempt.cancelled() and not attempt.exception()
            page.take(task, attempt.result() if finished_well else None)
            attempt.cancel()
        settled = await page.settle(patience)
    return settled


async def _attempt(
    collector: Collector,
    task: ImageTask,
    limit: asyncio.Semaphore,
    reserved: dict[str, str],
    unreachable: Unreachable,
) -> Outcome:
    """The task's result; a StorageError to stop the stage; None if not tried because of a
    stop: handed back uncharged, due at once; a moment if not tried because its host took
    no connection or answered 429 this cycle: handed back uncharged until then (its
    Retry-After, else :data:`HOST_REST`)."""
    async with limit:
        if collector.stopping.is_set():
            return None
        try:
            image = await download_image(
                collector.image_http,
                task.original_url,
                limits=collector.image_limits,
                unreachable=unreachable,
            )
        except ImageNotTried as exc:
            log.debug("image %s (item %s): %s", task.original_url, task.item_id, exc)
            return collector.clock() + max(exc.wait or HOST_REST, DEFERRED_AT_LEAST)
        except ImageRetryLater as exc:
            log.debug("image %s (item %s): %s", task.original_url, task.item_id, exc)
            asked = collector.clock() + exc.wait
            return store_images.ImageResult(task.id, None, str(exc), not_before=asked)
        except ImageError as exc:
            log.debug("image %s (item %s): %s", task.original_url, task.item_id, exc)
            return store_images.ImageResult(task.id, None, str(exc))
        except Exception as exc:  # one image never stops the others (nor the cycle)
            log.exception(
                "internal: unexpected %s downloading image %s (item %s); this is a bug in "
                "feedcollector (please report it with this traceback). The attempt counts; "
                "the other images go on.",
                type(exc).__name__,
                task.original_url,
                task.item_id,
            )
            return store_images.ImageResult(task.id, None, f"image: internal: {exc!r}")
        try:
            key = await store_images.image_key(collector.db, task, image.ext, reserved)
            await collector.objects.put(key, image.data, image.content_type)
        except StorageError as exc:
            return exc
        return store_images.ImageResult(task.id, key, None)
