"""The decode stage against feedparser's encoding corpus, targeted cases and arbitrary input."""

from __future__ import annotations

import ast
import codecs
import encodings
import itertools
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from lxml import etree

from feedcollector.decode import (
    charset_decides,
    codec_for_label,
    decode_feed,
    without_controls,
)
from feedcollector.decode_detect import _all_detected, _windows_1252_wins
from feedcollector.decode_labels import DETECTABLE
from feedcollector.errors import ParseError
from feedcollector.parse import parse_feed

from .conftest import CORPUS
from .feedserver import FeedServer

ENCODING_CASES = CORPUS / "feedparser-encoding" / "encoding"
CHARDET_CASES = CORPUS / "feedparser-encoding" / "chardet"
CORPUS_FILES = sorted([*ENCODING_CASES.glob("*.xml"), *CHARDET_CASES.glob("*.xml")])

NONCHARACTERS = re.compile("[\ufffe\uffff]")
XML_DECLARATION = re.compile(r"\A<\?xml\s[^<>]*>")

FEEDPARSER_NAMES = {
    "utf-8": "utf-8",
    "us-ascii": "windows-1252",
    "iso-8859-1": "windows-1252",
    "gb18030": "gb18030",
    "gb2312": "gb18030",
    "big5": "big5hkscs",
    "shift_jis": "cp932",
    "euc-jp": "euc-jp",
    "euc-kr": "cp949",
    "koi8-r": "koi8-r",
    "tis-620": "cp874",
    "windows-1255": "windows-1255",
    "utf-16be": "utf-16be",
    "utf-16le": "utf-16le",
    "utf-32be": "utf-32be",
    "utf-32le": "utf-32le",
}
"""feedparser's encoding names (lower-cased) -> ours: the WHATWG mapping browsers apply."""


@dataclass(frozen=True)
class Divergence:
    """A case where we deliberately read the bytes differently from feedparser, and how."""

    reason: str
    encoding: str | None = None
    source: str | None = None
    contains: str | None = None
    unchanged: bool = False
    """The body is ASCII that this stage must hand over byte for byte."""


_TEXT_DEFAULT = (
    "text/* without a charset: we do not apply RFC 3023's us-ascii default (RFC 7303 dropped "
    "it; it breaks real feeds), so the declaration or the UTF-8 default decides"
)
_PARSER_LEVEL = (
    "the expectation is about character references (&#146;, &acirc;...), which the parser "
    "resolves; decoding hands the ASCII body over untouched"
)

DIVERGENCES: dict[str, Divergence] = {
    **{
        name: Divergence(_TEXT_DEFAULT, encoding="utf-8", source="default")
        for name in (
            "http_text_atom_xml_default.xml",
            "http_text_rss_xml_default.xml",
            "http_text_xml_default.xml",
            "http_text_xml_epe_default.xml",
            "http_text_xml_qs.xml",
            "http_text_xml_bogus_charset.xml",
            "http_text_xml_bogus_param.xml",
        )
    },
    **{
        name: Divergence(_TEXT_DEFAULT, encoding="windows-1252", source="declaration")
        for name in (
            "http_text_atom_xml_encoding.xml",
            "http_text_rss_xml_encoding.xml",
            "http_text_xml_epe_encoding.xml",
        )
    },
    "bozo_http_i18n.xml": Divergence(
        _TEXT_DEFAULT + "; feedparser reports the us-ascii override, we keep the declared UTF-8",
        encoding="utf-8",
        source="declaration",
        contains="Iñtërnâtiônàlizætiøn",
    ),
    "demoronize-1.xml": Divergence(
        "the bytes are valid UTF-8 for U+0092; turning C1 controls into windows-1252 quotes is "
        "content repair, not decoding: the parse stage does it (text_repair)",
        encoding="utf-8",
        contains="don\x92t",
    ),
    "demoronize-2.xml": Divergence(_PARSER_LEVEL, unchanged=True),
    "demoronize-3.xml": Divergence(_PARSER_LEVEL, unchanged=True),
    "double-encoded-html.xml": Divergence(_PARSER_LEVEL, unchanged=True),
    "bozo_double-encoded-html.xml": Divergence(_PARSER_LEVEL, unchanged=True),
    "bozo_linenoise.xml": Divergence(
        "declared UTF-8 with 2 valid characters, both curly quotes, and 1 stray byte: Western "
        "UTF-8 with a windows-1252 byte mixed in, read as such; feedparser's expected value is "
        "a guess (its iso-8859-2 fallback read the whole body, quotes included)",
        encoding="utf-8",
        source="detected",
        contains="\u2019<>\u201d\u00a9",
    ),
}


def _metadata(raw: bytes) -> dict[str, str]:
    """The comment fields of a corpus file (ASCII, so NUL-stripping reads UTF-16/32 too)."""
    text = raw.replace(b"\x00", b"").decode("latin-1")
    return {
        match.group(1): match.group(2).strip()
        for match in re.finditer(r"^(Header|Expect|SkipUnless|Description):(.*)$", text, re.M)
    }


def _content_type(meta: dict[str, str]) -> str | None:
    header = meta.get("Header")
    if header is None:
        return None
    name, _, value = header.partition(":")
    assert name.strip().lower() == "content-type"
    return value.strip()


def _expectations(expect: str) -> tuple[str | None, list[str], bool]:
    """From feedparser's Expect expression: the encoding, expected texts, and 'not bozo'."""
    tree = ast.parse(expect, mode="eval")
    encoding: str | None = None
    texts: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.Eq):
            right = node.comparators[0]
            if not (isinstance(right, ast.Constant) and isinstance(right.value, str)):
                continue
            if isinstance(node.left, ast.Name) and node.left.id == "encoding":
                encoding = right.value
            else:
                texts.append(right.value)
    well_formed = "not bozo" in expect
    return encoding, texts, well_formed


def _skip_unless(meta: dict[str, str]) -> None:
    needed = re.search(r"lookup\('([^']+)'\)", meta.get("SkipUnless", ""))
    if needed is None:
        return  # "__import__('chardet')": our detector is charset-normalizer, always present
    try:
        codecs.lookup(needed.group(1))
    except LookupError:
        pytest.skip(f"Python lacks the codec {needed.group(1)}")


def _parse(data: bytes) -> etree._Element:
    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    return etree.fromstring(data, parser)


def _assert_clean_utf8(data: bytes) -> str:
    text = data.decode("utf-8")
    assert not text.startswith("\ufeff")
    assert NONCHARACTERS.search(text) is None
    declaration = XML_DECLARATION.match(text)
    if declaration is not None and re.search(r"\bencoding\s*=", declaration.group(0)):
        assert re.search(r"""\bencoding\s*=\s*["']utf-?8["']""", declaration.group(0), re.I)
    return text


def _after_declaration(text: str) -> str:
    return XML_DECLARATION.sub("", text.lstrip("\ufeff"), count=1)


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_feedparser_encoding_corpus(path: Path) -> None:
    raw = path.read_bytes()
    meta = _metadata(raw)
    _skip_unless(meta)
    result = decode_feed(raw, _content_type(meta))
    text = _assert_clean_utf8(result.data)
    codecs.lookup(result.encoding)

    divergence = DIVERGENCES.get(path.name)
    if divergence is not None:
        assert divergence.reason
        if divergence.encoding is not None:
            assert result.encoding == divergence.encoding
        if divergence.source is not None:
            assert result.source == divergence.source
        if divergence.contains is not None:
            assert divergence.contains in text
        if divergence.unchanged:
            assert result.data == raw
        return

    encoding, texts, well_formed = _expectations(meta["Expect"])
    if encoding is not None:
        assert result.encoding == FEEDPARSER_NAMES[encoding.lower()]
        try:
            theirs = raw.decode(encoding)
        except UnicodeDecodeError:
            theirs = None
        if theirs is not None:
            assert _after_declaration(text) == _after_declaration(theirs)
    if well_formed or texts:
        root = _parse(result.data)
        content = "".join(str(piece) for piece in root.itertext())
        for expected in texts:
            assert expected in content


def test_every_divergence_names_a_corpus_file() -> None:
    names = {path.name for path in CORPUS_FILES}
    assert set(DIVERGENCES) <= names


@pytest.mark.parametrize(
    "name",
    [
        "http_application_atom_xml_gb2312_charset_overrides_encoding.xml",
        "http_text_xml_charset_overrides_encoding_2.xml",
        "http_text_xml_default.xml",
        "utf-16le-bom.xml",
    ],
)
def test_corpus_cases_served_over_http(feed_server: FeedServer, name: str) -> None:
    """The header reaches decode_feed the way the fetch stage sees it: from a real response."""
    raw = (ENCODING_CASES / name).read_bytes()
    content_type = _content_type(_metadata(raw))
    headers = {"Content-Type": content_type} if content_type else {}
    url = feed_server.route("/feed", body=raw, headers=headers)
    response = httpx.get(url)
    result = decode_feed(response.content, response.headers.get("content-type"))
    assert result == decode_feed(raw, content_type)
    _parse(result.data)


# ---- targeted cases -------------------------------------------------------------------------

ZH_SIMPLIFIED = (
    "今天的新闻摘要：北京天气晴朗，气温适宜。科技公司发布了新的手机产品，市场反应热烈。"
    "研究人员表示，人工智能技术正在改变我们的生活方式和工作方法。"
)
ZH_TRADITIONAL = (
    "今日新聞摘要：臺北天氣晴朗，氣溫適宜。科技公司發表了新的手機產品，市場反應熱烈。"
    "研究人員表示，人工智慧技術正在改變我們的生活方式與工作方法。"
)
JAPANESE = (
    "今日のニュースです。東京は晴れて、気温もちょうどよいでしょう。新しい携帯電話が発表され、"
    "市場の反応はとても良いようです。研究者によると、人工知能の技術が私たちの生活と働き方を"
    "変えつつあります。"
)
KOREAN = (
    "오늘의 뉴스 요약입니다. 서울은 맑고 기온도 적당하겠습니다. 기술 회사가 새로운 휴대전화를 "
    "발표했고 시장의 반응은 뜨거웠습니다. 연구자들은 인공지능 기술이 우리의 생활 방식과 일하는 "
    "방법을 바꾸고 있다고 말합니다."
)
LEGACY = [
    pytest.param(ZH_SIMPLIFIED, "gbk", "gb18030", id="gbk"),
    pytest.param(ZH_TRADITIONAL, "big5", "big5hkscs", id="big5"),
    pytest.param(JAPANESE, "shift_jis", "cp932", id="shift_jis"),
    pytest.param(KOREAN, "euc-kr", "cp949", id="euc-kr"),
]


def rss(text: str, declared: str | None = None) -> str:
    head = f'<?xml version="1.0" encoding="{declared}"?>\n' if declared else ""
    return (
        f'{head}<rss version="2.0"><channel><title>{text[:10]}</title><link>http://example.com/'
        f"</link><item><title>{text[:16]}</title><description>{text}</description></item>"
        "</channel></rss>"
    )


def channel_title(data: bytes) -> str:
    title = _parse(data).findtext("channel/title")
    assert title is not None
    return title


def item_description(data: bytes) -> str:
    description = _parse(data).findtext("channel/item/description")
    assert description is not None
    return description


@pytest.mark.parametrize(("text", "codec", "expected"), LEGACY)
def test_legacy_body_with_declaration(text: str, codec: str, expected: str) -> None:
    result = decode_feed(rss(text, declared=codec).encode(codec), "application/rss+xml")
    assert (result.encoding, result.source) == (expected, "declaration")
    assert item_description(result.data) == text
    assert b'encoding="UTF-8"' in result.data[:60]


@pytest.mark.parametrize(("text", "codec", "expected"), LEGACY)
def test_legacy_body_without_any_label_is_detected(text: str, codec: str, expected: str) -> None:
    result = decode_feed(rss(text).encode(codec), "text/xml")
    assert (result.encoding, result.source) == (expected, "detected")
    assert item_description(result.data) == text


@pytest.mark.parametrize(("text", "codec", "expected"), LEGACY)
def test_declaration_that_lies_about_utf8_falls_to_detection(
    text: str, codec: str, expected: str
) -> None:
    result = decode_feed(rss(text, declared="utf-8").encode(codec), None)
    assert (result.encoding, result.source) == (expected, "detected")
    assert item_description(result.data) == text


@pytest.mark.parametrize(("text", "codec", "expected"), LEGACY)
def test_http_charset_alone_decides(text: str, codec: str, expected: str) -> None:
    result = decode_feed(rss(text).encode(codec), f"application/xml; charset={codec.upper()}")
    assert (result.encoding, result.source) == (expected, "http")
    assert channel_title(result.data) == text[:10]


RUSSIAN_SHORT = "Привет"
"""Too short for detection: read without its header it comes out as windows-1255."""


def test_charset_decides_when_the_header_names_another_encoding_than_the_body() -> None:
    legacy = rss(RUSSIAN_SHORT).encode("koi8-r")
    header = "application/rss+xml; charset=KOI8-R"
    assert decode_feed(legacy, None).data != decode_feed(legacy, header).data  # a wrong guess
    assert charset_decides(legacy, header)
    declared = rss(RUSSIAN_SHORT, declared="koi8-r").encode("koi8-r")
    assert not charset_decides(declared, header)  # the declaration tells the same
    assert not charset_decides(rss(RUSSIAN_SHORT).encode("utf-8"), "text/xml; charset=utf-8")
    assert not charset_decides(legacy, "application/rss+xml")  # no charset to keep
    assert not charset_decides(legacy, None)
    assert not charset_decides(legacy, "text/xml; charset=no-such-thing")
    assert not charset_decides(b"", header)  # nothing to read: nothing to keep
    # a UTF-8 header over a body that declares otherwise decides too
    assert charset_decides(
        rss(RUSSIAN_SHORT, declared="koi8-r").encode("utf-8"), "text/xml; charset=utf-8"
    )
    assert not charset_decides(
        b"\xef\xbb\xbf" + rss(RUSSIAN_SHORT).encode(), "text/xml; charset=UTF-8"
    )


@pytest.mark.parametrize(
    "charset", ["utf-8", "ISO-8859-1", "KOI8-R", "Shift_JIS", "gb2312", "utf-16", "windows-1251"]
)
def test_a_header_charset_not_kept_never_changes_the_reading(charset: str) -> None:
    """No false negatives on the encoding corpus: when the header is not kept beside a
    backup, reading the body without it gives the same text (or the same error)."""
    header = f"application/xml; charset={charset}"
    for path in CORPUS_FILES:
        body = path.read_bytes()
        if charset_decides(body, header):
            continue
        try:
            with_header = decode_feed(body, header).data
        except ParseError:
            with pytest.raises(ParseError):
                decode_feed(body, None)
            continue
        assert decode_feed(body, None).data == with_header, path.name


def test_header_wins_over_declaration() -> None:
    body = rss(ZH_SIMPLIFIED, declared="utf-8").encode("gbk")
    result = decode_feed(body, 'text/xml; charset="gbk"')
    assert (result.encoding, result.source) == ("gb18030", "http")
    assert item_description(result.data) == ZH_SIMPLIFIED


def test_header_wins_even_when_both_decode() -> None:
    body = rss("Caf\u00e9 d\u00e9j\u00e0 vu", declared="iso-8859-2").encode("latin-1")
    result = decode_feed(body, "application/rss+xml; charset=ISO-8859-1")
    assert (result.encoding, result.source) == ("windows-1252", "http")
    assert channel_title(result.data) == "Café déjà v"[:10]


def test_header_that_cannot_decode_yields_to_the_declaration() -> None:
    body = rss(ZH_SIMPLIFIED, declared="gb2312").encode("gbk")
    result = decode_feed(body, "application/xml; charset=utf-8")
    assert (result.encoding, result.source) == ("gb18030", "declaration")
    assert item_description(result.data) == ZH_SIMPLIFIED


def test_gb2312_label_reads_gb18030() -> None:
    outside_gb2312 = "朱镕基访问𠀀村"  # 镕 is GBK only, 𠀀 needs GB18030's four-byte form
    with pytest.raises(UnicodeEncodeError):
        outside_gb2312.encode("gb2312")
    body = rss(outside_gb2312 + ZH_SIMPLIFIED, declared="gb2312").encode("gb18030")
    for content_type in (None, "text/xml; charset=gb2312"):
        result = decode_feed(body, content_type)
        assert result.encoding == "gb18030"
        assert item_description(result.data).startswith(outside_gb2312)


@pytest.mark.parametrize(
    ("bom", "codec", "expected"),
    [
        (codecs.BOM_UTF8, "utf-8", "utf-8"),
        (codecs.BOM_UTF16_LE, "utf-16-le", "utf-16le"),
        (codecs.BOM_UTF16_BE, "utf-16-be", "utf-16be"),
        (codecs.BOM_UTF32_LE, "utf-32-le", "utf-32le"),
        (codecs.BOM_UTF32_BE, "utf-32-be", "utf-32be"),
    ],
)
def test_bom_wins_over_header_and_declaration(bom: bytes, codec: str, expected: str) -> None:
    body = bom + rss(ZH_SIMPLIFIED, declared="iso-8859-1").encode(codec)
    result = decode_feed(body, "text/xml; charset=iso-8859-1")
    assert (result.encoding, result.source) == (expected, "bom")
    assert result.data.startswith(b'<?xml version="1.0" encoding="UTF-8"?>')
    assert item_description(result.data) == ZH_SIMPLIFIED


def test_utf8_bom_over_damaged_bytes_stays_utf8() -> None:
    body = codecs.BOM_UTF8 + rss("Valid: \u0468 Invalid: EspaXa").encode().replace(b"X", b"\xf1")
    result = decode_feed(body, None)
    assert (result.encoding, result.source, result.replaced) == ("utf-8", "detected", 1)
    assert item_description(result.data) == "Valid: \u0468 Invalid: Espa\ufffda"


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
@pytest.mark.parametrize("declared", ["utf-16", "utf-32", None])
def test_wide_unicode_without_bom(codec: str, declared: str | None) -> None:
    body = rss(KOREAN, declared=declared).encode(codec)
    result = decode_feed(body, None)
    assert result.encoding == codec.replace("-le", "le").replace("-be", "be")
    same_family = declared is not None and declared[:6] == codec[:6]
    assert result.source == ("declaration" if same_family else "detected")
    assert item_description(result.data) == KOREAN


def test_wide_label_on_single_byte_body_is_ignored() -> None:
    result = decode_feed(rss("plain").encode(), "application/xml; charset=utf-16")
    assert (result.encoding, result.source) == ("utf-8", "default")


def test_narrow_label_on_utf16_body_is_ignored() -> None:
    body = rss(JAPANESE, declared="shift_jis").encode("utf-16-le")
    result = decode_feed(body, "text/xml; charset=utf-8")
    assert (result.encoding, result.source) == ("utf-16le", "detected")
    assert item_description(result.data) == JAPANESE


@pytest.mark.parametrize("content_type", ["text/xml; charset=bogus", "text/xml; charset=utf-7"])
def test_bogus_or_refused_header_falls_to_declaration(content_type: str) -> None:
    body = rss(KOREAN, declared="euc-kr").encode("euc-kr")
    result = decode_feed(body, content_type)
    assert (result.encoding, result.source) == ("cp949", "declaration")


def test_bogus_declaration_is_ignored_and_rewritten() -> None:
    body = rss("caf\u00e9", declared="bogus").encode()
    with pytest.raises(etree.XMLSyntaxError):
        _parse(body)
    result = decode_feed(body, None)
    assert (result.encoding, result.source) == ("utf-8", "default")
    assert channel_title(result.data) == "caf\u00e9"


def test_damaged_utf8_keeps_its_good_characters() -> None:
    good = rss(ZH_SIMPLIFIED, declared="utf-8").encode()
    body = good.replace("北京".encode(), "北京".encode() + b"\xff")
    result = decode_feed(body, None)
    assert (result.encoding, result.source) == ("utf-8", "detected")
    assert result.replaced == good.count("北京".encode())
    assert item_description(result.data) == ZH_SIMPLIFIED.replace("北京", "北京\ufffd")


def test_a_word_paste_in_a_utf8_feed_keeps_its_quotes_and_every_accent() -> None:
    """Two windows-1252 curly quotes beside six good accents: detection picked a Thai code
    page that read every "é" as two letters, and nothing warned."""
    body = (
        rss("Caf\u00e9 " * 6, declared="utf-8")
        .encode()
        .replace(b"</title>", b"\x93x\x94</title>", 1)
    )
    result = decode_feed(body, "application/rss+xml; charset=utf-8")
    assert (result.encoding, result.replaced, result.stray_windows_1252) == ("utf-8", 0, 2)
    assert channel_title(result.data) == "Caf\u00e9 Caf\u00e9 \u201cx\u201d"
    assert item_description(result.data) == "Caf\u00e9 " * 6


@pytest.mark.parametrize("declared", ["utf-8", None])
def test_a_short_utf8_body_with_more_latin1_bytes_than_good_characters_reads_both(
    declared: str | None,
) -> None:
    """A UTF-8 template with a legacy database's names in it: one good "é" against three
    Latin-1 letters was too little evidence for damaged UTF-8, and charset detection on a few
    hundred bytes picked a code page that turned the "é" into two letters (or worse)."""
    body = rss("Caf\u00e9 M\u00fcller, Gr\u00fc\u00dfe", declared=declared).encode("utf-8")
    body = body.replace("ü".encode(), b"\xfc").replace("ß".encode(), b"\xdf")
    result = decode_feed(body, None)
    assert (result.encoding, result.replaced, result.stray_windows_1252) == ("utf-8", 0, 6)
    assert item_description(result.data) == "Caf\u00e9 M\u00fcller, Gr\u00fc\u00dfe"


def test_stray_bytes_beside_utf8_that_windows_1252_cannot_write_stay_replaced() -> None:
    """The text is not Western, so its stray bytes are no windows-1252 either: U+FFFD."""
    body = rss("Caf\u00e9 \u0142\u00f3d\u017a " * 4, declared="utf-8").encode()
    body = body.replace(b"</title>", b"\xb9</title>", 1)
    result = decode_feed(body, None)
    assert (result.encoding, result.replaced, result.stray_windows_1252) == ("utf-8", 1, 0)
    assert channel_title(result.data) == "Caf\u00e9 \u0142\u00f3d\u017a \ufffd"


def test_a_windows_1252_body_forming_a_non_western_utf8_sequence_is_detected() -> None:
    """German legacy text where "ß" meets a curly quote (DF 93) is valid UTF-8 for an N'Ko
    letter: no Western UTF-8 text, so the body is read as the code page it is."""
    text = "Die Stra\u00dfe \u201eam Markt\u201c und die Stra\u00dfe\u201c, sch\u00f6n"
    result = decode_feed(rss(text).encode("cp1252"), None)
    assert (result.encoding, result.source, result.stray_windows_1252) == (
        "windows-1252",
        "detected",
        0,
    )
    assert item_description(result.data) == text


def test_a_utf8_bom_with_stray_windows_1252_bytes_reads_them() -> None:
    body = codecs.BOM_UTF8 + rss("R\u00e9sum\u00e9 \u00a9 Espa\u00f1a").encode()
    body = body.replace("ñ".encode(), b"\xf1")
    result = decode_feed(body, None)
    assert (result.encoding, result.source, result.stray_windows_1252) == ("utf-8", "detected", 2)
    assert item_description(result.data) == "R\u00e9sum\u00e9 \u00a9 Espa\u00f1a"


@pytest.mark.parametrize(
    ("declared", "content_type"),
    [("iso-8859-1", None), ("utf-8", "text/xml; charset=iso-8859-1"), ("windows-1252", None)],
)
def test_valid_utf8_overrules_a_single_byte_label(declared: str, content_type: str | None) -> None:
    """A server-wide ``AddDefaultCharset ISO-8859-1`` (or a CMS's leftover declaration) on a
    UTF-8 feed: read as labelled, "é" became "Ã©" everywhere."""
    text = "Caf\u00e9 \u2018quoted\u2019 S\u00e3o Paulo"
    result = decode_feed(rss(text, declared=declared).encode(), content_type)
    assert (result.encoding, result.source) == ("utf-8", "detected")
    assert item_description(result.data) == text


def test_a_double_byte_label_yields_to_utf8_only_on_plain_evidence() -> None:
    """A few characters of GBK can be valid UTF-8 by chance; a Chinese paragraph cannot."""
    few = rss("\u00e9t\u00e9", declared="gbk").encode()
    assert decode_feed(few, None).encoding == "gb18030"
    many = rss(ZH_SIMPLIFIED, declared="gbk").encode()
    result = decode_feed(many, None)
    assert (result.encoding, result.source) == ("utf-8", "detected")
    assert item_description(result.data) == ZH_SIMPLIFIED


@pytest.mark.parametrize("header", ["gbk", "shift_jis", "big5"])
def test_a_document_that_declares_utf8_keeps_a_few_characters_against_a_double_byte_header(
    header: str,
) -> None:
    """The server's default charset says GBK, the document says UTF-8, and its bytes are
    valid UTF-8: two pieces of evidence against one, whatever the count (read as GBK,
    "Résumé" was "R茅sum茅")."""
    body = rss("R\u00e9sum\u00e9", declared="utf-8").encode()
    result = decode_feed(body, f"application/xml; charset={header}")
    assert (result.encoding, item_description(result.data)) == ("utf-8", "R\u00e9sum\u00e9")


def test_a_windows_1252_body_labelled_utf8_is_not_read_as_damaged_utf8() -> None:
    text = "Caf\u00e9 d\u00e9j\u00e0 vu, na\u00efve fa\u00e7ade"
    result = decode_feed(rss(text, declared="utf-8").encode("cp1252"), None)
    assert (result.encoding != "utf-8", result.source, result.replaced) == (True, "detected", 0)


def test_damaged_gbk_is_not_read_as_another_code_page() -> None:
    body = rss(ZH_SIMPLIFIED * 3, declared="gbk").encode("gbk") + b"<!-- \x81 -->"
    result = decode_feed(body, None)
    assert (result.encoding, result.source, result.replaced) == ("gb18030", "detected", 1)
    assert ZH_SIMPLIFIED in result.data.decode()


def test_noncharacters_are_removed_and_controls_left_to_the_parse_stage() -> None:
    dirty = "a\x00b\x01c\x08d\x0be\x0cf\x1fg\ufffeh\uffffi\tj\nk\rl"
    body = rss(dirty, declared="utf-8").encode()
    result = decode_feed(body, None)
    assert result.data == body.replace("\ufffe".encode(), b"").replace("\uffff".encode(), b"")
    with pytest.raises(etree.XMLSyntaxError):
        _parse(result.data)
    (item,) = parse_feed(result.data, "https://example.org/feed").items
    assert item.content_html == "abcdefghi\tj\nk\nl"  # XML normalizes CR


def test_controls_in_other_encodings_are_removed_by_the_parse_stage() -> None:
    body = rss("\u0419\x02\u0416\x1b", declared="koi8-r").encode("koi8-r")
    result = decode_feed(body, None)
    assert (result.encoding, result.source) == ("koi8-r", "declaration")
    (item,) = parse_feed(result.data, "https://example.org/feed").items
    assert item.content_html == "\u0419\u0416"


def test_without_controls_keeps_tab_newline_and_carriage_return() -> None:
    assert without_controls(b"a\x00b\x1f\tc\nd\re\x7f") == b"ab\tc\nd\re\x7f"
    clean = b"<rss>\t\n</rss>"
    assert without_controls(clean) is clean


def test_whitespace_before_declaration_is_dropped() -> None:
    body = b"\r\n  " + rss("caf\u00e9", declared="windows-1252").encode("cp1252")
    result = decode_feed(body, None)
    assert result.data.startswith(b"<?xml")
    assert channel_title(result.data) == "caf\u00e9"


def test_clean_utf8_is_returned_without_a_copy() -> None:
    for body in (rss(ZH_SIMPLIFIED, declared="UTF-8").encode(), rss("ascii only").encode()):
        result = decode_feed(body, "application/rss+xml; charset=utf-8")
        assert result.data is body
        assert (result.encoding, result.source) == ("utf-8", "http")
    plain = rss(KOREAN).encode()
    assert decode_feed(plain, None).data is plain


@pytest.mark.parametrize(
    ("tail", "verdict"),
    [
        ("caf\u00e9".encode(), "as is"),  # a two-byte character across the 4 KiB piece boundary
        ("\U0001f600 and more".encode(), "as is"),  # four bytes across it
        (b"\xc3", "not utf-8"),  # a sequence the body ends inside
        (b"\xc3" + b"a" * 5000, "not utf-8"),  # left open by a piece, then ASCII pieces
        (b"a" * 5000 + b"\xff", "not utf-8"),  # a bad byte after skipped ASCII pieces
        ("a\ufffe".encode(), "noncharacter dropped"),  # in a later piece
    ],
)
def test_utf8_check_reads_the_body_in_pieces(tail: bytes, verdict: str) -> None:
    body = b"<rss>" + b"x" * (4096 - 5 - 3) + tail + b"</rss>"
    result = decode_feed(body, "application/xml; charset=utf-8")
    if verdict == "as is":
        assert result.data is body
    elif verdict == "noncharacter dropped":
        assert result.data == body.replace("\ufffe".encode(), b"")
        assert (result.encoding, result.source) == ("utf-8", "http")
    else:
        assert (result.encoding, result.source) != ("utf-8", "http")


def test_unlabelled_western_feed_detected_as_windows_1252() -> None:
    """A real Brazilian feed without any label: the code pages tied for it include windows-1257."""
    body = (CORPUS / "rss-parser" / "test" / "input" / "uolNoticias.rss").read_bytes()
    result = decode_feed(body, None)
    assert (result.encoding, result.source) == ("windows-1252", "detected")
    assert channel_title(result.data) == "UOL Noticias"
    assert "<title>UOL Noticias - \u00daltimas Not\u00edcias</title>" in result.data.decode()


@pytest.mark.parametrize("body", [b"", codecs.BOM_UTF8, codecs.BOM_UTF16_LE])
def test_nothing_to_read_is_a_parse_error(body: bytes) -> None:
    with pytest.raises(ParseError, match=r"^decode: "):
        decode_feed(body, "text/xml")


@pytest.mark.parametrize(
    ("label", "codec"),
    [
        ("gb2312", "gb18030"),
        ("GBK", "gb18030"),
        ("iso-8859-1", "windows-1252"),
        ("latin1", "windows-1252"),
        ("US-ASCII", "windows-1252"),
        ("big5", "big5hkscs"),
        ("Shift_JIS", "cp932"),
        ("euc-kr", "cp949"),
        ("tis-620", "cp874"),
        ("x-mac-cyrillic", "mac-cyrillic"),
        ("unicode-1-1-utf-8", "utf-8"),
        ("cp936", "gb18030"),
        ("utf_16", "utf-16le"),
        ("cp437", "cp437"),
        ("bogus", None),
        ("utf-7", None),
        ("hz-gb-2312", None),
        ("base64", None),
        ("unicode_escape", None),
        ("idna", None),
        ("", None),
    ],
)
def test_labels_map_as_browsers_map_them(label: str, codec: str | None) -> None:
    assert codec_for_label(label) == codec


def test_every_accepted_codec_can_read_arbitrary_bytes() -> None:
    """Whatever label a feed or server names, the lossy last resort must still work."""
    names = {module.name for module in pkgutil.iter_modules(encodings.__path__)}
    accepted = {codec_for_label(name) for name in names | set(encodings.aliases.aliases)}
    accepted.discard(None)
    assert {"gb18030", "windows-1252", "utf-16le", "cp437"} <= accepted
    noise = bytes(range(256)) * 4
    for codec in accepted:
        assert codec is not None
        assert isinstance(noise.decode(codec, "replace"), str)


# ---- arbitrary input ------------------------------------------------------------------------

LABELS = st.sampled_from(
    ["utf-8", "gbk", "big5", "shift_jis", "euc-kr", "latin1", "utf-16", "utf-32", "bogus",
     "utf-7", "idna", "unicode_escape", "koi8-r", "iso-2022-jp", "x-user-defined", ""]
)  # fmt: skip
CONTENT_TYPES = st.one_of(
    st.none(),
    st.text(max_size=40),
    st.builds(lambda label: f"text/xml; charset={label}", LABELS | st.text(max_size=12)),
)
PREFIXES = st.sampled_from(
    [b"", codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_LE,
     codecs.BOM_UTF32_BE, b"<\x00?\x00", b"\x00<\x00?", b"\x00\x00\x00<", b"<\x00\x00\x00",
     b"  \n"]
)  # fmt: skip
BODIES = st.one_of(
    st.binary(max_size=300),
    st.builds(
        lambda prefix, label, rest: (
            prefix + f'<?xml version="1.0" encoding="{label}"?>'.encode("utf-8", "replace") + rest
        ),
        PREFIXES,
        LABELS | st.text(max_size=12),
        st.binary(max_size=300),
    ),
    st.builds(
        lambda text, codec, prefix: prefix + rss(text).encode(codec, "replace"),
        st.text(max_size=80),
        st.sampled_from(["utf-8", "gb18030", "utf-16-le", "utf-32-be", "cp1252", "big5"]),
        PREFIXES,
    ),
)


@settings(max_examples=300, deadline=None)
@given(body=BODIES, content_type=CONTENT_TYPES)
def test_any_input_gives_clean_utf8_or_a_parse_error(body: bytes, content_type: str | None) -> None:
    try:
        result = decode_feed(body, content_type)
    except ParseError as exc:
        error: str | None = str(exc)
    else:
        error = None
    if error is not None:
        assert error.startswith("decode: ")
        return
    _assert_clean_utf8(result.data)
    assert result.source in {"bom", "http", "declaration", "detected", "default"}
    codecs.lookup(result.encoding)


WESTERN_AND_OTHER_TEXTS = [
    "A informação sobre a educação não está disponível. Notícias: o governo anunciou ações.",
    "L'été dernier, nous étions à la plage. Ça coûte très cher, où est-ce? Œuvre d'été.",
    "Über die Straße gehen Mädchen und Jungen. Größere Häuser kosten mehr. Grüße aus München.",
    "Příliš žluťoučký kůň úpěl ďábelské ódy. Česká republika je stát ve střední Evropě.",
    "În această săptămână, guvernul a anunțat măsuri noi pentru învățământ și sănătate.",
    "Сегодня в Москве прошла встреча глав государств. Новости дня: правительство объявило.",
    "Σήμερα στην Αθήνα πραγματοποιήθηκε συνάντηση. Ειδήσεις της ημέρας από την κυβέρνηση.",
    "Bugün İstanbul'da önemli bir toplantı yapıldı. Hükümet yeni düzenlemeleri açıkladı.",
]


@pytest.mark.parametrize("text", WESTERN_AND_OTHER_TEXTS)
def test_windows_1252_shortcut_agrees_with_full_detection(text: str) -> None:
    """The cheap check never claims windows-1252 when the full detection would not pick it."""
    for codec in DETECTABLE:
        try:
            body = rss(text).encode(codec)
        except UnicodeEncodeError:
            continue
        if _windows_1252_wins(body):
            assert _all_detected(body)[0] == "windows-1252", codec


def test_windows_1252_shortcut_takes_the_unlabelled_western_feed() -> None:
    body = (CORPUS / "rss-parser" / "test" / "input" / "uolNoticias.rss").read_bytes()
    assert _windows_1252_wins(body)
    assert _all_detected(body)[0] == "windows-1252"


SMALL_WESTERN = [
    "\u00dcber die Stra\u00dfe gehen M\u00e4dchen",  # Mac Roman was tied with it
    "H\u00e4m\u00e4l\u00e4inen ty\u00f6skentelee yst\u00e4v\u00e4ns\u00e4 kanssa.",  # Mac Roman
    "Caf\u00e9 d\u00e9j\u00e0 vu, na\u00efve fa\u00e7ade",  # windows-1257 had less chaos
    "It\u2019s a \u201cquote\u201d \u2013 \u20ac5",
]


@pytest.mark.parametrize("text", SMALL_WESTERN)
@pytest.mark.parametrize("declared", ["utf-8", None])
def test_small_western_feeds_read_as_windows_1252(text: str, declared: str | None) -> None:
    """A few hundred bytes of windows-1252, declared UTF-8 or not labelled: charset-normalizer
    scored Mac Roman or windows-1257 a little better, and every accent came out garbled."""
    result = decode_feed(rss(text, declared=declared).encode("cp1252"), None)
    assert (result.encoding, result.source) == ("windows-1252", "detected")
    assert item_description(result.data) == text


SMALL_OTHER = [
    pytest.param(WESTERN_AND_OTHER_TEXTS[3], "cp1250", "windows-1250", id="czech"),
    pytest.param(WESTERN_AND_OTHER_TEXTS[5], "cp1251", "windows-1251", id="russian-1251"),
    pytest.param(WESTERN_AND_OTHER_TEXTS[5], "koi8-r", "koi8-r", id="russian-koi8"),
    pytest.param(WESTERN_AND_OTHER_TEXTS[6], "cp1253", "windows-1253", id="greek"),
]


@pytest.mark.parametrize(("text", "codec", "expected"), SMALL_OTHER)
def test_small_non_western_feeds_keep_their_code_page(text: str, codec: str, expected: str) -> None:
    """The preference for windows-1252 does not take text it reads as mojibake."""
    result = decode_feed(rss(text, declared="utf-8").encode(codec), None)
    assert (result.encoding, item_description(result.data)) == (expected, text)


@pytest.mark.parametrize(
    ("declared", "content_type"),
    [("iso-8859-1", None), (None, "text/xml; charset=windows-1252"), ("us-ascii", None)],
)
def test_western_utf8_in_a_body_labelled_windows_1252_is_read_as_utf8(
    declared: str | None, content_type: str | None
) -> None:
    """A legacy template (or a server default) labels the feed Latin-1 while newer entries are
    UTF-8: read as labelled, their "é" became "Ã©". The label's bytes still read as it says."""
    body = rss("Caf\u00e9 \u201cneu\u201d, M\u00fcller", declared=declared).encode()
    body = body.replace("ü".encode(), b"\xfc")
    result = decode_feed(body, content_type)
    assert (result.encoding, result.source, result.stray_windows_1252) == ("utf-8", "detected", 2)
    assert item_description(result.data) == "Caf\u00e9 \u201cneu\u201d, M\u00fcller"


def test_a_windows_1252_label_keeps_a_body_without_western_utf8() -> None:
    text = "Die Stra\u00dfe\u201c und M\u00fcller"
    result = decode_feed(rss(text, declared="windows-1252").encode("cp1252"), None)
    assert (result.encoding, result.source, result.stray_windows_1252) == (
        "windows-1252",
        "declaration",
        0,
    )
    assert item_description(result.data) == text


WESTERN_LETTERS = st.text(
    st.sampled_from(
        "abc xyz.\u00e9\u00fc\u00df\u00e0\u00f1\u00e7\u00c9\u00a9\u201c\u201d\u2019\u20ac\u0153"
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.tuples(WESTERN_LETTERS, st.booleans()), min_size=1, max_size=8))
def test_western_text_mixing_utf8_and_windows_1252_pieces_reads_back_whole(
    pieces: list[tuple[str, bool]],
) -> None:
    """Any Western text whose pieces are written in UTF-8 or windows-1252 reads back as
    written, provided its UTF-8 shows itself as text (a three-byte character, or an accented
    letter beside a lowercase one) and no run of windows-1252 forms a UTF-8 sequence by itself
    (which no reading can tell from UTF-8)."""
    encoded = [text.encode("utf-8" if in_utf8 else "cp1252") for text, in_utf8 in pieces]
    assume(_UTF8_AS_TEXT.search(b"".join(encoded)))
    legacy_runs = b"".join(
        b"\n" if in_utf8 else piece for piece, (_, in_utf8) in zip(encoded, pieces, strict=True)
    )
    assume(not _forms_utf8_sequence(legacy_runs))
    text = "".join(text for text, _ in pieces)
    head = b'<rss version="2.0"><channel><title>'
    result = decode_feed(head + b"".join(encoded) + b"</title></channel></rss>", None)
    assert (result.encoding, result.replaced) == ("utf-8", 0)
    assert channel_title(result.data) == text


_UTF8_AS_TEXT = re.compile(
    rb"\xe2[\x80-\xbf]{2}|[a-z][\xc2-\xdf][\x80-\xbf]|[\xc2-\xdf][\x80-\xbf][a-z]"
)


def _forms_utf8_sequence(piece: bytes) -> bool:
    return any(
        0xC2 <= first <= 0xF4 and 0x80 <= second <= 0xBF
        for first, second in itertools.pairwise(piece)
    )


@pytest.mark.parametrize(
    ("text", "codec", "content_type"),
    [
        ("Від сьогодні нові правила", "cp1251", None),  # "Ві" is C2 B3: "Â³"
        ("Від сьогодні нові правила", "cp1251", "text/xml; charset=utf-8"),  # PHP's default
        ("В\xa0Москве открылся новый «НТВ» центр", "cp1251", None),  # "В" + NBSP: C2 A0
        ("\u201cA IRMÃ\u201d estreia com recorde de público", "cp1252", "text/xml; charset=latin1"),
        ("Amanhã: \u201cAMANHÃ\u201d é o dia; IRMÃ\xa0SÃO PAULO Â®", "cp1252", None),
    ],
    ids=["ukrainian", "ukrainian-labelled-utf8", "russian-nbsp", "portuguese-latin1", "caps"],
)
def test_legacy_text_forming_a_pair_by_accident_is_not_read_as_utf8(
    text: str, codec: str, content_type: str | None
) -> None:
    """Between capitals, spaces and symbols, legacy bytes form two-byte UTF-8 sequences by
    accident: one such pair overruled charset detection (a short Ukrainian feed read wholly as
    windows-1252 mojibake) or a Latin-1 label ("IRMÃ”" read as "IRMÔ")."""
    result = decode_feed(rss_bytes(text.encode(codec)), content_type)
    assert result.stray_windows_1252 == 0
    assert channel_title(result.data) == text


def test_mixed_reading_counts_only_stray_bytes_and_replaces_unassigned_ones() -> None:
    """A U+FFFD the UTF-8 holds is no stray byte; a stray byte windows-1252 does not assign
    (81) becomes U+FFFD and is said as such (a WARNING, not the INFO of a mixed reading)."""
    written = "Caf\u00e9 \ufffd ok ".encode() + b"M\xfcller"
    result = decode_feed(rss_bytes(written), None)
    assert (result.replaced, result.stray_windows_1252) == (0, 1)
    unassigned = "Caf\u00e9 ".encode() + b"\x81 M\xfcller"
    result = decode_feed(rss_bytes(unassigned), None)
    assert (result.replaced, result.stray_windows_1252) == (1, 2)
    assert channel_title(result.data) == "Caf\u00e9 \ufffd M\u00fcller"


def rss_bytes(title: bytes) -> bytes:
    return b'<rss version="2.0"><channel><title>' + title + b"</title></channel></rss>"
