"""A wall clock that went back: stored schedules moved back with it.

Every schedule is stored as a time by the wall clock (``next_fetch_at``, leases, Retry-After
deadlines, an image's next try, the daily cleanup's last run). A clock that ran ahead and was
then corrected (a VM resumed, a board up before NTP with a wrong clock, a date set by hand)
left all of them ahead by the size of the step: every feed waited that long, silently. A clock
behind that jumps forward (the usual case) is harmless.

Each machine keeps a mark of its clock in ``collector_state`` (``clock_seen_by:<host>``),
read with the feeds file's digest at the start of every cycle and written at the end of one
when it is :data:`MARK_EVERY` old (a write that fails is only tried again by the next cycle:
the mark is bookkeeping, and a database another process holds locked fails the claims
anyway). When this machine's clock reads more than :data:`STEP_TOLERANCE`
before its mark, the stored times ahead of now move back by the step (leases and
Retry-Afters only where no right clock can have written them), in one batch guarded by the
mark, so two processes of the machine never move them twice. Marks are per machine: a
collector on another machine whose clock is off does not move them. Item dates and
``last_fetched_at`` are history and stay: the next fetch of a feed whose last one is ahead is
dated a second after it (a backup's key never repeats), its schedule from now.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from .database import Database, SqlValue, Statement
from .errors import DatabaseError
from .owners import owner_host
from .timestamps import TIMESTAMP_FORMAT, format_timestamp, parse_timestamp

log = logging.getLogger("feedcollector")

CLOCK_MARK_PREFIX = "clock_seen_by:"
STEP_TOLERANCE = timedelta(minutes=5)
"""A clock this much behind its mark went back (an NTP slew never does that)."""
MARK_EVERY = timedelta(minutes=5)
"""How old the mark may get before a cycle writes it again: a write every few cycles, not
every minute (a D1 request). A step back shorter than this and the tolerance together goes
unseen, and delays the feeds by as much at most."""


def clock_mark_key(owner: str) -> str:
    """The ``collector_state`` key of the clock mark of the machine a collector runs on (its
    ``owner``, see :mod:`.owners`): by host name."""
    return CLOCK_MARK_PREFIX + owner_host(owner)


def went_back(mark: str | None, now: datetime) -> timedelta | None:
    """How far the clock went back since ``mark`` was written, when beyond the tolerance."""
    if mark is None:
        return None
    step = parse_timestamp(mark) - now
    return step if step > STEP_TOLERANCE else None


def mark_is_due(mark: str | None, now: datetime) -> bool:
    """Whether a cycle at ``now`` writes the mark again (none yet, or :data:`MARK_EVERY` old)."""
    return mark is None or parse_timestamp(mark) <= now - MARK_EVERY


def shift_statements(
    key: str,
    mark: str,
    step: timedelta,
    now: datetime,
    *,
    longest_retry_after: timedelta,
    longest_lease: timedelta,
) -> list[Statement]:
    """Move the stored times ahead of ``now`` back by ``step``, then the mark to now; each
    statement only while the mark still reads ``mark`` (pure).

    Schedules move whoever wrote them: a feed or an image another process scheduled by a
    right clock comes one fetch or try early, once. Leases and Retry-Afters move only when
    no right clock can have written them (further ahead than the longest lease or Retry-After,
    and the tolerance): a lease a live process took after the clock came back, moved, let
    another process take its feed from under it."""
    stamp = format_timestamp(now)
    beyond_lease = format_timestamp(now + longest_lease + STEP_TOLERANCE)
    beyond_retry_after = format_timestamp(now + longest_retry_after + STEP_TOLERANCE)
    shifted: list[tuple[str, str, str, tuple[SqlValue, ...]]] = [
        ("feeds", "next_fetch_at", "", ()),
        ("feeds", "retry_after_until", " AND retry_after_until > ?", (beyond_retry_after,)),
        ("feeds", "lease_until", " AND lease_until > ?", (beyond_lease,)),
        ("image_tasks", "retry_at", " AND status = 'pending'", ()),
        (
            "image_tasks",
            "lease_until",
            " AND status = 'pending' AND lease_until > ?",
            (beyond_lease,),
        ),
        ("maintenance", "lease_until", " AND lease_until > ?", (beyond_lease,)),
        ("maintenance", "last_done_at", "", ()),
    ]
    guard = " AND (SELECT value FROM collector_state WHERE key = ?) = ?"
    statements = [
        Statement(
            f"UPDATE {table} SET {column} = strftime('{TIMESTAMP_FORMAT}', {column}, ?) "  # noqa: S608 (fixed names)
            f"WHERE {column} > ?{condition}{guard}",
            (f"-{round(step.total_seconds())} seconds", stamp, *params, key, mark),
        )
        for table, column, condition, params in shifted
    ]
    statements.append(
        Statement(
            "UPDATE collector_state SET value = ?, updated_at = ? WHERE key = ? AND value = ? "
            "RETURNING key",
            (stamp, stamp, key, mark),
        )
    )
    return statements


def mark_statement(key: str, now: datetime) -> Statement:
    """Write this machine's mark: the later of the stored one and ``now``."""
    stamp = format_timestamp(now)
    return Statement(
        "INSERT INTO collector_state (key, value, updated_at) VALUES (?, ?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = MAX(value, excluded.value), "
        "updated_at = excluded.updated_at",
        (key, stamp, stamp),
    )


async def settle_clock(
    db: Database,
    key: str,
    mark: str | None,
    now: datetime,
    *,
    longest_retry_after: timedelta,
    longest_lease: timedelta,
) -> timedelta | None:
    """Compare the clock with its mark (read by the caller) and move the stored times back
    when it went back: the step, or None when it did not or another process did it first."""
    step = went_back(mark, now)
    if step is None or mark is None:
        return None
    statements = shift_statements(
        key,
        mark,
        step,
        now,
        longest_retry_after=longest_retry_after,
        longest_lease=longest_lease,
    )
    answers = await db.batch(statements)
    if not answers[-1]:
        return None
    log.warning(
        "clock: this machine's clock went back by %s (it read %s before, %s now): the stored "
        "schedules ahead of now moved back as much, and the leases and waits no right clock "
        "can have written, so no feed, image or cleanup waits for the lost time",
        step,
        mark,
        format_timestamp(now),
    )
    return step


async def write_mark(db: Database, key: str, now: datetime) -> bool:
    """Write the mark; whether it was written (a failure waits for the next cycle)."""
    try:
        await db.batch([mark_statement(key, now)])
    except DatabaseError as exc:
        log.debug("clock: the clock mark was not written (%s); the next cycle writes it", exc)
        return False
    return True
