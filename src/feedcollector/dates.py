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
- US zones without S or D (ET, CT, MT, PT) and IANA names (``Etc/UTC``, ``America/New_York``)
  follow their zone's rules (daylight saving time included) from the stdlib's zone data; a
  machine may have none (the tzdata package is optional): an IANA name then leaves the date
  unread, and the US zones take their standard offset. feedparser ignores IANA names (a date
  hours off), so it never reads a date that has one.
- Military letters: Z is UTC; the other letters are read as UTC too, as RFC 2822 section 4.3
  directs, because RFC 822 defined their signs backwards and they carry no reliable offset.
- Out-of-range fields (Feb 31, hour 25, second 60) give None.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta, tzinfo

from .dates_cjk import is_cjk_date, iso_from_cjk
from .dates_feedparser import parse_with_feedparser
from .dates_names import MILITARY_ZONES as MILITARY_ZONES
from .dates_names import MONTH_NAMES as MONTH_NAMES
from .dates_names import MONTHS, US_ZONES, WEEKDAYS, unaccented
from .dates_names import ZONE_MINUTES as ZONE_MINUTES
from .dates_zones import (
    ZONE_NAME,
    ZONE_NAME_RE,
    common_zone_delta,
    is_ruled,
    offset_delta,
    offset_minutes,
    ruled_zone,
    zone_minutes,
)

MAX_DATE_LENGTH = 256
"""Longer text is not a date; refusing it keeps every regex and feedparser call cheap."""

_ISO_RE = re.compile(
    r"(?P<y>\d{4})(?P<sep>[-/])(?P<mo>\d{1,2})(?P=sep)(?P<d>\d{1,2})"
    r"(?:(?:[Tt]|\s+)(?P<h>\d{1,2}):(?P<mi>\d{1,2})(?::(?P<s>\d{1,2})(?:[.,](?P<f>\d+))?)?"
    r"(?:\s*(?P<half>[AaPp])\.?[Mm]\.?(?![A-Za-z]))?)?"
    rf"\s*(?P<zone>[A-Za-z]{{1,5}}|{ZONE_NAME})?\s*(?P<off>[+-]\d{{2}}(?::?\d{{2}})?)?"
)
_ORDINAL_RE = re.compile(
    r"(?P<y>\d{4})(?:-(?P<extended>\d{3})|(?P<basic>\d{3})(?=[Tt]))(?P<rest>(?:[Tt\s].*)?)",
    re.DOTALL,
)
"""An ISO 8601 ordinal date (``2024-123``; without the hyphen only before a time, as seven
digits alone are no date), with whatever follows it."""
_TIME_RE = re.compile(
    r"(?P<h>\d{1,2}):(?P<mi>\d{1,2})(?::(?P<s>\d{1,2})(?:[.,](?P<f>\d+))?)?"
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
_DASHED_DATE_RE = re.compile(
    r"\b(\d{1,2})[-/]([a-z]{3,9}\.?)[-/](\d{2,4})\b"
    r"|\b(\d{4})-([^\W\d_]{3,12}\.?)-(\d{1,2})(?:t|\b)"
)
"""``02-jan-2024``, and year first (``2004-január-01T12:00+01:00``, as Hungarian feeds write
them), read as ``day month year``."""


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
        offset = common_zone_delta(zone)
        if month is not None and offset is not None:
            try:  # fromisoformat: one C call instead of six int() and the constructor
                moment = datetime.fromisoformat(f"{year}-{month}-{day:0>2}T{clock}+00:00")
                return moment - offset if offset else moment
            except (ValueError, OverflowError):
                pass  # out of range: the general readers decide
    if not text.isascii() and is_cjk_date(text):
        text = iso_from_cjk(text)
    readers = _DIGIT_FIRST if text[0].isdecimal() else _LETTER_FIRST
    for reader in readers:
        read = reader(text)
        if read is not None:
            return read
    return None


def _build(
    year: int,
    month: int,
    day: int,
    hour: int,
    minute: int,
    second: int,
    micro: int,
    offset: int,
    zone: tzinfo | None = None,
) -> datetime | None:
    """Assemble and convert to UTC (from ``zone`` when given, else from ``offset`` minutes);
    out-of-range fields give None rather than an exception."""
    try:
        if zone is not None:
            return datetime(year, month, day, hour, minute, second, micro, zone).astimezone(UTC)
        moment = datetime(year, month, day, hour, minute, second, micro, UTC)
        return moment - offset_delta(offset) if offset else moment
    except (ValueError, OverflowError):
        return None


def _fraction_micro(fraction: str | None) -> int:
    return int((fraction or "0")[:6].ljust(6, "0"))


def _parse_iso(text: str) -> datetime | None:
    """ISO 8601 / W3CDTF / RFC 3339, with a space for the T and an optional named zone; also
    with slashes (``2024/01/02 10:00``: year first is always year, month, day), and with a
    12-hour clock's AM or PM (``2024-05-25 11:23:17 PM``, as .NET writes en-US dates):
    feedparser, the last resort, read it as 11:23, twelve hours early.

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
        return _parse_ordinal(text)
    offset = 0
    zone = None
    if match["off"] is not None:
        parsed = offset_minutes(match["off"])
        if parsed is None:
            return None
        offset = parsed
        if match["zone"] is not None and match["zone"].lower() not in ("utc", "gmt", "ut"):
            return None
    elif match["zone"] is not None:
        named = zone_minutes(match["zone"])
        if named is None:
            zone = ruled_zone(match["zone"]) if is_ruled(match["zone"]) else None
            if zone is None:
                return None
        else:
            offset = named
    hour = int(match["h"] or 0)
    if match["half"] is not None:  # 12 AM is midnight, 3 PM is 15 (feedparser: 3 either way)
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if match["half"] in "Pp" else 0)
    return _build(
        int(match["y"]),
        int(match["mo"]),
        int(match["d"]),
        hour,
        int(match["mi"] or 0),
        int(match["s"] or 0),
        _fraction_micro(match["f"]),
        offset,
        zone,
    )


def _parse_ordinal(text: str) -> datetime | None:
    """An ISO 8601 ordinal date (``2024-123``: the year's 123rd day), read as the calendar date
    it is; feedparser reads it as December 1st."""
    match = _ORDINAL_RE.fullmatch(text)
    if match is None:
        return None
    year, day_of_year = int(match["y"]), int(match["extended"] or match["basic"])
    try:
        day = date(year, 1, 1) + timedelta(days=day_of_year - 1)
    except (ValueError, OverflowError):  # year 0, or past the end of the calendar
        return None
    if day_of_year < 1 or day.year != year:
        return None
    sep = "" if match["basic"] else "-"
    return _parse_iso(f"{year:04d}{sep}{day.month:02d}{sep}{day.day:02d}{match['rest']}")


class _Fields:
    """What the RFC 822 token reader has found so far."""

    __slots__ = (
        "day", "hour", "micro", "minute", "month", "month_was_mar", "named", "numeric", "second",
        "year", "zone",
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
        self.zone: tzinfo | None = None

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
        """A zone word; a second one refuses the date ("10:00 EST PST" as "10:00 ET PST"):
        which one the time is in is anyone's guess."""
        if self.named is not None or self.zone is not None:
            return False
        minutes = zone_minutes(name)
        if minutes is not None:
            self.named = minutes
            return True
        self.zone = ruled_zone(name) if name in US_ZONES else None
        return self.zone is not None

    def take_offset(self, text: str) -> bool:
        minutes = offset_minutes(text)
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
    fields = _Fields()
    named_zone = ZONE_NAME_RE.search(text) if "/" in text else None
    if named_zone is not None:  # found in the text as written: IANA names are case-sensitive
        fields.zone = ruled_zone(named_zone.group())
        if fields.zone is None:
            return None
        text = f"{text[: named_zone.start()]} {text[named_zone.end() :]}"
    cleaned = _COMMENT_RE.sub(" ", text).lower().replace(",", " ")
    cleaned = _DASHED_DATE_RE.sub(_day_month_year, cleaned)
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
        fields.zone if offset is None else None,
    )


def _day_month_year(dashed: re.Match[str]) -> str:
    if dashed[1] is not None:
        return f"{dashed[1]} {dashed[2]} {dashed[3]}"
    return f"{dashed[6]} {dashed[5]} {dashed[4]} "


def _take_token(fields: _Fields, token: str) -> bool:
    """Fit one token into ``fields``; False when it does not belong to a date."""
    if not token.isascii() and token[0].isalpha():  # Greek names are listed without accents
        token = token if token.rstrip(".") in MONTHS else unaccented(token)
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
        return fields.take_number(token.removesuffix("."))  # "1. Januar", "2004. január 1."
    if token[0] in "+-":
        return fields.take_offset(token)
    if token in ("am", "pm", "a.m.", "p.m."):
        return fields.take_meridiem(token)
    combined = _ZONE_WITH_OFFSET_RE.fullmatch(token)
    if combined is not None:
        return fields.take_offset(combined["off"])
    return fields.take_zone(token)


_DIGIT_FIRST = (_parse_iso, _parse_rfc822, parse_with_feedparser)
_LETTER_FIRST = (_parse_rfc822, parse_with_feedparser)
"""ISO 8601 always starts with the year: text starting with a letter skips that reader."""

__all__ = ["parse_date"]
