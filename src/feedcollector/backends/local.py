"""The embedded object store: a local folder where keys become paths.

Writes go to a temporary file in the target folder and are renamed into place, so a crash
never leaves a half-written object under its final key.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from ..errors import ObjectNotFoundError, ObjectStoreError

_TEMP_PREFIX = ".partial-"


class LocalObjectStore:
    """Objects as files under ``root`` (``<root>/<key>``)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).resolve()

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ObjectStoreError(f"storage: invalid object key {key!r}")
        return self.root.joinpath(*parts)

    async def put(self, key: str, data: bytes, content_type: str | None = None) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp_name = tempfile.mkstemp(prefix=_TEMP_PREFIX, dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
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
            return
        keys: list[str] = []
        try:
            for dirpath, _dirnames, filenames in os.walk(start):
                base = Path(dirpath).relative_to(self.root).as_posix()
                for name in filenames:
                    if name.startswith(_TEMP_PREFIX):
                        continue
                    key = name if base == "." else f"{base}/{name}"
                    if key.startswith(prefix):
                        keys.append(key)
        except OSError as exc:
            raise ObjectStoreError(f"storage: cannot list {start}: {exc}") from exc
        for key in sorted(keys):
            yield key

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
