"""Time zones of feed dates -> offsets from UTC, or zones with rules (:mod:`.dates`).

Numeric offsets and abbreviations (:data:`.dates_names.ZONE_MINUTES`) are fixed minutes. US
zones without S or D and IANA names follow their rules, from the stdlib's zone data (the
system's, or the optional tzdata package's); without it an IANA name is not resolved, and a US
zone takes its standard offset.
"""

from __future__ import annotations

import re
from datetime import timedelta, timezone, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .dates_names import IANA_AREAS, MILITARY_ZONES, US_ZONES, ZONE_MINUTES

ZONE_NAME = rf"(?i:{'|'.join(IANA_AREAS)})(?:/[A-Za-z][\w+-]*){{1,2}}"
"""An IANA zone name: its area as :data:`.dates_names.IANA_AREAS` spells it, in any case (so
that feedparser never reads a date with one), then one or two more parts."""
ZONE_NAME_RE = re.compile(rf"(?<![\w/]){ZONE_NAME}(?![\w/])")
OFFSET_RE = re.compile(r"([+-])(\d{1,2})(?::?(\d{2}))?")


@lru_cache(maxsize=1024)
def common_zone_delta(zone: str) -> timedelta | None:
    """The offset from UTC of the zone of a common RFC 822 date (a feed repeats its own)."""
    minutes = offset_minutes(zone) if zone[0] in "+-" else zone_minutes(zone)
    return None if minutes is None else offset_delta(minutes)


@lru_cache(maxsize=256)
def offset_delta(minutes: int) -> timedelta:
    return timedelta(minutes=minutes)


def offset_minutes(text: str) -> int | None:
    """'+0530', '-05:00', '+01', '+1' -> minutes east of UTC; None if malformed."""
    match = OFFSET_RE.fullmatch(text)
    if match is None:
        return None
    sign, hours, minutes = match.group(1), int(match.group(2)), int(match.group(3) or 0)
    if hours > 23 or minutes > 59:
        return None
    total = hours * 60 + minutes
    return -total if sign == "-" else total


def zone_minutes(name: str) -> int | None:
    name = name.lower()
    if name in ZONE_MINUTES:
        return ZONE_MINUTES[name]
    if name in MILITARY_ZONES:
        return 0
    return None


@lru_cache(maxsize=256)
def ruled_zone(name: str) -> tzinfo | None:
    """The zone ``name`` names by its rules rather than an offset (a key of
    :data:`.dates_names.US_ZONES` in any case, or an IANA name as written); None if it cannot
    be resolved. Cached: a feed repeats its zone, and a name not found is looked for on disk."""
    us_zone = US_ZONES.get(name.lower())
    try:
        return ZoneInfo(name if us_zone is None else us_zone[0])
    except (ZoneInfoNotFoundError, ValueError, OSError):  # no such zone, or no zone data here
        return None if us_zone is None else timezone(timedelta(minutes=us_zone[1]))


def is_ruled(name: str) -> bool:
    """Whether ``name`` is for :func:`ruled_zone` (not just any unknown word)."""
    return "/" in name or name.lower() in US_ZONES
