"""The embedded database: a local SQLite file behind the Database protocol.

Calls run on the event loop's thread: SQLite answers in microseconds, and a thread hop per
round trip would cost more than most of them. WAL mode lets several collector processes share
one file; while another process holds the write lock, a statement is tried again after an
``asyncio.sleep`` instead of in SQLite's own busy wait, which would freeze the loop (every
fetch in flight would miss its deadline, a stop signal would wait) for up to
``[database] timeout``.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from ..database import Row, SqlValue, Statement, naming_statement
from ..errors import DatabaseError

DRIVER_ERRORS = (sqlite3.Error, ValueError, OverflowError)
"""What the driver raises: its own errors, and for a value it cannot bind, text no UTF-8
holds (half of a surrogate pair: UnicodeEncodeError, a ValueError) or an integer over 64 bits
(OverflowError)."""


BUSY_FIX = (
    "Another process holds a write lock on it (another feedcollector command, or a sqlite3 "
    "shell with a transaction open): let it finish. A running collector tries again in its "
    "next cycle; a command can be run again."
)
FIRST_BUSY_PAUSE_S = 0.001
LONGEST_BUSY_PAUSE_S = 0.05
"""Pauses between tries while another process holds the write lock double from the first to
the longest: its batches take milliseconds, a shell's transaction may take minutes."""

WAL_EMPTYING_PATIENCE_MS = 5000
"""How long closing a replaced file waits for the old file's readers to let its log go."""

T = TypeVar("T")
log = logging.getLogger("feedcollector")


class SQLiteDatabase:
    """A SQLite file (or ``:memory:``) speaking query/batch/exec."""

    def __init__(self, path: Path | str, *, busy_timeout_s: float = 30.0) -> None:
        self.path = str(path)
        self.busy_timeout_s = busy_timeout_s
        self._stop_by: float | None = None
        """Once stopping: when every wait for the write lock ends (``time.monotonic``)."""
        self._waited_s = 0.0
        """How long the last wait for the write lock lasted, for its error message."""
        self.gave_up = False
        """Whether a stop cut a wait for the write lock short (what it waited for is undone)."""
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
            )
            self._conn.row_factory = sqlite3.Row
            self._opened = file_identity(self.path)
            self._conn.execute("PRAGMA foreign_keys = ON")
            # Statement journals in memory: a multi-row INSERT into a table with foreign keys
            # keeps one (it may fail halfway), and spilled to a temporary file past 64 KiB it
            # cost a quarter of an items batch's CPU. They hold one statement's pages.
            self._conn.execute("PRAGMA temp_store = MEMORY")
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode = WAL")
                self._conn.execute("PRAGMA synchronous = NORMAL")
            # opening may wait in SQLite (nothing runs yet); from now on the loop waits
            self._conn.execute("PRAGMA busy_timeout = 0")
            if self.path != ":memory:":
                self._check_writable()
        except (sqlite3.Error, OSError) as exc:
            if hasattr(self, "_conn"):  # connected, then refused: the file stays closed
                self._conn.close()
            if _busy(exc):  # not a permission problem: a lock held past the busy timeout
                message = (
                    f"database: SQLite file {self.path} is locked ({exc}; waited "
                    f"{busy_timeout_s:g} s). {BUSY_FIX}"
                )
            elif Path(self.path).is_dir():
                message = (
                    f"database: {self.path} is a folder, not a database file; point "
                    "[database] path at a file (it is created on first use)."
                )
            elif getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_NOTADB:
                message = (
                    f"database: {self.path} is not an SQLite database ({exc}: another kind of "
                    "file, or a damaged database); nothing was written to it. Point [database] "
                    "path at another file (a damaged database: put back a `backup-db` copy)."
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
        ``user_version`` with its own value, rolled back, is the cheapest real write. While
        another process holds the write lock, that process shows the file system takes
        writes, and permissions are checked instead: waiting for the lock held up commands that
        only read (``status``), which WAL lets read beside a writer.
        """
        version = int(self._conn.execute("PRAGMA user_version").fetchone()[0])
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if not _busy(exc):
                raise
            self._check_permissions()
            return
        try:
            self._conn.execute(f"PRAGMA user_version = {version}")
        finally:
            self._conn.execute("ROLLBACK")

    def _check_permissions(self) -> None:
        """The database, its WAL companions and its folder writable by this user."""
        database = Path(self.path)
        companions = [database.with_name(database.name + end) for end in ("-wal", "-shm")]
        for path in [database, database.parent, *companions]:
            if path.exists() and not os.access(path, os.W_OK):
                raise PermissionError(errno.EACCES, "not writable by this user", str(path))

    async def query(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        def attempt() -> list[Row]:
            cursor = self._conn.execute(sql, tuple(params))
            return [dict(row) for row in cursor.fetchall()]

        try:
            return await self._when_unlocked(attempt)
        except DRIVER_ERRORS as exc:
            raise DatabaseError(self._describe(exc, sql, params)) from exc

    async def batch(self, statements: Sequence[Statement]) -> list[list[Row]]:
        """One transaction; it takes the write lock at once unless every statement is a
        SELECT (a batch of lookups reads beside a writer, as WAL allows)."""
        begin = Statement("BEGIN" if all(map(_reads_only, statements)) else "BEGIN IMMEDIATE")
        statement = begin

        def attempt() -> list[list[Row]]:
            nonlocal statement
            results: list[list[Row]] = []
            statement = begin
            try:
                self._conn.execute(statement.sql)
                for statement in statements:
                    cursor = self._conn.execute(statement.sql, statement.params)
                    results.append([dict(row) for row in cursor.fetchall()])
                statement = Statement("COMMIT")
                self._conn.execute(statement.sql)
            except BaseException:
                if self._conn.in_transaction:  # whatever failed: the next try begins afresh
                    self._conn.execute("ROLLBACK")
                raise
            return results

        try:
            return await self._when_unlocked(attempt)
        except DRIVER_ERRORS as exc:
            if statement is begin and statements:  # name what could not begin, not BEGIN
                statement = naming_statement(statements)
            raise DatabaseError(self._describe(exc, statement.sql, statement.params)) from exc

    async def exec(self, sql: str) -> None:
        """Administrative SQL, which the collector itself never sends: a script may have run
        halfway when it meets the lock, so it cannot be tried again; SQLite waits instead."""
        self._conn.execute(f"PRAGMA busy_timeout = {round(self.busy_timeout_s * 1000)}")
        try:
            self._conn.executescript(sql)
        except DRIVER_ERRORS as exc:
            raise DatabaseError(self._describe(exc, sql, ())) from exc
        finally:
            self._conn.execute("PRAGMA busy_timeout = 0")

    def stop_waiting(self, patience_s: float) -> None:
        """The collector is stopping: waits for another process's write lock end
        ``patience_s`` from now at the latest, however long ``[database] timeout`` is (a stop
        waited a whole timeout for each of its last writes). What such a write would have done
        is left undone: the feed is fetched again next time, the leases expire by themselves."""
        stop_by = time.monotonic() + max(patience_s, 0.0)
        if self._stop_by is None or stop_by < self._stop_by:
            self._stop_by = stop_by

    async def _when_unlocked(self, attempt: Callable[[], T]) -> T:
        """``attempt()``, tried again while another process holds the write lock, until
        :attr:`busy_timeout_s` has passed (or a stop's patience, :meth:`stop_waiting`). A busy
        statement changed nothing (a batch is rolled back whole), so trying it again is safe."""
        pause = FIRST_BUSY_PAUSE_S
        began = time.monotonic()
        while True:
            try:
                return attempt()
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    raise
                now = time.monotonic()
                self._waited_s = min(round(now - began, 2), self.busy_timeout_s)
                deadline = began + self.busy_timeout_s
                if self._stop_by is not None and self._stop_by < deadline:
                    deadline = self._stop_by
                    if now >= deadline:
                        self._give_up()
                if now >= deadline:
                    raise
                await asyncio.sleep(min(pause, deadline - now))
                pause = min(2 * pause, LONGEST_BUSY_PAUSE_S)

    def _give_up(self) -> None:
        if not self.gave_up:
            self.gave_up = True
            log.warning(
                "database: stopping, gave up waiting for another process's write lock on "
                "SQLite %s: the writes still waiting are not done (their feeds are fetched "
                "again next time, no item is stored twice), and the leases this collector "
                "holds expire by themselves",
                self.path,
            )

    def _describe(self, exc: Exception, sql: str, params: Sequence[SqlValue]) -> str:
        shown = [p if not isinstance(p, str) or len(p) <= 80 else p[:77] + "..." for p in params]
        waited = f" (waited {self._waited_s:g} s)" if _busy(exc) else ""
        fix = f" {BUSY_FIX}" if _busy(exc) else ""
        return (
            f"database: SQLite {self.path}: {exc}{waited} (sql: {' '.join(sql.split())[:300]}; "
            f"params: {shown}){fix}"
        )

    async def close(self) -> None:
        """Close; if the file was replaced under the connection (``mv new.db collector.db``),
        empty the write-ahead log first. SQLite leaves the log of a moved file in place, and
        the next process to open the new file under that name applied the old file's pages
        to it: a corrupt database."""
        if file_identity(self.path) != self._opened:
            try:  # a reader of the old file holds the log back: wait for it a little
                self._conn.execute(f"PRAGMA busy_timeout = {WAL_EMPTYING_PATIENCE_MS}")
                busy = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                problem = "another connection to the old file still reads it" if busy else None
            except sqlite3.Error as exc:
                problem = str(exc)
            if problem is not None:
                log.error(
                    "database: %s was replaced while open, and the write-ahead log beside it "
                    "could not be emptied (%s): stop every process using it, then delete "
                    "%s-wal and %s-shm before anything opens the new file",
                    self.path,
                    problem,
                    self.path,
                    self.path,
                )
        self._conn.close()


def file_identity(path: str) -> tuple[int, int] | None:
    """Which file ``path`` names now (device, inode); None in memory or when there is none."""
    if path == ":memory:":
        return None
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _busy(exc: Exception) -> bool:
    """SQLITE_BUSY: another connection holds the write lock past the busy timeout."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_BUSY


def _reads_only(statement: Statement) -> bool:
    return statement.sql.lstrip()[:6].upper() == "SELECT"
