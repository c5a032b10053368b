from __future__ import annotations

import sys
import zoneinfo
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from feedcollector import dates_zones
from feedcollector.dates import _DIGIT_FIRST as DIGIT_FIRST_READERS
from feedcollector.dates import _LETTER_FIRST as LETTER_FIRST_READERS
from feedcollector.dates import (
    MILITARY_ZONES,
    MONTH_NAMES,
    ZONE_MINUTES,
    parse_date,
)
from feedcollector.dates_names import OTHER_MONTH_NAMES
from feedcollector.timestamps import format_timestamp, parse_timestamp

REAL_WORLD_DATES = {
    # RFC 822 / 1123 as the RSS spec wants it
    "Tue, 10 Jun 2003 04:00:00 GMT": "2003-06-10T04:00:00Z",
    "Mon, 18 Nov 2019 19:14:32 +0000": "2019-11-18T19:14:32Z",
    "Mon, 01 Jan 2024 10:00:00 GMT;": "2024-01-01T10:00:00Z",  # a template's punctuation
    "Mon, 01 Jan 2024 10:00:00 +0200.": "2024-01-01T08:00:00Z",
    "2024-01-01T10:00:00Z, ": "2024-01-01T10:00:00Z",
    "Thu, 21 Jan 2021 18:58:00 +1100": "2021-01-21T07:58:00Z",
    "Fri, 19 May 2017 21:05:02 +0530": "2017-05-19T15:35:02Z",
    # named zones (US zones of RFC 822, plus common others)
    "Tue, 01 Oct 2019 14:30:00 PST": "2019-10-01T22:30:00Z",
    "Tue, 01 Oct 2019 14:30:00 PDT": "2019-10-01T21:30:00Z",
    "07 Nov 2015 12:00:00 EST": "2015-11-07T17:00:00Z",
    "Sat, 07 Nov 2015 12:00:00 EDT": "2015-11-07T16:00:00Z",
    "Sat, 07 Nov 2015 12:00:00 CST": "2015-11-07T18:00:00Z",
    "Sat, 07 Nov 2015 12:00:00 MDT": "2015-11-07T18:00:00Z",
    "Fri, 20 Feb 2015 09:51:15 UTC": "2015-02-20T09:51:15Z",
    "2015-01-26+02:00": "2015-01-25T22:00:00Z",  # a date with its offset, not 02:00 o'clock
    "2015-01-26+0900": "2015-01-25T15:00:00Z",
    "Fri, 20 Feb 2015 09:51:15 UT": "2015-02-20T09:51:15Z",
    "Fri, 20 Feb 2015 09:51:15 Z": "2015-02-20T09:51:15Z",
    "Fri, 20 Feb 2015 09:51:15 CET": "2015-02-20T08:51:15Z",
    "Fri, 20 Jul 2015 09:51:15 CEST": "2015-07-20T07:51:15Z",
    "Fri, 20 Jul 2015 09:51:15 BST": "2015-07-20T08:51:15Z",
    "Fri, 20 Feb 2015 09:51:15 JST": "2015-02-20T00:51:15Z",
    "Fri, 20 Feb 2015 09:51:15 AEST": "2015-02-19T23:51:15Z",
    "Fri, 20 Feb 2015 09:51:15 IST": "2015-02-20T04:21:15Z",
    # military letters other than Z carry no reliable offset (RFC 2822 4.3): read as UTC
    "Fri, 20 Feb 2015 09:51:15 A": "2015-02-20T09:51:15Z",
    "Fri, 20 Feb 2015 09:51:15 N": "2015-02-20T09:51:15Z",
    # lowercase, missing weekday, wrong weekday, extra whitespace and commas
    "mon, 02 jan 2006 15:04:05 gmt": "2006-01-02T15:04:05Z",
    "02 Jan 2006 15:04:05 +0000": "2006-01-02T15:04:05Z",
    "Sun, 02 Jan 2006 15:04:05 +0000": "2006-01-02T15:04:05Z",
    "  Mon,   2 Jan  2006   15:04:05   GMT  ": "2006-01-02T15:04:05Z",
    "Mon,, 02 Jan, 2006, 15:04:05 GMT": "2006-01-02T15:04:05Z",
    "Wed, 03 Jan 2018 13:47:00 GMT\r\n      ": "2018-01-03T13:47:00Z",
    "Sat, 23 Jan 2016 15:40:37 +0000 (UTC)": "2016-01-23T15:40:37Z",
    # 2-digit years (RFC 2822: < 50 is 20xx), missing seconds, single-digit day and hour,
    # HHMM time, offsets with a colon or hours only, "GMT+hhmm"
    "03 Apr 02 1500 GMT": "2002-04-03T15:00:00Z",
    "Thu, 01 Jan 70 00:00:00 GMT": "1970-01-01T00:00:00Z",
    "Mon, 2 Jan 2006 3:04 +0100": "2006-01-02T02:04:00Z",
    "Mon, 02 Jan 2006 15:04:05 +01:00": "2006-01-02T14:04:05Z",
    "Mon, 02 Jan 2006 15:04:05 -05": "2006-01-02T20:04:05Z",
    "Mon, 02 Jan 2006 15:04:05 GMT+0200": "2006-01-02T13:04:05Z",
    "Mon Jan 02 2006 15:04:05 GMT-0700": "2006-01-02T22:04:05Z",
    "Sunday, 06-Nov-94 08:49:37 GMT": "1994-11-06T08:49:37Z",
    "Sun Jan  4 16:29:06 PST 2004": "2004-01-05T00:29:06Z",
    "January 2, 2006 3:04 PM": "2006-01-02T15:04:00Z",
    "2 September 2019 10:00 am": "2019-09-02T10:00:00Z",
    "1st Jan 2020 12:00 +0000": "2020-01-01T12:00:00Z",
    # unpadded minutes and seconds (feedparser reads them)
    "Mon, 1 Jan 2024 9:5:3 GMT": "2024-01-01T09:05:03Z",
    "Mon, 1 Jan 2024 9:5 +0100": "2024-01-01T08:05:00Z",
    # US zones without S or D, in winter (standard time, with or without zone data)
    "Mon, 01 Jan 2024 10:00:00 ET": "2024-01-01T15:00:00Z",
    "Mon, 01 Jan 2024 10:00:00 CT": "2024-01-01T16:00:00Z",
    "Mon, 01 Jan 2024 10:00:00 mt": "2024-01-01T17:00:00Z",
    "Mon, 01 Jan 2024 10:00:00 PT": "2024-01-01T18:00:00Z",
    "2024-01-01T10:00:00 PT": "2024-01-01T18:00:00Z",
    # a date without a time is midnight UTC
    "01 Jan 2024": "2024-01-01T00:00:00Z",
    # localized RFC 822 (Portuguese, Spanish, German, French names)
    "Seg, 24 Set 2018 19:42:40 -0300": "2018-09-24T22:42:40Z",
    "sáb, 1 dez 2018 10:00:00 -0200": "2018-12-01T12:00:00Z",
    "mar 24 sep 2018 10:00 +0200": "2018-09-24T08:00:00Z",
    "Mo, 03 Okt 2022 10:00:00 +0200": "2022-10-03T08:00:00Z",
    "3 févr 2022 10:00 +0100": "2022-02-03T09:00:00Z",
    # ISO 8601 / W3CDTF / RFC 3339
    "2017-06-15T10:29:47-07:00": "2017-06-15T17:29:47Z",
    "2016-02-01T17:54:50+01:00": "2016-02-01T16:54:50Z",
    "2017-09-14T18:03:34.000Z": "2017-09-14T18:03:34Z",
    "2024-01-02T03:04:05.123456789Z": "2024-01-02T03:04:05Z",
    "2024-01-02T03:04:05Z": "2024-01-02T03:04:05Z",
    "2024-01-02t03:04:05z": "2024-01-02T03:04:05Z",
    "2024-01-02 03:04:05": "2024-01-02T03:04:05Z",
    "2024-01-02T03:04+02:00": "2024-01-02T01:04:00Z",
    "2024-01-02T03:04:05+0530": "2024-01-01T21:34:05Z",
    "2024-01-02T03:04:05 GMT": "2024-01-02T03:04:05Z",
    "2024-01-02T03:04:05 EST": "2024-01-02T08:04:05Z",
    "2024-1-2 3:04:05": "2024-01-02T03:04:05Z",
    "2024-01-02": "2024-01-02T00:00:00Z",
    "20240102T030405Z": "2024-01-02T03:04:05Z",
    # ISO 8601 ordinal dates (the year's nth day): feedparser reads 2024-123 as December 1st
    "2024-123": "2024-05-02T00:00:00Z",
    "2024-123T10:00:00Z": "2024-05-02T10:00:00Z",
    "2024-123 10:00:00 +0200": "2024-05-02T08:00:00Z",
    "2024123T100000Z": "2024-05-02T10:00:00Z",
    "2024-366": "2024-12-31T00:00:00Z",
    "2024-001": "2024-01-01T00:00:00Z",
    # year first with slashes (some CMSs): feedparser misreads these as November 1st
    "2024/01/02 10:00:00 +0900": "2024-01-02T01:00:00Z",
    "1997/08/23 03:52:46": "1997-08-23T03:52:46Z",
    "2024/1/2": "2024-01-02T00:00:00Z",
    # feedparser's handlers as the last resort (Greek, Perforce), result checked against input
    "Κυρ, 11 Ιούλ 2004 12:00:00 EST": "2004-07-11T17:00:00Z",
    "Fri, 2006/09/15 08:19:53 EDT": "2006-09-15T12:19:53Z",
}

NOT_DATES = [
    "",
    "   ",
    "garbage",
    "yesterday",
    "12",
    "2024",  # a year alone: the day would be invented
    "2024-02",  # a year and month: same
    "Mon, 31 Feb 2024 10:00:00 GMT",  # Feb 31
    "Mon, 30 Feb 2024",
    "2024-02-30T10:00:00Z",
    "2024-13-01",
    "Mon, 01 Jan 2024 25:00:00 GMT",
    "Mon, 01 Jan 2024 10:61:00 GMT",
    "Mon, 01 Jan 2024 10:00:00 +2400",
    "Mon, 02 Mar 2026 09:00:00 +2400",  # feedparser shifted it a day, which its guard allowed
    "2026-03-02T09:00:00+24:00",
    "2026年3月",  # no day
    "2026年3月2日 凌晨3点",  # a marker not known: unreadable (the fetch time), not midnight
    "2026年3月2日 下午",  # an afternoon without its hour
    "32 Jan 2024",
    "01/02/2024",  # day/month order unknowable
    "2024/01-02",  # mixed separators
    "2024/02/30",
    "Jan Feb 2024",
    "Mon, 01 Jan 2024 10:00:00 GMT" + "x" * 300,  # absurdly long
    "9999-12-31T23:59:59-14:00",  # beyond datetime's range once converted to UTC
    "2023-366",  # no 366th day in 2023
    "2024-000",
    "0000-001",  # no year 0
    "2024123",  # seven digits alone: no ordinal date without its hyphen
    "Mon, 01 Jan 2024 10:00:00 ET PST",  # two zones: which one is meant is unknowable
    "Mon, 01 Jan 2024 10:00:00 EST PST",  # two fixed ones too (the last one was taken)
    "Mon, 01 Jan 2024 10:00:00 PST ET",
    "Mon, 01 Jan 2024 10:00:00 GMT America/New_York",
    "Mon, 01 Jan 2024 10:00:00 ET ET",
]


@pytest.mark.parametrize(("text", "expected"), REAL_WORLD_DATES.items())
def test_real_world_dates(text: str, expected: str) -> None:
    moment = parse_date(text)
    assert moment is not None, text
    assert moment.utcoffset() == timedelta(0)
    assert format_timestamp(moment) == expected


@pytest.mark.parametrize("text", NOT_DATES)
def test_garbage_and_out_of_range_give_none(text: str) -> None:
    assert parse_date(text) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2021-07-04 09:05:06 PM", "2021-07-04T21:05:06Z"),
        ("2021/07/04 9:05 pm", "2021-07-04T21:05:00Z"),
        ("2021-07-04 12:30:00 AM", "2021-07-04T00:30:00Z"),
        ("2021-07-04 12:30 p.m.", "2021-07-04T12:30:00Z"),
        ("2021-07-04T09:05:06 PM+02:00", "2021-07-04T19:05:06Z"),
        ("2021-07-04 09:05 PM EST", "2021-07-05T02:05:00Z"),
    ],
)
def test_an_iso_date_on_a_12_hour_clock_keeps_its_half_day(text: str, expected: str) -> None:
    """feedparser (the last resort for them) dropped the PM: twelve hours early."""
    assert _stamp(parse_date(text)) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024年1月2日", "2024-01-02T00:00:00Z"),  # feedparser alone: 2024-11-01
        ("2026年03月02日 09:00", "2026-03-02T09:00:00Z"),
        ("2026年3月2日 星期一 9时5分", "2026-03-02T09:05:00Z"),
        ("2026年03月02日(月) 09:00:30", "2026-03-02T09:00:30Z"),
        ("2026年3月2日 09:00 +0800", "2026-03-02T01:00:00Z"),
        ("2026年3月2日 下午3:00", "2026-03-02T15:00:00Z"),
        ("2026年3月2日 午後3時5分", "2026-03-02T15:05:00Z"),
        ("2026年3月2日 上午12:30", "2026-03-02T00:30:00Z"),
        ("2026年3月2日 15時", "2026-03-02T15:00:00Z"),
        ("2026-03-02 下午 3:05:09", "2026-03-02T15:05:09Z"),  # feedparser: midnight
        ("2026/3/2 下午 3:05:09", "2026-03-02T15:05:09Z"),
        ("2026-03-02 오후 3:05:09", "2026-03-02T15:05:09Z"),
        ("2026. 3. 2. 오전 11:05:09", "2026-03-02T11:05:09Z"),
        ("2026년 3월 2일 오후 3:05", "2026-03-02T15:05:00Z"),
        ("2026-03-02 오후 3:05 +0900", "2026-03-02T06:05:00Z"),
    ],
)
def test_chinese_japanese_and_korean_dates_are_read(text: str, expected: str) -> None:
    """Chinese feeds are in scope (the seed's gb2312 rule): their dates were stored as the
    fetch time. Without a zone, UTC, as every zone-less date. A numeric date with a half-day
    marker (.NET's zh-TW and ko-KR dates) was read by feedparser as its midnight."""
    assert _stamp(parse_date(text)) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Mon, 01 Jan 0001 00:00:00 +0000", "0001-01-01T00:00:00Z"),  # Go's zero time
        ("0999-06-01T12:00:00Z", "0999-06-01T12:00:00Z"),
        ("0050-01-01T00:00:00Z", "0050-01-01T00:00:00Z"),
    ],
)
def test_years_before_1000_keep_four_digits(text: str, expected: str) -> None:
    """Stored timestamps order as text and read back as ISO 8601 only with four digits."""
    moment = parse_date(text)
    assert moment is not None
    assert format_timestamp(moment) == expected
    assert parse_timestamp(expected) == moment
    assert datetime.fromisoformat(expected) == moment


def _has_zone_data() -> bool:
    try:
        zoneinfo.ZoneInfo("America/New_York")
    except zoneinfo.ZoneInfoNotFoundError:
        return False
    return True


needs_zone_data = pytest.mark.skipif(
    not _has_zone_data(), reason="no time zone data on this machine (tzdata is optional)"
)


@needs_zone_data
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # US zones without S or D follow daylight saving time (feedparser: always standard)
        ("Fri, 05 Jul 2024 10:00:00 ET", "2024-07-05T14:00:00Z"),
        ("Fri, 05 Jul 2024 10:00:00 CT", "2024-07-05T15:00:00Z"),
        ("Fri, 05 Jul 2024 10:00:00 MT", "2024-07-05T16:00:00Z"),
        ("Fri, 05 Jul 2024 10:00:00 PT", "2024-07-05T17:00:00Z"),
        ("Sun, 03 Nov 2024 00:30:00 ET", "2024-11-03T04:30:00Z"),  # before the change back
        ("Mon, 04 Nov 2024 00:30:00 ET", "2024-11-04T05:30:00Z"),
        ("2024-07-05 10:00:00 ET", "2024-07-05T14:00:00Z"),
        # IANA zone names (feedparser ignores them: these were read as UTC, or not at all)
        ("Mon, 01 Jan 2024 10:00:00 Etc/UTC", "2024-01-01T10:00:00Z"),
        ("Fri, 05 Jul 2024 10:00:00 America/New_York", "2024-07-05T14:00:00Z"),
        ("Fri, 05 Jan 2024 10:00:00 America/New_York", "2024-01-05T15:00:00Z"),
        ("Fri, 05 Jul 2024 10:00:00 Europe/Berlin", "2024-07-05T08:00:00Z"),
        ("5 Jul 2024 10:00 America/Argentina/Buenos_Aires", "2024-07-05T13:00:00Z"),
        ("Fri, 05 Jul 2024 10:00:00 Etc/GMT-3", "2024-07-05T07:00:00Z"),  # POSIX signs
        ("2024-07-05T10:00:00 Europe/Berlin", "2024-07-05T08:00:00Z"),
        ("Fri, 05 Jul 2024 10:00:00 +0000 America/New_York", "2024-07-05T10:00:00Z"),
    ],
)
def test_zones_with_rules_follow_their_rules(text: str, expected: str) -> None:
    moment = parse_date(text)
    assert moment is not None, text
    assert format_timestamp(moment) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Fri, 05 Jul 2024 10:00:00 Europe/Nowhere",  # feedparser: 10:00 UTC
        "Fri, 05 Jul 2024 10:00:00 europe/berlin",  # IANA names are case-sensitive
        "2024-07-05T10:00:00 America/Nowhere",
        "Fri, 05 Jul 2024 10:00:00 Etc/UTC/Extra",
    ],
)
def test_zone_names_not_found_leave_the_date_unread(text: str) -> None:
    """Read as UTC, the date would be hours off; unread, the item gets its fetch time."""
    assert parse_date(text) is None


@pytest.fixture
def no_zone_data(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As on a machine without zone data: no system database, no tzdata package."""
    saved_path = zoneinfo.TZPATH
    for name in [name for name in sys.modules if name.split(".")[0] == "tzdata"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tzdata", None)  # makes "import tzdata" fail
    zoneinfo.reset_tzpath(to=[])
    zoneinfo.ZoneInfo.clear_cache()
    dates_zones.ruled_zone.cache_clear()
    try:
        yield
    finally:
        zoneinfo.reset_tzpath(to=saved_path)
        zoneinfo.ZoneInfo.clear_cache()
        dates_zones.ruled_zone.cache_clear()


@pytest.mark.usefixtures("no_zone_data")
def test_without_zone_data_zone_names_leave_dates_unread_and_us_zones_are_standard() -> None:
    """tzdata is no dependency: a machine without zone data must not fail a feed."""
    assert parse_date("Fri, 05 Jul 2024 10:00:00 America/New_York") is None
    assert parse_date("2024-07-05T10:00:00 Etc/UTC") is None
    assert parse_date("Fri, 05 Jul 2024 10:00:00 ET") == datetime(2024, 7, 5, 15, tzinfo=UTC)
    assert parse_date("Fri, 05 Jul 2024 10:00:00 PT") == datetime(2024, 7, 5, 18, tzinfo=UTC)
    assert parse_date("Fri, 05 Jul 2024 10:00:00 GMT") == datetime(2024, 7, 5, 10, tzinfo=UTC)


def test_fractional_seconds_are_kept_below_the_second() -> None:
    assert parse_date("2024-01-02T03:04:05.25Z") == datetime(2024, 1, 2, 3, 4, 5, 250000, UTC)


def test_zone_table_has_no_surprises() -> None:
    """Every named zone is a whole number of quarter hours within +-14 h; Z is UTC."""
    assert ZONE_MINUTES["z"] == 0
    assert not {"j", "z"} & MILITARY_ZONES
    for name, minutes in ZONE_MINUTES.items():
        assert name == name.lower()
        assert -14 * 60 <= minutes <= 14 * 60, name
        assert minutes % 15 == 0, name


def test_no_month_name_means_two_months() -> None:
    seen: dict[str, int] = {}
    for number, names in enumerate(MONTH_NAMES + OTHER_MONTH_NAMES, start=1):
        for name in names:
            assert seen.setdefault(name, (number - 1) % 12 + 1) == (number - 1) % 12 + 1, name


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Δευ, 01 Ιαν 2024 10:00:00 GMT", "2024-01-01T10:00:00Z"),
        ("Τετ, 03 Μαρ 2024 10:00:00 +0200", "2024-03-03T08:00:00Z"),
        ("Κυρ, 11 Ιουλ 2004 12:00:00 EST", "2004-07-11T17:00:00Z"),
        ("Πεμ, 5 Σεπτεμβρίου 2024 10:00:00 +0300", "2024-09-05T07:00:00Z"),
        ("2004-január-01", "2004-01-01T00:00:00Z"),
        ("2004-július-13T9:15-05:00", "2004-07-13T14:15:00Z"),
        ("2004-február-29T12:00+01:00", "2004-02-29T11:00:00Z"),
        ("2024-máj-05 10:00", "2024-05-05T10:00:00Z"),
        ("2004. január 1. 12:00", "2004-01-01T12:00:00Z"),
        ("2004. júl. 13. 09:15:00 +0200", "2004-07-13T07:15:00Z"),
        ("Do, 1. Jan 2004 12:00:00 +0100", "2004-01-01T11:00:00Z"),
        ("1. Januar 2004 12:00", "2004-01-01T12:00:00Z"),
    ],
)
def test_greek_and_hungarian_month_names_are_read(text: str, expected: str) -> None:
    """feedparser's tables misspell some (``máujus``, ``Μάώ``) and lack the unaccented Greek
    forms; its W3C reader, tried first, took ``2004-január-01`` for November 1st, which its
    guard here let through (any word counted for any month), and a Greek date on the day that
    numbers its month (``01 Ιαν``) was refused. They are read as the other languages are, as
    is the ordinal dot of Hungarian and German numbers (``2004. január 1.``, ``1. Januar``)."""
    assert _stamp(parse_date(text)) == expected


def _stamp(moment: datetime | None) -> str | None:
    return None if moment is None else format_timestamp(moment)


@pytest.mark.parametrize("text", ["2004-foo-01", "2004-kedd-01T10:00+01:00"])
def test_a_word_that_is_no_month_leaves_feedparsers_month_unsupported(text: str) -> None:
    assert parse_date(text) is None


@pytest.mark.parametrize("day", ["01", "02", "11"])
def test_an_unknown_zone_word_is_read_as_utc_on_every_day(day: str) -> None:
    """As feedparser reads it. Refusing the date would store the fetch time instead: right
    within a polling interval for a new item, but days or months off for every item of a
    feed's first fetch or a restore, and their order lost; an unknown zone is at most 14
    hours off, the day and the order kept. It was refused only when the day's digits were
    the month's (``01 Jan``), by accident of the guard above."""
    expected = f"2024-01-{day}T10:00:00Z"
    assert _stamp(parse_date(f"Mon, {day} Jan 2024 10:00:00 XYZ")) == expected
    assert _stamp(parse_date(f"2024-01-{day}T10:00:00 XYZ")) == expected
    assert parse_date(f"Mon, {day} Jan 2024 10:00:00 ET PST") is None


@given(st.text(max_size=80))
def test_arbitrary_text_never_raises(text: str) -> None:
    moment = parse_date(text)
    assert moment is None or moment.utcoffset() == timedelta(0)


DIGITS_OF_EVERY_KIND = (
    "0123456789\u00b2\u00b3\u00b9\u2070\u2074\u2082\u2460\u0661\u0662\uff11\uff12"
)
"""ASCII digits, digits int() refuses though ``str.isdigit()`` says yes (superscripts,
subscripts, circled), and decimal digits of other scripts that int() reads (Arabic-Indic,
fullwidth)."""


@given(
    st.lists(
        st.text(DIGITS_OF_EVERY_KIND, min_size=1, max_size=4)
        | st.sampled_from(["Jan", "Mon,", "GMT", "+0200", ":", "-", "T", "Z", "10:00:00"]),
        max_size=8,
    ).map(" ".join)
)
def test_dates_written_with_any_kind_of_digit_never_raise(text: str) -> None:
    """``01 Jan \u00b2\u2070\u00b2\u2074`` failed its whole feed: a year of superscript digits
    passed ``isdigit()`` and int() refused it."""
    moment = parse_date(text)
    assert moment is None or moment.utcoffset() == timedelta(0)


@given(
    st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1)),
    st.sampled_from(["%a, %d %b %Y %H:%M:%S GMT", "%Y-%m-%dT%H:%M:%SZ", "%d %b %Y %H:%M:%S +0000"]),
)
def test_formatted_datetimes_round_trip(moment: datetime, pattern: str) -> None:
    expected = moment.replace(microsecond=0, tzinfo=UTC)
    assert parse_date(moment.strftime(pattern)) == expected


@given(
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    st.sampled_from(
        ["{a}, {d:02d} {b} {y:04d} {t}", "{d} {b} {y:04d} {t}", "{a},{d} {b}  {y:04d} {t}"]
    ),
    st.booleans(),
    st.sampled_from(["GMT", "Z", "PST", "EDT", "+0530", "-1100", "+0000", "J", "XYZ", "+2400"]),
    st.sampled_from([str, str.upper, str.lower]),
)
def test_the_common_rfc822_shortcut_reads_as_the_general_reader(
    moment: datetime, pattern: str, seconds: bool, zone: str, case: Callable[[str], str]
) -> None:
    """parse_date reads the usual RSS date shape on a shortcut; the token reader that reads
    every other spelling must give the same answer (or refuse it alike)."""
    text = pattern.format(
        a=moment.strftime("%a"),
        d=moment.day,
        b=moment.strftime("%b"),
        y=moment.year,
        t=moment.strftime("%H:%M:%S" if seconds else "%H:%M"),
    )
    text = case(f"{text} {zone}")
    readers = DIGIT_FIRST_READERS if text[0].isdigit() else LETTER_FIRST_READERS
    without_shortcut = next(filter(None, (reader(text) for reader in readers)), None)
    assert parse_date(text) == without_shortcut


@pytest.mark.parametrize(
    "text",
    [
        "Mon, 01 Jan 0001 05:56:36 XYZ",
        "Mon, 02 Jan 0001 18:02 +2400",
        "Fri, 31 Dec 9999 23:59:59 -0060",
        "Fri, 31 Dec 9999 23:00:00 XYZ",
    ],
)
def test_dates_at_the_ends_of_the_calendar_do_not_raise(text: str) -> None:
    """.NET writes DateTime.MinValue as 0001-01-01; the plausibility check looks a day
    either side, which must not step off the calendar."""
    moment = parse_date(text)
    assert moment is None or moment.utcoffset() == timedelta(0)


@given(st.datetimes(min_value=datetime(1000, 1, 1), max_value=datetime(9999, 12, 31)))
def test_stored_timestamps_read_back_exactly(moment: datetime) -> None:
    expected = moment.replace(microsecond=0, tzinfo=UTC)
    assert parse_timestamp(format_timestamp(expected)) == expected


@pytest.mark.parametrize(
    "text", ["2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z", "2026-03-01", "2026-03-01T12:00:00"]
)
def test_what_is_not_a_stored_timestamp_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"does not match format|out of range|must be in"):
        parse_timestamp(text)
