"""The embedded database: a local SQLite file behind the Database protocol.

Calls run on the event loop's thread: SQLite answers in microseconds, and a single
connection keeps batches strictly ordered. WAL mode and a busy timeout let several
collector processes share one file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from ..database import Row, SqlValue, Statement
from ..errors import DatabaseError

DRIVER_ERRORS = (sqlite3.Error, ValueError, OverflowError)
"""What the driver raises: its own errors, and for a value it cannot bind, text no UTF-8
holds (half of a surrogate pair: UnicodeEncodeError, a ValueError) or an integer over 64 bits
(OverflowError)."""


BUSY_FIX = (
    "Another process holds a write lock on it: wait for it to finish (another feedcollector "
    "command, or a sqlite3 shell with a transaction open) and run the command again."
)


class SQLiteDatabase:
    """A SQLite file (or ``:memory:``) speaking query/batch/exec."""

    def __init__(self, path: Path | str, *, busy_timeout_s: float = 30.0) -> None:
        self.path = str(path)
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
            )
            self._conn.row_factory = sqlite3.Row
            self._conn.execute("PRAGMA foreign_keys = ON")
            # Statement journals in memory: a multi-row INSERT into a table with foreign keys
            # keeps one (it may fail halfway), and spilled to a temporary file past 64 KiB it
            # cost a quarter of an items batch's CPU. They hold one statement's pages.
            self._conn.execute("PRAGMA temp_store = MEMORY")
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode = WAL")
                self._conn.execute("PRAGMA synchronous = NORMAL")
                self._check_writable()
        except (sqlite3.Error, OSError) as exc:
            if hasattr(self, "_conn"):  # connected, then refused: the file stays closed
                self._conn.close()
            if _busy(exc):  # not a permission problem: a lock held past the busy timeout
                message = (
                    f"database: SQLite file {self.path} is locked ({exc}; waited "
                    f"{busy_timeout_s:g} s). {BUSY_FIX}"
                )
            else:
                message = (
                    f"database: cannot open SQLite file {self.path} for writing: {exc}. The file "
                    "and its folder must be writable by this user, on a file system that is "
                    "neither read-only nor full."
                )
            raise DatabaseError(message) from exc

    def _check_writable(self) -> None:
        """Fail at open, not in the middle of a cycle, when the file cannot be written.

        SQLite opens a file it may not write read-only without a word; rewriting the header's
        ``user_version`` with its own value, rolled back, is the cheapest real write.
        """
        version = int(self._conn.execute("PRAGMA user_version").fetchone()[0])
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            self._conn.execute(f"PRAGMA user_version = {version}")
        finally:
            self._conn.execute("ROLLBACK")

    async def query(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        try:
            cursor = self._conn.execute(sql, tuple(params))
            return [dict(row) for row in cursor.fetchall()]
        except DRIVER_ERRORS as exc:
            raise DatabaseError(_describe(exc, sql, params, self.path)) from exc

    async def batch(self, statements: Sequence[Statement]) -> list[list[Row]]:
        results: list[list[Row]] = []
        statement = Statement("BEGIN IMMEDIATE")
        try:
            self._conn.execute(statement.sql)
            for statement in statements:
                cursor = self._conn.execute(statement.sql, statement.params)
                results.append([dict(row) for row in cursor.fetchall()])
            statement = Statement("COMMIT")
            self._conn.execute(statement.sql)
        except BaseException as exc:
            if self._conn.in_transaction:  # whatever failed: the next batch must begin afresh
                self._conn.execute("ROLLBACK")
            if isinstance(exc, DRIVER_ERRORS):
                raise DatabaseError(
                    _describe(exc, statement.sql, statement.params, self.path)
                ) from exc
            raise
        return results

    async def exec(self, sql: str) -> None:
        try:
            self._conn.executescript(sql)
        except DRIVER_ERRORS as exc:
            raise DatabaseError(_describe(exc, sql, (), self.path)) from exc

    async def close(self) -> None:
        self._conn.close()


def _busy(exc: Exception) -> bool:
    """SQLITE_BUSY: another connection holds the write lock past the busy timeout."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_BUSY


def _describe(exc: Exception, sql: str, params: Sequence[SqlValue], path: str) -> str:
    shown = [p if not isinstance(p, str) or len(p) <= 80 else p[:77] + "..." for p in params]
    fix = f" {BUSY_FIX}" if _busy(exc) else ""
    return (
        f"database: SQLite {path}: {exc} (sql: {' '.join(sql.split())[:300]}; params: {shown})"
        + fix
    )
