"""When the retention cleanup runs: once a day, one collector at a time, never beside a
restore (:mod:`.retention` does the cleaning).

The time of the last cleanup and the lease of the one running live in the ``maintenance``
table (:mod:`.maintenance_leases`), so restarts and several collectors sharing the database
agree on them; ``cleanup`` by hand takes the same lease, due or not.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from . import maintenance_leases as leases
from .database import Database, Statement
from .errors import StorageError
from .held_lease import take
from .timestamps import format_timestamp, parse_timestamp

log = logging.getLogger("feedcollector")

CLEANUP_TASK = leases.CLEANUP
CLEANUP_EVERY = timedelta(days=1)
CLEANUP_LEASE = leases.CLEANUP_LEASE
"""A claimed cleanup that crashed or failed is tried again by anyone after this long; a
running one renews it every minute."""

_RESTORES_WAITED_FOR: set[str] = set()
"""The restores whose wait the daily claim has logged at INFO (then DEBUG, every cycle)."""


@dataclass(frozen=True, slots=True)
class DailyClaim:
    """What asking for the day's cleanup found."""

    taken: bool
    not_due_before: datetime | None = None
    """When the day's cleanup was done already: when the next one is due. A running
    collector need not ask again before then (a cleanup by hand only moves it later, which
    the next claim finds)."""


async def claim_cleanup(
    db: Database,
    *,
    now: datetime,
    owner: str,
    every: timedelta = CLEANUP_EVERY,
    lease: timedelta = CLEANUP_LEASE,
) -> DailyClaim:
    """Take the day's cleanup if it is due and nobody holds it (one winner among collectors),
    nor a restore runs (it waits for it, and is tried again next cycle).

    The time of the last cleanup lives in the ``maintenance`` table, so restarts and several
    collectors sharing the database agree on it. A lease of ``owner``'s own found here is one
    its last cleanup could not let go of: it is let go, its time kept as the wait.
    """
    claimed = await leases.claim(
        db,
        CLEANUP_TASK,
        owner=owner,
        now=now,
        length=lease,
        due_before=now - every,
        wait_out_backoff=True,
    )
    last = claimed.last_done_at
    if last is not None and last > format_timestamp(now - every):
        return DailyClaim(False, parse_timestamp(last) + every)
    for holder in claimed.in_the_way:
        if holder.task != leases.RESTORE:
            continue
        level = logging.DEBUG if holder.owner in _RESTORES_WAITED_FOR else logging.INFO
        _RESTORES_WAITED_FOR.add(holder.owner)
        log.log(
            level,
            "cleanup: the daily cleanup is due but waits, %s (it would delete backups the "
            "restore replays); it is tried again every cycle",
            leases.describe(holder),
        )
    return DailyClaim(claimed.taken)


async def take_cleanup(db: Database, *, now: datetime, owner: str) -> None:
    """Take the cleanup lease for ``cleanup`` by hand, due or not; raise ConfigError naming
    the holder while another cleanup (the daily one of a collector) or a restore runs."""
    await take(db, CLEANUP_TASK, owner=owner, now=now, command="cleanup", length=CLEANUP_LEASE)


async def record_cleanup(db: Database, *, started_at: datetime, owner: str) -> None:
    """Remember when the last cleanup (daily or by hand) started, and let go of ``owner``'s
    lease (never another process's, which took it after ours ran out) or clear the wait
    :func:`.retention.run_cleanup` left when it let go itself.

    A failure raises a StorageError saying that the deletes are done: only the record is
    missing, so the daily cleanup may run again (and find little left)."""
    try:
        await db.batch(
            [
                Statement("INSERT OR IGNORE INTO maintenance (task) VALUES (?)", (CLEANUP_TASK,)),
                Statement(
                    "UPDATE maintenance SET last_done_at = ?, lease_until = CASE WHEN "
                    "lease_owner IS NULL OR lease_owner = ? THEN NULL ELSE lease_until END, "
                    "lease_owner = CASE WHEN lease_owner = ? THEN NULL ELSE lease_owner END "
                    "WHERE task = ?",
                    (format_timestamp(started_at), owner, owner, CLEANUP_TASK),
                ),
            ]
        )
    except StorageError as exc:
        raise StorageError(
            "cleanup: its deletes are done, but recording the cleanup failed, so it does not "
            "count as the day's one and the daily cleanup may run again within the hour "
            f"(finding little left to delete): {exc}"
        ) from exc


async def last_cleanup_at(db: Database) -> str | None:
    rows = await db.query("SELECT last_done_at FROM maintenance WHERE task = ?", (CLEANUP_TASK,))
    return rows[0]["last_done_at"] if rows else None
