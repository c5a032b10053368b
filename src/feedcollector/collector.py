"""The resources one collector process works with, opened once and passed down."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import aiohttp
import httpx

from . import store_schedule
from .backends import open_database, open_object_store
from .backends.d1 import D1Database
from .backends.sqlite import SQLiteDatabase
from .clock_step import STEP_TOLERANCE
from .config import Settings
from .database import Database
from .errors import StorageError
from .fetch import FetchLimits, make_http_client
from .images import ImageLimits, make_image_client
from .objectstore import ObjectStore
from .owners import new_owner
from .politeness import HostGate
from .report import CycleObserver
from .schedule import SchedulePolicy
from .schema import migrate
from .timestamps import utc_now

log = logging.getLogger("feedcollector")

STOP_PATIENCE = timedelta(seconds=10)
"""How long a stopping collector still waits for the database, in all (never longer than
``[database] timeout``): a D1 request or a SQLite batch takes well under a second, and a
service manager's stop should not wait a timeout per write for a Worker that stopped answering
or another process that holds SQLite's write lock."""


def termination_signals() -> list[int]:
    """SIGTERM, and SIGHUP (a closed terminal, an ssh session gone) unless the process was
    started to ignore it (``nohup``): what stops a command as Ctrl-C does."""
    signals: list[int] = [signal.SIGTERM]
    hangup = getattr(signal, "SIGHUP", None)
    if hangup is not None and signal.getsignal(hangup) is signal.SIG_DFL:
        signals.append(hangup)
    return signals


@dataclass
class Collector:
    """Settings, backends and HTTP clients of one collector process."""

    settings: Settings
    db: Database
    objects: ObjectStore
    feed_http: aiohttp.ClientSession
    clock: Callable[[], datetime] = utc_now
    owner: str = field(default_factory=new_owner)
    """Who holds this collector's leases (:mod:`.owners`)."""
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    observer: CycleObserver | None = None
    """Hears every cycle's progress (progress display, metrics); None for nobody."""
    hosts: HostGate = field(init=False)
    """Per-host politeness of this process (lives as long as the collector, across cycles)."""

    fetch_limits: FetchLimits = field(init=False)
    """The ``[fetch]`` limits, built once: every feed asks for them."""
    schedule_policy: SchedulePolicy = field(init=False)
    """The ``[schedule]`` policy, built once: every feed asks for it."""
    cleanup_not_due_before: datetime | None = field(default=None, init=False)
    """When the daily cleanup is next due, as the last claim found it (None: ask each cycle)."""
    warned_of_another_file: bool = field(default=False, init=False)
    """Whether the WARNING that another collector syncs a different feeds file was given."""
    clock_mark: str | None = field(default=None, init=False)
    """This machine's clock mark as the last cycle's start read it (:mod:`.clock_step`)."""
    _wall_clock_seen: tuple[datetime, float] | None = field(default=None, init=False, repr=False)
    """The wall clock and the monotonic clock at :meth:`wall_clock_went_back`'s last call."""
    claims_feeds: bool = field(default=False, init=False)
    """Whether this collector has asked for feeds (so may hold some to hand back at the end):
    a command that only reads must not wait for another process's write lock as it closes."""
    stopped_leases_checked: bool = field(default=False, init=False)
    """Whether the leases of stopped collectors of this machine were taken back (once)."""
    _image_http: httpx.AsyncClient | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.hosts = HostGate(self.settings.schedule.host_gap)
        self.fetch_limits = fetch_limits(self.settings)
        self.schedule_policy = _policy(self.settings)

    def wall_clock_went_back(self, now: datetime) -> bool:
        """Whether the wall clock went back since the last call by more than the tolerance of
        :mod:`.clock_step`, as this process's monotonic clock tells: what it keeps by the wall
        clock is ahead then, whichever process moved the stored times."""
        looked_at = time.monotonic()
        last, self._wall_clock_seen = self._wall_clock_seen, (now, looked_at)
        if last is None:
            return False
        return last[0] + timedelta(seconds=looked_at - last[1]) - now > STEP_TOLERANCE

    def forget_wall_clock_state(self) -> None:
        """The wall clock went back: forget what this process keeps by it (ahead by the
        step), the Retry-After deferrals of hosts and when the daily cleanup is due."""
        self.cleanup_not_due_before = None
        self.hosts.forget_deferrals()

    @property
    def image_http(self) -> httpx.AsyncClient:
        """The image download client, built on first use: a cycle with no image to fetch (most
        steady cycles) does not pay for its TLS setup, about 20 ms of CPU per process."""
        if self._image_http is None:
            self._image_http = make_image_client(
                self.settings.fetch.user_agent,
                allow_private_addresses=self.settings.images.allow_private_addresses,
                max_connections=self.settings.images.concurrency * 2,
            )
        return self._image_http

    @image_http.setter
    def image_http(self, client: httpx.AsyncClient) -> None:
        self._image_http = client

    async def close_image_http(self) -> None:
        """Close the image client if one was built."""
        if self._image_http is not None:
            await self._image_http.aclose()
            self._image_http = None

    def stop_waiting_for_database(self, patience: timedelta = STOP_PATIENCE) -> None:
        """A stop was asked for: bound what it still waits for the database, ``patience`` in
        all (a D1 Worker's answers, :meth:`.D1Database.stop_waiting`; another process's
        SQLite write lock, :meth:`.SQLiteDatabase.stop_waiting`)."""
        _stop_waiting(self.db, patience)

    @property
    def gave_up_on_database(self) -> bool:
        """Whether a stop gave up waiting for the database (its answers lost, leases kept)."""
        return _gave_up(self.db)

    @property
    def page_size(self) -> int:
        """Feeds claimed per round trip: enough to keep every worker busy."""
        return max(20, self.settings.fetch.concurrency * 4)

    @property
    def image_limits(self) -> ImageLimits:
        images = self.settings.images
        return ImageLimits(
            timeout_s=images.timeout.total_seconds(),
            deadline_s=images.deadline.total_seconds(),
            max_bytes=images.max_bytes,
            allow_private_addresses=images.allow_private_addresses,
        )


def _stop_waiting(db: Database, patience: timedelta) -> None:
    if isinstance(db, D1Database | SQLiteDatabase):
        db.stop_waiting(patience.total_seconds())


def _gave_up(db: Database | None) -> bool:
    return isinstance(db, D1Database | SQLiteDatabase) and db.gave_up


class StopRequest:
    """Ctrl-C or SIGTERM heard from before the collector opens (``run`` handles them first):
    ``stopping`` becomes the collector's, and the database's waits are bounded from the
    moment it is open, migrations included, as :meth:`Collector.stop_waiting_for_database`
    bounds them later."""

    def __init__(self) -> None:
        self.stopping = asyncio.Event()
        self.started = False
        """Set once the collector is open and its work began: a stop then lets in-flight
        feeds finish; before, the start-up step at hand."""
        self._patience: timedelta | None = None
        self._db: Database | None = None

    def stop_waiting(self, patience: timedelta) -> None:
        self._patience = patience if self._patience is None else min(patience, self._patience)
        if self._db is not None:
            _stop_waiting(self._db, patience)

    def opened(self, db: Database) -> None:
        self._db = db
        if self._patience is not None:
            _stop_waiting(db, self._patience)

    @property
    def gave_up_on_database(self) -> bool:
        return _gave_up(self._db)


def _policy(settings: Settings) -> SchedulePolicy:
    schedule = settings.schedule
    return SchedulePolicy(
        default_interval=settings.fetch.default_interval,
        adaptive=schedule.adaptive,
        min_interval=schedule.min_interval,
        max_interval=schedule.max_interval,
        jitter=schedule.jitter,
        max_cache_floor=schedule.max_cache_floor,
        max_retry_after=schedule.max_retry_after,
    )


def fetch_limits(settings: Settings) -> FetchLimits:
    """The ``[fetch]`` limits of every feed download (also used by ``add``'s checks)."""
    fetch = settings.fetch
    return FetchLimits(
        timeout_s=fetch.timeout.total_seconds(),
        deadline_s=fetch.deadline.total_seconds(),
        max_body_bytes=fetch.max_body_bytes,
        user_agent=fetch.user_agent,
    )


@asynccontextmanager
async def open_collector(
    settings: Settings,
    *,
    clock: Callable[[], datetime] = utc_now,
    observer: CycleObserver | None = None,
    stop: StopRequest | None = None,
) -> AsyncIterator[Collector]:
    """Open the backends (applying migrations) and HTTP clients; close them all on exit.

    ``stop``: the stop requests of a process that handles signals while this opens."""
    db = open_database(settings)
    try:
        if stop is not None:
            stop.opened(db)
        await migrate(db)
        objects = open_object_store(settings)
        # One connection per fetch worker: a smaller pool held workers back, and their wait
        # for a connection counted against the connect timeout.
        feed_http = make_http_client(
            settings.fetch.user_agent, max_connections=settings.fetch.concurrency
        )
        collector = Collector(settings, db, objects, feed_http, clock=clock, observer=observer)
        if stop is not None:
            collector.stopping = stop.stopping
        try:
            yield collector
        finally:
            await feed_http.close()
            await collector.close_image_http()
            await objects.close()
            await _let_go(collector)
    finally:
        await db.close()


async def _let_go(collector: Collector) -> None:
    """Hand back the feeds this process still holds. A claim whose answer was lost (the
    database took it, the reply never came) otherwise kept its feed from every collector
    until the lease ran out, 15 minutes, and `fetch` blamed a killed process."""
    if not collector.claims_feeds:
        return
    try:
        await store_schedule.release_owned_feeds(collector.db, collector.owner)
    except StorageError as exc:
        log.warning(
            "%s; the feeds this collector holds stay claimed until their leases run out "
            "(15 minutes after their claim, or twice [fetch] deadline), unless a collector "
            "started on this machine takes them back first",
            exc,
        )
