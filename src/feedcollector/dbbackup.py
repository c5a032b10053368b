"""``feedcollector backup-db``: a consistent copy of the embedded SQLite database.

Copying a live WAL database with ``cp`` can tear it (the main file and the ``-wal`` file are
copied at different moments). ``VACUUM INTO`` reads one snapshot inside a read transaction,
so it is safe while collectors write, and it writes a compact, self-contained file. The copy is
made next to the target, checked with ``PRAGMA quick_check`` and only then renamed into place,
so a target path never holds a half-written backup.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from .errors import ConfigError, DatabaseError


def backup_sqlite(source: Path, target: Path) -> int:
    """Write a checked snapshot of ``source`` to ``target`` (which must not exist); its size."""
    if source.is_dir():
        raise ConfigError(
            f"backup-db: {source} is a folder, not a database file; point [database] path at "
            "the collector's database file."
        )
    if not source.is_file():
        raise ConfigError(
            f"backup-db: there is no database at {source} yet (it is created by the first "
            "`feedcollector run`)."
        )
    if target.exists():
        raise ConfigError(
            f"backup-db: {target} already exists. Give a new file name (backups are never "
            "overwritten), e.g. one with the date in it."
        )
    if not target.parent.is_dir():
        raise ConfigError(f"backup-db: the folder {target.parent} does not exist. Create it first.")
    companions = {source.resolve().with_name(source.name + end) for end in SQLITE_COMPANIONS}
    if target.resolve() in companions:
        raise ConfigError(
            f"backup-db: {target} is a name SQLite uses beside the database for its own files "
            "(and deletes when it opens the database). Give another file name."
        )
    partial = target.with_name(f".backup-db-{os.getpid()}.partial")  # fits any file name
    try:
        with contextlib.closing(sqlite3.connect(source, timeout=60)) as conn:
            conn.execute("VACUUM INTO ?", (str(partial),))
        with contextlib.closing(sqlite3.connect(partial)) as copy:
            verdict = copy.execute("PRAGMA quick_check").fetchone()[0]
        if verdict != "ok":
            raise DatabaseError(f"backup-db: the copy of {source} failed its check: {verdict}")
        _put_in_place(partial, target)
    except sqlite3.Error as exc:
        raise DatabaseError(f"backup-db: cannot copy {source} to {target}: {exc}") from exc
    except OSError as exc:
        raise DatabaseError(
            f"backup-db: cannot write {target}: {exc.strerror or exc}. Check the folder's "
            "permissions and free space."
        ) from exc
    finally:
        for leftover in (
            partial,
            *(partial.with_name(partial.name + end) for end in SQLITE_COMPANIONS),
        ):
            with contextlib.suppress(OSError):
                leftover.unlink(missing_ok=True)  # VACUUM INTO's own journal too, on a full disk
    return target.stat().st_size


def _put_in_place(partial: Path, target: Path) -> None:
    """Give the checked copy its name, never over a file: one made there since the check
    above (another backup-db, a user's file) stays. A hard link fails when the name is
    taken; a file system without links gets a last check, then a rename."""
    try:
        os.link(partial, target)
    except FileExistsError:
        raise ConfigError(
            f"backup-db: {target} was created while the copy was made; it is left as it is. "
            "Give a new file name."
        ) from None
    except OSError:
        if target.exists():
            raise
        os.replace(partial, target)


SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")
"""Files SQLite keeps beside a database: a backup written under such a name is lost."""
