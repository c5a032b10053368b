"""UTF-8 with windows-1252 mixed in: a UTF-8 template around names from a legacy database,
a Word paste in a UTF-8 feed, a server that labels a feed Latin-1 while its newer entries
are UTF-8.

Read as one encoding, such a body loses either way: as UTF-8 its stray bytes become U+FFFD,
as windows-1252 every UTF-8 character becomes mojibake (``Ã©`` for ``é``). Where every
character its valid multi-byte UTF-8 sequences form is one windows-1252 has too (Western
text), the stray bytes almost surely come from a windows-1252 or Latin-1 source, and legacy
text forms such sequences only as mojibake: the body is read as UTF-8, its other bytes as
windows-1252. Other text (a Chinese feed's stray bytes are no windows-1252) is left to the
rest of :mod:`.decode`.
"""

from __future__ import annotations

import codecs
import re

WINDOWS_1252 = "windows-1252"
_ERRORS = "feedcollector.stray-windows-1252"
_WINDOWS_1252_ONLY = bytes(range(0x80, 0x100)).decode("cp1252", "ignore")
"""The non-ASCII characters windows-1252 writes (its five unassigned bytes left out)."""
_WESTERN_LEADS = sorted({character.encode()[0] for character in _WINDOWS_1252_ONLY})
"""The first bytes of those characters' UTF-8: C2, C3, C5, C6, CB and E2."""
_NON_ASCII_RE = re.compile(r"[^\x00-\x7f\ufffd]")
"""A character of a valid multi-byte UTF-8 sequence (U+FFFD marks the invalid bytes)."""
_NOT_WINDOWS_1252_RE = re.compile(rf"[^\x00-\x7f\ufffd{re.escape(_WINDOWS_1252_ONLY)}]")
"""A character windows-1252 cannot write: the text is not (only) Western."""


def read_mixed(payload: bytes) -> tuple[str, int] | None:
    """``payload`` read as UTF-8 with its invalid bytes read as windows-1252, and how many
    byte sequences were; None unless it holds Western UTF-8 and nothing but."""
    text = payload.decode("utf-8", "replace")
    if not _NON_ASCII_RE.search(text) or _NOT_WINDOWS_1252_RE.search(text):
        return None
    return payload.decode("utf-8", _ERRORS), text.count("\ufffd")


def may_hold_western_utf8(payload: bytes) -> bool:
    """Whether a lead byte of a windows-1252 character's UTF-8 is followed by a continuation
    byte somewhere: those lead bytes (``Â``, ``Ã``, ``â``...) are rare in windows-1252 text
    and rarer still before one of its symbols, so a labelled body seldom pays for more than a
    few ``find`` calls before :func:`read_mixed` decodes it."""
    end = len(payload) - 1
    for lead in _WESTERN_LEADS:
        at = payload.find(lead)
        while at != -1 and at < end:
            if 0x80 <= payload[at + 1] <= 0xBF:
                return True
            at = payload.find(lead, at + 1)
    return False


def _stray_bytes_as_windows_1252(error: UnicodeError) -> tuple[str, int]:
    """Codec error handler: the bytes UTF-8 could not read, read as windows-1252 (U+FFFD for
    its five unassigned bytes)."""
    if not isinstance(error, UnicodeDecodeError):
        raise error
    return error.object[error.start : error.end].decode("cp1252", "replace"), error.end


codecs.register_error(_ERRORS, _stray_bytes_as_windows_1252)
