"""The one timestamp format of the collector: ISO 8601 UTC ``YYYY-MM-DDTHH:MM:SSZ``.

Every timestamp stored in the database or used in an object key goes through
:func:`format_timestamp`, so plain text comparison orders them.
"""

from __future__ import annotations

from datetime import UTC, datetime

TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def utc_now() -> datetime:
    """The current time, whole seconds, in UTC (the default clock)."""
    return datetime.now(UTC).replace(microsecond=0)


def format_timestamp(moment: datetime) -> str:
    """Render an aware datetime as ``YYYY-MM-DDTHH:MM:SSZ`` (naive values are taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime(TIMESTAMP_FORMAT)


def parse_timestamp(text: str) -> datetime:
    """Read back a value written by :func:`format_timestamp`."""
    return datetime.strptime(text, TIMESTAMP_FORMAT).replace(tzinfo=UTC)
