"""The ObjectStore protocol: put/get/list/delete-many, for a local folder or S3/R2.

Keys are ``/``-separated (``images/{feed_id}/...``, ``backups/{feed_id}/...``). A put is
atomic: a reader never sees a half-written object under its final key. Backends translate
their errors into :class:`~feedcollector.errors.ObjectStoreError`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import NamedTuple, Protocol
from urllib.parse import quote

MAX_KEYS_PER_DELETE = 1000
"""S3 ``DeleteObjects`` (and R2) accept at most this many keys per call."""


class ListedObject(NamedTuple):
    """A key with what the listing says about its object (no extra request per object)."""

    key: str
    last_modified: datetime
    """When the object was last written, aware UTC: how long it has existed, for sweeps
    that must leave a just-written object to the row about to name it."""
    size: int
    """Bytes."""


class ObjectStore(Protocol):
    """What every object-store backend offers."""

    async def put(
        self, key: str, data: bytes, content_type: str | None = None, *, durable: bool = True
    ) -> None:
        """Store ``data`` under ``key``, replacing any previous object.

        ``durable``: the object is on stable storage when this returns, so a row written next
        may name it (a power cut cannot leave the row and an empty file). ``False`` for objects
        no row names (the raw XML backups): the local store then skips the flush to the disk,
        a tenth of a millisecond of CPU per object. An S3 store's PUT is always durable.
        """
        ...

    async def get(self, key: str) -> bytes:
        """Return the object's bytes; raise ObjectNotFoundError when absent."""
        ...

    def list(self, prefix: str) -> AsyncIterator[str]:
        """Yield every key under ``prefix``, in lexical order."""
        ...

    def list_with_times(self, prefix: str) -> AsyncIterator[ListedObject]:
        """What :meth:`list` yields (same keys, same order), with each object's last-modified
        time and size."""
        ...

    async def delete_many(self, keys: Sequence[str]) -> None:
        """Delete the keys (absent ones are fine), at most 1000 per request."""
        ...

    def public_url(self, key: str) -> str | None:
        """The URL a reader can load the object from, when there is one."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


async def object_exists(objects: ObjectStore, key: str) -> bool:
    """Whether ``key`` is stored (a listing of it as a prefix: the protocol has no HEAD)."""
    found = False
    async for listed in objects.list(key):
        found = found or listed == key
    return found


def public_url_under(base: str, key: str) -> str:
    """``<base>/<key>``: the URL of an object under ``[storage] public_base_url`` (a CDN or
    R2's public bucket, or a web server that serves the local objects folder)."""
    return f"{base.rstrip('/')}/{quote(key, safe='/')}"
