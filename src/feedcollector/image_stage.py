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
from datetime import datetime, timedelta

from . import store, store_images
from .collector import Collector
from .config_values import format_duration
from .errors import ImageError, ImageNotTried, StorageError
from .httpbody import Unreachable
from .images import ImageRetryLater, download_image
from .models import ImageTask
from .report import CycleReport
from .timestamps import format_timestamp, parse_timestamp

log = logging.getLogger("feedcollector")

RECORD_EVERY = 64
"""Results written in one batch at most."""
RECORD_EVERY_S = 5.0
"""Results are written at least this often while a page downloads."""
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
Outcome = store_images.ImageResult | StorageError | datetime | None
"""What became of one attempt (see :func:`_attempt`)."""
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
                collector.db, now=now, lease=lease, limit=page, after=cursor
            )
            if not tasks:
                return
            cursor = store_images.TaskCursor.past(tasks[-1])
            state = _Page(collector, tasks, now + lease, report)
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
    page: _Page, limit: asyncio.Semaphore, reserved: dict[str, str], unreachable: Unreachable
) -> bool:
    """Download a page of tasks, recording the results as they come: at least every
    :data:`RECORD_EVERY_S` seconds (and every :data:`RECORD_EVERY` results), not once the whole
    page is done. A process killed mid-page left every image it had stored unrecorded, to
    be downloaded again, and its object to no row when the retries then failed.

    However the page ends (done, a storage failure, a stop, cancelled), its results not yet
    written and its tasks not done get one more write (:meth:`_Page.settle`): a refused write
    once left the whole page leased for half an hour, its downloaded images unrecorded.
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


class _Page:
    """A claimed page of tasks: its results not written yet, its tasks not done, its failures."""

    def __init__(
        self,
        collector: Collector,
        tasks: list[ImageTask],
        leased_until: datetime,
        report: CycleReport,
    ) -> None:
        self.collector = collector
        self.tasks = tasks
        self.by_id = {task.id: task for task in tasks}
        self.leased_until = leased_until
        self.report = report
        self.held: list[store_images.ImageResult] = []
        """Results not written yet (a refused write keeps them: their images are stored)."""
        self.untried: dict[str, datetime | None] = {}
        """Tasks not done, to hand back uncharged: until when their host asked them to wait
        (429 with Retry-After), or None (due again at once)."""
        self.failure: StorageError | None = None
        """What stops the stage after this page (an attempt's object store or database)."""
        self.refused: StorageError | None = None
        """The last write's error, until a write goes through."""
        self.oldest: float | None = None
        """When the oldest result not yet written came (or the last write was refused)."""

    def take(self, task: ImageTask, outcome: Outcome) -> None:
        """Keep an attempt's outcome: a result to write, or a task to hand back uncharged (due
        again at once, or from the moment its host asked for)."""
        if isinstance(outcome, store_images.ImageResult):
            self.held.append(outcome)
            self.oldest = self.oldest or time.monotonic()
            return
        self.untried[task.id] = outcome if isinstance(outcome, datetime) else None
        if isinstance(outcome, StorageError) and self.failure is None:
            self.failure = outcome

    def wait_s(self) -> float | None:
        """How long the page may wait for its downloads before the results are due."""
        if self.oldest is None:
            return None
        return max(0.0, self.oldest + RECORD_EVERY_S - time.monotonic())

    def write_due(self) -> bool:
        """Every :data:`RECORD_EVERY_S`, or :data:`RECORD_EVERY` results unless the last write
        was refused (each new result would wait out the lock again)."""
        if self.oldest is None:
            return False
        if time.monotonic() - self.oldest >= RECORD_EVERY_S:
            return True
        return self.refused is None and len(self.held) >= RECORD_EVERY

    async def flush(self) -> None:
        """Write the results so far. Refused (another process held the SQLite write lock past
        ``[database] timeout``, a network error on D1), they are kept and tried again
        :data:`RECORD_EVERY_S` later, when a lock is usually free, and at the page's end: the
        page goes on (its images were stored; its downloads need no write)."""
        kept = self.refused is not None
        count = len(self.held)
        try:
            await self._write(release=False)
        except StorageError as exc:
            self.refused = exc
            self.oldest = time.monotonic()
            log.warning(
                "images: could not write %d image results (%s); they are kept and tried again "
                "in %g s or at the end of the page",
                len(self.held),
                exc,
                RECORD_EVERY_S,
            )
            return
        self.refused, self.oldest = None, None
        if kept:
            log.info("images: wrote the %d image results kept since a refused write", count)

    async def settle(self, patience: float | None) -> bool:
        """The page's end: one try (a stop waits for no more; cancelled, ``patience`` s at
        most) to write the results still held and hand back every task not done, so that none
        waits out its lease. Says what became of them; returns whether the stage goes on."""
        kept = self.refused is not None
        written, released = len(self.held), len(self.untried)
        stored = sum(result.r2_key is not None for result in self.held)
        try:
            async with asyncio.timeout(patience):
                await self._write(release=True)
        except (StorageError, TimeoutError) as exc:
            if self.held or self.untried:  # else only deleting orphans was cut short
                self._left_leased(exc, patience)
                return False
        if self.failure is not None:
            log.error(
                "images: %s; image downloads stopped for this cycle (the page's last %d results "
                "written, its %d tasks not done handed back for the next one)",
                self.failure,
                written,
                released,
            )
            return False
        if kept:
            log.info(
                "images: wrote the %d image results (%d images stored) kept since a refused "
                "write, and handed back %d tasks not done",
                written,
                stored,
                released,
            )
        return True

    def _left_leased(self, exc: Exception, patience: float | None) -> None:
        """Say which tasks wait for their lease to end, and until when: nothing else can free
        them while the database is out of reach."""
        why = (
            str(exc) if isinstance(exc, StorageError) else f"cancelled, no answer in {patience:g} s"
        )
        undone = [f"write {len(self.held)} image results"] if self.held else []
        undone += [f"hand back {len(self.untried)} tasks not done"] if self.untried else []
        stored = sum(result.r2_key is not None for result in self.held)
        log.error(
            "images: at the end of a page, could not %s (%s); these %d tasks stay leased until "
            "%s, when the first cycle after that takes them again (%d images already stored "
            "are downloaded again then, normally to the same keys)%s; image downloads stopped "
            "for this cycle",
            " nor ".join(undone),
            why,
            len(self.held) + len(self.untried),
            format_timestamp(self.leased_until),
            stored,
            f"; before that: {self.failure}" if self.failure is not None else "",
        )

    async def _write(self, *, release: bool) -> None:
        """Write the held results, :data:`RECORD_EVERY` a batch, the last one handing back the
        tasks not done when ``release``. A refused batch raises; it and those after it stay
        held. Objects whose row is gone are deleted; failing that stops the stage."""
        while True:
            batch = self.held[:RECORD_EVERY]
            last = len(self.held) <= RECORD_EVERY
            handed = self.untried if release and last else {}
            if not batch and not handed:
                return
            recorded = await store_images.record_image_results(
                self.collector.db,
                batch,
                self.collector.clock(),
                release=store_images.HandBack(handed, self.leased_until),
            )
            del self.held[: len(batch)]
            if handed:
                self.untried = {}
            orphans = recorded.orphans
            if batch:
                _count(self.report, self.tasks, [r for r in batch if r.r2_key not in orphans])
                self._log_failures(batch, recorded.failures)
            if orphans:
                try:
                    await _delete_orphans(self.collector, orphans)
                except StorageError as exc:
                    self.failure = self.failure or exc
            if last:
                return

    def _log_failures(
        self, batch: list[store_images.ImageResult], failures: list[store_images.Counted]
    ) -> None:
        """One line per failed attempt the database counted: INFO with when the image is tried
        again, or a WARNING when it failed for good, saying how to queue it again."""
        errors = {result.task_id: result.error for result in batch}
        for counted in failures:
            task = self.by_id[counted.task_id]
            attempt = task.attempts + 1
            if counted.failed:
                error = errors.get(task.id) or ""
                retry = self.collector.settings.command("retry-images", "--feed", task.feed_url)
                first = "Once its server serves it again,"
                if "byte limit" in error:
                    first = "To keep images this big, raise [images] max_bytes in the config, then"
                advice = f"{first} queue it again with `{retry}`"
                log.warning(
                    "images: %s of feed %s failed for good after %d attempts (last: %s); "
                    "readers keep its original URL. %s",
                    task.original_url,
                    task.feed_url,
                    attempt,
                    error,
                    advice,
                )
            else:
                log.info(
                    "images: %s of feed %s, attempt %d of %d failed (%s); tried again from %s",
                    task.original_url,
                    task.feed_url,
                    attempt,
                    store_images.MAX_IMAGE_ATTEMPTS,
                    errors.get(task.id),
                    counted.retry_at,
                )


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
