"""The embedded object store: a local folder where keys become paths.

Writes go to a temporary file in ``<root>/.partial/`` and are renamed into place, so a crash
never leaves a half-written object under its final key; the temporary files a killed process
left behind are swept when the store next writes.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from ..errors import ObjectNotFoundError, ObjectStoreError

_TEMP_DIR = ".partial"
_TEMP_PREFIX = ".partial-"
ABANDONED_AFTER_S = 3600.0
"""A temporary file this old belongs to a write that died (a live write takes far less)."""


class LocalObjectStore:
    """Objects as files under ``root`` (``<root>/<key>``)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).resolve()
        self._temp = self.root / _TEMP_DIR
        self._swept = False

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

    async def put(self, key: str, data: bytes, content_type: str | None = None) -> None:
        path = self._path(key)
        try:
            if not self._swept:
                self._sweep_abandoned()
            try:
                fd, temp_name = tempfile.mkstemp(prefix=_TEMP_PREFIX, dir=self._temp)
            except FileNotFoundError:  # folders are made when missing, not checked every time
                self._temp.mkdir(parents=True, exist_ok=True)
                fd, temp_name = tempfile.mkstemp(prefix=_TEMP_PREFIX, dir=self._temp)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                try:
                    os.replace(temp_name, path)
                except FileNotFoundError:  # the key's folder is new: make it only then
                    path.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(temp_name, path)
            except BaseException:
                Path(temp_name).unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise ObjectStoreError(f"storage: cannot write {path}: {exc}") from exc

    async def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return path.read_bytes()
        except FileNotFoundError as exc:
            raise ObjectNotFoundError(f"storage: no object {key!r} at {path}") from exc
        except OSError as exc:
            raise ObjectStoreError(f"storage: cannot read {path}: {exc}") from exc

    async def list(self, prefix: str) -> AsyncIterator[str]:
        folder, _, _ = prefix.rpartition("/")
        start = self.root / folder if folder else self.root
        if not start.is_dir():
            self._check_folders(start)
            return
        keys: list[str] = []
        try:
            for dirpath, dirnames, filenames in os.walk(start):
                base = Path(dirpath).relative_to(self.root).as_posix()
                if base == ".":
                    dirnames[:] = [name for name in dirnames if name != _TEMP_DIR]
                for name in filenames:
                    key = name if base == "." else f"{base}/{name}"
                    if key.startswith(prefix):
                        keys.append(key)
        except OSError as exc:
            raise ObjectStoreError(f"storage: cannot list {start}: {exc}") from exc
        for key in sorted(keys):
            yield key

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
        for key in keys:
            path = self._path(key)
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                raise ObjectStoreError(f"storage: cannot delete {path}: {exc}") from exc

    def public_url(self, key: str) -> str | None:
        return self._path(key).as_uri()

    async def close(self) -> None:
        return None
