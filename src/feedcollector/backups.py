"""Raw XML backups: every non-304 body, byte for byte, before it is parsed (seed section 7).

Keys are ``backups/{feed_id}/{YYYY-MM-DDTHH:MM:SSZ}.xml``: the timestamp in the key is what
retention and recovery read, so listing a feed's folder yields its backups in time order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime

from .objectstore import ObjectStore
from .timestamps import format_timestamp, parse_timestamp

PREFIX = "backups/"
SUFFIX = ".xml"


def backup_key(feed_id: str, fetched_at: datetime) -> str:
    return f"{PREFIX}{feed_id}/{format_timestamp(fetched_at)}{SUFFIX}"


def backup_time(key: str) -> datetime | None:
    """The fetch time encoded in a backup key, or None for a key that is not a backup."""
    if not key.startswith(PREFIX) or not key.endswith(SUFFIX):
        return None
    stamp = key.rsplit("/", 1)[-1][: -len(SUFFIX)]
    try:
        return parse_timestamp(stamp)
    except ValueError:
        return None


async def write_backup(
    objects: ObjectStore, feed_id: str, body: bytes, fetched_at: datetime
) -> str:
    key = backup_key(feed_id, fetched_at)
    await objects.put(key, body, "application/xml")
    return key


async def feed_backups(objects: ObjectStore, feed_id: str) -> AsyncIterator[str]:
    """A feed's backup keys, oldest first."""
    async for key in objects.list(f"{PREFIX}{feed_id}/"):
        if backup_time(key) is not None:
            yield key
