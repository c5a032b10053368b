"""Reading Retry-After, cache freshness and permanent redirects from headers (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from feedcollector.http_hints import (
    MAX_HINT,
    freshness,
    http_date,
    permanent_target,
    readable_retry_after,
    response_hints,
    retry_after,
)
from feedcollector.models import ResponseHints

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def http(moment: datetime) -> str:
    return format_datetime(moment, usegmt=True)


def test_http_dates_in_all_three_forms() -> None:
    expected = datetime(1994, 11, 6, 8, 49, 37, tzinfo=UTC)
    assert http_date("Sun, 06 Nov 1994 08:49:37 GMT") == expected
    assert http_date("Sunday, 06-Nov-94 08:49:37 GMT") == expected
    assert http_date("Sun Nov  6 08:49:37 1994") == expected
    for garbage in (None, "", "  ", "0", "-1", "soon", "Sun, 99 Nov 1994 99:99:99 GMT"):
        assert http_date(garbage) is None
    assert http_date("Fri, 31 Dec 9999 23:59:59 -2359") is None, "past the calendar in UTC"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("120", timedelta(seconds=120)),
        (" 3600 ", timedelta(hours=1)),
        (http(NOW + timedelta(hours=2)), timedelta(hours=2)),
        ("0", None),
        (http(NOW - timedelta(minutes=5)), None),
        ("-30", None),
        ("1.5", None),
        ("next tuesday", None),
        ("", None),
        ("9" * 40, MAX_HINT),
        ("9" * 5000, MAX_HINT),
        ("0000000000000005", timedelta(seconds=5)),
        ("Fri, 31 Dec 9999 23:59:59 -2359", None),
    ],
    ids=[
        "seconds",
        "spaces",
        "http-date",
        "zero",
        "past-date",
        "negative",
        "fraction",
        "garbage",
        "empty",
        "huge",
        "more-digits-than-int-reads",
        "leading-zeros",
        "past-the-calendar",
    ],
)
def test_retry_after_both_forms_and_what_is_ignored(
    header: str, expected: timedelta | None
) -> None:
    assert retry_after(ResponseHints(retry_after=header), NOW) == expected


@pytest.mark.parametrize(
    ("header", "readable"),
    [
        ("120", True),
        (" 0 ", True),
        (http(NOW - timedelta(minutes=5)), True),
        ("-5", False),
        ("120.5", False),
        ("+5", False),
        ("soon", False),
        ("", False),
    ],
)
def test_only_the_two_forms_of_retry_after_are_readable(header: str, readable: bool) -> None:
    """Zero and a past date are read (and then ignored); anything else is not read at all."""
    assert readable_retry_after(header) is readable


def test_retry_after_dates_count_from_the_servers_own_clock() -> None:
    server_clock = NOW - timedelta(hours=5)  # the server is five hours behind
    hints = ResponseHints(
        retry_after=http(server_clock + timedelta(minutes=10)), date=http(server_clock)
    )
    assert retry_after(hints, NOW) == timedelta(minutes=10)
    assert retry_after(None, NOW) is None
    assert retry_after(ResponseHints(), NOW) is None


@pytest.mark.parametrize(
    ("hints", "expected"),
    [
        (ResponseHints(cache_control="public, max-age=7200"), timedelta(hours=2)),
        (ResponseHints(cache_control='max-age="600"'), timedelta(minutes=10)),
        (ResponseHints(cache_control="max-age=7200", age="600"), timedelta(minutes=110)),
        (ResponseHints(cache_control="max-age=60", age="600"), timedelta(0)),
        (ResponseHints(cache_control="no-cache, max-age=7200"), timedelta(0)),
        (ResponseHints(cache_control="No-Store"), timedelta(0)),
        (ResponseHints(cache_control="s-maxage=7200"), timedelta(0)),
        (ResponseHints(cache_control="x-max-age=7200"), timedelta(0)),
        (ResponseHints(cache_control='no-cache="Set-Cookie", max-age=60'), timedelta(minutes=1)),
        (ResponseHints(cache_control="x-no-cache, max-age=60"), timedelta(minutes=1)),
        (ResponseHints(cache_control="max-age=0000000000060"), timedelta(minutes=1)),
        (ResponseHints(expires="Fri, 31 Dec 9999 23:59:59 -2359"), timedelta(0)),
        (ResponseHints(cache_control="max-age=" + "9" * 30), MAX_HINT),
        (ResponseHints(cache_control="max-age=" + "9" * 5000, age="9" * 5000), timedelta(0)),
        (ResponseHints(expires=http(NOW + timedelta(hours=3))), timedelta(hours=3)),
        (
            ResponseHints(
                expires=http(NOW + timedelta(hours=1)), date=http(NOW - timedelta(hours=1))
            ),
            timedelta(hours=2),
        ),
        (ResponseHints(expires="0"), timedelta(0)),
        (ResponseHints(expires=http(NOW - timedelta(days=1))), timedelta(0)),
        (
            ResponseHints(cache_control="max-age=60", expires=http(NOW + timedelta(days=1))),
            timedelta(minutes=1),
        ),
        (ResponseHints(), timedelta(0)),
        (None, timedelta(0)),
    ],
    ids=[
        "max-age",
        "quoted",
        "minus-age",
        "older-than-max-age",
        "no-cache",
        "no-store",
        "shared-caches-only",
        "another-directive-ending-in-max-age",
        "no-cache-of-named-fields-only",
        "another-directive-ending-in-no-cache",
        "leading-zeros",
        "expires-past-the-calendar",
        "huge",
        "more-digits-than-int-reads",
        "expires",
        "expires-minus-date",
        "invalid-expires",
        "past-expires",
        "max-age-wins",
        "nothing",
        "no-answer",
    ],
)
def test_freshness_from_cache_control_and_expires(
    hints: ResponseHints | None, expected: timedelta
) -> None:
    assert freshness(hints, NOW) == expected


def test_response_hints_pick_the_headers() -> None:
    headers = {"Retry-After": "5", "Cache-Control": "max-age=1", "Expires": "x", "Date": "d"}
    assert response_hints(headers) == ResponseHints("5", "max-age=1", "x", "d", None)


@pytest.mark.parametrize(
    ("hops", "expected"),
    [
        ([], None),
        ([(301, "https://b/")], "https://b/"),
        ([(301, "https://b/"), (308, "https://c/")], "https://c/"),
        ([(301, "https://b/"), (302, "https://c/")], "https://b/"),
        ([(302, "https://b/"), (301, "https://c/")], None),
        ([(307, "https://b/")], None),
        ([(303, "https://b/")], None),
        ([(301, "https://b/feed#latest")], "https://b/feed"),
    ],
)
def test_only_the_leading_permanent_redirects_move_a_feed(
    hops: list[tuple[int, str]], expected: str | None
) -> None:
    assert permanent_target(hops) == expected
