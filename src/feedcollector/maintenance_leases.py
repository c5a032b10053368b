"""Maintenance leases: one process at a time per task, and no two tasks at once that clash.

The rows of the ``maintenance`` table (``task``, ``last_done_at``, ``lease_owner``,
``lease_until``) are leases every process sharing the database sees, on SQLite and D1 alike. A
lease is taken in one batch, a transaction (``UPDATE ... WHERE <free> AND NOT EXISTS
<a clashing lease> RETURNING``): of two processes taking clashing leases at once, one wins.

What clashes (:data:`CLASHES`):

- ``restore`` and the orphan sweep (``orphans``): the sweep deletes archived images that no row
  names, and restore names them again (it relinks them). Side by side, the sweep deleted
  what restore was about to link: rows of ``success`` pointing at nothing.
- ``restore`` and the retention ``cleanup``: the cleanup deletes backups older than
  ``backup_days``, which a restore replays (it reads ``item_days`` back), and expires items
  whose images a restore may be linking.
- each task with itself.

The sweep and the cleanup may overlap: neither names an object, each deletes only what no row
(or an expired one) names.

A holder renews its lease every :data:`RENEW_EVERY` while it works (a restore may take hours),
and lets go at the end, also after an error or Ctrl-C; a killed process's lease runs out by
itself. Before each step that deletes or names objects the work asks :meth:`Lease.check`: it
goes on only while its lease is its own for at least one more renewal period, so a process
whose renewals failed (or that was suspended) stops instead of running beside the one that
took the lease after it ran out.

A lease with a time and no owner is a daily cleanup's wait before it is tried again (see
:mod:`.retention`): only the daily claim waits for it; nothing runs. A lease its holder could
not let go of (the database did not answer) can only run out: refusals say it is not renewed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from .collector import owner_has_stopped
from .database import Database, SqlValue, Statement
from .errors import ConfigError, StorageError
from .store import placeholders
from .timestamps import format_timestamp, parse_timestamp

log = logging.getLogger("feedcollector")

RESTORE = "restore"
ORPHANS = "orphans"
CLEANUP = "cleanup"

CLASHES: dict[str, tuple[str, ...]] = {
    RESTORE: (RESTORE, ORPHANS, CLEANUP),
    ORPHANS: (ORPHANS, RESTORE),
    CLEANUP: (CLEANUP, RESTORE),
}
"""Per task, the tasks (itself included) whose live lease keeps it from starting."""

NAMES = {
    RESTORE: "a restore",
    ORPHANS: "an orphan sweep (`cleanup --orphans`)",
    CLEANUP: "a retention cleanup (the daily one of `run`, or `cleanup`)",
}
WHY = {
    frozenset({RESTORE, ORPHANS}): "the sweep deletes archived images that no row names yet, "
    "and the restore links them again",
    frozenset({RESTORE, CLEANUP}): "the cleanup deletes old backups, which the restore "
    "replays, and old items, whose images it may be linking",
}

UNFINISHED_RESTORE = "restore-unfinished"
"""The row of a restore that began (its ``last_done_at``) and has not finished: until one
does, archived images may wait to be linked again, which the orphan sweep would delete."""

LEASE = timedelta(minutes=5)
"""How long a restore's or sweep's lease lasts unrenewed: a killed process's frees soon."""
CLEANUP_LEASE = timedelta(hours=1)
"""How long the cleanup's lease lasts unrenewed: also the wait of a daily cleanup that failed."""
LENGTHS = {RESTORE: LEASE, ORPHANS: LEASE, CLEANUP: CLEANUP_LEASE}
"""Per task, how far ahead its lease is written: ``lease_until`` less this is when it was."""
LONGEST_LEASE = max(LENGTHS.values())
"""No right clock writes a maintenance lease further ahead (:mod:`.clock_step`)."""
RENEW_EVERY = timedelta(minutes=1)
"""How often a holder renews its lease; also the least it must have left to go on."""
IDLE_AFTER = 3 * RENEW_EVERY
"""A lease unrenewed this long is not worked on, as far as anyone can tell."""


class LeaseLost(StorageError):
    """The work's lease ran out unrenewed, or another process holds it now: the work stops
    where a storage failure would stop it (a command exits 1, the daily cleanup is tried
    again later)."""


@dataclass(frozen=True, slots=True)
class Holder:
    """A live lease of another process (or of this one under another owner)."""

    task: str
    owner: str
    until: str
    idle_since: str | None = field(default=None, compare=False)
    """When it was last renewed, if longer ago than :data:`IDLE_AFTER`."""


def _holder(task: str, owner: str, until: str, now: datetime) -> Holder:
    renewed = parse_timestamp(until) - LENGTHS[task]
    idle = format_timestamp(renewed) if now - renewed > IDLE_AFTER else None
    return Holder(task, owner, until, idle)


@dataclass(frozen=True, slots=True)
class Claim:
    taken: bool
    in_the_way: tuple[Holder, ...]
    """The live leases that kept it (none: a daily cleanup that was not due)."""
    last_done_at: str | None


def live(alias: str = "") -> str:
    """The SQL condition of a lease that someone holds (one ``?``: now)."""
    return f"{alias}lease_owner IS NOT NULL AND {alias}lease_until > ?"


async def claim(
    db: Database,
    task: str,
    *,
    owner: str,
    now: datetime,
    length: timedelta,
    due_before: datetime | None = None,
    wait_out_backoff: bool = False,
) -> Claim:
    """Take ``task``'s lease for ``owner`` unless a live lease of it or of a task it clashes
    with is in the way, in one transaction; never raises for a refusal. When only leases of
    stopped processes of this machine were in the way (a cleanup or sweep killed mid-way),
    those are let go and the claim made again: they kept every command waiting up to an
    hour for a process known to be gone.

    ``due_before``: only if the task was last done at or before then (the daily cleanup).
    ``wait_out_backoff``: an ownerless ``lease_until`` (a failed run's wait) holds it too, and
    ``owner``'s own lease becomes one: the daily claim comes between its runs, so that is what
    its last run could not let go of (the database did not answer then)."""
    stamp = format_timestamp(now)
    clashing = CLASHES[task]
    others = [other for other in clashing if other != task]
    free = "lease_until IS NULL OR lease_until <= ?"
    if not wait_out_backoff:
        free = f"lease_owner IS NULL OR {free}"
    params: list[SqlValue] = [owner, format_timestamp(now + length), task, stamp]
    due = ""
    if due_before is not None:
        due = " AND (last_done_at IS NULL OR last_done_at <= ?)"
        params.append(format_timestamp(due_before))
    params += [*others, stamp]
    leftover = "UPDATE maintenance SET lease_owner = NULL WHERE task = ? AND lease_owner = ?"
    statements = [
        Statement("INSERT OR IGNORE INTO maintenance (task) VALUES (?)", (task,)),
        *([Statement(leftover, (task, owner))] if wait_out_backoff else []),
        Statement(
            f"UPDATE maintenance SET lease_owner = ?, lease_until = ? WHERE task = ? "  # noqa: S608 (fixed text)
            f"AND ({free}){due} AND NOT EXISTS (SELECT 1 FROM maintenance o WHERE o.task "
            f"IN ({placeholders(len(others))}) AND {live('o.')}) RETURNING task",
            tuple(params),
        ),
        Statement(
            "SELECT task, last_done_at, lease_owner, lease_until FROM maintenance "  # noqa: S608 (placeholders)
            f"WHERE task IN ({placeholders(len(clashing))}) ORDER BY task",
            clashing,
        ),
    ]
    for first_try in (True, False):
        results = await db.batch(statements)
        taken = bool(results[-2])
        rows = results[-1]
        holders = tuple(
            _holder(row["task"], row["lease_owner"], row["lease_until"], now)
            for row in rows
            if row["lease_owner"] is not None
            and row["lease_until"] is not None
            and row["lease_until"] > stamp
            and not (taken and row["task"] == task)
        )
        gone = holders and all(owner_has_stopped(holder.owner) for holder in holders)
        if taken or not gone or not first_try:
            break
        let_go = "UPDATE maintenance SET lease_owner = NULL, lease_until = NULL WHERE task = ? "
        when = "AND lease_owner = ? AND lease_until = ?"
        await db.batch([Statement(let_go + when, (h.task, h.owner, h.until)) for h in holders])
        for holder in holders:
            log.warning("%s: its lease is let go", describe(holder))
    done = next((row["last_done_at"] for row in rows if row["task"] == task), None)
    return Claim(taken, holders, done)


async def live_leases(db: Database, tasks: Sequence[str], now: datetime) -> list[Holder]:
    """Who holds a lease of ``tasks`` now (without taking anything)."""
    rows = await db.query(
        "SELECT task, lease_owner, lease_until FROM maintenance "  # noqa: S608 (placeholders)
        f"WHERE task IN ({placeholders(len(tasks))}) AND {live()} ORDER BY task",
        (*tasks, format_timestamp(now)),
    )
    return [_holder(row["task"], row["lease_owner"], row["lease_until"], now) for row in rows]


async def restore_began(db: Database, now: datetime) -> bool:
    """Mark a restore as begun; True when this one made the mark (none was left before)."""
    rows = await db.query(
        "INSERT OR IGNORE INTO maintenance (task, last_done_at) VALUES (?, ?) RETURNING task",
        (UNFINISHED_RESTORE, format_timestamp(now)),
    )
    return bool(rows)


async def restore_finished(db: Database) -> None:
    await db.query("DELETE FROM maintenance WHERE task = ?", (UNFINISHED_RESTORE,))


async def unfinished_restore(db: Database) -> str | None:
    """When the restore began that has not finished yet, if one has not."""
    rows = await db.query(
        "SELECT last_done_at FROM maintenance WHERE task = ?", (UNFINISHED_RESTORE,)
    )
    return rows[0]["last_done_at"] if rows else None


def describe(holder: Holder) -> str:
    """Who holds a lease and until when, in words, and whether that process is gone."""
    name = NAMES[holder.task]
    if owner_has_stopped(holder.owner):
        return (
            f"{name} was under way: collector {holder.owner} of this machine holds its lease "
            f"until {holder.until}, but that process has stopped without letting go (killed?)"
        )
    held = f"{name} is under way: collector {holder.owner} holds its lease until {holder.until}"
    if holder.idle_since is None:
        return held
    return (
        f"{held}, though it last renewed it at {holder.idle_since} (one at work does every "
        "minute: its work may have ended without letting go, the database not answering then, "
        "or that process is stuck or gone)"
    )


def refusal(command: str, task: str, holders: Sequence[Holder]) -> str:
    """The error of ``command`` kept from taking ``task``'s lease by ``holders``."""
    if not holders:  # let go between the update and the read: rare, and a retry is enough
        return f"{command}: another process held the {task} lease a moment ago; run it again"
    parts = []
    for holder in holders:
        if holder.task == task:
            why = f"one {task} at a time"
        else:
            why = WHY[frozenset({task, holder.task})]
        parts.append(f"{describe(holder)} ({why})")
    last = max(holder.until for holder in holders)
    if all(owner_has_stopped(holder.owner) for holder in holders):
        what = f"Run {command} again once its lease runs out at {last}"
    else:
        what = (
            f"Wait for it to finish, then run {command} again; if that process is dead, its "
            f"lease runs out at {last} (a process at work renews it every minute)"
        )
    return f"{command}: refused, {'; and '.join(parts)}. {what}"


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

    def check(self) -> None:
        """Raise :class:`LeaseLost` unless the lease is ours for another renewal period."""
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
