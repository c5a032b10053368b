"""The rules for untrusted text: each holds for any text at all."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from lxml import etree

from feedcollector.safe_text import (
    ERROR_CHARS,
    has_half_pair,
    one_line,
    stored_error,
    whole_pairs,
    xml_chars,
)

ANY_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, categories=None))


@given(ANY_TEXT, st.none() | st.integers(1, 50))
def test_one_line_is_one_line_without_controls_within_its_limit(
    text: str, limit: int | None
) -> None:
    shown = one_line(text, limit)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in shown)
    assert not any(0x202A <= ord(c) <= 0x202E or 0x2066 <= ord(c) <= 0x2069 for c in shown)
    assert "\n" not in shown
    assert shown == shown.strip()
    assert limit is None or len(shown) <= limit


def test_one_line_examples() -> None:
    assert one_line("\x1b[31mred\x1b[0m  and\nbell\x07") == "[31mred [0m and bell"
    assert one_line("a" * 10, 5) == "aaaa\u2026"
    assert (
        one_line("Title \u202egnp.exe\u202c <https://a.example/>")
        == "Title gnp.exe <https://a.example/>"
    )
    assert one_line("\u05e9\u05dc\u05d5\u05dd\u200f!") == "\u05e9\u05dc\u05d5\u05dd\u200f!"


def test_a_stored_error_keeps_why_after_a_huge_url() -> None:
    """httpx says a 70,000-character URL is too long after quoting it whole."""
    error = f"image: {'https://a.example/' + 'x' * 70_000} is not a valid URL (URL too long)"
    kept = stored_error(error)
    assert len(kept) <= ERROR_CHARS
    assert kept.startswith("image: https://a.example/xxx")
    assert kept.endswith("is not a valid URL (URL too long)")
    assert stored_error("short") == "short"


@given(ANY_TEXT)
def test_xml_chars_are_what_an_xml_document_holds(text: str) -> None:
    kept = whole_pairs(xml_chars(text))
    element = etree.Element("outline", title=kept)  # lxml refuses anything XML cannot hold
    assert etree.fromstring(etree.tostring(element)).get("title") == kept


@given(ANY_TEXT)
def test_whole_pairs_always_encode_as_utf_8(text: str) -> None:
    whole = whole_pairs(text)
    whole.encode("utf-8")
    assert not has_half_pair(whole)
    assert has_half_pair(text) == (whole != text)
