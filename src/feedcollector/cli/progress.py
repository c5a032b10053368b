"""Progress of long work: rich bars on a terminal, periodic plain log lines otherwise.

Progress always goes to stderr (bars) or the log (lines), never to stdout, so ``--json`` and
``--jsonl`` output stays clean. Plain lines go through the logger, so they follow
``--log-format json`` and ``--log-level`` like every other line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from ..database import Database
from ..report import CycleReport, FeedOutcome, counted
from ..restore import RestoreProgress
from ..retention import CleanupReport

log = logging.getLogger("feedcollector")

LINE_EVERY_S = 10.0
"""Plain mode: at most one line per task this often (plus the first and the last)."""
CYCLE_MIN_FEEDS = 20
"""A cycle shows progress only when it refreshes at least this many feeds (a first fetch)."""


class ProgressDisplay(Protocol):
    def update(self, task: str, done: int, total: int | None, detail: str) -> None:
        """``task`` has done ``done`` of ``total`` (None: unknown); ``detail`` says more."""

    def close(self) -> None:
        """Finish the display (the last state of every task stays visible)."""


def open_display(
    console: Console | None = None,
    *,
    every_s: float = LINE_EVERY_S,
    clock: Callable[[], float] = time.monotonic,
) -> ProgressDisplay:
    """Bars when the console (stderr by default) is a terminal, else periodic lines."""
    console = console or Console(stderr=True)
    if console.is_terminal:
        return BarDisplay(console)
    return LineDisplay(every_s=every_s, clock=clock)


class BarDisplay:
    """rich progress bars, one per task; started on the first update."""

    def __init__(self, console: Console) -> None:
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}", markup=False),  # holds feed URLs
            TimeElapsedColumn(),
            console=console,
        )
        self._tasks: dict[str, TaskID] = {}

    def update(self, task: str, done: int, total: int | None, detail: str) -> None:
        if not self._tasks:
            self._progress.start()
        if task not in self._tasks:
            self._tasks[task] = self._progress.add_task(task, total=total, detail=detail)
        self._progress.update(self._tasks[task], completed=done, total=total, detail=detail)

    def close(self) -> None:
        if self._tasks:
            self._progress.stop()
            self._tasks.clear()


@dataclass
class _LineState:
    last_line_at: float
    shown: str


class LineDisplay:
    """``task: [done/total] detail`` log lines: the first, then one per ``every_s``, the last."""

    def __init__(self, *, every_s: float, clock: Callable[[], float]) -> None:
        self._every_s = every_s
        self._clock = clock
        self._tasks: dict[str, _LineState] = {}
        self._pending: dict[str, str] = {}

    def update(self, task: str, done: int, total: int | None, detail: str) -> None:
        line = progress_line(task, done, total, detail)
        now = self._clock()
        state = self._tasks.get(task)
        finished = total is not None and done >= total
        if state is None or finished or now - state.last_line_at >= self._every_s:
            if state is None or line != state.shown:
                log.info("%s", line)
            self._tasks[task] = _LineState(now, line)
            self._pending.pop(task, None)
        else:
            self._pending[task] = line

    def close(self) -> None:
        for task, line in self._pending.items():
            if line != self._tasks[task].shown:
                log.info("%s", line)
        self._pending.clear()
        self._tasks.clear()  # a display used again (each cycle of `run`) starts anew


def progress_line(task: str, done: int, total: int | None, detail: str) -> str:
    """``fetch: [120/1000] 12%, 3 failed`` (pure, the plain mode's wording)."""
    count = f"[{done}/{total}] {100 * done // total}%" if total else f"[{done}]"
    return f"{task}: {count}" + (f", {detail}" if detail else "")


# --- what the commands report -------------------------------------------------------------


class CycleProgress:
    """A cycle observer showing feeds and images done, for cycles of many feeds."""

    def __init__(self, display: ProgressDisplay, *, min_feeds: int = CYCLE_MIN_FEEDS) -> None:
        self._display = display
        self._min_feeds = min_feeds

    def _shown(self, report: CycleReport) -> bool:
        return report.feeds_due is not None and report.feeds_due >= self._min_feeds

    def feed_done(self, outcome: FeedOutcome, report: CycleReport) -> None:
        if self._shown(report):
            detail = f"{report.failed} failed, {counted(report.new_items, 'new item')}"
            self._display.update("feeds", report.feeds, report.feeds_due, detail)

    def images_done(self, report: CycleReport) -> None:
        if self._shown(report):
            done = report.images_stored + report.images_failed + report.images_retry_later
            detail = (
                f"{report.images_stored} stored, {report.images_retry_later} to retry, "
                f"{report.images_failed} failed"
            )
            self._display.update("images", done, None, detail)

    async def cycle_done(self, report: CycleReport, db: Database) -> None:
        self._display.close()


def restore_callback(display: ProgressDisplay) -> Callable[[RestoreProgress], None]:
    def update(step: RestoreProgress) -> None:
        done = step.feeds_done if step.feed_done else step.feeds_done - 1
        detail = f"{counted(step.items_recovered, 'item')} recovered, {_short(step.feed_url)}"
        display.update("restore", done, step.feeds_total, detail)

    return update


def cleanup_callback(display: ProgressDisplay) -> Callable[[CleanupReport], None]:
    def update(report: CleanupReport) -> None:
        display.update("cleanup: backups", report.backups, None, "old backups")
        if report.items_expiring is not None:
            objects = report.image_objects + report.content_objects
            detail = f"with {objects} image and content objects"
            display.update("cleanup: items", report.items, report.items_expiring, detail)

    return update


def _short(url: str, width: int = 50) -> str:
    return url if len(url) <= width else url[: width - 3] + "..."
