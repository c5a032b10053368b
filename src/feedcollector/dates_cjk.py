"""Chinese, Japanese and Korean dates (``2026年3月2日 下午3:00``, ``2026-03-02 오후 3:00``)
rewritten for the ISO reader of :mod:`.dates`: pure text work, no date is computed here."""

from __future__ import annotations

import re

_CJK_DATE_RE = re.compile(r"(\d{4})\s*[年년]\s*(\d{1,2})\s*[月월]\s*(\d{1,2})\s*[日号일]")
_NUMERIC_DATE_RE = re.compile(r"(\d{4})\s*([-/.])\s*(\d{1,2})\s*\2\s*(\d{1,2})\b\.?")
"""``2026-03-02``, ``2026/3/2``, ``2026. 3. 2.``: the date before a half-day marker, as .NET
writes a date of the ko-KR or zh-TW culture (``2026-03-02 오후 3:00:00``)."""
_CJK_HALF_DAY_RE = re.compile(r"(上午|午前|早上|下午|午後|晚上|오전|오후)\s*")
_CJK_TIME_RE = re.compile(
    r"(?P<half>[\x01\x02])?(?P<h>\d{1,2})(?:\s*[时時点]\s*(?:(?P<mi>\d{1,2})\s*分"
    r"(?:\s*(?P<s>\d{1,2})\s*秒)?)?|:(?P<mi2>\d{2})(?::(?P<s2>\d{2}))?)"
)
_CJK_WEEKDAY_RE = re.compile(r"(?:星期|礼拜|周|週)[一二三四五六日天]|[(（][月火水木金土日][)）]")
_PM = frozenset(("下午", "午後", "晚上", "오후"))
_MORNING, _AFTERNOON = "\x01", "\x02"
"""Half-day markers while a date is rewritten (characters no date text holds)."""
_HALF_DAYS = frozenset((_MORNING, _AFTERNOON))


def is_cjk_date(text: str) -> bool:
    """Whether ``text`` (not ASCII) is for :func:`iso_from_cjk`: a CJK date or a half-day
    marker, which feedparser dropped with the time after it (midnight)."""
    return "年" in text or "년" in text or _CJK_HALF_DAY_RE.search(text) is not None


def iso_from_cjk(text: str) -> str:
    """``2026年03月02日 下午3时5分`` (Chinese, Japanese) as ``2026-03-02 15:05``, weekday
    dropped, for the ISO reader (feedparser read such dates wrong, so its results for them
    are refused). What is left in CJK script (an unknown marker) makes it unreadable rather
    than wrong: ``-``."""
    text = _CJK_WEEKDAY_RE.sub(" ", text)
    date = _CJK_DATE_RE.search(text)
    if date is not None:
        year, month, day = date[1], date[2], date[3]
    elif (date := _NUMERIC_DATE_RE.search(text)) is not None:
        year, month, day = date[1], date[3], date[4]
    else:
        return "-"
    head = f"{year}-{int(month):02d}-{int(day):02d}"
    rest = _CJK_HALF_DAY_RE.sub(
        lambda m: _AFTERNOON if m[1] in _PM else _MORNING, text[date.end() :]
    )
    rest = _CJK_TIME_RE.sub(_cjk_clock, rest, count=1)
    text = " ".join(f"{text[: date.start()]} {head} {rest}".split())
    unread = any(ord(char) >= 0x2E80 or char in _HALF_DAYS for char in text)
    return "-" if unread else text


def _cjk_clock(match: re.Match[str]) -> str:
    """``下午3时5分`` (its marker replaced by then) or ``15:00`` as ``15:05``; a half-day
    marker moves the hour (12 in the morning is midnight, 3 in the afternoon is 15)."""
    hour = int(match["h"]) % 12 if match["half"] else int(match["h"])
    hour += 12 if match["half"] == _AFTERNOON else 0
    minute = int(match["mi"] or match["mi2"] or 0)
    second = match["s"] or match["s2"]
    return f"{hour:02d}:{minute:02d}" + (f":{int(second):02d}" if second else "")
