"""The image stage of a cycle: download every pending image task into the object store.

Runs after the cycle's items are stored, so it never delays them. Each attempt counts
(``attempts += 1``); the third failure marks the task ``failed`` (seed section 6). A host that
took no connection (no address, refused, connect timeout) is tried once a cycle: its other
images are handed back uncharged for the next cycle instead of each waiting out a timeout. An
object-store or database failure is the infrastructure's fault, not the image's: the stage
stops for this cycle and the interrupted tasks are handed back without being charged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from asyncio import FIRST_COMPLETED
from datetime import timedelta

from . import store_images
from .collector import Collector
from .errors import ImageError, ImageNotTried, StorageError
from .httpbody import Unreachable
from .images import download_image
from .models import ImageTask
from .report import CycleReport

log = logging.getLogger("feedcollector")

RECORD_EVERY = 64
"""Results written in one batch at most."""
RECORD_EVERY_S = 5.0
"""Results are written at least this often while a page downloads."""
IMAGE_LEASE = timedelta(minutes=15)
"""How long claimed image tasks stay reserved at least (see :func:`image_lease`)."""


def image_lease(page: int, concurrency: int, deadline: timedelta) -> timedelta:
    """How long a claimed page of tasks stays reserved: long enough for every task of it to
    use its whole ``[images] deadline``, ``concurrency`` at a time, with as much again to spare
    (at concurrency 1, 50 slow images took 100 min, and another collector took them over)."""
    rounds = -(-page // concurrency)
    return max(IMAGE_LEASE, 2 * rounds * deadline)


async def download_pending_images(collector: Collector, report: CycleReport) -> None:
    """Work through the pending tasks (new and retries) page by page, each task once a cycle."""
    settings = collector.settings.images
    limit = asyncio.Semaphore(settings.concurrency)
    page = max(50, settings.concurrency * 8)
    lease = image_lease(page, settings.concurrency, settings.deadline)
    cursor = store_images.TaskCursor()
    reserved: dict[str, str] = {}  # object key -> item id, see store_images.image_key
    unreachable: Unreachable = {}
    try:
        while not collector.stopping.is_set():
            tasks = await store_images.claim_image_tasks(
                collector.db,
                now=collector.clock(),
                lease=lease,
                limit=page,
                after=cursor,
            )
            if not tasks:
                return
            cursor = store_images.TaskCursor(tasks[-1].created_at, tasks[-1].id)
            await _download_page(collector, tasks, limit, reserved, unreachable, report)
    except StorageError as exc:
        log.error("%s; image downloads stopped for this cycle, the next one resumes", exc)


async def _download_page(
    collector: Collector,
    tasks: list[ImageTask],
    limit: asyncio.Semaphore,
    reserved: dict[str, str],
    unreachable: Unreachable,
    report: CycleReport,
) -> None:
    """Download a page of tasks, recording the results as they come: at least every
    :data:`RECORD_EVERY_S` seconds (and every :data:`RECORD_EVERY` results), not once the whole
    page is done. A process killed mid-page left every image it had stored unrecorded, to
    be downloaded again, and its object to no row when the retries then failed."""
    pending = {
        asyncio.ensure_future(_attempt(collector, task, limit, reserved, unreachable)): task
        for task in tasks
    }
    done: list[store_images.ImageResult] = []
    untried: list[str] = []
    failure: StorageError | None = None
    oldest: float | None = None  # when the oldest result not yet written came
    try:
        while pending:
            timeout = (
                None if oldest is None else max(0.0, oldest + RECORD_EVERY_S - time.monotonic())
            )
            finished, _ = await asyncio.wait(pending, timeout=timeout, return_when=FIRST_COMPLETED)
            for attempt in finished:
                task = pending.pop(attempt)
                outcome = attempt.result()
                if isinstance(outcome, store_images.ImageResult):
                    done.append(outcome)
                    oldest = oldest or time.monotonic()
                    continue
                untried.append(task.id)
                if isinstance(outcome, StorageError) and failure is None:
                    failure = outcome
            if oldest is not None and (
                len(done) >= RECORD_EVERY or time.monotonic() - oldest >= RECORD_EVERY_S
            ):
                await _record(collector, tasks, done, report)
                done, oldest = [], None
    finally:
        for attempt in pending:
            attempt.cancel()
    await _record(collector, tasks, done, report)
    await store_images.release_image_tasks(collector.db, untried)
    if failure is not None:
        raise failure


async def _record(
    collector: Collector,
    tasks: list[ImageTask],
    results: list[store_images.ImageResult],
    report: CycleReport,
) -> None:
    """Write these results (one batch), then delete what no row names any more."""
    if not results:
        return
    orphans = await store_images.record_image_results(collector.db, results, collector.clock())
    _count(report, tasks, [r for r in results if r.r2_key not in orphans])
    if orphans:
        await _delete_orphans(collector, orphans)


async def _attempt(
    collector: Collector,
    task: ImageTask,
    limit: asyncio.Semaphore,
    reserved: dict[str, str],
    unreachable: Unreachable,
) -> store_images.ImageResult | StorageError | None:
    """The task's result; a StorageError to stop the stage; None if not tried (shutdown, or
    its host unreachable this cycle): handed back uncharged."""
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
            return None
        except ImageError as exc:
            log.info("image %s (item %s): %s", task.original_url, task.item_id, exc)
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


async def _delete_orphans(collector: Collector, keys: list[str]) -> None:
    """Delete the images stored after their task was deleted (no row names them any more)."""
    await collector.objects.delete_many(keys)
    log.info(
        "images: %d downloaded while retention deleted their item; their objects were "
        "deleted again (%s%s)",
        len(keys),
        ", ".join(keys[:3]),
        ", ..." if len(keys) > 3 else "",
    )


def _count(
    report: CycleReport, tasks: list[ImageTask], results: list[store_images.ImageResult]
) -> None:
    attempts = {task.id: task.attempts for task in tasks}
    for result in results:
        if result.r2_key is not None:
            report.images_stored += 1
        elif attempts[result.task_id] + 1 >= store_images.MAX_IMAGE_ATTEMPTS:
            report.images_failed += 1
        else:
            report.images_retry_later += 1
    report.images_counted()
