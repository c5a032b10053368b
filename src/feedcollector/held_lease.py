"""A maintenance lease this process holds: taken, renewed while the work runs, let go.

A holder renews its lease every :data:`.maintenance_leases.RENEW_EVERY` while it works (a
restore may take hours), and lets go at the end, also after an error or Ctrl-C; a killed
process's lease runs out by itself. Before each step that deletes or names objects the work
awaits :meth:`Lease.checkpoint`, which lets the event loop run (the renewal is a task of its
own) and goes on only while its lease is its own for at least one more renewal period, so a
process whose renewals failed (or that was suspended) stops instead of running beside the
one that took the lease after it ran out. Which leases clash, and how one
is claimed, is :mod:`.maintenance_leases`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta

from .database import Database
from .errors import ConfigError, StorageError
from .maintenance_leases import LEASE, RENEW_EVERY, claim, refusal
from .timestamps import format_timestamp

log = logging.getLogger("feedcollector")


class LeaseLost(StorageError):
    """The work's lease ran out unrenewed, or another process holds it now: the work stops
    where a storage failure would stop it (a command exits 1, the daily cleanup is tried
    again later)."""


def clock_from(now: datetime) -> Callable[[], datetime]:
    """A clock that reads ``now`` when made and moves on with the time since: a lease's
    times count on the caller's clock (the clock seam of the collector, a test's clock)."""
    started = time.monotonic()
    return lambda: now + timedelta(seconds=time.monotonic() - started)


class Lease:
    """A lease this process holds (or believes it holds) as ``owner``."""

    def __init__(
        self,
        db: Database,
        task: str,
        owner: str,
        *,
        length: timedelta,
        clock: Callable[[], datetime],
        command: str,
        until: datetime | None = None,
        every: timedelta = RENEW_EVERY,
        again: str | None = None,
    ) -> None:
        if length <= 2 * every:
            raise ValueError("maintenance: a lease must last more than two renewal periods")
        self.db = db
        self.task = task
        self.owner = owner
        self.length = length
        self.clock = clock
        self.command = command
        self.every = every
        self.again = again or f"Run {command} again"
        """What :class:`LeaseLost` tells to do next: a daily run tries again by itself."""
        self.until = until
        """When the lease runs out as last written (None: not known yet, not to be used)."""
        self.lost: str | None = None
        """Why the lease is no longer ours, once a renewal found so."""

    async def renew(self) -> None:
        """Push the lease ``length`` past now, if it is still ours and has not run out."""
        now = self.clock()
        until = (now + self.length).replace(microsecond=0)
        rows = await self.db.query(
            "UPDATE maintenance SET lease_until = ? WHERE task = ? AND lease_owner = ? "
            "AND lease_until > ? RETURNING task",
            (format_timestamp(until), self.task, self.owner, format_timestamp(now)),
        )
        if rows:
            self.until = until
            return
        left = f"it ran out at {format_timestamp(self.until)}" if self.until else "not taken"
        self.lost = (
            f"its {self.task} lease is no longer its own ({left}; another process may hold it)"
        )

    async def checkpoint(self) -> None:
        """Let the event loop run, then raise :class:`LeaseLost` unless the lease is ours for
        another renewal period.

        On SQLite and a local folder a maintenance loop never waits on anything: without this
        turn of the loop the renewal (a task of its own) never ran, so a restore longer than
        the lease stopped as if the database did not answer, and a Ctrl-C (which cancels the
        main task at its next wait) was heard only when all the work was done."""
        await asyncio.sleep(0)
        if self.lost is None and self.until is not None:
            if self.clock() + self.every < self.until:
                return
            self.lost = (
                f"its {self.task} lease runs out at {format_timestamp(self.until)} and could "
                "not be renewed (the database did not answer, or this process was suspended)"
            )
        raise LeaseLost(
            f"{self.command}: stopped, {self.lost}, so that it does not run beside a process "
            f"that may take the lease. {self.again}"
        )

    async def release(self, *, backoff: bool = False) -> None:
        """Let go of the lease if it is still ours. ``backoff`` keeps its time as the wait of
        a failed daily cleanup. A database that does not answer leaves it to run out."""
        keep = "" if backoff else ", lease_until = NULL"
        try:
            await self.db.query(
                f"UPDATE maintenance SET lease_owner = NULL{keep} "  # noqa: S608 (fixed text)
                "WHERE task = ? AND lease_owner = ?",
                (self.task, self.owner),
            )
        except StorageError as exc:
            until = format_timestamp(self.until) if self.until else "soon"
            log.warning(
                "%s: its %s lease could not be let go (it runs out at %s): %s",
                self.command,
                self.task,
                until,
                exc,
            )


async def checkpoint(lease: Lease | None) -> None:
    """:meth:`Lease.checkpoint`, or for work that holds no lease (a dry run) only the turn of
    the event loop (a Ctrl-C is heard there too)."""
    if lease is not None:
        await lease.checkpoint()
    else:
        await asyncio.sleep(0)


async def _renew_forever(lease: Lease) -> None:
    while lease.lost is None:
        await asyncio.sleep(lease.every.total_seconds())
        try:
            await lease.renew()
        except StorageError as exc:
            log.warning(
                "%s: its %s lease could not be renewed (tried again in %g s): %s",
                lease.command,
                lease.task,
                lease.every.total_seconds(),
                exc,
            )


@asynccontextmanager
async def renewed(lease: Lease) -> AsyncIterator[Lease]:
    """Renew ``lease`` every ``lease.every`` in the background while the body runs."""
    renewer = asyncio.create_task(_renew_forever(lease))
    try:
        yield lease
    finally:
        renewer.cancel()
        await asyncio.wait([renewer])
        if not renewer.cancelled():
            renewer.result()


async def take(
    db: Database,
    task: str,
    *,
    owner: str,
    now: datetime,
    command: str,
    length: timedelta = LEASE,
    clock: Callable[[], datetime] | None = None,
    every: timedelta = RENEW_EVERY,
) -> Lease:
    """Take ``task``'s lease for ``command``, or raise ConfigError naming who is in the way."""
    claimed = await claim(db, task, owner=owner, now=now, length=length)
    if not claimed.taken:
        raise ConfigError(refusal(command, task, claimed.in_the_way))
    until = (now + length).replace(microsecond=0)
    return Lease(
        db,
        task,
        owner,
        length=length,
        clock=clock or clock_from(now),
        command=command,
        until=until,
        every=every,
    )


@asynccontextmanager
async def holding(
    db: Database, task: str, *, owner: str, now: datetime, command: str
) -> AsyncIterator[Lease]:
    """Hold ``task``'s lease while the body runs: taken (or refused with a ConfigError),
    renewed every minute, let go at the end whatever happened."""
    lease = await take(db, task, owner=owner, now=now, command=command)
    try:
        async with renewed(lease):
            yield lease
    finally:
        await lease.release()
