"""UTF-8 with windows-1252 mixed in: a UTF-8 template around names from a legacy database,
a Word paste in a UTF-8 feed, a server that labels a feed Latin-1 while its newer entries
are UTF-8.

Read as one encoding, such a body loses either way: as UTF-8 its stray bytes become U+FFFD,
as windows-1252 every UTF-8 character becomes mojibake (``Ã©`` for ``é``). It is read as
UTF-8 with its other bytes as windows-1252 when two things hold:

- every character its valid multi-byte UTF-8 sequences form is one windows-1252 has too
  (Western text; a Chinese feed's stray bytes are no windows-1252);
- the UTF-8 shows itself as text: a three-byte character (curly quotes, dashes, ``…``,
  ``€``) or an accented letter beside a lowercase ASCII one (``caf|é``, ``é|té``). Legacy
  text forms two-byte sequences by accident, but between capitals, spaces and symbols: a
  Portuguese ``IRMÃ”`` (C3 94), a Ukrainian ``Ві`` in windows-1251 (C2 B3), a Russian ``В``
  before a no-break space. One such pair overruled a label, or charset detection, for the
  whole body.

Anything else is left to the rest of :mod:`.decode`.
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
_UTF8_AS_TEXT_RE = re.compile(
    rb"\xe2[\x80-\xbf][\x80-\xbf]|[a-z][\xc2-\xdf][\x80-\xbf]|[\xc2-\xdf][\x80-\xbf][a-z]"
)
"""UTF-8 that shows itself as text: a three-byte sequence of E2 (windows-1252's punctuation,
``€``, ``™``), or a two-byte one beside a lowercase ASCII letter. Bytes C2-DF followed by
80-BF are always a whole valid sequence, so nothing else is matched."""
_NOT_WINDOWS_1252_RE = re.compile(rf"[^\x00-\x7f\ufffd{re.escape(_WINDOWS_1252_ONLY)}]")
"""A character windows-1252 cannot write: the text is not (only) Western."""


def read_mixed(payload: bytes) -> tuple[str, int, int] | None:
    """``payload`` read as UTF-8 with its invalid bytes read as windows-1252: the text, how
    many byte sequences were read so, and how many bytes of them windows-1252 does not
    assign either (U+FFFD); None unless it holds Western UTF-8, and nothing but, that shows
    itself as text (see the module's docstring)."""
    text = payload.decode("utf-8", "replace")
    if text.replace("\ufffd", "").isascii():  # no UTF-8 character at all: legacy bytes only
        return None  # (the search below reads every byte: 0.3 ms for a 9 KB legacy feed)
    if _NOT_WINDOWS_1252_RE.search(text) or not _UTF8_AS_TEXT_RE.search(payload):
        return None
    written = payload.count("\ufffd".encode())  # a U+FFFD the UTF-8 itself holds
    mixed = payload.decode("utf-8", _ERRORS)
    return mixed, text.count("\ufffd") - written, mixed.count("\ufffd") - written


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
