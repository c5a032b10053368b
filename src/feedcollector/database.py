"""The Database protocol: the three calls of the D1 Proxy Worker, for every backend.

``query`` runs one statement, ``batch`` runs several as one transaction (all or nothing, one
round trip), ``exec`` runs administrative SQL without parameters. Backends translate their
driver errors into :class:`~feedcollector.errors.DatabaseError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

SqlValue = str | int | float | bytes | None
Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Statement:
    """One SQL statement with its bound parameters (``?`` placeholders)."""

    sql: str
    params: tuple[SqlValue, ...] = ()


def naming_statement(statements: Sequence[Statement]) -> Statement:
    """The statement an error of a whole batch is named by: its write with the most
    parameters (the items of a feed's batch, not the reads and small writes around them),
    else its first statement."""
    writes = [s for s in statements if s.sql.lstrip()[:6].upper() != "SELECT"]
    return max(writes, key=lambda s: len(s.params)) if writes else statements[0]


class Database(Protocol):
    """What every database backend offers (SQLite file, D1 through the Proxy Worker)."""

    async def query(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        """Run one statement; return its rows (``RETURNING`` rows for writes)."""
        ...

    async def batch(self, statements: Sequence[Statement]) -> list[list[Row]]:
        """Run statements in order as one transaction; return each statement's rows."""
        ...

    async def exec(self, sql: str) -> None:
        """Run parameterless administrative SQL (one statement per line on D1)."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


class CountingDatabase:
    """Wraps a Database and counts round trips (for benchmarks and tests)."""

    def __init__(self, inner: Database) -> None:
        self.inner = inner
        self.round_trips = 0
        self.statements = 0

    async def query(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        self.round_trips += 1
        self.statements += 1
        return await self.inner.query(sql, params)

    async def batch(self, statements: Sequence[Statement]) -> list[list[Row]]:
        self.round_trips += 1
        self.statements += len(statements)
        return await self.inner.batch(statements)

    async def exec(self, sql: str) -> None:
        self.round_trips += 1
        await self.inner.exec(sql)

    async def close(self) -> None:
        await self.inner.close()
