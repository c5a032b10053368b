"""The cycle's storage circuit breaker: a few feeds in a row aborted by storage errors stop the
cycle from starting more.

A full disk, a revoked key, a missing bucket or a database refusing writes aborts every feed
alike. Without the breaker, each due feed of the cycle was still downloaded from its source
and logged an ERROR: with a thousand feeds, a thousand downloads from other people's servers
a minute, none of which could be stored. The pipeline tells :class:`StorageBreaker` of each
finished feed in order of completion; each cycle has a breaker of its own, so the next one
probes storage again with up to :data:`STORAGE_TRIP_AFTER` feeds.
"""

from __future__ import annotations

import logging

from .report import CycleReport, FeedOutcome

log = logging.getLogger("feedcollector")

STORAGE_TRIP_AFTER = 3
"""Storage aborts in a row that stop the cycle. One or two can be bad luck (a write that timed
out, a lock held a moment); three with no write going through between them is storage down.
It is also what each cycle of an outage costs: up to this many downloads and ERROR lines (plus
the feeds already in flight), and what it takes to notice that storage is back."""

WROTE_ITS_ROW = frozenset({"stored", "failed", "gone", "deferred"})
"""Outcomes whose feed row was written during the refresh itself: storage took a write, so
the aborts before them were not an outage. A feed failed by its source (or refused by the
database as too large, D1) has its failure written; a stored one its items, backup and row.
A 304 or a 200 with the body stored last time neither counts nor resets: its row waits for the
cycle's batch, so it shows nothing about storage, and in a full disk's steady state, where most
feeds answer 304, it would keep the breaker from ever tripping while every batch failed."""


class StorageBreaker:
    """Counts storage aborts in order of completion; trips once per cycle at the threshold."""

    def __init__(self, trip_after: int = STORAGE_TRIP_AFTER) -> None:
        self.trip_after = trip_after
        self.in_a_row = 0
        self.last_error: str | None = None
        """The last storage abort's error, quoted when the breaker trips."""
        self.tripped = False

    def record(self, outcome: FeedOutcome) -> bool:
        """Count a finished feed; True only for the one that trips the breaker."""
        if outcome.state == "aborted":
            self.in_a_row += 1
            self.last_error = outcome.error
        elif outcome.state in WROTE_ITS_ROW:
            self.in_a_row = 0
        if self.tripped or self.in_a_row < self.trip_after:
            return False
        self.tripped = True
        return True

    def count_left(self, report: CycleReport, left: int) -> None:
        """If tripped, count the ``left`` feeds in the report and say so in one ERROR line (the
        per-feed lines said why each aborted one stopped; this says why the others waited)."""
        if not self.tripped:
            return
        report.left, report.storage_failing = left, self.last_error
        log.error(
            "storage: failing, so this cycle starts no more feeds: %d feeds in a row were "
            "aborted by storage errors (the last: %s); %d claimed feeds were not requested and "
            "are left as they were for the next cycle, which tries storage again",
            self.trip_after,
            self.last_error,
            left,
        )
