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

A process holds a lease it took as a :class:`.held_lease.Lease`, renewed while it works and
let go at the end (see :mod:`.held_lease`).

A lease with a time and no owner is a daily cleanup's wait before it is tried again (see
:mod:`.retention`): only the daily claim waits for it; nothing runs. A lease its holder could
not let go of (the database did not answer) can only run out: refusals say it is not renewed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from .database import Database, SqlValue, Statement
from .owners import owner_has_stopped
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
