"""Text from feeds, servers and files, made safe for where it goes: a terminal line, an XML
document, a UTF-8 database, int(). Pure; each rule lives here once."""

from __future__ import annotations

import re

QUOTED_CHARS = 200
"""Characters of a feed's words (a title, a date's text) a log line quotes: feeds choose
their size."""

_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_DIRECTION_OVERRIDES = re.compile("[\u202a-\u202e\u2066-\u2069]")
"""Bidirectional embeddings, overrides and isolates: one a title leaves open reverses the rest
of the terminal line (the feed's URL, the next column). The marks (LRM, RLM) stay: they
order only what is around them."""
_NOT_IN_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_HALF_PAIR = re.compile("[\ud800-\udfff]")


ERROR_CHARS = 2000
"""Characters of an error message a row keeps (``last_error``)."""


def stored_error(text: str) -> str:
    """An error message fit for ``last_error``: its start and its end when it is longer than
    :data:`ERROR_CHARS` (messages quote a URL first, which a feed may make 70,000 characters
    long, and say why last)."""
    if len(text) <= ERROR_CHARS:
        return text
    half = (ERROR_CHARS - 3) // 2
    return f"{text[:half]} \u2026 {text[-half:]}"


def without_controls(text: str) -> str:
    """``text`` with each control character (a line break, an escape sequence) a space."""
    return _CONTROLS.sub(" ", text)


def one_line(text: str, limit: int | None = None) -> str:
    """What a feed or a server wrote, fit for one line of a log or a terminal: control
    characters gone (an escape sequence would drive the terminal), and the bidirectional
    overrides (:data:`_DIRECTION_OVERRIDES`), whitespace collapsed, at most ``limit``
    characters."""
    text = " ".join(_DIRECTION_OVERRIDES.sub("", _CONTROLS.sub(" ", text)).split())
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "\u2026"


def xml_chars(text: str) -> str:
    """``text`` without the characters XML 1.0 cannot hold: C0 controls but tab and line
    breaks, U+FFFE and U+FFFF (a JSON escape or a YAML one can write them)."""
    return _NOT_IN_XML.sub("", text)


def has_half_pair(text: str) -> bool:
    """Whether ``text`` holds half of a UTF-16 surrogate pair (``"\\ud800"`` alone, as JSON
    and YAML escapes can write): no UTF-8 text holds one, so no database can store it."""
    return _HALF_PAIR.search(text) is not None


def whole_pairs(text: str) -> str:
    """``text`` with each half of a UTF-16 pair replaced by U+FFFD."""
    return _HALF_PAIR.sub("\ufffd", text)


def clipped_int(digits: str, limit: int) -> int:
    """The number decimal ``digits`` write, at most ``limit``. int() is never handed more
    digits than ``limit`` has: it refuses over 4,300, and a feed or a header may hold more.
    Leading zeros are not counted (``0000000000000005`` is 5)."""
    digits = digits.lstrip("0") or "0"
    return limit if len(digits) > len(str(limit)) else min(int(digits), limit)
