"""Decode stage: settle a feed body's encoding before parsing and hand the parser UTF-8.

Order of evidence (seed section 5, with the BOM in front):

1. A byte order mark. It is part of the bytes the author produced, while a ``charset`` is often
   a server-wide default; browsers (WHATWG "decode") and XML 1.0 Appendix F both let it win.
2. The HTTP ``Content-Type`` charset. ``text/*`` without a charset gets no RFC 3023 us-ascii
   default: that rule breaks real feeds, so it falls through to the declaration.
3. The XML declaration's ``encoding``.
4. Detection: the ``<?xml`` byte patterns of UTF-16/32 without a BOM; then valid UTF-8 is
   UTF-8 (``default`` when nothing was declared); then charset-normalizer, limited to the
   encodings browsers know (:mod:`.decode_detect`).

Valid UTF-8 with non-ASCII characters overrules a label of another encoding (a single-byte
one always; a double-byte one given sixteen such characters, or when the document declares
UTF-8 itself): labels are often a server's
default, and no other text forms such sequences by chance (:func:`_utf8_beats`).

Labels map as browsers map them (:mod:`.decode_labels`: ``gb2312`` -> gb18030,
``latin1``/``us-ascii`` -> windows-1252, ``big5`` -> big5hkscs, ``shift_jis`` -> cp932,
``euc-kr`` -> cp949...); a label that names no text encoding, or one the bytes cannot be in (a
UTF-16 label on single-byte bytes and the reverse), is ignored. A candidate must decode the
whole body strictly. When none does, UTF-8 whose multi-byte characters are all Western is read
with its other bytes as windows-1252 (:mod:`.decode_mixed`), a BOM still wins (with
replacement characters), and a candidate that decodes almost everything (enough good non-ASCII
characters per bad byte) is read with replacement before detection is asked, since detection
would trade a few bad bytes for mojibake everywhere; the last resort is the first candidate
(or UTF-8) with replacement. Mixed and lossy readings report ``detected`` and how many byte
sequences they read as windows-1252 or replaced; the caller says so, naming the feed (this
module does not log).

The output has no BOM, a declaration (if any) that is first and says UTF-8, and no U+FFFE or
U+FFFF. The other characters XML 1.0 forbids, C0 controls but TAB/LF/CR, are not searched for
here: libxml2 refuses them, and the parse stage's repair step removes them
(:func:`without_controls`) only for the rare body that has them.
"""

from __future__ import annotations

import codecs
import functools
import re

from .decode_detect import detected_codecs
from .decode_labels import UTF8 as _UTF8
from .decode_labels import WIDE as _WIDE
from .decode_labels import codec_for_label
from .decode_mixed import WINDOWS_1252, may_hold_western_utf8, read_mixed
from .errors import ParseError
from .models import DecodedFeed

_HEAD_BYTES = 4096
"""How much of the body is searched for the XML declaration (room for UTF-32)."""
_LOSSY_RATIO = 4
"""A lossy reading needs this many good non-ASCII characters per replaced byte sequence;
UTF-8 needs one (:data:`_LOSSY_UTF8_RATIO`)."""
_LOSSY_UTF8_RATIO = 1
"""Text in another encoding read as UTF-8 is mostly invalid (a windows-1252 "é" never is, a
GBK or Shift_JIS character one time in ten): a UTF-8 feed with a Word paste of two curly
quotes and six good accents is UTF-8 with two bad bytes, where detection picked a code page
that turned every accent to mojibake."""
_UTF8_OVER_WIDE_LABEL = 16
"""Non-ASCII characters of valid UTF-8 that overrule a double-byte label (GBK, Shift_JIS,
Big5...): a handful of such characters can be valid UTF-8 by chance, sixteen cannot."""

_BOMS: tuple[tuple[bytes, str], ...] = (
    (b"\x00\x00\xfe\xff", "utf-32be"),
    (b"\xff\xfe\x00\x00", "utf-32le"),  # before UTF-16LE: U+0000 cannot follow in XML
    (b"\xef\xbb\xbf", _UTF8),
    (b"\xfe\xff", "utf-16be"),
    (b"\xff\xfe", "utf-16le"),
)

_DECLARATION = re.compile(r"\A[ \t\r\n]*<\?xml[ \t\r\n](?P<attrs>[^<>]*)>")
_ENCODING_ATTR = re.compile(
    r"""\bencoding[ \t\r\n]*=[ \t\r\n]*(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)'|(?P<bare>[^\s?>"']*))"""
)
_C0_ILLEGAL = bytes([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20)])
_C0_EACH = tuple(bytes([byte]) for byte in _C0_ILLEGAL)
"""One ``in`` per control character (a vectorized memchr each) is about twice as fast as the
``translate`` copy that finds out whether a body has any."""
_XML_WHITESPACE = b" \t\r\n"
_UTF8_PIECE = 4096
_UTF8_DECODER = codecs.getincrementaldecoder(_UTF8)


def decode_feed(body: bytes, content_type: str | None) -> DecodedFeed:
    """Read ``body`` in the encoding its evidence supports and return it as clean UTF-8."""
    bom_codec, bom_length, wide, declared = _own_evidence(body)
    payload = body[bom_length:] if bom_length else body
    if not payload:
        raise ParseError("decode: empty body, nothing to read")
    candidates = _candidates(bom_codec, wide, _charset_param(content_type), declared)
    codec, data, source, replaced, stray = _read(payload, candidates, bom_codec, wide)
    return DecodedFeed(_finish(data), codec, source, replaced, stray)


def charset_decides(body: bytes, content_type: str | None) -> bool:
    """True when the ``charset`` of ``content_type`` names another encoding than the body
    announces itself (its BOM, else its XML declaration, else UTF-8): then the header may be
    what decides how the body reads, and a backup keeps it beside the body (:mod:`.backups`).

    No decoding, so every fetch can ask. It may say True where the header turned out not to
    matter (bytes the header's encoding cannot read); keeping the header then is harmless,
    since a replay with it reads the body exactly as the fetch did.
    """
    label = _charset_param(content_type)
    if label is None or not body:
        return False
    bom_codec, _, wide, declared_label = _own_evidence(body)
    header = _codec_for_body(label, wide)
    if header is None:
        return False
    declared = _codec_for_body(declared_label, wide)
    return header != (bom_codec or declared or wide or _UTF8)


def _own_evidence(body: bytes) -> tuple[str | None, int, str | None, str | None]:
    """What the body tells of its encoding: BOM codec and length, UTF-16/32 byte pattern,
    declared label. Shared by the reader and by :func:`charset_decides`, so both weigh the
    same evidence."""
    bom_codec, bom_length = _sniff_bom(body)
    wide = bom_codec if bom_codec in _WIDE else _sniff_wide(body)
    return bom_codec, bom_length, wide, _declared_label(body, bom_length, wide)


def _read(
    payload: bytes, candidates: list[tuple[str, str]], bom_codec: str | None, wide: str | None
) -> tuple[str, bytes, str, int, int]:
    """Codec, UTF-8 bytes, source, replaced sequences and stray windows-1252 bytes: strict
    readings first, then UTF-8 mixed with windows-1252, lossy readings last."""
    if bom_codec is None and wide is None and candidates:
        if _utf8_beats(payload, candidates):
            return _UTF8, payload, "detected", 0, 0
        if candidates[0][0] == WINDOWS_1252 and may_hold_western_utf8(payload):
            mixed = _decode_mixed(payload)  # the label's reading, but for Western UTF-8
            if mixed is not None:
                return _UTF8, *mixed
    for codec, source in candidates:
        data = _decode_strict(payload, codec)
        if data is not None:
            return codec, data, source, 0, 0
    tried = {codec for codec, _ in candidates}
    utf8_untried = wide is None and _UTF8 not in tried
    if utf8_untried:
        data = _decode_strict(payload, _UTF8)
        if data is not None:
            return _UTF8, data, "detected" if candidates else "default", 0, 0
    if bom_codec is not None:  # a BOM is no guess: damaged bytes do not overturn it
        mixed = _decode_mixed(payload) if bom_codec == _UTF8 else None
        if mixed is not None:
            return bom_codec, *mixed
        data, replaced = _decode_lossy(payload, bom_codec)
        return bom_codec, data, "detected", replaced, 0
    for codec in [codec for codec, _ in candidates] + ([_UTF8] if utf8_untried else []):
        mixed = _decode_mixed(payload) if codec == _UTF8 else None
        if mixed is not None:
            return codec, *mixed
        mostly = _decode_mostly(payload, codec)
        if mostly is not None:
            data, replaced = mostly
            return codec, data, "detected", replaced, 0
    if wide is None:
        for codec in detected_codecs(payload, tried):
            data = _decode_strict(payload, codec) if codec not in tried else None
            if data is not None:
                return codec, data, "detected", 0, 0
    fallback = candidates[0][0] if candidates else _UTF8
    data, replaced = _decode_lossy(payload, fallback)
    return fallback, data, "detected", replaced, 0


def _utf8_beats(payload: bytes, candidates: list[tuple[str, str]]) -> bool:
    """Whether ``payload`` is plainly UTF-8 though the label names another encoding.

    Valid UTF-8 with multi-byte characters is strong evidence, and labels are often a
    server's default (Apache's ``AddDefaultCharset ISO-8859-1``) or a CMS's leftover: read
    as labelled, every "é" became "Ã©". Text in a single-byte encoding never forms such
    sequences by chance (it would have to be mojibake already); a few characters of a
    double-byte one may, so a double-byte label needs :data:`_UTF8_OVER_WIDE_LABEL` of them,
    unless the document declares UTF-8 itself (``Résumé`` read as GBK was ``R茅sum茅``).
    """
    first = candidates[0][0]
    if first == _UTF8 or payload.isascii() or not _is_clean_utf8(payload):
        return False
    if _single_byte(first) or any(codec == _UTF8 for codec, _ in candidates[1:]):
        return True
    text = payload.decode(_UTF8)
    return len(text) - len(text.encode("ascii", "ignore")) >= _UTF8_OVER_WIDE_LABEL


@functools.cache
def _single_byte(codec: str) -> bool:
    """Whether ``codec`` reads one byte as one character (no lead bytes)."""
    return len(bytes(range(256)).decode(codec, "replace")) == 256


def _sniff_bom(body: bytes) -> tuple[str | None, int]:
    for bom, codec in _BOMS:
        if body.startswith(bom):
            return codec, len(bom)
    return None, 0


def _sniff_wide(body: bytes) -> str | None:
    """UTF-16/32 without a BOM, from the zero bytes around the first (ASCII) character."""
    if len(body) < 4:
        return None
    a, b, c, d = body[:4]
    if a == b == c == 0 and d:
        return "utf-32be"
    if a and b == c == d == 0:
        return "utf-32le"
    if a == 0 and b and c == 0 and d:
        return "utf-16be"
    if a and b == 0 and c and d == 0:
        return "utf-16le"
    return None


def _charset_param(content_type: str | None) -> str | None:
    """The ``charset`` parameter of a Content-Type value, unquoted; None when absent."""
    if not content_type:
        return None
    for parameter in content_type.split(";")[1:]:
        name, equals, value = parameter.partition("=")
        if equals and name.strip().lower() == "charset":
            value = value.strip().strip("\"'").strip()
            return value or None
    return None


def _declared_label(body: bytes, bom_length: int, wide: str | None) -> str | None:
    head_bytes = body[bom_length : bom_length + _HEAD_BYTES]
    head = head_bytes.decode(wide or "latin-1", "replace")
    declaration = _DECLARATION.match(head)
    if declaration is None:
        return None
    attribute = _ENCODING_ATTR.search(declaration.group("attrs"))
    if attribute is None:
        return None
    label = attribute.group("dq") or attribute.group("sq") or attribute.group("bare") or ""
    return label.strip() or None


def _candidates(
    bom_codec: str | None, wide: str | None, http_label: str | None, declared: str | None
) -> list[tuple[str, str]]:
    """The codecs to try, in order of evidence, each with the source it came from."""
    found: list[tuple[str, str]] = []
    if bom_codec is not None:
        found.append((bom_codec, "bom"))
    for label, source in ((http_label, "http"), (declared, "declaration")):
        codec = _codec_for_body(label, wide)
        if codec is not None:
            found.append((codec, source))
    if wide is not None:
        found.append((wide, "detected"))
    unique: list[tuple[str, str]] = []
    for codec, source in found:
        if all(codec != seen for seen, _ in unique):
            unique.append((codec, source))
    return unique


def _codec_for_body(label: str | None, wide: str | None) -> str | None:
    """The codec a label means for these bytes; None when it cannot describe them."""
    codec = codec_for_label(label) if label else None
    if codec is None:
        return None
    if wide is None:
        return None if codec in _WIDE else codec
    same_width = codec in _WIDE and codec[:6] == wide[:6]
    return wide if same_width else None  # the bytes, not the label, tell the byte order


def _decode_strict(payload: bytes, codec: str) -> bytes | None:
    """UTF-8 bytes of ``payload`` read as ``codec``, or None if any byte does not fit.

    Valid UTF-8 comes back as the same object: the common case costs no copy.
    """
    if codec == _UTF8:
        if payload.isascii() or _is_clean_utf8(payload):
            return payload
        try:
            text = payload.decode(_UTF8)
        except UnicodeDecodeError:
            return None
        return _utf8(text)
    try:
        return _utf8(payload.decode(codec))
    except UnicodeError:
        return None


def _is_clean_utf8(payload: bytes) -> bool:
    """Valid UTF-8 without U+FFFE/U+FFFF, checked without a wide copy of the whole body.

    Read in pieces of :data:`_UTF8_PIECE` bytes: the pure-ASCII ones (most of a feed's
    markup) are skipped, the others decoded into small strings. About 40% cheaper than
    decoding the body at once, which widens all of it to the size of its widest character.
    """
    decoder = _UTF8_DECODER()
    try:
        for start in range(0, len(payload), _UTF8_PIECE):
            piece = payload[start : start + _UTF8_PIECE]
            if piece.isascii() and not decoder.getstate()[0]:
                continue  # no sequence left open by the piece before
            if _has_noncharacter(decoder.decode(piece)):
                return False
        decoder.decode(b"", True)
    except UnicodeDecodeError:
        return False
    return True


def _decode_mixed(payload: bytes) -> tuple[bytes, str, int, int] | None:
    """:func:`.decode_mixed.read_mixed` as a reading (UTF-8 bytes, source, replaced, stray)."""
    mixed = read_mixed(payload)
    if mixed is None:
        return None
    text, stray, replaced = mixed
    return _utf8(text), "detected", replaced, stray


def _decode_mostly(payload: bytes, codec: str) -> tuple[bytes, int] | None:
    """A lossy reading (UTF-8 bytes, sequences replaced), but only when it is plainly the right
    codec with a few damaged bytes."""
    text = payload.decode(codec, "replace")
    replaced = text.count("\ufffd")
    good = len(text) - len(text.encode("ascii", "ignore")) - replaced
    if good < (_LOSSY_UTF8_RATIO if codec == _UTF8 else _LOSSY_RATIO) * replaced:
        return None
    return _utf8(text), replaced


def _decode_lossy(payload: bytes, codec: str) -> tuple[bytes, int]:
    """The last resort: ``codec`` with every undecodable sequence replaced (UTF-8 bytes, how
    many)."""
    text = payload.decode(codec, "replace")
    return _utf8(text), text.count("\ufffd")


def _has_noncharacter(text: str) -> bool:
    return "\ufffe" in text or "\uffff" in text


def _utf8(text: str) -> bytes:
    """Encode decoded text, without U+FFFE/U+FFFF (XML 1.0 forbids them; a str finds them fast)."""
    if _has_noncharacter(text):
        text = text.replace("\ufffe", "").replace("\uffff", "")
    return text.encode(_UTF8, "replace")  # "replace" only matters for a lone surrogate


def without_controls(data: bytes) -> bytes:
    """``data`` without the C0 controls XML 1.0 forbids; the same object when it has none."""
    if not any(control in data for control in _C0_EACH):
        return data
    return data.translate(None, _C0_ILLEGAL)


def _finish(data: bytes) -> bytes:
    """Make UTF-8 bytes ready for lxml: the declaration first and saying UTF-8.

    Each fix copies only when it applies, so a clean body is returned as the same object.
    """
    if data[:1] in (b" ", b"\t", b"\r", b"\n"):
        head = data[:_HEAD_BYTES]
        stripped = head.lstrip(_XML_WHITESPACE)
        if stripped.startswith(b"<?xml"):  # lxml refuses a declaration that is not first
            data = data[len(head) - len(stripped) :]
    if data.startswith(b"<?xml"):
        data = _declare_utf8(data)
    return data


def _declare_utf8(data: bytes) -> bytes:
    """Rewrite the declaration's encoding pseudo-attribute to UTF-8 unless it already says so."""
    head = data[:_HEAD_BYTES].decode("latin-1")  # one char per byte: spans map back exactly
    declaration = _DECLARATION.match(head)
    if declaration is None:
        return data
    attribute = _ENCODING_ATTR.search(head, declaration.start("attrs"), declaration.end("attrs"))
    if attribute is None:
        return data
    value = attribute.group("dq") or attribute.group("sq") or attribute.group("bare") or ""
    if value.lower() in ("utf-8", "utf8") and attribute.group("bare") is None:
        return data
    start, end = attribute.span()
    return data[:start] + b'encoding="UTF-8"' + data[end:]
