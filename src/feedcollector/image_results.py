"""The results of a claimed page of image tasks: held, written in batches, handed back.

A page's downloads finish one by one; their results are written at least every
:data:`RECORD_EVERY_S` seconds (and every :data:`RECORD_EVERY` results), not once the whole
page is done, so a process killed mid-page leaves few stored images unrecorded. A write the
database refuses keeps the results for the next try; the page's end gets one last write that
also hands back the tasks not done (:meth:`ResultPage.settle`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime

from . import store_images
from .collector import Collector
from .errors import StorageError
from .models import ImageTask
from .report import CycleReport
from .timestamps import format_timestamp

log = logging.getLogger("feedcollector")

RECORD_EVERY = 64
"""Results written in one batch at most."""
RECORD_EVERY_S = 5.0
"""Results are written at least this often while a page downloads."""
Outcome = store_images.ImageResult | StorageError | datetime | None
"""What became of one download attempt of the image stage: a result to write, a StorageError
that stops the stage, a moment until which the task is handed back uncharged, or None (handed
back, due again at once)."""


class ResultPage:
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
