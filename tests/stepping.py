"""How much work SQLite does per query: its virtual machine's steps, counted through a progress
handler. A scale test asserts that a page costs the same in a big table as in a small one,
without measuring time."""

from __future__ import annotations

from collections.abc import Sequence

from feedcollector.backends.sqlite import SQLiteDatabase
from feedcollector.database import CountingDatabase, Row, SqlValue, Statement

STEP = 100
"""The handler runs every STEP virtual-machine instructions."""


class SteppingDatabase(CountingDatabase):
    """Records the steps (in units of :data:`STEP`) of each query and of each batch."""

    def __init__(self, inner: SQLiteDatabase) -> None:
        super().__init__(inner)
        self.steps: list[int] = []
        self.sql: list[str] = []
        inner._conn.set_progress_handler(self._step, STEP)

    def _step(self) -> int:
        if self.steps:
            self.steps[-1] += 1
        return 0

    async def query(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        self.steps.append(0)
        self.sql.append(sql)
        return await super().query(sql, params)

    async def batch(self, statements: Sequence[Statement]) -> list[list[Row]]:
        self.steps.append(0)
        self.sql.append("; ".join(statement.sql for statement in statements))
        return await super().batch(statements)

    def most(self) -> int:
        """The most steps one query or batch took."""
        return max(self.steps, default=0)
