"""feedparser's date handlers, the last resort of :func:`.dates.parse_date` (Greek, Korean,
Hungarian, Perforce...), behind a guard: a result whose year, month and day cannot be found in
the input is refused (feedparser reads '2024年1月2日' as 2024-11-01)."""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime, timedelta

from feedparser.datetimes import _parse_date as _feedparser_parse_date

from .dates_names import MONTHS, US_ZONES, ZONE_MINUTES, unaccented
from .dates_zones import ZONE_NAME_RE, offset_minutes

_TRAILING_OFFSET_RE = re.compile(r"[+-]\d{2}:?\d{2}$")
_DIGITS_RE = re.compile(r"\d+")
_WORD_RE = re.compile(r"[^\W\d_]{3,}")
_LETTERS_RE = re.compile(r"[A-Za-z]+")
ZONE_WORDS = frozenset(ZONE_MINUTES) | frozenset(US_ZONES)


def parse_with_feedparser(text: str) -> datetime | None:
    """feedparser's handlers as a last resort, kept only if the input supports the result.
    Never for a date with an IANA zone name, which feedparser ignores (read as UTC)."""
    if "/" in text and ZONE_NAME_RE.search(text) is not None:
        return None
    if sum(word.lower() in ZONE_WORDS for word in _LETTERS_RE.findall(text)) > 1:
        return None  # two zones ("10:00 ET PST"): which one is meant is unknowable
    try:
        parsed = _feedparser_parse_date(text)
    except Exception:  # feedparser's handlers are many and loosely written; none is trusted
        return None
    if parsed is None:
        return None
    offset = _TRAILING_OFFSET_RE.search(text)
    if offset is not None and offset_minutes(offset.group()) is None:
        return None  # "+2400": feedparser shifts the date a day instead
    try:
        year, month, day, hour, minute, second = parsed[:6]
        moment = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except (ValueError, OverflowError):
        return None
    return moment if _supported_by_text(moment, text) else None


def _supported_by_text(moment: datetime, text: str) -> bool:
    """Year, month and day of ``moment`` (or of a day either side: the UTC shift) are in ``text``.

    Each number must have its own digit run (so '2024-02' cannot pass as Feb 2); the month may
    instead be a word that names it (:data:`.dates_names.MONTHS`), which then leaves the digit
    runs to the day ('01 Jan' is January 1st). Any word used to count for any month: feedparser's
    W3C reader took ``2004-január-01`` for November 1st, and 'Jan' took the day's '01'.
    """
    runs = Counter(int(run) for run in _DIGITS_RE.findall(text) if len(run) <= 4)
    named = {_month_named(word) for word in _WORD_RE.findall(text.lower())}
    for shift in (-1, 0, 1):
        try:
            day = (moment + timedelta(days=shift)).date()
        except OverflowError:  # the day before 0001-01-01 or after 9999-12-31
            continue
        available = runs.copy()
        if not _consume(available, day.year) and not (
            day.year >= 1950 and _consume(available, day.year % 100)
        ):
            continue
        if day.month not in named and not _consume(available, day.month):
            continue
        if _consume(available, day.day):
            return True
    return False


def _month_named(word: str) -> int | None:
    found = MONTHS.get(word)
    return found if found is not None or word.isascii() else MONTHS.get(unaccented(word))


def _consume(available: Counter[int], number: int) -> bool:
    if available[number] <= 0:
        return False
    available[number] -= 1
    return True
