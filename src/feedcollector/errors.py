"""One error hierarchy for the whole collector.

Every stage raises a subclass of :class:`FeedCollectorError`; driver and library errors are
translated at the boundary (``raise ... from exc``) so callers never see sqlite3, httpx or
obstore exceptions. The pipeline reacts to the class:

- :class:`FetchError` and :class:`ParseError` count as a failure of the feed (backoff).
- :class:`StorageError` aborts the feed's work for this cycle without touching
  ``last_fetched_at`` (seed section 8); the next cycle tries again. Except a
  :class:`DatabaseError` of kind :data:`TOO_LARGE`: the database refused what the feed gave
  (a value or row over D1's size limit, a batch over the Worker's body limit), which no retry
  changes, so it counts as a failure of the feed (backoff) like a body over the size cap.
- :class:`ConfigError` stops the command with exit code 2.
- :class:`ImageError` is recorded in ``image_tasks.last_error``.
"""

from __future__ import annotations

from datetime import timedelta

from .models import ResponseHints


class FeedCollectorError(Exception):
    """Base class of every error feedcollector raises on purpose."""


class ConfigError(FeedCollectorError):
    """A config or feeds file is missing or invalid; the message names the file, line and fix."""


class FetchError(FeedCollectorError):
    """The feed could not be downloaded (timeout, DNS, refused, 4xx/5xx, too large...)."""

    def __init__(
        self,
        message: str,
        *,
        kind: str = "error",
        status: int | None = None,
        hints: ResponseHints | None = None,
        url: str | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.hints = hints
        """The refusing answer's headers (Retry-After...), when there was an answer."""
        self.url = url
        """The URL that gave the refusing answer, when there was one: after a redirect, not
        the feed's, and its host is the one a 429 asks to wait."""


class ParseError(FeedCollectorError):
    """The body could not be decoded or is not a feed we can read."""


class LenientParseNeeded(FeedCollectorError):
    """Only the lenient parser can read this document: raised instead of running it when the
    caller asked (``parse_feed(..., lenient=False)``), so that it can run those seconds of
    pure Python off its event loop."""


class StorageError(FeedCollectorError):
    """The database or the object store failed; the feed's work is aborted for this cycle."""


TOO_LARGE = "too_large"
"""The Proxy Worker's error kind for a request too big for it or for D1 (413)."""


class DatabaseError(StorageError):
    """A database request failed (SQLite error, Proxy Worker 4xx/5xx, timeout).

    ``kind`` is the Proxy Worker's error kind when it answered one (``too_large``, ``sql``,
    ``constraint``, ``d1``...), else None."""

    def __init__(self, message: str, *, kind: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind


class ObjectStoreError(StorageError):
    """An object-store request failed (local disk, S3/R2)."""


class ObjectNotFoundError(ObjectStoreError):
    """The requested key does not exist."""


class ImageError(FeedCollectorError):
    """An image could not be downloaded or is not acceptable; recorded on its task."""


class ImageNotTried(ImageError):
    """The download was not even sent: its host took no connection earlier in this cycle, or
    answered 429 Too Many Requests (or it was on its way then, and met the 429 too).

    Not an attempt of the task: it is handed back uncharged, for the next cycle or, when the
    429 asked to wait (``wait``, its Retry-After), for then."""

    def __init__(self, message: str, wait: timedelta | None = None) -> None:
        super().__init__(message)
        self.wait = wait
