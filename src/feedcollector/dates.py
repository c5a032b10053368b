"""Feed dates -> aware UTC datetimes, without ever inventing one.

Order of attempts: ISO 8601 / W3CDTF, then RFC 822/1123 with its real-world variants (a token
reader, so order, case, commas and missing parts are tolerated), then feedparser's own handlers
(Greek, Korean, Hungarian, Perforce...) behind a guard that rejects results whose year, month and
day cannot be found in the input (feedparser reads '2024年1月2日' as 2024-11-01).

Conventions, all deliberate:

- No zone at all means UTC (RFC 822 requires one; W3CDTF without a zone is "local", unknowable).
- A date without a time is midnight UTC; a year alone or a year-month is *not* a date (None):
  the day would be invented.
- Two-digit years follow RFC 2822: 00-49 -> 20xx, 50-99 -> 19xx.
- Ambiguous zone abbreviations take their most common meaning in feeds: CST = US Central
  (-06:00, not China), IST = India (+05:30, not Ireland/Israel), BST = British Summer Time
  (+01:00, not Bangladesh), AST = Atlantic (-04:00, not Arabia).
- Military letters: Z is UTC; the other letters are read as UTC too, as RFC 2822 section 4.3
  directs, because RFC 822 defined their signs backwards and they carry no reliable offset.
- Out-of-range fields (Feb 31, hour 25, second 60) give None.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from feedparser.datetimes import _parse_date as _feedparser_parse_date

from .dates_cjk import iso_from_cjk
from .dates_names import MILITARY_ZONES as MILITARY_ZONES
from .dates_names import MONTH_NAMES as MONTH_NAMES
from .dates_names import MONTHS, WEEKDAYS
from .dates_names import ZONE_MINUTES as ZONE_MINUTES

MAX_DATE_LENGTH = 256
"""Longer text is not a date; refusing it keeps every regex and feedparser call cheap."""

_ISO_RE = re.compile(
    r"(?P<y>\d{4})(?P<sep>[-/])(?P<mo>\d{1,2})(?P=sep)(?P<d>\d{1,2})"
    r"(?:(?:[Tt]|\s+)(?P<h>\d{1,2}):(?P<mi>\d{2})(?::(?P<s>\d{2})(?:[.,](?P<f>\d+))?)?)?"
    r"\s*(?P<zone>[A-Za-z]{1,5})?\s*(?P<off>[+-]\d{2}(?::?\d{2})?)?"
)
_OFFSET_RE = re.compile(r"([+-])(\d{1,2})(?::?(\d{2}))?")
_TRAILING_OFFSET_RE = re.compile(r"[+-]\d{2}:?\d{2}$")
_TIME_RE = re.compile(
    r"(?P<h>\d{1,2}):(?P<mi>\d{2})(?::(?P<s>\d{2})(?:[.,](?P<f>\d+))?)?"
    r"(?P<zone>[a-z]{1,5})?(?P<off>[+-]\d{1,2}(?::?\d{2})?)?"
)
_ZONE_WITH_OFFSET_RE = re.compile(r"(?P<zone>gmt|utc|ut)(?P<off>[+-]\d{1,2}(?::?\d{2})?)")
_DAY_RE = re.compile(r"(\d{1,2})(?:st|nd|rd|th)?")
_RFC822_COMMON_RE = re.compile(
    r"(?:[A-Za-z]{3},\s*)?([0-9]{1,2})\s+([A-Za-z]{3})\s+([0-9]{4})\s+"
    r"([0-9]{2}:[0-9]{2}(?::[0-9]{2})?)\s*([A-Za-z]{1,4}|[+-][0-9]{4})"
)
"""The shape almost every RSS date has; read directly before the general token reader."""
_COMMON_MONTHS = {
    spelling: f"{number:02d}"
    for name, number in MONTHS.items()
    if len(name) == 3 and name.isascii()
    for spelling in (name, name.title(), name.upper())
}
"""Three-letter month names as feeds write them (so the common path needs no ``lower()``),
to the two digits of an ISO 8601 date."""
_COMMENT_RE = re.compile(r"\([^()]*\)")
_DASHED_DATE_RE = re.compile(r"\b(\d{1,2})[-/]([a-z]{3,9}\.?)[-/](\d{2,4})\b")
_DIGITS_RE = re.compile(r"\d+")
_WORD_RE = re.compile(r"[^\W\d_]{3,}")


def parse_date(text: str) -> datetime | None:
    """The moment ``text`` names, as an aware UTC datetime, or None if it cannot be read.
    A full stop, comma or semicolon after it (``... GMT;``, as templates leave them) is no
    part of it."""
    text = text.strip().rstrip(".,;").rstrip()
    if not text or len(text) > MAX_DATE_LENGTH:
        return None
    common = _RFC822_COMMON_RE.fullmatch(text)
    if common is not None:  # inline: one item in most feeds, so every call saved counts
        day, month_name, year, clock, zone = common.groups()
        month = _COMMON_MONTHS.get(month_name)
        offset = _common_zone_delta(zone)
        if month is not None and offset is not None:
            try:  # fromisoformat: one C call instead of six int() and the constructor
                moment = datetime.fromisoformat(f"{year}-{month}-{day:0>2}T{clock}+00:00")
                return moment - offset if offset else moment
            except (ValueError, OverflowError):
                pass  # out of range: the general readers decide
    if "年" in text:
        text = iso_from_cjk(text)
    readers = _DIGIT_FIRST if text[0].isdecimal() else _LETTER_FIRST
    for reader in readers:
        read = reader(text)
        if read is not None:
            return read
    return None


@lru_cache(maxsize=1024)
def _common_zone_delta(zone: str) -> timedelta | None:
    """The offset from UTC of the zone of a common RFC 822 date (a feed repeats its own)."""
    minutes = _offset_minutes(zone) if zone[0] in "+-" else _zone_minutes(zone)
    return None if minutes is None else _offset_delta(minutes)


@lru_cache(maxsize=256)
def _offset_delta(minutes: int) -> timedelta:
    return timedelta(minutes=minutes)


def _offset_minutes(text: str) -> int | None:
    """'+0530', '-05:00', '+01', '+1' -> minutes east of UTC; None if malformed."""
    match = _OFFSET_RE.fullmatch(text)
    if match is None:
        return None
    sign, hours, minutes = match.group(1), int(match.group(2)), int(match.group(3) or 0)
    if hours > 23 or minutes > 59:
        return None
    total = hours * 60 + minutes
    return -total if sign == "-" else total


def _zone_minutes(name: str) -> int | None:
    name = name.lower()
    if name in ZONE_MINUTES:
        return ZONE_MINUTES[name]
    if name in MILITARY_ZONES:
        return 0
    return None


def _build(
    year: int, month: int, day: int, hour: int, minute: int, second: int, micro: int, offset: int
) -> datetime | None:
    """Assemble and convert to UTC; out-of-range fields give None rather than an exception."""
    try:
        moment = datetime(year, month, day, hour, minute, second, micro, UTC)
        return moment - _offset_delta(offset) if offset else moment
    except (ValueError, OverflowError):
        return None


def _fraction_micro(fraction: str | None) -> int:
    return int((fraction or "0")[:6].ljust(6, "0"))


def _parse_iso(text: str) -> datetime | None:
    """ISO 8601 / W3CDTF / RFC 3339, with a space for the T and an optional named zone; also
    with slashes (``2024/01/02 10:00``: year first is always year, month, day).

    ``fromisoformat`` takes any character after the date for the T: ``2015-01-26+02:00`` (a
    date with its offset) became 02:00 UTC, so after ``YYYY-MM-DD`` only a T or a space is
    left to it."""
    try:
        odd_separator = text[4:5] == "-" and text[10:11] not in ("", "T", "t", " ")
        moment = None if odd_separator else datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is not None:
        if moment.tzinfo is None:
            return moment.replace(tzinfo=UTC)
        try:
            return moment.astimezone(UTC)
        except OverflowError:
            return None
    match = _ISO_RE.fullmatch(text)
    if match is None:
        return None
    offset = 0
    if match["off"] is not None:
        parsed = _offset_minutes(match["off"])
        if parsed is None:
            return None
        offset = parsed
        if match["zone"] is not None and match["zone"].lower() not in ("utc", "gmt", "ut"):
            return None
    elif match["zone"] is not None:
        named = _zone_minutes(match["zone"])
        if named is None:
            return None
        offset = named
    return _build(
        int(match["y"]),
        int(match["mo"]),
        int(match["d"]),
        int(match["h"] or 0),
        int(match["mi"] or 0),
        int(match["s"] or 0),
        _fraction_micro(match["f"]),
        offset,
    )


class _Fields:
    """What the RFC 822 token reader has found so far."""

    __slots__ = (
        "day", "hour", "micro", "minute", "month", "month_was_mar", "named", "numeric", "second",
        "year",
    )  # fmt: skip

    def __init__(self) -> None:
        self.day: int | None = None
        self.month: int | None = None
        self.month_was_mar = False
        self.year: int | None = None
        self.hour: int | None = None
        self.minute = 0
        self.second = 0
        self.micro = 0
        self.named: int | None = None
        self.numeric: int | None = None

    def take_time(self, match: re.Match[str]) -> bool:
        if self.hour is not None:
            return False
        self.hour, self.minute = int(match["h"]), int(match["mi"])
        self.second = int(match["s"] or 0)
        self.micro = _fraction_micro(match["f"])
        return (match["zone"] is None or self.take_zone(match["zone"])) and (
            match["off"] is None or self.take_offset(match["off"])
        )

    def take_zone(self, name: str) -> bool:
        minutes = _zone_minutes(name)
        if minutes is None:
            return False
        self.named = minutes
        return True

    def take_offset(self, text: str) -> bool:
        minutes = _offset_minutes(text)
        if minutes is None:
            return False
        self.numeric = minutes
        return True

    def take_number(self, token: str) -> bool:
        if len(token) == 4 and token.isdecimal():
            if self.year is None:
                self.year = int(token)
            elif self.hour is None:
                self.hour, self.minute = int(token[:2]), int(token[2:])
            else:
                return False
            return True
        day = _DAY_RE.fullmatch(token)
        if day is None:
            return False
        if self.day is None:
            self.day = int(day.group(1))
        elif self.year is None and token.isdecimal() and len(token) == 2:
            self.year = _expand_two_digit_year(int(token))
        else:
            return False
        return True

    def take_meridiem(self, token: str) -> bool:
        if self.hour is None or not 1 <= self.hour <= 12:
            return False
        if token.startswith("p") and self.hour != 12:
            self.hour += 12
        elif token.startswith("a") and self.hour == 12:
            self.hour = 0
        return True


def _expand_two_digit_year(year: int) -> int:
    return 2000 + year if year < 50 else 1900 + year


def _parse_rfc822(text: str) -> datetime | None:
    """RFC 822/1123 and relatives: any case, optional or wrong weekday, 2-digit years..."""
    cleaned = _COMMENT_RE.sub(" ", text).lower().replace(",", " ")
    cleaned = _DASHED_DATE_RE.sub(r"\1 \2 \3", cleaned)
    fields = _Fields()
    for token in cleaned.split():
        if not _take_token(fields, token):
            return None
    if fields.day is None or fields.month is None or fields.year is None:
        return None
    offset = fields.numeric if fields.numeric is not None else fields.named
    return _build(
        fields.year,
        fields.month,
        fields.day,
        fields.hour or 0,
        fields.minute,
        fields.second,
        fields.micro,
        offset or 0,
    )


def _take_token(fields: _Fields, token: str) -> bool:
    """Fit one token into ``fields``; False when it does not belong to a date."""
    if token in WEEKDAYS or token.rstrip(".") in WEEKDAYS:
        return True
    month = MONTHS.get(token.rstrip("."))
    if month is not None:
        if fields.month is not None and not fields.month_was_mar:
            return False
        fields.month = month
        fields.month_was_mar = token.rstrip(".") == "mar"
        return True
    if token[0].isdecimal():
        time_match = _TIME_RE.fullmatch(token)
        if time_match is not None:
            return fields.take_time(time_match)
        return fields.take_number(token)
    if token[0] in "+-":
        return fields.take_offset(token)
    if token in ("am", "pm", "a.m.", "p.m."):
        return fields.take_meridiem(token)
    combined = _ZONE_WITH_OFFSET_RE.fullmatch(token)
    if combined is not None:
        return fields.take_offset(combined["off"])
    return fields.take_zone(token)


def _parse_with_feedparser(text: str) -> datetime | None:
    """feedparser's handlers as a last resort, kept only if the input supports the result."""
    try:
        parsed = _feedparser_parse_date(text)
    except Exception:  # feedparser's handlers are many and loosely written; none is trusted
        return None
    if parsed is None:
        return None
    offset = _TRAILING_OFFSET_RE.search(text)
    if offset is not None and _offset_minutes(offset.group()) is None:
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
    instead be a word of three or more letters of an alphabetic script (Greek, Hungarian...),
    never CJK date markers like 年/月/日.
    """
    runs = Counter(int(run) for run in _DIGITS_RE.findall(text) if len(run) <= 4)
    has_month_word = any(
        all(ord(char) < 0x2E80 for char in word) for word in _WORD_RE.findall(text)
    )
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
        if not _consume(available, day.month) and not has_month_word:
            continue
        if _consume(available, day.day):
            return True
    return False


def _consume(available: Counter[int], number: int) -> bool:
    if available[number] <= 0:
        return False
    available[number] -= 1
    return True


_DIGIT_FIRST = (_parse_iso, _parse_rfc822, _parse_with_feedparser)
_LETTER_FIRST = (_parse_rfc822, _parse_with_feedparser)
"""ISO 8601 always starts with the year: text starting with a letter skips that reader."""

__all__ = ["parse_date"]
