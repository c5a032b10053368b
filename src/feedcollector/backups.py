"""Raw XML backups: every non-304 body, byte for byte, before it is parsed (seed section 7).

Keys are ``backups/{feed_id}/{YYYY-MM-DDTHH:MM:SSZ}.xml``: the timestamp in the key is what
retention and recovery read, so listing a feed's folder yields its backups in time order.

A body whose HTTP ``Content-Type`` names another charset than the body announces itself
(``charset=KOI8-R`` on a document without an encoding declaration) would be read in a guessed
encoding on replay; for those, the header is kept beside the backup as
``{timestamp}.content-type`` (UTF-8 text), and expires with it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from .decode import charset_decides
from .errors import ObjectNotFoundError
from .objectstore import ObjectStore, object_exists
from .timestamps import format_timestamp, parse_timestamp

PREFIX = "backups/"
SUFFIX = ".xml"
CONTENT_TYPE_SUFFIX = ".content-type"


@dataclass(frozen=True, slots=True)
class StoredBackup:
    """One backup as a listing finds it."""

    key: str
    taken: datetime
    content_type_key: str | None
    """The key of the Content-Type kept beside it, when that may decide how it reads."""


def backup_key(feed_id: str, fetched_at: datetime) -> str:
    return f"{PREFIX}{feed_id}/{format_timestamp(fetched_at)}{SUFFIX}"


def content_type_key(backup: str) -> str:
    return backup.removesuffix(SUFFIX) + CONTENT_TYPE_SUFFIX


def backup_time(key: str) -> datetime | None:
    """The fetch time encoded in a backup key, or None for a key that is not a backup."""
    return _stamp(key, SUFFIX)


def stored_time(key: str) -> datetime | None:
    """The fetch time of a backup or of the Content-Type kept beside one (retention)."""
    return _stamp(key, SUFFIX) or _stamp(key, CONTENT_TYPE_SUFFIX)


def _stamp(key: str, suffix: str) -> datetime | None:
    if not key.startswith(PREFIX) or not key.endswith(suffix):
        return None
    try:
        return parse_timestamp(key.rsplit("/", 1)[-1][: -len(suffix)])
    except ValueError:
        return None


async def unused_backup_time(objects: ObjectStore, feed_id: str, at: datetime) -> datetime:
    """``at``, or the first second after it that no backup of the feed has taken.

    A fetch that failed after its backup was written (a body that does not parse) leaves
    ``last_fetched_at`` as it was, so a fetch within the same second (a manual ``fetch``
    beside ``run``, a clock stepped back) replaced that backup, and could leave its
    ``.content-type`` beside the new body, which restore then read in the wrong encoding."""
    while await object_exists(objects, backup_key(feed_id, at)):
        at += timedelta(seconds=1)
    return at


async def write_backup(
    objects: ObjectStore,
    feed_id: str,
    body: bytes,
    fetched_at: datetime,
    content_type: str | None = None,
) -> str:
    """Store the body; then its Content-Type beside it if that may decide how it reads.

    Not flushed to the disk one by one (``durable=False``): no row names a backup, and the
    flush would add a tenth of a millisecond of CPU to every fetch. A power cut within the
    kernel's write-back delay can leave the newest backups empty; restore skips them, named.
    """
    key = backup_key(feed_id, fetched_at)
    await objects.put(key, body, "application/xml", durable=False)
    if content_type is not None and charset_decides(body, content_type):
        await objects.put(
            content_type_key(key),
            content_type.encode("utf-8"),
            "text/plain; charset=utf-8",
            durable=False,
        )
    return key


async def feed_backups(objects: ObjectStore, feed_id: str) -> AsyncIterator[StoredBackup]:
    """A feed's backups, oldest first (``.content-type`` sorts before ``.xml``: a backup's
    companion is listed just before it)."""
    companion: str | None = None
    async for key in objects.list(f"{PREFIX}{feed_id}/"):
        if key.endswith(CONTENT_TYPE_SUFFIX):
            companion = key
            continue
        taken = backup_time(key)
        if taken is not None:
            own = companion if companion == content_type_key(key) else None
            yield StoredBackup(key, taken, own)


async def read_backup(objects: ObjectStore, backup: StoredBackup) -> tuple[bytes, str | None]:
    """The body and the Content-Type to read it with (None: the body tells its encoding)."""
    body = await objects.get(backup.key)
    if backup.content_type_key is None:
        return body, None
    try:
        header = await objects.get(backup.content_type_key)
    except ObjectNotFoundError:  # expired between the listing and now: the body alone
        return body, None
    return body, header.decode("utf-8", "replace")
