"""Text that publishers mis-encode, repaired as readers expect it, the same way on every path.

Applied to an item's title, link and GUID by :func:`.parse_common.finish_values`, and to its
content and description by the reader that gives them (:mod:`.parse_text`, :mod:`.parse_json`,
the fallback):

1. **Double-encoded UTF-8**, UTF-8 bytes read as latin-1 or windows-1252 and encoded again
   ("CafÃ©" for "Café", "Itâ€™s" for "It’s"). feedparser replaces every value by
   ``value.encode("latin-1").decode("utf-8")`` when that succeeds; this does the same, and
   also with windows-1252 for a value holding one of the marks such text always has ("Ã" of
   an accented letter, "â€" of curly quotes and dashes), which feedparser leaves as it is.
   Both need the whole value to encode, and every non-ASCII character in it to belong to a
   valid UTF-8 sequence: legitimate text is left alone as soon as one accented letter stands
   outside such a pair ("SÃO PAULO", "Ã© means é"). What can still be taken for mojibake is
   a value whose only non-ASCII characters all pair up by chance (an all-caps "CAFÉ" followed
   by a no-break space, and nothing else accented). feedparser's part cannot be turned off
   in the fallback parser, and doing it here too is what keeps a feed that is well-formed
   one day and broken the next on the same text and the same GUIDs. Repeated while it
   applies: text encoded twice over is seen too, and the fallback's values, which feedparser
   repaired once already, then end where the fast path's do.
2. **Windows-1252 code points read as C1 controls** (raw U+0080-U+009F, or ``&#146;``): mapped
   to the characters windows-1252 has there (’ “ ” – € ...), as feedparser and HTML5's numeric
   references do. The five positions windows-1252 leaves undefined (81 8D 8F 90 9D) stay as
   they are, as both leave them.

Upgrades: versions before these repairs stored an item under its GUID as written (an explicit
``<guid>urn:CafÃ©</guid>``, or a fallback from the link or the title as written). Where a repair
changes the GUID, the item carries the one written as well (``ParsedItem.earlier_guid``), and
the store does not insert it when the feed has an item, or a tombstone, under that one.

Upgrading also changes stored text of such items only when they are new: existing items are
never updated.

Cost: nothing for ASCII values (``str.isascii`` is O(1)); any other value is looked at in its
UTF-8 bytes (encoded once, or as lxml serializes them) with memchr-speed searches for the lead
byte of U+0080-U+00BF and for the marks; only a value that has one goes further.
"""

from __future__ import annotations

import re

_UNDEFINED_IN_CP1252 = (0x81, 0x8D, 0x8F, 0x90, 0x9D)
_CP1252_C1 = str.maketrans(
    {
        code: bytes([code]).decode("cp1252")
        for code in range(0x80, 0xA0)
        if code not in _UNDEFINED_IN_CP1252
    }
)
"""U+0080-U+009F -> the windows-1252 character at that byte, read from the codec."""
_C1_IN_UTF8 = re.compile(b"\xc2[\x80-\x9f]")
_LEAD_OF_80_TO_BF = b"\xc2"
"""UTF-8's lead byte of U+0080-U+00BF: of a C1 control, or of the second half of a pair that
UTF-8 read as latin-1 leaves; a value without it and without a mark has nothing to repair."""
_MARKS_RE = re.compile(b"\xc3(?:\x83|\xa2\xe2\x82\xac)")
""""Ã" (the lead of U+00C0-U+00FF) and "â€" (of U+2010-U+203F: ’ “ ” – — …) read as
windows-1252: what double-encoded Western text shows where it has no U+0080-U+00BF."""


def readable(text: str) -> str:
    """``text`` with double-encoded UTF-8 and windows-1252 C1 controls repaired (the same
    object when there is nothing to repair). Looked for in the UTF-8 bytes: one encode, then
    byte searches, is the cheapest test CPython has for a range of characters."""
    if text.isascii():
        return text
    utf8 = text.encode("utf-8", "surrogatepass")
    return repaired(text, utf8) if may_need_repair(utf8) else text


def may_need_repair(utf8: bytes) -> bool:
    """Whether text whose UTF-8 is (or contains) ``utf8`` may have something to repair: a
    few byte searches, for a caller that has the bytes without encoding (lxml's)."""
    return _LEAD_OF_80_TO_BF in utf8 or _has_mark(utf8)


def repaired(text: str, utf8: bytes) -> str:
    """:func:`readable` past its first check; ``utf8`` is ``text`` encoded."""
    while True:  # a successful repair is shorter: this ends
        try:
            repaired = text.encode("latin-1").decode("utf-8")  # feedparser's rule
        except UnicodeError:
            pass
        else:
            if repaired == text:  # ASCII
                return text
            text = repaired
            utf8 = text.encode("utf-8", "surrogatepass")
            continue
        if _C1_IN_UTF8.search(utf8) is not None:
            text = text.translate(_CP1252_C1)
            utf8 = text.encode("utf-8", "surrogatepass")
        if not _has_mark(utf8):
            return text
        try:
            text = text.encode("cp1252").decode("utf-8")
        except UnicodeError:
            return text
        utf8 = text.encode("utf-8", "surrogatepass")


def _has_mark(utf8: bytes) -> bool:
    """Whether ``utf8`` holds a mark. Both start with the byte C3: memchr finds whether there
    is one at all (most text has none), and one regex pass, scanning for that literal byte,
    replaces two searches for short needles, which are several times slower."""
    start = utf8.find(b"\xc3")
    return start >= 0 and _MARKS_RE.search(utf8, start) is not None
