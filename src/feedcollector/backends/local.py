"""The embedded object store: a local folder where keys become paths.

Writes go to a temporary file in ``<root>/.partial/`` and are renamed into place, so a crash
never leaves a half-written object under its final key; the temporary files a killed process
left behind are swept when the store next writes. A durable write (every object a row names)
is flushed to the disk before its rename and the rename with its folders after it: without
that, a power cut within the kernel's write-back delay (about 30 s) can leave an empty file
under a key the database already names.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from ..errors import ObjectNotFoundError, ObjectStoreError
from ..objectstore import ListedObject, public_url_under

_TEMP_DIR = ".partial"
_TEMP_PREFIX = ".partial-"
_CREATE_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
ABANDONED_AFTER_S = 3600.0
"""A temporary file this old belongs to a write that died (a live write takes far less)."""


class LocalObjectStore:
    """Objects as files under ``root`` (``<root>/<key>``)."""

    def __init__(self, root: Path | str, *, public_base_url: str | None = None) -> None:
        self.root = Path(root).resolve()
        self.public_base_url = public_base_url
        self._temp = self.root / _TEMP_DIR
        self._swept = False
        self._nonce = secrets.token_hex(8)
        self._count = itertools.count()

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if (
            not key
            or key.startswith("/")
            or parts[0] == _TEMP_DIR
            or any(p in ("", ".", "..") for p in parts)
        ):
            raise ObjectStoreError(f"storage: invalid object key {key!r}")
        return self.root.joinpath(*parts)

    def _sweep_abandoned(self) -> None:
        """Remove temporary files of writes killed mid-way (SIGKILL, power loss).

        Housekeeping only: an error here (a file another process just removed, a folder we
        cannot read) never fails the write that triggered it; the next process sweeps again.
        """
        self._swept = True
        deadline = time.time() - ABANDONED_AFTER_S
        try:
            with os.scandir(self._temp) as entries:
                for entry in entries:
                    if entry.name.startswith(_TEMP_PREFIX) and entry.stat().st_mtime < deadline:
                        os.unlink(entry.path)
        except OSError:
            return

    async def put(
        self, key: str, data: bytes, content_type: str | None = None, *, durable: bool = True
    ) -> None:
        """A durable write waits for the disk on a worker thread (an SD card's flush takes
        tens of milliseconds, which would hold every download and fetch of the event loop);
        the others are quick and stay on the loop."""
        if durable:
            await asyncio.to_thread(self._write, key, data, durable=True)
        else:
            self._write(key, data, durable=False)

    def _write(self, key: str, data: bytes, *, durable: bool) -> None:
        """Written with the system calls themselves (``open()`` added three more a file: a
        status, a terminal check, a seek), under a temporary name without a random draw each:
        a first cycle writes a backup a feed, and each system call cost 10-30 us of CPU
        there."""
        path = self._path(key)
        try:
            if not self._swept:
                self._sweep_abandoned()
            temp, handle = self._create_temporary()
            try:
                try:
                    _write_all(handle, data)
                    if durable:
                        os.fsync(handle)
                finally:
                    os.close(handle)
                grown = _move_into_place(temp, path)
            except BaseException:
                temp.unlink(missing_ok=True)
                raise
            if durable:
                _sync_folders(path.parent, grown or path.parent)
        except OSError as exc:
            raise ObjectStoreError(f"storage: cannot write {path}: {exc}") from exc

    def _create_temporary(self) -> tuple[Path, int]:
        """A new temporary file, created here or not at all (``O_EXCL``), with the mode any
        new file gets (mkstemp's 0600 stayed on the object, which a web server of another user
        could not serve). Named by this store's nonce and a count; a name taken (a forked
        process counts from the same place) draws a new nonce. Folders are made when
        missing, not checked every time."""
        temp = self._next_temporary()
        for _ in range(2):
            try:
                return temp, os.open(temp, _CREATE_NEW, 0o666)
            except FileNotFoundError:
                self._temp.mkdir(parents=True, exist_ok=True)
            except FileExistsError:
                self._nonce = secrets.token_hex(8)
                temp = self._next_temporary()
        return temp, os.open(temp, _CREATE_NEW, 0o666)

    def _next_temporary(self) -> Path:
        return self._temp / f"{_TEMP_PREFIX}{self._nonce}-{next(self._count)}"

    async def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return path.read_bytes()
        except FileNotFoundError as exc:
            raise ObjectNotFoundError(f"storage: no object {key!r} at {path}") from exc
        except OSError as exc:
            raise ObjectStoreError(f"storage: cannot read {path}: {exc}") from exc

    async def list(self, prefix: str) -> AsyncIterator[str]:
        for key, _ in self._walk(prefix):
            yield key

    async def list_with_times(self, prefix: str) -> AsyncIterator[ListedObject]:
        for key, entry in self._walk(prefix):
            try:
                found = entry.stat()
            except FileNotFoundError:  # deleted since its folder was read
                continue
            except OSError as exc:
                raise ObjectStoreError(f"storage: cannot read {entry.path}: {exc}") from exc
            yield ListedObject(key, datetime.fromtimestamp(found.st_mtime, UTC), found.st_size)

    def _walk(self, prefix: str) -> Iterator[tuple[str, os.DirEntry[str]]]:
        """The files under ``prefix`` in key order, read a folder at a time: memory holds the
        folders on the way down, not the millions of keys a store may have."""
        folder, _, _ = prefix.rpartition("/")
        start = self.root / folder if folder else self.root
        if not start.is_dir():
            self._check_folders(start)
            return
        yield from self._walk_folder(str(start), f"{folder}/" if folder else "", prefix)

    def _walk_folder(
        self, path: str, base: str, prefix: str
    ) -> Iterator[tuple[str, os.DirEntry[str]]]:
        """Every key of a folder's files is its name plus ``/`` plus more, so sorting the
        folder's entries by that name (``a-b`` < ``a/`` < ``a0``) gives the keys' order."""
        try:
            with os.scandir(path) as scan:
                named: list[tuple[str, os.DirEntry[str], bool]] = []
                for entry in scan:
                    if not base and entry.name == _TEMP_DIR:
                        continue
                    is_folder = entry.is_dir()
                    if is_folder and entry.is_symlink():  # never followed
                        continue
                    named.append(
                        (f"{base}{entry.name}{'/' if is_folder else ''}", entry, is_folder)
                    )
        except FileNotFoundError:  # removed since its parent was read: it holds nothing now
            return
        except OSError as exc:
            raise ObjectStoreError(f"storage: cannot list {path}: {exc}") from exc
        named.sort(key=lambda item: item[0])
        for key, entry, is_folder in named:
            if not is_folder:
                if key.startswith(prefix):
                    yield key, entry
            elif key.startswith(prefix) or prefix.startswith(key):
                yield from self._walk_folder(entry.path, key, prefix)

    def _check_folders(self, start: Path) -> None:
        """A missing folder holds no objects; a file where a folder should be is a store
        that cannot be used, and listing it as empty would report "0 backups" as if fine."""
        for path in (start, *start.parents):
            if path.is_dir():
                return
            if path.exists() or path.is_symlink():
                raise ObjectStoreError(
                    f"storage: cannot list {start}: {path} is not a folder. Move it away, or "
                    "set path under [storage] to a folder."
                )
            if path == self.root:
                return

    async def delete_many(self, keys: Sequence[str]) -> None:
        """Delete the keys' files, then the folders that left empty, up to the root: a year
        of expired items left some 180,000 empty folders behind, which every listing walks."""
        folders: set[Path] = set()
        for key in keys:
            path = self._path(key)
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                raise ObjectStoreError(f"storage: cannot delete {path}: {exc}") from exc
            folders.add(path.parent)
        for folder in folders:
            while folder != self.root:
                try:
                    os.rmdir(folder)
                except OSError:  # not empty (or gone already): so are the folders above it
                    break
                folder = folder.parent

    def public_url(self, key: str) -> str | None:
        """Under ``public_base_url`` when the folder is served (a reader on another machine),
        else the file's own URL."""
        if self.public_base_url:
            return public_url_under(self.public_base_url, key)
        return self._path(key).as_uri()

    async def close(self) -> None:
        return None


MOVE_ATTEMPTS = 3


def _move_into_place(temp: Path, path: Path) -> Path | None:
    """Rename ``temp`` to ``path``, making the key's folder when it is missing: new, or
    removed as empty by a delete (of another process too) since it was made. The folder that
    got new folders in it, when it made some. A missing folder is made at once, and its
    ancestors looked for only when that fails: a feed's first backup made its folder."""
    grown: Path | None = None
    for _ in range(MOVE_ATTEMPTS - 1):
        try:
            os.replace(temp, path)
            return grown
        except FileNotFoundError:
            grown = path.parent
            try:
                os.mkdir(grown)
                grown = grown.parent
            except FileExistsError:  # made meanwhile, by another write
                pass
            except FileNotFoundError:  # its parent is missing too
                while not grown.is_dir() and grown != grown.parent:
                    grown = grown.parent
                path.parent.mkdir(parents=True, exist_ok=True)
    os.replace(temp, path)
    return grown


def _write_all(handle: int, data: bytes) -> None:
    """``data`` to the file, however many writes the kernel takes for it."""
    view = memoryview(data)
    while view:
        view = view[os.write(handle, view) :]


def _sync_folders(folder: Path, top: Path) -> None:
    """Flush ``folder``'s entries to the disk, and those of each folder above it up to ``top``
    (folders just made are entries of their parents). Best effort: some file systems refuse
    to flush a folder, and the object itself is on the disk already."""
    while True:
        try:
            handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(handle)
            finally:
                os.close(handle)
        except OSError:
            return
        if folder == top or folder == folder.parent:
            return
        folder = folder.parent
