"""Decode stage: settle a feed body's encoding before parsing and hand the parser UTF-8.

Order of evidence (seed section 5, with the BOM in front):

1. A byte order mark. It is part of the bytes the author produced, while a ``charset`` is often
   a server-wide default; browsers (WHATWG "decode") and XML 1.0 Appendix F both let it win.
2. The HTTP ``Content-Type`` charset. ``text/*`` without a charset gets no RFC 3023 us-ascii
   default: that rule breaks real feeds, so it falls through to the declaration.
3. The XML declaration's ``encoding``.
4. Detection: the ``<?xml`` byte patterns of UTF-16/32 without a BOM; then valid UTF-8 is
   UTF-8 (``default`` when nothing was declared); then charset-normalizer, limited to the
   encodings browsers know.

Labels map as browsers map them (``gb2312`` -> gb18030, ``latin1``/``us-ascii`` ->
windows-1252, ``big5`` -> big5hkscs, ``shift_jis`` -> cp932, ``euc-kr`` -> cp949...); a label
that names no text encoding, or one the bytes cannot be in (a UTF-16 label on single-byte
bytes and the reverse), is ignored. A candidate must decode the whole body strictly. When none
does, a BOM still wins (with replacement characters), and a candidate that decodes almost
everything (many good non-ASCII characters per bad byte) is read with replacement before
detection is asked, since detection would trade a few bad bytes for mojibake everywhere; the
last resort is the first candidate (or UTF-8) with replacement. Lossy readings report
``detected`` and log a warning.

The output has no BOM, a declaration (if any) that is first and says UTF-8, and none of the
characters XML 1.0 forbids (C0 controls but TAB/LF/CR, U+FFFE, U+FFFF).
"""

from __future__ import annotations

import codecs
import functools
import logging
import re

from charset_normalizer import from_bytes

from .errors import ParseError
from .models import DecodedFeed

logger = logging.getLogger(__name__)

_UTF8 = "utf-8"
_HEAD_BYTES = 4096
"""How much of the body is searched for the XML declaration (room for UTF-32)."""
_MAX_LABEL = 64
_LOSSY_RATIO = 4
"""A lossy reading needs this many good non-ASCII characters per replaced byte sequence."""

_REFUSED = "replacement"
_WHATWG_LABELS: dict[str, str] = {
    "utf-8": "unicode-1-1-utf-8 unicode11utf8 unicode20utf8 utf-8 utf8 x-unicode20utf8",
    "cp866": "866 cp866 csibm866 ibm866",
    "iso-8859-2": "csisolatin2 iso-8859-2 iso-ir-101 iso8859-2 iso88592 iso_8859-2 "
    "iso_8859-2:1987 l2 latin2",
    "iso-8859-3": "csisolatin3 iso-8859-3 iso-ir-109 iso8859-3 iso88593 iso_8859-3 "
    "iso_8859-3:1988 l3 latin3",
    "iso-8859-4": "csisolatin4 iso-8859-4 iso-ir-110 iso8859-4 iso88594 iso_8859-4 "
    "iso_8859-4:1988 l4 latin4",
    "iso-8859-5": "csisolatincyrillic cyrillic iso-8859-5 iso-ir-144 iso8859-5 iso88595 "
    "iso_8859-5 iso_8859-5:1988",
    "iso-8859-6": "arabic asmo-708 csiso88596e csiso88596i csisolatinarabic ecma-114 "
    "iso-8859-6 iso-8859-6-e iso-8859-6-i iso-ir-127 iso8859-6 iso88596 iso_8859-6 "
    "iso_8859-6:1987",
    "iso-8859-7": "csisolatingreek ecma-118 elot_928 greek greek8 iso-8859-7 iso-ir-126 "
    "iso8859-7 iso88597 iso_8859-7 iso_8859-7:1987 sun_eu_greek",
    "iso-8859-8": "csiso88598e csisolatinhebrew hebrew iso-8859-8 iso-8859-8-e iso-ir-138 "
    "iso8859-8 iso88598 iso_8859-8 iso_8859-8:1988 visual csiso88598i iso-8859-8-i logical",
    "iso-8859-10": "csisolatin6 iso-8859-10 iso-ir-157 iso8859-10 iso885910 l6 latin6",
    "iso-8859-13": "iso-8859-13 iso8859-13 iso885913",
    "iso-8859-14": "iso-8859-14 iso8859-14 iso885914",
    "iso-8859-15": "csisolatin9 iso-8859-15 iso8859-15 iso885915 iso_8859-15 l9",
    "iso-8859-16": "iso-8859-16",
    "koi8-r": "cskoi8r koi koi8 koi8-r koi8_r",
    "koi8-u": "koi8-ru koi8-u",
    "mac-roman": "csmacintosh mac macintosh x-mac-roman",
    "cp874": "dos-874 iso-8859-11 iso8859-11 iso885911 tis-620 windows-874",
    "windows-1250": "cp1250 windows-1250 x-cp1250",
    "windows-1251": "cp1251 windows-1251 x-cp1251",
    "windows-1252": "ansi_x3.4-1968 ascii cp1252 cp819 csisolatin1 ibm819 iso-8859-1 "
    "iso-ir-100 iso8859-1 iso88591 iso_8859-1 iso_8859-1:1987 l1 latin1 us-ascii "
    "windows-1252 x-cp1252",
    "windows-1253": "cp1253 windows-1253 x-cp1253",
    "windows-1254": "cp1254 csisolatin5 iso-8859-9 iso-ir-148 iso8859-9 iso88599 iso_8859-9 "
    "iso_8859-9:1989 l5 latin5 windows-1254 x-cp1254",
    "windows-1255": "cp1255 windows-1255 x-cp1255",
    "windows-1256": "cp1256 windows-1256 x-cp1256",
    "windows-1257": "cp1257 windows-1257 x-cp1257",
    "windows-1258": "cp1258 windows-1258 x-cp1258",
    "mac-cyrillic": "x-mac-cyrillic x-mac-ukrainian",
    "gb18030": "chinese csgb2312 csiso58gb231280 gb2312 gb_2312 gb_2312-80 gbk iso-ir-58 "
    "x-gbk gb18030",
    "big5hkscs": "big5 big5-hkscs cn-big5 csbig5 x-x-big5",
    "euc-jp": "cseucpkdfmtjapanese euc-jp x-euc-jp",
    "iso-2022-jp": "csiso2022jp iso-2022-jp",
    "cp932": "csshiftjis ms932 ms_kanji shift-jis shift_jis sjis windows-31j x-sjis",
    "cp949": "cseuckr csksc56011987 iso-ir-149 korean ks_c_5601-1987 ks_c_5601-1989 ksc5601 "
    "ksc_5601 windows-949 euc-kr",
    "utf-16be": "unicodefffe utf-16be",
    "utf-16le": "csunicode iso-10646-ucs-2 ucs-2 unicode unicodefeff utf-16 utf-16le",
    "utf-32be": "utf-32be",
    "utf-32le": "utf-32 utf-32le ucs-4 iso-10646-ucs-4",
    _REFUSED: "csiso2022kr hz-gb-2312 iso-2022-cn iso-2022-cn-ext iso-2022-kr replacement "
    "x-user-defined utf-7 utf7 csunicode11utf7 unicode-1-1-utf-7 "
    "hz iso2022_kr idna punycode charmap undefined unicode-escape raw-unicode-escape",
}
"""WHATWG Encoding Standard labels (plus XML's UTF-32), by the Python codec we read them with.

Labels browsers refuse to decode with (WHATWG "replacement", UTF-7) count as bogus, and so do
the Python codecs that are no charsets (``idna``, ``unicode-escape``...).
"""


_PYTHON_NAMES: dict[str, str] = {
    "utf-8-sig": _UTF8,
    "ascii": "windows-1252",
    "euc_jp": "euc-jp",
    "iso2022_jp": "iso-2022-jp",
    "iso8859-16": "iso-8859-16",
    "gbk": "gb18030",
    "gb2312": "gb18030",
    "big5": "big5hkscs",
    "shift_jis": "cp932",
    "euc_kr": "cp949",
    "utf-16": "utf-16le",
    "utf-16-le": "utf-16le",
    "utf-16-be": "utf-16be",
    "utf-32": "utf-32le",
    "utf-32-le": "utf-32le",
    "utf-32-be": "utf-32be",
}
"""Python canonical codec names the WHATWG labels do not cover -> the codec we read with."""

_LABEL_TO_CODEC: dict[str, str] = {
    label: codec for codec, labels in _WHATWG_LABELS.items() for label in labels.split()
}

_WIDE = frozenset({"utf-16le", "utf-16be", "utf-32le", "utf-32be"})
_DETECTABLE = [codec for codec in _WHATWG_LABELS if codec not in {*_WIDE, _UTF8, _REFUSED}]

_BOMS: tuple[tuple[bytes, str], ...] = (
    (b"\x00\x00\xfe\xff", "utf-32be"),
    (b"\xff\xfe\x00\x00", "utf-32le"),  # before UTF-16LE: U+0000 cannot follow in XML
    (b"\xef\xbb\xbf", _UTF8),
    (b"\xfe\xff", "utf-16be"),
    (b"\xff\xfe", "utf-16le"),
)

_ASCII_PROBE = bytes(range(0x20, 0x7F)) + b"\t\n\r\\n\\u0041+AGE-"
"""Markup must survive a narrow codec unchanged; escape codecs and UTF-7 change this probe."""

_DECLARATION = re.compile(r"\A[ \t\r\n]*<\?xml[ \t\r\n](?P<attrs>[^<>]*)>")
_ENCODING_ATTR = re.compile(
    r"""\bencoding[ \t\r\n]*=[ \t\r\n]*(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)'|(?P<bare>[^\s?>"']*))"""
)
_C0_ILLEGAL = bytes([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20)])
_XML_WHITESPACE = b" \t\r\n"


def decode_feed(body: bytes, content_type: str | None) -> DecodedFeed:
    """Read ``body`` in the encoding its evidence supports and return it as clean UTF-8."""
    bom_codec, bom_length = _sniff_bom(body)
    payload = body[bom_length:] if bom_length else body
    if not payload:
        raise ParseError("decode: empty body, nothing to read")
    wide = bom_codec if bom_codec in _WIDE else _sniff_wide(body)
    candidates = _candidates(
        bom_codec, wide, _charset_param(content_type), _declared_label(body, bom_length, wide)
    )
    codec, data, source = _read(payload, candidates, bom_codec, wide)
    return DecodedFeed(_finish(data), codec, source)


def _read(
    payload: bytes, candidates: list[tuple[str, str]], bom_codec: str | None, wide: str | None
) -> tuple[str, bytes, str]:
    """Codec, UTF-8 bytes and source: strict readings first, lossy ones only after them."""
    for codec, source in candidates:
        data = _decode_strict(payload, codec)
        if data is not None:
            return codec, data, source
    tried = {codec for codec, _ in candidates}
    utf8_untried = wide is None and _UTF8 not in tried
    if utf8_untried:
        data = _decode_strict(payload, _UTF8)
        if data is not None:
            return _UTF8, data, "detected" if candidates else "default"
    if bom_codec is not None:  # a BOM is no guess: damaged bytes do not overturn it
        return bom_codec, _decode_lossy(payload, bom_codec), "detected"
    for codec in [codec for codec, _ in candidates] + ([_UTF8] if utf8_untried else []):
        data = _decode_mostly(payload, codec)
        if data is not None:
            return codec, data, "detected"
    if wide is None:
        for codec in _detected_codecs(payload):
            data = _decode_strict(payload, codec) if codec not in tried else None
            if data is not None:
                return codec, data, "detected"
    fallback = candidates[0][0] if candidates else _UTF8
    return fallback, _decode_lossy(payload, fallback), "detected"


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


@functools.lru_cache(maxsize=512)
def codec_for_label(label: str) -> str | None:
    """The Python codec a browser-style reader uses for an encoding label; None if bogus."""
    key = label.strip().lower()
    if not key or len(key) > _MAX_LABEL:
        return None
    if key in _LABEL_TO_CODEC:
        return None if _LABEL_TO_CODEC[key] == _REFUSED else _LABEL_TO_CODEC[key]
    try:
        name = codecs.lookup(key).name
    except (LookupError, ValueError):
        return None
    mapped = _PYTHON_NAMES.get(name) or _LABEL_TO_CODEC.get(name)
    if mapped is not None:
        return None if mapped == _REFUSED else mapped
    try:
        ascii_compatible = _ASCII_PROBE.decode(name) == _ASCII_PROBE.decode("ascii")
    except (LookupError, ValueError):  # not a text codec, or one that cannot decode at all
        return None
    return name if ascii_compatible else None


def _decode_strict(payload: bytes, codec: str) -> bytes | None:
    """UTF-8 bytes of ``payload`` read as ``codec``, or None if any byte does not fit.

    Valid UTF-8 comes back as the same object: the common case costs no copy.
    """
    if codec == _UTF8:
        if payload.isascii():
            return payload
        try:
            text = payload.decode(_UTF8)
        except UnicodeDecodeError:
            return None
        return _utf8(text) if _has_noncharacter(text) else payload
    try:
        return _utf8(payload.decode(codec))
    except UnicodeError:
        return None


def _decode_mostly(payload: bytes, codec: str) -> bytes | None:
    """A lossy reading, but only when it is plainly the right codec with a few damaged bytes."""
    text = payload.decode(codec, "replace")
    replaced = text.count("\ufffd")
    good = len(text) - len(text.encode("ascii", "ignore")) - replaced
    if good < _LOSSY_RATIO * replaced:
        return None
    logger.warning("decode: %d undecodable byte sequence(s) replaced, read as %s", replaced, codec)
    return _utf8(text)


def _decode_lossy(payload: bytes, codec: str) -> bytes:
    text = payload.decode(codec, "replace")
    logger.warning(
        "decode: no encoding fits, read as %s with %d replacement(s)", codec, text.count("\ufffd")
    )
    return _utf8(text)


def _has_noncharacter(text: str) -> bool:
    return "\ufffe" in text or "\uffff" in text


def _utf8(text: str) -> bytes:
    """Encode decoded text, without U+FFFE/U+FFFF (XML 1.0 forbids them; a str finds them fast)."""
    if _has_noncharacter(text):
        text = text.replace("\ufffe", "").replace("\uffff", "")
    return text.encode(_UTF8, "replace")  # "replace" only matters for a lone surrogate


def _detected_codecs(payload: bytes) -> list[str]:
    """charset-normalizer's guesses among the legacy encodings browsers know, best first.

    Among the guesses tied for least chaos, windows-1252 goes first: it is what browsers assume
    for unlabelled legacy text, and charset-normalizer's tie-break picks e.g. cp1257 for
    Portuguese.
    """
    matches = list(from_bytes(payload, cp_isolation=_DETECTABLE, preemptive_behaviour=False))
    least_chaos = min((match.chaos for match in matches), default=0.0)
    found: list[str] = []
    for match in matches:
        codec = codec_for_label(match.encoding)
        if codec is None or codec in found:
            continue
        if codec == "windows-1252" and match.chaos <= least_chaos:
            found.insert(0, codec)
        else:
            found.append(codec)
    return found


def _finish(data: bytes) -> bytes:
    """Make UTF-8 bytes safe for lxml: declaration first and saying UTF-8, no C0 controls.

    Each fix copies only when it applies, so a clean body is returned as the same object.
    """
    if data[:1] in (b" ", b"\t", b"\r", b"\n"):
        head = data[:_HEAD_BYTES]
        stripped = head.lstrip(_XML_WHITESPACE)
        if stripped.startswith(b"<?xml"):  # lxml refuses a declaration that is not first
            data = data[len(head) - len(stripped) :]
    if data.startswith(b"<?xml"):
        data = _declare_utf8(data)
    cleaned = data.translate(None, _C0_ILLEGAL)
    return cleaned if len(cleaned) != len(data) else data


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
