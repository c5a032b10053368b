from __future__ import annotations

import contextlib
import hashlib
import json
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import feedparser
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from feedcollector.errors import LenientParseNeeded, ParseError
from feedcollector.html import absolutize, resolve_url
from feedcollector.models import ParsedFeed, ParsedItem
from feedcollector.normalize import item_records
from feedcollector.parse import FEED_SIGNS, LENIENT_PARSE_LIMIT, parse_feed
from feedcollector.parse_common import MAX_FIELD_CHARS
from feedcollector.parse_fallback import parse_with_feedparser
from feedcollector.parse_repair import ends_unclosed, item_pieces, whole_items
from feedcollector.text_repair import readable
from feedcollector.timestamps import format_timestamp

from .conftest import CORPUS

RSS_PARSER = CORPUS / "rss-parser" / "test"
BASE_URL = "https://feeds.example.test/path/feed.xml"

LATIN1_INPUTS = {"encoding", "uolNoticias"}
"""Inputs stored in ISO-8859-1; the decode stage would hand them over as UTF-8, so do we."""
LATIN1_OUTPUTS = {"encoding"}
"""Expected outputs stored in ISO-8859-1 (the corpus README says so)."""
NOT_A_FEED = {"unrecognized"}

KNOWN_DIFFERENCES: dict[tuple[str, str], str] = {
    ("uolNoticias", "title"): (
        "upstream read the ISO-8859-1 bytes as UTF-8, so its titles hold U+FFFD (corpus README)"
    ),
    ("uolNoticias", "content"): "same U+FFFD damage in upstream's content",
    ("uolNoticias", "date"): (
        "the dates are Portuguese ('Seg, 24 Set 2018 ...'): JavaScript's Date gives up, we read "
        "the localized month name"
    ),
    ("xml2js-options", "content"): (
        "upstream was run with xml2js emptyTag='EMPTY', so empty descriptions read 'EMPTY'"
    ),
    ("reddit-atom", "content"): (
        "the descriptions hold inline (unescaped) XHTML; upstream's xml2js rebuild wraps it in a "
        "<div> and drops the text between elements ('submitted byto'); we serialize the elements"
    ),
    ("atom-customfields", "content"): (
        "YouTube's media:description is plain text: we store it escaped, as HTML ('S&amp;P'), "
        "upstream as it is ('S&P')"
    ),
    ("reddit-home", "content"): (
        "Atom type='xhtml' content: upstream serializes the <content> element itself (a wrapper "
        "<div type='xhtml' xml:base=...> around the XHTML div); we give the div's inner XHTML"
    ),
}
"""(feed stem, field) -> why our value differs from rss-parser's there, justifiably."""


def _corpus_stems() -> list[str]:
    return sorted(path.stem for path in (RSS_PARSER / "input").iterdir())


def _input_bytes(stem: str) -> bytes:
    path = next((RSS_PARSER / "input").glob(f"{stem}.*"))
    data = path.read_bytes()
    if stem in LATIN1_INPUTS:
        return data.decode("latin-1").encode("utf-8")
    data.decode("utf-8")  # every other input must already be UTF-8, as decode would hand it over
    return data


def _expected(stem: str) -> dict[str, Any] | None:
    path = RSS_PARSER / "output" / f"{stem}.json"
    if not path.exists():
        return None
    text = path.read_bytes().decode("latin-1" if stem in LATIN1_OUTPUTS else "utf-8")
    feed: dict[str, Any] = json.loads(text)["feed"]
    return feed


def _normalize_html(html: str | None, base: str) -> str | None:
    """Make upstream's raw HTML comparable with ours.

    - relative URLs resolved against the same base ours were (upstream keeps them relative);
    - CR LF / CR -> LF: XML parsers must normalize line ends (XML 1.0, 2.11), xml2js does not.
    """
    if html is None or not html.strip():
        return None
    return absolutize(html.replace("\r\n", "\n").replace("\r", "\n"), base)


def _differences(stem: str, feed: ParsedFeed, expected: dict[str, Any]) -> dict[str, list[str]]:
    base = feed.link or BASE_URL
    found: dict[str, list[str]] = {}

    def differ(field: str, theirs: object, ours: object) -> None:
        if theirs != ours:
            found.setdefault(field, []).append(f"{theirs!r} != {ours!r}")

    differ("feed title", (expected.get("title") or "").strip() or None, feed.title)
    their_link = expected.get("link")
    differ(
        "feed link", resolve_url(their_link.strip(), BASE_URL) if their_link else None, feed.link
    )
    their_items: list[dict[str, Any]] = expected.get("items", [])
    differ("item count", len(their_items), len(feed.items))
    for theirs, ours in zip(their_items, feed.items, strict=False):
        _compare_item(theirs, ours, base, differ)
    return found


def _compare_item(theirs: dict[str, Any], ours: ParsedItem, base: str, differ: Any) -> None:
    title = (theirs.get("title") or "").strip() or None
    differ("title", title, ours.title)
    link = theirs.get("link")
    link = resolve_url(link.strip(), base) if link and link.strip() else None
    differ("link", link, ours.link)
    raw_guid = theirs.get("guid", theirs.get("id"))
    if isinstance(raw_guid, dict):
        raw_guid = raw_guid.get("_")
    # the chain: guid/id, else link, else md5(title + raw pubDate)
    fallback = hashlib.md5(((title or "") + (ours.raw_pub_date or "")).encode()).hexdigest()
    differ("guid", (raw_guid or "").strip() or link or fallback, ours.guid)
    iso = theirs.get("isoDate")
    differ("date", iso[:19] + "Z" if iso else None, stamp(ours.pub_date))
    content = theirs.get("content:encoded", theirs.get("content", theirs.get("summary")))
    if content is None:  # rss-parser gives media:description as a custom field only
        content = _first(theirs.get("media:group", {}).get("media:description"))
    differ("content", _normalize_html(content, base), ours.content_html)


def _first(values: list[Any] | None) -> Any:
    return values[0] if values else None


@pytest.mark.parametrize("stem", _corpus_stems())
def test_rss_parser_corpus(stem: str) -> None:
    data = _input_bytes(stem)
    if stem in NOT_A_FEED:
        with pytest.raises(ParseError, match=r"^parse: "):
            parse_feed(data, BASE_URL)
        return
    feed = parse_feed(data, BASE_URL)
    assert not feed.format.endswith("-fallback"), "every corpus feed is well-formed XML"
    expected = _expected(stem)
    if expected is None:  # no upstream output for this input: count the items ourselves
        assert len(feed.items) == len(re.findall(rb"<(?:item|entry)[\s>]", data)) > 0
        return
    found = _differences(stem, feed, expected)
    known = {field for (known_stem, field) in KNOWN_DIFFERENCES if known_stem == stem}
    unexpected = {field: cases[:3] for field, cases in found.items() if field not in known}
    assert not unexpected, f"new differences from rss-parser: {unexpected}"
    assert known <= found.keys(), f"listed differences no longer occur: {known - found.keys()}"


def test_corpus_is_complete() -> None:
    """Guard against a silently empty or moved corpus making the test above vacuous."""
    assert len(_corpus_stems()) >= 31
    total = sum(len((_expected(stem) or {}).get("items", [])) for stem in _corpus_stems())
    assert total >= 1200


# ---------------------------------------------------------------------------- targeted rules


def rss(
    items: str, channel: str = "<title>T</title><link>http://site.example/blog/</link>"
) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<rss version="2.0" xmlns:content="http://purl.org/rss/1.0/modules/content/"'
        ' xmlns:dc="http://purl.org/dc/elements/1.1/"'
        ' xmlns:sy="http://purl.org/rss/1.0/modules/syndication/">'
        f"<channel>{channel}{items}</channel></rss>"
    ).encode()


def atom(entries: str, head: str = '<title>A</title><link href="http://site.example/"/>') -> bytes:
    return f'<feed xmlns="http://www.w3.org/2005/Atom">{head}{entries}</feed>'.encode()


def only_item(data: bytes, base_url: str = BASE_URL) -> ParsedItem:
    feed = parse_feed(data, base_url)
    assert len(feed.items) == 1
    return feed.items[0]


def contents(data: bytes) -> list[str | None]:
    """The items' stored HTML, read on the fast path (ParseError if it needs feedparser)."""
    return [item.content_html for item in parse_feed(data, BASE_URL, lenient=False).items]


def stamp(moment: datetime | None) -> str | None:
    return None if moment is None else format_timestamp(moment)


def md5(text: str) -> str:
    return hashlib.md5(text.encode("utf-8")).hexdigest()


def test_guid_chain_rss() -> None:
    item = only_item(rss("<item><guid> g-1 </guid><link>http://x.example/1</link></item>"))
    assert item.guid == "g-1"
    item = only_item(rss("<item><guid></guid><link>/posts/2</link></item>"))
    assert item.guid == item.link == "http://site.example/posts/2"
    raw = "Tue, 10 Jun 2003 04:00:00 GMT"
    item = only_item(rss(f"<item><title> Hello </title><pubDate>{raw}</pubDate></item>"))
    assert item.guid == md5("Hello" + raw)
    item = only_item(rss("<item><title>No date</title></item>"))
    assert item.guid == md5("No date")


def test_megabytes_long_titles_guids_and_links_are_bounded_alike_on_every_path() -> None:
    """D1 refuses a value of about 2 MB, and a feed's items go in one batch: one such title
    failed the whole feed on the cloud shape (SQLite stored it). Every shape now stores the
    same bounded values; the backup keeps the whole text."""
    huge = "x" * 2_500_000
    long_link = "http://site.example/" + "p" * MAX_FIELD_CHARS
    body = rss(
        f"<item><title>{huge}</title><guid>{huge}</guid><link>{long_link}</link>"
        f'<description>&lt;img src="http://img.example/{huge}.png"&gt;'
        '&lt;img src="http://img.example/ok.png"&gt;</description></item>'
        "<item><title>next</title><link>http://site.example/next</link></item>"
    )
    for parsed in (parse_feed(body, BASE_URL), parse_with_feedparser(body, BASE_URL)):
        first, second = parsed.items
        assert first.guid == "sha256:" + hashlib.sha256(huge.encode()).hexdigest()
        assert first.title == "x" * (MAX_FIELD_CHARS - 1) + "…"
        assert first.link is None
        assert second.guid == "http://site.example/next"
        (record,), _ = item_records([first], datetime(2026, 3, 2, tzinfo=UTC))
        assert record.image_urls == ("http://img.example/ok.png",)
    (no_guid,) = parse_feed(rss(f"<item><link>{long_link}</link></item>"), BASE_URL).items
    assert no_guid.guid == "sha256:" + hashlib.sha256(long_link.encode()).hexdigest()
    assert no_guid.link is None


def test_md5_fallback_uses_the_date_text_as_written_trimmed_even_when_unreadable() -> None:
    raw = "  sometime last week "
    item = only_item(rss(f"<item><title>T</title><pubDate>{raw}</pubDate></item>"))
    assert item.pub_date is None
    assert item.raw_pub_date == raw
    assert (item.guid, item.earlier_guid) == (md5("T" + raw.strip()), md5("T" + raw))


def test_md5_fallback_hashes_the_pubdate_text_whichever_date_was_read() -> None:
    """The GUID must not change if a later parser version reads the pubDate after all."""
    item = only_item(
        rss("<item><title>T</title><pubDate>Lun 3</pubDate><dc:date>2020-01-01</dc:date></item>")
    )
    assert stamp(item.pub_date) == "2020-01-01T00:00:00Z"
    assert item.guid == md5("T" + "Lun 3")


@pytest.mark.parametrize("broken", [False, True], ids=["fast path", "feedparser"])
def test_items_of_a_description_alone_get_a_guid_each(broken: bool) -> None:
    """RSS allows an item of a description alone. The seed's last step hashes title + pubDate,
    which is md5("") for every such item: the feed would keep only its first. Their text is
    hashed instead; an item with no text at all still gets md5("")."""
    items = (
        "<item><description> first note </description></item>"
        "<item><description><![CDATA[<p>second <a href='/n/2'>note</a></p>]]></description></item>"
        "<item><content:encoded>third</content:encoded><description>ignored</description></item>"
        "<item><description>   </description></item>"
    )
    data = rss(items) + (b"<" if broken else b"")
    if broken:
        with pytest.raises(LenientParseNeeded):
            parse_feed(data, BASE_URL, lenient=False)
    feed = parse_feed(data, BASE_URL)
    assert [item.guid for item in feed.items] == [
        md5("first note"),
        md5("<p>second <a href='/n/2'>note</a></p>"),
        md5("third"),
        md5(""),
    ]
    titled = only_item(rss("<item><title>T</title><description>text</description></item>"))
    assert titled.guid == md5("T")


RDF = (
    b'<?xml version="1.0"?><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"'
    b' xmlns="http://purl.org/rss/1.0/"><channel rdf:about="http://site.example/">'
    b"<title>R</title><link>http://site.example/</link></channel>"
    b'<item rdf:about="urn:x:1"><title>One</title><link>http://site.example/1</link></item>'
    b"</rdf:RDF>"
)


@pytest.mark.parametrize(
    ("document", "guid", "link"),
    [
        (
            rss(
                "<item><title>Episode</title><pubDate>Mon, 02 Mar 2026 08:00:00 GMT</pubDate>"
                '<enclosure url="/e.mp3" length="1" type="audio/mpeg"/></item>'
            ),
            md5("Episode" + "Mon, 02 Mar 2026 08:00:00 GMT"),
            None,
        ),
        (RDF, "http://site.example/1", "http://site.example/1"),
    ],
    ids=["rss enclosure", "rdf:about"],
)
def test_both_paths_give_an_item_the_same_guid_and_link(
    document: bytes, guid: str, link: str | None
) -> None:
    """A feed well-formed one day and broken the next stored its items again: feedparser
    took an RSS <enclosure> for the item's link (and GUID), and rdf:about for its GUID."""
    for data in (document, document + b"<"):
        (item,) = parse_feed(data, BASE_URL).items
        assert (item.guid, item.link) == (guid, link), data[-1:]


@pytest.mark.parametrize("broken", [False, True], ids=["fast path", "feedparser"])
def test_a_permalink_guid_is_the_link_of_an_item_without_one(broken: bool) -> None:
    """RSS 2.0: a guid is a permalink unless isPermaLink says otherwise; an item with no
    other URL had no link at all (feedparser takes the guid)."""
    items = (
        "<item><title>A</title><guid>https://site.example/a</guid></item>"
        '<item><title>B</title><guid isPermaLink="false">https://site.example/b</guid></item>'
        "<item><title>C</title><guid>urn:uuid:1</guid></item>"
        "<item><title>D</title><link>/d</link><guid>https://site.example/not-d</guid></item>"
    )
    feed = parse_feed(rss(items) + (b"<" if broken else b""), BASE_URL)
    assert [item.link for item in feed.items] == [
        "https://site.example/a",
        None,
        None,
        "http://site.example/d",
    ]


@pytest.mark.parametrize("broken", [False, True], ids=["fast path", "feedparser"])
def test_an_rss_item_without_link_takes_its_atom_link(broken: bool) -> None:
    """Both paths read it as feedparser does (the alternate, else the first), so a feed that
    turns ill-formed one day keeps its items' GUIDs; an item's own <link> comes first."""
    atom_link = '<atom:link xmlns:atom="http://www.w3.org/2005/Atom"'
    items = (
        f'<item><title>A</title>{atom_link} rel="replies" href="/c/1"/>'
        f'{atom_link} rel="alternate" href="/p/1"/></item>'
        f'<item><title>B</title><link> </link>{atom_link} rel="enclosure" href="/f.mp3"/></item>'
        f'<item><title>C</title><link>/p/3</link>{atom_link} href="/p/other"/></item>'
        f'<item><title>D</title><description>no link</description>{atom_link} href=""/></item>'
    )
    data = rss(items) + (b"<" if broken else b"")
    if broken:
        with pytest.raises(LenientParseNeeded):
            parse_feed(data, BASE_URL, lenient=False)
    feed = parse_feed(data, BASE_URL)
    expected = [
        "http://site.example/p/1",
        "http://site.example/f.mp3",
        "http://site.example/p/3",
    ]
    assert [item.link for item in feed.items] == [*expected, None]
    assert [item.guid for item in feed.items] == [*expected, md5("D")]


@pytest.mark.parametrize("broken", [False, True], ids=["fast path", "feedparser"])
def test_a_link_without_href_has_its_text_for_one(broken: bool) -> None:
    """``<link>https://...</link>`` in Atom (an RSS habit): feedparser takes the text for the
    href, the link being otherwise chosen as any other; both paths read it so, the entry's
    and the feed's alike. An href, even empty, is the href."""
    entries = atom(
        "<entry><id>a</id><link>\n  /a  \n</link></entry>"
        '<entry><id>b</id><link rel="self">/b.atom</link><link rel="alternate" href="/b"/></entry>'
        '<entry><id>c</id><link>/c-text</link><link rel="alternate" href="/c-href"/></entry>'
        '<entry><id>e</id><link href="/e-href">/e-text</link></entry>'
        '<entry><id>f</id><link href="">/f-text</link><link rel="related" href="/f"/></entry>'
        '<entry><id>g</id><link rel="enclosure" href="/g.mp3"/><link rel="alternate"/></entry>'
        # last: feedparser's loose parse applies an entry's xml:base to the entries after it
        '<entry xml:base="http://other.example/dir/"><id>d</id><link>d</link></entry>',
        head="<title>A</title><link>http://home.example/</link>",
    ) + (b"<" if broken else b"")
    feed = parse_feed(entries, BASE_URL)
    assert feed.format == ("atom-fallback" if broken else "atom")
    assert feed.link == "http://home.example/"
    assert [item.link for item in feed.items] == [
        "http://home.example/a",
        "http://home.example/b",
        "http://home.example/c-text",
        "http://home.example/e-href",
        "http://home.example/f",
        "http://home.example/g.mp3",
        "http://other.example/dir/d",
    ]


def test_guid_chain_atom() -> None:
    item = only_item(atom('<entry><id>urn:x:1</id><link href="/a"/></entry>'))
    assert item.guid == "urn:x:1"
    item = only_item(
        atom('<entry><link rel="self" href="/self"/><link rel="alternate" href="/alt"/></entry>')
    )
    assert item.guid == item.link == "http://site.example/alt"
    item = only_item(atom('<entry><link rel="enclosure" href="/file.mp3"/></entry>'))
    assert item.link == "http://site.example/file.mp3"
    raw = "2024-01-02T03:04:05Z"
    item = only_item(atom(f"<entry><title>X</title><updated>{raw}</updated></entry>"))
    assert item.guid == md5("X" + raw)


@pytest.mark.parametrize("broken", [False, True], ids=["fast path", "feedparser"])
def test_an_entry_links_to_its_html_page_first(broken: bool) -> None:
    """The first alternate of an HTML type (no type counts as HTML), else the first alternate,
    else the first link; both paths choose alike, so a GUID does not depend on the path."""
    entries = atom(
        '<entry><link rel="alternate" type="audio/mpeg" href="/a.mp3"/>'
        '<link rel="alternate" type="text/html; charset=utf-8" href="/a.html"/></entry>'
        '<entry><link rel="enclosure" href="/b.mp3"/>'
        '<link rel="alternate" type="application/json" href="/b.json"/></entry>'
        '<entry><link rel="related" href="/c"/></entry>'
    ) + (b"<" if broken else b"")
    feed = parse_feed(entries, BASE_URL)
    assert feed.format == ("atom-fallback" if broken else "atom")
    assert [item.link for item in feed.items] == [
        "http://site.example/a.html",
        "http://site.example/b.json",
        "http://site.example/c",
    ]


def test_content_encoded_wins_over_description() -> None:
    item = only_item(
        rss(
            "<item><description>short</description>"
            "<content:encoded><![CDATA[<p>full</p>]]></content:encoded></item>"
        )
    )
    assert item.content_html == "<p>full</p>"
    item = only_item(
        rss("<item><content:encoded>  </content:encoded><description>desc</description></item>")
    )
    assert item.content_html == "desc"
    item = only_item(rss("<item><title>t</title></item>"))
    assert item.content_html is None


def test_content_namespace_without_trailing_slash_still_counts() -> None:
    data = (
        b'<rss xmlns:content="http://purl.org/rss/1.0/modules/content"><channel><item>'
        b"<description>d</description><content:encoded>c</content:encoded></item></channel></rss>"
    )
    assert only_item(data).content_html == "c"


def test_atom_content_wins_over_summary() -> None:
    item = only_item(
        atom(
            '<entry><summary>s</summary><content type="html">&lt;b&gt;c&lt;/b&gt;</content></entry>'
        )
    )
    assert item.content_html == "<b>c</b>"
    item = only_item(
        atom('<entry><summary>s</summary><content src="http://x.example/out-of-line"/></entry>')
    )
    assert item.content_html == "s"


def test_cdata_and_escaped_content_give_the_same_html() -> None:
    html = '<p class="x">Fish &amp; chips <img src="http://x.example/a.png"></p>'
    escaped = html.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    from_cdata = only_item(rss(f"<item><description><![CDATA[{html}]]></description></item>"))
    from_text = only_item(rss(f"<item><description>{escaped}</description></item>"))
    assert from_cdata.content_html == from_text.content_html == html


def test_relative_urls_in_content_become_absolute_and_the_rest_stays_byte_identical() -> None:
    html = (
        "<p>Hi <a href='/about'>me</a>\n<img  src=\"pics/a.png\" alt='A'>"
        '<img srcset="s.png 1x, /l.png 2x"><a href="https://x.example/">abs</a>'
        '<a href="#top">top</a><a href="mailto:m@x.example">m</a><!-- <img src="c.png"> --></p>'
    )
    item = only_item(rss(f"<item><description><![CDATA[{html}]]></description></item>"))
    assert item.content_html == (
        html.replace("'/about'", "'http://site.example/about'")
        .replace('"pics/a.png"', '"http://site.example/blog/pics/a.png"')
        .replace(
            '"s.png 1x, /l.png 2x"',
            '"http://site.example/blog/s.png 1x, http://site.example/l.png 2x"',
        )
    )


def test_base_is_xml_base_else_feed_link_else_fetch_url() -> None:
    entry = (
        '<entry xml:base="sub/"><id>1</id><link href="page"/>'
        '<content type="html" xml:base="deeper/">&lt;img src="c.png"&gt;</content>'
        '<summary type="html">&lt;img src="s.png"&gt;</summary></entry>'
    )
    data = atom(entry, head='<link href="http://ignored.example/"/>').replace(
        b"<feed ", b'<feed xml:base="http://base.example/root/" '
    )
    item = only_item(data)
    assert item.link == "http://base.example/root/sub/page"
    assert item.content_html == '<img src="http://base.example/root/sub/deeper/c.png">'
    summary_only = data.replace(
        b'<content type="html" xml:base="deeper/">&lt;img src="c.png"&gt;</content>', b""
    )
    assert only_item(summary_only).content_html == '<img src="http://base.example/root/sub/s.png">'
    # no xml:base: the feed's link (itself made absolute against the fetch URL)
    relative_link = rss("<item><link>p</link></item>", channel="<link>/blog/</link>")
    assert (
        only_item(relative_link, "https://fetched.example/feed").link
        == "https://fetched.example/blog/p"
    )
    # no xml:base and no feed link: the fetch URL
    no_link = rss("<item><link>p</link></item>", channel="<title>T</title>")
    assert (
        only_item(no_link, "https://fetched.example/feeds/rss").link
        == "https://fetched.example/feeds/p"
    )


def test_atom_xhtml_content_is_the_inner_xhtml_of_the_div() -> None:
    entry = (
        '<entry><id>1</id><content type="xhtml"><div xmlns="http://www.w3.org/1999/xhtml">'
        'Hi &amp; <p class="a">x<br/><img src="i.png"/></p> tail</div></content></entry>'
    )
    item = only_item(atom(entry))
    assert item.content_html == (
        'Hi &amp; <p class="a">x<br/><img src="http://site.example/i.png"/></p> tail'
    )


def test_the_xml_base_of_the_div_of_atom_xhtml_content_is_followed() -> None:
    """The div that wraps Atom XHTML content is no part of the value, but XML Base gives its
    children its ``xml:base`` (feedparser leaves it out); it is resolved against the content's
    own, the entry's and the feed's in turn."""
    xhtml = 'xmlns="http://www.w3.org/1999/xhtml"'
    entries = (
        '<entry xml:base="b/"><id>1</id><content type="xhtml" xml:base="c/">'
        f'<div {xhtml} xml:base="d/"><img src="i.png"/><a href="/top">t</a></div></content>'
        "</entry>"
        f'<entry><id>2</id><summary type="xhtml"><div {xhtml} xml:base="s/"><a href="x">x</a>'
        "</div></summary></entry>"
        f'<entry><id>3</id><content type="xhtml"><div {xhtml} xml:base="https://cdn.example/m/">'
        '<img src="p.png"/></div></content><link href="page"/></entry>'
        f'<entry><id>4</id><content type="xhtml"><div {xhtml}><img src="n.png"/></div></content>'
        "</entry>"
    )
    data = atom(entries).replace(b"<feed ", b'<feed xml:base="http://base.example/a/" ')
    assert contents(data) == [
        '<img src="http://base.example/a/b/c/d/i.png"/><a href="http://base.example/top">t</a>',
        '<a href="http://base.example/a/s/x">x</a>',
        '<img src="https://cdn.example/m/p.png"/>',
        '<img src="http://base.example/a/n.png"/>',
    ]
    item = parse_feed(data, BASE_URL).items[2]
    assert item.link == "http://base.example/a/page"  # the div's base is the content's alone


@pytest.mark.parametrize("broken", [False, True], ids=["fast path", "feedparser"])
def test_an_xml_base_inside_xhtml_content_is_followed_below_its_element(broken: bool) -> None:
    """XML Base gives an element's base to everything below it, also inside content, where
    feedparser (and both readers here) resolved every URL against the content's base. Both
    readers keep the attribute in the markup, so one pass over the HTML honours it on both
    paths; it ends with its element, and a nested one is resolved against it."""
    xhtml = 'xmlns="http://www.w3.org/1999/xhtml"'
    entry = (
        f'<entry><id>1</id><content type="xhtml"><div {xhtml}><p xml:base="http://in.example/i/">'
        '<a href="a.html">a</a><img src="i.png"/><span xml:base="deeper/"><img src="d.png"/>'
        '</span><p>nested <a href="n">n</a></p></p><img src="out.png"/></div></content></entry>'
    )
    (item,) = parse_feed(atom(entry) + (b"<" if broken else b""), BASE_URL).items
    html = (item.content_html or "").replace("></img>", "/>")  # feedparser closes them so
    assert html == (
        '<p xml:base="http://in.example/i/"><a href="http://in.example/i/a.html">a</a>'
        '<img src="http://in.example/i/i.png"/><span xml:base="deeper/">'
        '<img src="http://in.example/i/deeper/d.png"/></span>'
        '<p>nested <a href="http://in.example/i/n">n</a></p></p>'
        '<img src="http://site.example/out.png"/>'
    )


def test_atom_xhtml_content_after_its_first_div_is_kept() -> None:
    """Only the first ``<div>`` was kept: the article after it was lost (content and title)."""
    xhtml = 'xmlns="http://www.w3.org/1999/xhtml"'
    entry = (
        f'<entry><id>1</id><title type="xhtml"><div {xhtml}>Part one</div> part two</title>'
        f'<content type="xhtml"><div {xhtml}>Intro</div><p {xhtml}>The rest</p></content></entry>'
    )
    item = only_item(atom(entry))
    assert item.title == "Part one part two"
    assert item.content_html == "<div>Intro</div><p>The rest</p>"


_NAMESPACE_CASES = (
    b'<r xmlns:m="http://search.yahoo.com/mrss/" xmlns:xl="http://www.w3.org/1999/xlink"'
    b' xmlns:h="http://www.w3.org/1999/xhtml">'
    b'<div xmlns="http://www.w3.org/1999/xhtml">a &lt; b <p class="c">x<br/></p>t<!--c--></div>'
    b'<div xmlns="http://www.w3.org/1999/xhtml"><m:thumbnail url="x"/><a xl:href="y">t</a></div>'
    b'<div xmlns="http://www.w3.org/1999/xhtml"><h:p>prefixed</h:p><p xml:lang="fr">q</p></div>'
    b'<div xmlns="http://www.w3.org/1999/xhtml">&#13;<p xmlns:unused="u">x</p></div>'
    b'<div xmlns="http://www.w3.org/1999/xhtml"><svg xmlns="http://www.w3.org/2000/svg"/></div>'
    b'<div xmlns="http://www.w3.org/1999/xhtml">text x:y="z"<p/></div>'
    b'<div xmlns="http://www.w3.org/1999/xhtml"/>'
    b'<description>plain <b m:x="1">b</b> <i>i</i></description><d xml:base="/b">e<m:c/></d>'
    b'<div xmlns="http://www.w3.org/1999/xhtml" xml:base="/b" xml:lang="en"><p>p</p></div>'
    b'<description xmlns="http://purl.org/rss/1.0/">in RSS 1.0 <p>p</p></description></r>'
)


@pytest.mark.parametrize(
    "path",
    [None, *sorted((RSS_PARSER / "input").glob("*.atom")), RSS_PARSER / "input" / "rss-1.rss"],
)
def test_markup_cut_from_one_serialization_is_the_renamed_copys(path: Path | None) -> None:
    """XHTML content is cut from the container's own serialization when that gives what the
    renamed copy gives (every element in the container's namespace, no prefix, no declaration
    below it), and serialized from the copy otherwise: every element of these documents."""
    from lxml import etree

    from feedcollector.parse_text import _inner_as_serialized, _inner_renamed

    document = _NAMESPACE_CASES if path is None else path.read_bytes()
    root = etree.fromstring(document, etree.XMLParser(ns_clean=True, resolve_entities=False))
    cut = 0
    for element in root.iter("*"):
        inner = _inner_as_serialized(element)
        if inner is not None:
            cut += 1
            assert inner == _inner_renamed(element)
    assert cut > 0 or path is not None  # a text like "tag:a.example,2008:Repo/1" is not cut
    if path is None:
        divs = root.findall("{http://www.w3.org/1999/xhtml}div")
        assert [_inner_as_serialized(div) for div in divs] == [
            'a &lt; b <p class="c">x<br/></p>t<!--c-->',
            None,
            None,
            None,
            None,
            None,
            "",
            "<p>p</p>",
        ]
        assert _inner_renamed(divs[1]).startswith("<m:thumbnail ")  # declared, not cut
        assert _inner_renamed(divs[2]) == '<p>prefixed</p><p xml:lang="fr">q</p>'


@pytest.mark.parametrize(
    ("document", "title", "item"),
    [
        (  # RSS 1.0 written in Dublin Core alone: the titles and description were lost
            b'<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
            b'xmlns="http://purl.org/rss/1.0/" xmlns:dc="http://purl.org/dc/elements/1.1/">'
            b"<channel><dc:title>Chan</dc:title><link>http://ex.com/</link></channel>"
            b'<item rdf:about="http://ex.com/1"><dc:title>Item</dc:title><link>http://ex.com/1'
            b"</link><dc:description>desc</dc:description></item></rdf:RDF>",
            "Chan",
            ("Item", "desc", None),
        ),
        (  # an Atom entry dated only by dc:date, an Atom 0.3 one only by created
            b'<feed xmlns="http://www.w3.org/2005/Atom" xmlns:dc="http://purl.org/dc/elements/'
            b'1.1/"><title>T</title><entry><title>E</title><id>urn:1</id><dc:date>2024-01-01T'
            b"10:00:00Z</dc:date></entry></feed>",
            "T",
            ("E", None, "2024-01-01T10:00:00Z"),
        ),
        (
            b'<feed version="0.3" xmlns="http://purl.org/atom/ns#"><title>T</title><entry>'
            b"<title>E</title><id>urn:1</id><created>2004-01-03T00:00:00Z</created></entry></feed>",
            "T",
            ("E", None, "2004-01-03T00:00:00Z"),
        ),
        (
            b'<rss version="2.0" xmlns:dcterms="http://purl.org/dc/terms/"><channel><title>T'
            b"</title><item><title>x</title><guid>g</guid><dcterms:created>2024-01-01T10:00:00Z"
            b"</dcterms:created></item></channel></rss>",
            "T",
            ("x", None, "2024-01-01T10:00:00Z"),
        ),
    ],
)
def test_dublin_core_fields_stand_in_for_missing_ones(
    document: bytes, title: str, item: tuple[str, str | None, str | None]
) -> None:
    feed = parse_feed(document, "http://ex.com/feed")
    (only,) = feed.items
    dated = only.pub_date.strftime("%Y-%m-%dT%H:%M:%SZ") if only.pub_date else None
    assert (feed.title, (only.title, only.content_html, dated)) == (title, item)


def test_rss_1_0_rdf() -> None:
    data = b"""<?xml version="1.0"?>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns="http://purl.org/rss/1.0/"
 xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:sy="http://purl.org/rss/1.0/modules/syndication/">
<channel rdf:about="http://site.example/"><title>RDF</title><link>http://site.example/</link>
<sy:updatePeriod>daily</sy:updatePeriod><sy:updateFrequency>4</sy:updateFrequency></channel>
<item rdf:about="http://site.example/1"><title>One</title><link>http://site.example/1</link>
<description>first</description><dc:date>2017-06-15T10:29:47-07:00</dc:date></item>
<item rdf:about="http://site.example/2"><title>Two</title><link>/2</link></item>
</rdf:RDF>"""
    feed = parse_feed(data, BASE_URL)
    assert (feed.format, feed.title, feed.link, feed.ttl_minutes) == (
        "rdf",
        "RDF",
        "http://site.example/",
        360,
    )
    first, second = feed.items
    assert (first.guid, first.title, first.content_html) == (
        "http://site.example/1",
        "One",
        "first",
    )
    assert stamp(first.pub_date) == "2017-06-15T17:29:47Z"
    assert second.guid == "http://site.example/2"


def test_ttl_and_syndication_period() -> None:
    assert parse_feed(rss("", channel="<ttl> 45 </ttl>"), BASE_URL).ttl_minutes == 45
    sy = "<sy:updatePeriod>hourly</sy:updatePeriod><sy:updateFrequency>2</sy:updateFrequency>"
    assert parse_feed(rss("", channel=sy), BASE_URL).ttl_minutes == 30
    assert parse_feed(rss("", channel="<ttl>soon</ttl>"), BASE_URL).ttl_minutes is None
    assert parse_feed(rss("", channel="<title>T</title>"), BASE_URL).ttl_minutes is None
    many = "9" * 5000  # more digits than int() reads: clipped, not a failed feed
    assert parse_feed(rss("", channel=f"<ttl>{many}</ttl>"), BASE_URL).ttl_minutes == 10**9
    sy = f"<sy:updatePeriod>daily</sy:updatePeriod><sy:updateFrequency>{many}</sy:updateFrequency>"
    assert parse_feed(rss("", channel=sy), BASE_URL).ttl_minutes == 1
    superscript = "<ttl>\u00b2</ttl>"  # a digit to isdigit(), not to int()
    assert parse_feed(rss("", channel=superscript), BASE_URL).ttl_minutes is None


def test_dates_pubdate_then_dc_date_and_atom_published_then_updated() -> None:
    item = only_item(
        rss("<item><pubDate>bad</pubDate><dc:date>2020-05-06T07:08:09Z</dc:date></item>")
    )
    assert stamp(item.pub_date) == "2020-05-06T07:08:09Z"
    assert item.raw_pub_date == "bad"  # the pubDate text, even though dc:date was read
    item = only_item(
        atom(
            "<entry><updated>2020-01-01T00:00:00Z</updated>"
            "<published>2019-01-01T00:00:00+01:00</published></entry>"
        )
    )
    assert stamp(item.pub_date) == "2018-12-31T23:00:00Z"
    item = only_item(rss("<item><pubDate>not a date</pubDate></item>"))
    assert (item.pub_date, item.raw_pub_date) == (None, "not a date")


@pytest.mark.parametrize("broken", [False, True], ids=["fast path", "feedparser"])
def test_rss_items_dated_only_by_atom_or_dcmi_terms(broken: bool) -> None:
    """An RSS item without pubDate or dc:date may carry Atom's or DCMI terms' published or
    updated: feedparser reads them, so the fast path does too (it stored the fetch time), and
    a feed that turns ill-formed one day keeps its items' dates and GUIDs. Published counts
    before updated; pubDate and dc:date still come first, so no stored GUID changes."""
    namespaces = (
        'xmlns:atom="http://www.w3.org/2005/Atom" xmlns:dcterms="http://purl.org/dc/terms/"'
    )
    items = (
        "<item><title>A</title><atom:updated>2024-05-01T10:00:00Z</atom:updated></item>"
        "<item><title>B</title><dcterms:modified>2024-05-02T10:00:00Z</dcterms:modified>"
        "<dcterms:issued>2024-05-01T09:00:00Z</dcterms:issued></item>"
        "<item><title>C</title><atom:updated>2024-05-03T12:00:00Z</atom:updated>"
        "<atom:published>2024-05-03T10:00:00+02:00</atom:published></item>"
        "<item><title>D</title><pubDate>Sat, 04 May 2024 10:00:00 GMT</pubDate>"
        "<atom:updated>2024-06-01T00:00:00Z</atom:updated></item>"
    )
    data = rss(items).replace(b"<rss ", f"<rss {namespaces} ".encode()) + (b"<" if broken else b"")
    if broken:
        with pytest.raises(LenientParseNeeded):
            parse_feed(data, BASE_URL, lenient=False)
    feed = parse_feed(data, BASE_URL)
    assert [stamp(item.pub_date) for item in feed.items] == [
        "2024-05-01T10:00:00Z",
        "2024-05-01T09:00:00Z",
        "2024-05-03T08:00:00Z",
        "2024-05-04T10:00:00Z",
    ]
    assert [item.guid for item in feed.items] == [
        md5("A2024-05-01T10:00:00Z"),
        md5("B2024-05-01T09:00:00Z"),
        md5("C2024-05-03T10:00:00+02:00"),
        md5("DSat, 04 May 2024 10:00:00 GMT"),
    ]


def test_titles_resolve_entities_and_trim() -> None:
    item = only_item(rss("<item><title>\n  Fish &amp; chips &#233;t&#xE9; </title></item>"))
    assert item.title == "Fish & chips été"
    item = only_item(atom('<entry><title type="html">&lt;b&gt;Bold&lt;/b&gt; move</title></entry>'))
    assert item.title == "<b>Bold</b> move"
    item = only_item(
        atom(
            '<entry><title type="xhtml"><div xmlns="http://www.w3.org/1999/xhtml">'
            "An <em>XHTML</em> title</div></title></entry>"
        )
    )
    assert item.title == "An XHTML title"
    assert parse_feed(rss("", channel="<title>  </title>"), BASE_URL).title is None


def test_undefined_html_entities_and_stray_ampersands_are_repaired() -> None:
    data = rss(
        "<item><title>Caf&eacute;&nbsp;Bar & Grill &unknownentity;</title>"
        "<description>A &amp; B &copy; 2024</description>"
        "<content:encoded><![CDATA[<p>&nbsp;kept as written & raw</p>]]></content:encoded></item>"
    )
    feed = parse_feed(data, BASE_URL)
    assert feed.format == "rss"  # repaired, then read by the strict parser
    item = feed.items[0]
    assert item.title == "Café\xa0Bar & Grill &unknownentity;"
    assert item.content_html == "<p>&nbsp;kept as written & raw</p>"


def test_legacy_entities_without_a_semicolon_are_read_where_html_reads_them() -> None:
    """``&eacute`` or ``&copy`` without ``;`` are read by browsers and feedparser; before a
    letter, digit or ``=`` HTML reads them only in text, where a feed has URLs too:
    ``&copy=2``, ``&current=1`` are query strings, which must keep the link and GUID."""
    link = "http://site.example/a?x=1&copy=2&current=3&region=eu&eacutes"
    data = rss(
        "<item><title>caf&eacute au lait &amp b &copy 2024 &AMP&lt</title>"
        f"<link>{link}</link><description>&nbsp;x&amp</description></item>"
    )
    feed = parse_feed(data, BASE_URL)
    assert feed.format == "rss"  # repaired, then read by the strict parser
    assert feed.items[0].title == "café au lait & b © 2024 &<"
    assert feed.items[0].link == link
    assert feed.items[0].content_html == "\xa0x&"


def test_entities_of_an_unloaded_external_dtd_are_kept_not_dropped() -> None:
    data = (
        b'<!DOCTYPE rss PUBLIC "-//Netscape Communications//DTD RSS 0.91//EN"'
        b' "http://my.netscape.com/publish/formats/rss-0.91.dtd">'
        b'<rss version="0.91"><channel><title>Caf&eacute; &mystery;</title>'
        b"<item><title>x</title><description>caf&eacute; &lt;b&gt;</description></item>"
        b"</channel></rss>"
    )
    feed = parse_feed(data, BASE_URL)
    assert feed.title == "Café &mystery;"
    assert feed.items[0].content_html == "café <b>"


def test_entities_the_document_declares_are_read() -> None:
    """An internal DTD subset names its own entities: they are read (feedparser reads them
    too), by libxml2 within its amplification guard. A document that also uses an external
    entity, or one no DTD it has declares, keeps them all as written: nothing is loaded."""
    subset = '<!DOCTYPE rss [<!ENTITY author "Jane Doe"><!ENTITY nested "of &author;">]>'
    body = (
        '<rss version="2.0"><channel><title>By &author;</title><item><guid>g</guid>'
        "<title>&author; &nested;</title>"
        "<description>&lt;p&gt;by &author;&lt;/p&gt;</description></item></channel></rss>"
    )
    feed = parse_feed((subset + body).encode(), BASE_URL)
    assert (feed.format, feed.title) == ("rss", "By Jane Doe")
    assert feed.items[0].title == "Jane Doe of Jane Doe"
    assert feed.items[0].content_html == "<p>by Jane Doe</p>"
    external = subset.replace("]>", '<!ENTITY file SYSTEM "file:///etc/hostname">]>')
    kept = parse_feed((external + body.replace("&nested;", "&file;")).encode(), BASE_URL)
    assert (kept.format, kept.title, kept.items[0].title) == (
        "rss",
        "By &author;",
        "&author; &file;",
    )


def test_undeclared_namespace_prefixes_are_repaired() -> None:
    data = (
        b'<rss version="2.0"><channel><title>T</title><item><title>x</title>'
        b'<media:content url="http://x.example/v.mp4"/>'
        b"<content:encoded>full</content:encoded><description>short</description>"
        b"</item></channel></rss>"
    )
    feed = parse_feed(data, BASE_URL)
    assert feed.format == "rss"
    assert feed.items[0].content_html == "full"


def test_declared_latin1_but_utf8_bytes_are_read_as_utf8() -> None:
    """The decode stage hands over UTF-8 and may leave the old declaration in place."""
    data = '<?xml version="1.0" encoding="ISO-8859-1"?><rss><channel><title>Notícias</title></channel></rss>'
    assert parse_feed(data.encode("utf-8"), BASE_URL).title == "Notícias"


def test_leading_whitespace_and_bom_before_the_declaration() -> None:
    data = b"\xef\xbb\xbf\n\n  " + rss("<item><title>x</title></item>")
    feed = parse_feed(data, BASE_URL)
    assert (feed.format, feed.items[0].title) == ("rss", "x")


def test_broken_xml_falls_back_and_still_yields_items() -> None:
    data = b"""<?xml version="1.0"?><rss version="2.0"><channel><title>Broken</title>
<link>http://site.example/blog/</link>
<item><title>One</title><link>/one</link><description>unclosed <br> tag</description>
<pubDate>Tue, 10 Jun 2003 04:00:00 GMT</pubDate></item>
<item><title>Two</title><guid>g2</guid><description>&lt;img src="i.png"&gt;</description></item>
</channel></rss>"""
    feed = parse_feed(data, BASE_URL)
    assert feed.format == "rss-fallback"
    assert feed.title == "Broken"
    one, two = feed.items
    assert (one.title, one.link, one.guid) == (
        "One",
        "http://site.example/one",
        "http://site.example/one",
    )
    assert stamp(one.pub_date) == "2003-06-10T04:00:00Z"
    assert "unclosed" in (one.content_html or "")
    assert (two.guid, two.content_html) == ("g2", '<img src="http://site.example/blog/i.png">')


def test_without_lenient_a_document_only_feedparser_reads_is_handed_back() -> None:
    """The pipeline parses on its event loop with ``lenient=False`` and runs feedparser's
    seconds per MiB on a worker thread only when this is raised."""
    broken = atom("<entry><id>e1</id><title>A</title></entry><entry><title>B")[: -len(b"</feed>")]
    with pytest.raises(LenientParseNeeded):
        parse_feed(broken, BASE_URL, lenient=False)
    assert parse_feed(broken, BASE_URL).format == "atom-fallback"
    repairable = rss("<item><title>Fish &amp; chips &nbsp;&copy; &</title></item>")
    assert parse_feed(repairable, BASE_URL, lenient=False).format == "rss"


@pytest.mark.parametrize(
    "namespace",
    [
        "http://www.w3.org/2005/Atm",  # misspelled
        "http://purl.org/atom/ns#draft-ietf-atompub-format-08",  # a pre-1.0 draft
    ],
)
def test_a_feed_root_in_a_namespace_no_version_uses_is_read_by_local_names(namespace: str) -> None:
    """The fast path matches elements by namespace and would call this no feed; feedparser
    matches local names and reads it, as it reads any other document the fast path cannot."""
    entries = (
        '<entry><id>e1</id><title>One</title><link href="/one"/>'
        "<updated>2024-01-02T03:04:05Z</updated></entry><entry><id>e2</id><title>Two</title></entry>"
    )
    data = atom(entries).replace(b"http://www.w3.org/2005/Atom", namespace.encode())
    with pytest.raises(LenientParseNeeded, match="no RSS or Atom version uses"):
        parse_feed(data, BASE_URL, lenient=False)
    feed = parse_feed(data, BASE_URL)
    assert feed.format == "atom-fallback"
    assert [(item.guid, item.link) for item in feed.items] == [
        ("e1", "http://site.example/one"),
        ("e2", None),
    ]
    assert stamp(feed.items[0].pub_date) == "2024-01-02T03:04:05Z"


@pytest.mark.parametrize(
    ("page", "found"),
    [
        (
            b"<!DOCTYPE html><html><head><meta charset=utf-8><title>\n Just a   moment...</title>"
            b"</head><body><p>Checking your browser<br></body></html>",
            "an HTML page titled 'Just a moment...'",
        ),
        (b"<head><title>Document Moved</title></head>\n<body>here</body>", "an HTML page titled"),
        (b"<html><body><p>x<br></body></html>", "an HTML page)"),
        (b"<html><head><title>Sign in</title></head><body/></html>", "titled 'Sign in'"),
        (b"<html><title>" + b"T" * 200 + b"</title><br>", "'" + "T" * 79 + "\u2026'"),
        (b"Service Unavailable <br> & retry", "no RSS, RDF or Atom element in it"),
        (b"<html><title>\x1b[2JEvil\x07\xc2\x85 page</title><br>", "titled '[2JEvil page')"),
        (
            b"<!doctype html><html><head><title>Blog</title>"
            b"<link rel=alternate type=application/rss+xml href=/blog/feed.xml>"
            b"<link rel=alternate type=application/atom+xml href='atom.xml'></head><body><br>",
            "titled 'Blog' that announces the feed https://feeds.example.test/blog/feed.xml, "
            "https://feeds.example.test/path/atom.xml)",
        ),
        (
            b'<html xmlns="http://www.w3.org/1999/xhtml"><head><title>Moved</title>'
            b'<link rel="alternate" type="application/rss+xml" href="/new.rss"/></head></html>',
            "titled 'Moved' that announces the feed https://feeds.example.test/new.rss)",
        ),
    ],
)
def test_an_html_page_is_refused_without_the_lenient_parser(page: bytes, found: str) -> None:
    """A login wall or a "moved" page where a feed was: feedparser would find nothing in it
    either, so it is not run (not even handed to a worker thread), and the error says what
    the body is instead of quoting an XML syntax error."""
    with pytest.raises(ParseError, match=r"^parse: not a feed") as refused:
        parse_feed(page, BASE_URL, lenient=False)
    assert not isinstance(refused.value, LenientParseNeeded)
    assert found in str(refused.value)


@pytest.mark.parametrize(
    ("document", "error"),
    [
        (
            b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NoSuchKey</Code>'
            b"<Message>The specified key does not exist.</Message></Error>",
            "parse: not a feed (root element <Error>: NoSuchKey The specified key does not exist.)",
        ),
        (b"<x/>", "parse: not a feed (root element <x>)"),
        (
            b"<data>" + b"word " * 100 + b"</data>",
            "parse: not a feed (root element <data>: " + "word " * 23 + "word\u2026)",
        ),
        (
            b'<opml version="2.0"><head><title>Subscriptions</title></head><body/></opml>',
            "parse: not a feed but an OPML list of feeds; `feedcollector import-opml FILE` adds",
        ),
    ],
)
def test_other_xml_is_refused_with_what_it_says(document: bytes, error: str) -> None:
    """An object store's or an API's error document says why in its text; an OPML file is a
    list of feeds, which another command reads."""
    with pytest.raises(ParseError) as refused:
        parse_feed(document, BASE_URL)
    assert str(refused.value).startswith(error)


_FRAGMENTS = [
    "<html>", "<head>", "<title>T</title>", "<body>", "<p>", "</p>", "<br>", "text &amp; more",
    "<item>", "</item>", "<ITEM>", "<a:Entry>", "<entry/>", "<rss version='2.0'>", "<channel>",
    "<Feed>", "<rdf:RDF>", "<items>", "<feeds>", "<entries>", "<itemize>", "<![CDATA[<item>]]>",
    "<!-- <entry> -->", "<div xmlns='http://www.w3.org/2005/Atom'>", "<x xmlns:r='http://purl.org/rss/1.0/'>",
    "<title>", "</title>", "<guid>g</guid>", "<link>http://a.example/</link>", "&nbsp;", "<",
]  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_FRAGMENTS), min_size=1, max_size=12))
def test_what_is_refused_unread_feedparser_would_refuse_too(fragments: list[str]) -> None:
    """The shortcut above is safe only if feedparser finds no feed wherever it applies."""
    document = "".join(fragments).encode()
    if FEED_SIGNS.search(document) is None:
        result = feedparser.parse(document)
        assert (result.get("version", ""), result.get("entries", [])) == ("", [])


def test_a_root_named_like_a_feed_that_is_none_is_still_refused() -> None:
    data = b'<feed xmlns="urn:example:inventory"><shelf><book>A</book></shelf></feed>'
    with pytest.raises(ParseError, match="no RSS or Atom version uses, and the lenient parser"):
        parse_feed(data, BASE_URL)
    huge = data.replace(b"<shelf>", b"<shelf>" + b"<book>A</book>" * 400_000)
    with pytest.raises(ParseError, match=r"no RSS or Atom version uses, and at \d+ bytes too big"):
        parse_feed(huge, BASE_URL)


def test_items_right_under_the_root_are_read_without_a_channel() -> None:
    """``<rss>`` (or ``<rdf:RDF>``) holding the items without a ``<channel>``: feedparser
    reads them, and so does the fast path."""
    data = (
        b'<rss version="2.0"><title>T</title><link>http://site.example/</link>'
        b"<item><title>A</title><guid>a</guid></item><item><link>/b</link></item></rss>"
    )
    feed = parse_feed(data, BASE_URL, lenient=False)
    assert (feed.format, feed.title) == ("rss", "T")
    assert [(item.guid, item.link) for item in feed.items] == [
        ("a", None),
        ("http://site.example/b", "http://site.example/b"),
    ]
    rdf = (
        b'<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"'
        b' xmlns="http://purl.org/rss/1.0/"><item rdf:about="http://site.example/a">'
        b"<title>A</title><link>http://site.example/a</link></item></rdf:RDF>"
    )
    feed = parse_feed(rdf, BASE_URL, lenient=False)
    assert (feed.format, [item.link for item in feed.items]) == ("rdf", ["http://site.example/a"])
    assert parse_feed(b'<rss version="2.0"/>', BASE_URL).items == ()


@pytest.mark.parametrize(
    "page",
    [
        b"<html><body><pre>{feed}</pre></body></html>",
        b"<html><head><title>Warning</title></head><body><b>Warning</b>: in x.php<br/>{feed}"
        b"</body></html>",
    ],
)
def test_a_feed_wrapped_in_an_html_page_is_read(page: bytes) -> None:
    """Some servers serve the feed inside a page (around a PHP warning, in a ``<pre>`` for
    browsers); feedparser finds it there. Only one feed in it is read."""
    feeds = [
        rss("<item><title>A</title><guid>a</guid></item>").split(b"?>", 1)[1],
        atom("<entry><id>a</id><title>A</title></entry>"),
    ]
    for inside in feeds:
        feed = parse_feed(page.replace(b"{feed}", inside), BASE_URL, lenient=False)
        assert (feed.title in ("T", "A"), [item.guid for item in feed.items]) == (True, ["a"])
    with pytest.raises(ParseError, match=r"^parse: not a feed \(an HTML page"):
        parse_feed(page.replace(b"{feed}", feeds[0] * 2), BASE_URL)


def test_names_in_another_case_are_read_on_the_fast_path() -> None:
    """XML names are case-sensitive, feeds in the wild are not: ``<Item>``, ``<pubdate>`` or
    ``<ENTRY>`` would otherwise lose items, titles or dates. feedparser matches any case too."""
    upper = (
        rss(
            "<Item><Title>A</Title><Link>http://site.example/a</Link>"
            "<pubdate>Tue, 10 Jun 2003 04:00:00 GMT</pubdate></Item>"
            "<ITEM><TITLE>B</TITLE><GUID>g</GUID><Content:Encoded>&lt;p&gt;b&lt;/p&gt;</Content:Encoded>"
            "<DC:DATE>2024-01-02</DC:DATE></ITEM>"
            "<item><title>C</title><Guid>c</Guid><PubDate>Wed, 11 Jun 2003 04:00:00 GMT</PubDate></item>"
        )
        .replace(
            b"<rss ",
            b'<RSS xmlns:Content="http://purl.org/rss/1.0/modules/content/" '
            b'xmlns:DC="http://purl.org/dc/elements/1.1/" ',
        )
        .replace(b"</rss>", b"</RSS>")
    )
    expected = [
        ("A", "http://site.example/a", "2003-06-10T04:00:00Z", None),
        ("B", "g", "2024-01-02T00:00:00Z", "<p>b</p>"),
        ("C", "c", "2003-06-11T04:00:00Z", None),
    ]
    for document, format_name in ((upper, "rss"), (upper + b"<", "rss-fallback")):
        feed = parse_feed(document, BASE_URL)
        assert feed.format == format_name
        assert [
            (item.title, item.guid, stamp(item.pub_date), item.content_html) for item in feed.items
        ] == expected
    entry = atom(
        '<Entry><ID>e1</ID><Title>A</Title><LINK href="/a"/><Updated>2024-01-02T03:04:05Z</Updated>'
        "</Entry>"
    )
    (item,) = parse_feed(entry, BASE_URL, lenient=False).items
    assert (item.guid, item.title, item.link) == ("e1", "A", "http://site.example/a")
    assert stamp(item.pub_date) == "2024-01-02T03:04:05Z"
    extension = rss(
        '<x:Item xmlns:x="urn:example:x">not an item</x:Item>'
        '<item><guid>g</guid><x:Title xmlns:x="urn:example:x">not a title</x:Title></item>'
    )
    feed = parse_feed(extension, BASE_URL, lenient=False)
    assert [(item.guid, item.title) for item in feed.items] == [("g", None)]


def test_names_in_any_case_are_read_in_every_item() -> None:
    """The fast path's tag filter holds the usual cases of each name only; feedparser lowercases
    every name, so ``<Pubdate>``, ``<pubDATE>`` or ``<content:EnCoded>`` must be read too: in
    a feed writing them so in every item, and in one item of a feed that does not."""
    odd = (
        "<item><Title>{0}</Title><LINK>http://site.example/{0}</LINK><gUID>{0}</gUID>"
        "<Pubdate>Tue, 10 Jun 2003 04:00:00 GMT</Pubdate><dc:Creator>x</dc:Creator>"
        "<content:EnCoded>&lt;p&gt;{0}&lt;/p&gt;</content:EnCoded></item>"
    )
    feed = parse_feed(rss(odd.format("a") + odd.format("b")), BASE_URL, lenient=False)
    assert [
        (item.title, item.link, item.guid, stamp(item.pub_date), item.content_html)
        for item in feed.items
    ] == [
        (name, f"http://site.example/{name}", name, "2003-06-10T04:00:00Z", f"<p>{name}</p>")
        for name in "ab"
    ]
    mixed = rss(
        "<item><title>A</title><guid>a</guid><pubDate>Tue, 10 Jun 2003 04:00:00 GMT</pubDate></item>"
        "<item><title>B</title><guid>b</guid><pubDATE>Wed, 11 Jun 2003 04:00:00 GMT</pubDATE></item>"
    )
    feed = parse_feed(mixed, BASE_URL, lenient=False)
    assert [stamp(item.pub_date) for item in feed.items] == [
        "2003-06-10T04:00:00Z",
        "2003-06-11T04:00:00Z",
    ]
    entries = atom(
        '<entry><iD>e1</iD><tItle>A</tItle><lInk href="/a"/><UpDated>2024-01-02T03:04:05Z</UpDated>'
        '<conTent type="html">&lt;p&gt;a&lt;/p&gt;</conTent></entry>'
    )
    (item,) = parse_feed(entries, BASE_URL, lenient=False).items
    assert (item.guid, item.title, item.link, item.content_html) == (
        "e1",
        "A",
        "http://site.example/a",
        "<p>a</p>",
    )
    assert stamp(item.pub_date) == "2024-01-02T03:04:05Z"


@pytest.mark.parametrize(
    ("declaration", "element"),
    [
        ('xmlns:dc="http://www.purl.org/dc/elements/1.1/"', "dc:date"),
        ('xmlns:d="http://purl.org/dc/elements/1.0/"', "d:date"),
        ('xmlns:DC="HTTPS://WWW.PURL.ORG/DC/ELEMENTS/1.1"', "DC:date"),
        ('xmlns:dc="http://purl.org/dc/elements/1.2/"', "dc:date"),  # unknown: by its prefix
        ('xmlns:dcterms="http://www.purl.org/dc/terms"', "dcterms:issued"),
        ('xmlns:a="http://w3.org/2005/Atom/"', "a:published"),
        ('xmlns:atom="urn:example:not-atom"', "atom:updated"),
    ],
)
def test_dates_in_misspelled_namespaces_are_read(declaration: str, element: str) -> None:
    """feedparser knows a namespace by its URI, or else by the prefix the feed gives it, so
    a date in a misspelled Dublin Core or Atom namespace is read; the fast path lost it."""
    data = rss(
        f"<item {declaration}><guid>g</guid><{element}>2024-01-02T03:04:05Z</{element}></item>"
    )
    (item,) = parse_feed(data, BASE_URL, lenient=False).items
    assert stamp(item.pub_date) == "2024-01-02T03:04:05Z"


@pytest.mark.parametrize(
    ("declaration", "element"),
    [
        ('xmlns:c="http://web.resource.org/rss/1.0/modules/content/"', "c:encoded"),
        ('xmlns:content="https://www.purl.org/rss/1.0/modules/content"', "content:encoded"),
        ('xmlns:content="urn:example:not-content"', "content:encoded"),
        ('xmlns:m="http://tools.search.yahoo.com/mrss/"', "m:description"),
        ('xmlns:itunes="http://example.com/DTDs/PodCast-1.0.dtd"', "itunes:summary"),
        ('xmlns:i="https://itunes.com/dtds/podcast-1.0.dtd"', "i:summary"),
    ],
)
def test_content_in_misspelled_namespaces_is_read(declaration: str, element: str) -> None:
    """The same for content:encoded, media:description and itunes:summary (the item's HTML)."""
    data = rss(
        f"<item {declaration}><guid>g</guid><{element}>&lt;p&gt;c&lt;/p&gt;</{element}></item>"
    )
    (item,) = parse_feed(data, BASE_URL, lenient=False).items
    assert item.content_html == "<p>c</p>"


ATOM_TEXT = "if a &lt; b &amp;&amp; c &gt; d then &lt;script&gt;alert(1)&lt;/script&gt;"
"""A text that reads as written only when escaped; as HTML it is a live script."""


@pytest.mark.parametrize(
    ("entry", "expected", "lenient_expected"),
    [
        (f'<content type="text">{ATOM_TEXT}</content>', "if a &lt; b &amp;&amp; c &gt; d", None),
        (f"<summary>{ATOM_TEXT}</summary>", "if a &lt; b &amp;&amp; c &gt; d then", None),
        (  # feedparser types every text text/plain, written or not: there the guess decides
            '<summary type="text">&lt;b&gt;not bold&lt;/b&gt;</summary>',
            "&lt;b&gt;not bold&lt;/b&gt;",
            "<b>not bold</b>",
        ),
        ("<summary>&lt;p&gt;HTML, untyped&lt;/p&gt;</summary>", "<p>HTML, untyped</p>", None),
        ("<summary>one&lt;br&gt;two</summary>", "one<br>two", None),
        (
            '<summary>&lt;iframe src="https://v.example/1"&gt;&lt;/iframe&gt;&lt;ruby&gt;漢'
            "&lt;rt&gt;kan&lt;/rt&gt;&lt;/ruby&gt;&lt;o:p&gt;&lt;/o:p&gt;</summary>",
            '<iframe src="https://v.example/1"></iframe><ruby>漢',
            None,
        ),
        ("<summary>a &lt; b, and c &gt; d</summary>", "a &lt; b, and c &gt; d", None),
        ("<summary>Tom &amp;amp; Jerry</summary>", "Tom &amp; Jerry", None),
        (
            '<summary type="html">&lt;p&gt;a &amp;amp; b&lt;/p&gt;</summary>',
            "<p>a &amp; b</p>",
            None,
        ),
        (  # feedparser types a media:description HTML: its text as it reads
            '<media:group xmlns:media="http://search.yahoo.com/mrss/"><media:description>'
            "S&amp;P 500 &lt; 5000</media:description></media:group>",
            "S&amp;P 500 &lt; 5000",
            "S&P 500 < 5000",
        ),
    ],
    ids=[
        "text",
        "untyped",
        "typed-text-with-tags",
        "untyped-html",
        "untyped-br",
        "untyped-embed",
        "untyped-comparison",
        "untyped-entity",
        "html",
        "media",
    ],
)
def test_atom_text_is_stored_as_escaped_html(
    entry: str, expected: str, lenient_expected: str | None
) -> None:
    """content_html is HTML: a text construct is escaped (as JSON Feed's content_text is);
    untyped, it is HTML where it looks like HTML (closed tags of an article's elements, or
    entities), as feedparser guesses for RSS."""
    data = atom(f"<entry><id>e</id>{entry}</entry>")
    for document, path, wanted in (
        (data, "atom", expected),
        (data.replace(b"</feed>", b"<x></feed>"), "atom-fallback", lenient_expected or expected),
    ):
        feed = parse_feed(document, BASE_URL)
        assert feed.format == path
        assert (feed.items[0].content_html or "").startswith(wanted), path


def test_an_unknown_namespace_is_named_by_each_documents_own_prefix() -> None:
    """Element fields are memoized per raw tag, and ``{urn:example:d}date`` is ``dc:date``
    under the prefix ``dc`` but nothing under ``x``: each document's prefix counts."""

    def date_under(prefix: str) -> str | None:
        data = rss(
            f'<item xmlns:{prefix}="urn:example:d"><guid>g</guid>'
            f"<{prefix}:date>2024-01-02T03:04:05Z</{prefix}:date></item>"
        )
        return stamp(parse_feed(data, BASE_URL, lenient=False).items[0].pub_date)

    dated = "2024-01-02T03:04:05Z"
    assert [date_under(prefix) for prefix in ("x", "dc", "x", "DC")] == [None, dated, None, dated]


def test_items_wrapped_in_another_element_are_read_when_the_channel_has_none() -> None:
    """``<channel><items><item>``: feedparser reads such items, and a fast path that looked only
    at the channel's children would store nothing, without an error."""
    data = rss(
        "<items><item><title>A</title><guid>a</guid>"
        "<Item><guid>nested in an item: not an item of the feed</guid></Item></item>"
        "<group><ITEM><title>B</title><guid>b</guid></ITEM></group></items>"
    )
    feed = parse_feed(data, BASE_URL, lenient=False)
    assert [(item.guid, item.title) for item in feed.items] == [("a", "A"), ("b", "B")]
    deep = rss(
        "<a><b><item><guid>1</guid><x><y><item><guid>inner</guid></item></y></x></item></b>"
        "<item><guid>2</guid></item></a><c><item><guid>3</guid></item></c>"
    )
    assert [item.guid for item in parse_feed(deep, BASE_URL).items] == ["1", "2", "3"]
    entries = atom("<entries><entry><id>e1</id><title>One</title></entry></entries>")
    assert [item.guid for item in parse_feed(entries, BASE_URL, lenient=False).items] == ["e1"]
    assert parse_feed(rss(""), BASE_URL).items == ()


def test_media_description_is_the_content_of_last_resort() -> None:
    """YouTube's feeds describe a video only in ``<media:group><media:description>``; Media RSS
    items may carry ``<media:description>`` alone, podcast episodes ``<itunes:summary>``. Read
    when there is no content and no description/summary (feedparser reads them as the summary
    too)."""
    media = 'xmlns:media="http://search.yahoo.com/mrss/"'
    itunes = 'xmlns:itunes="http://www.itunes.com/dtds/podcast-1.0.dtd"'
    entries = atom(
        f"<entry {media}><id>yt:1</id><media:group><media:title>V</media:title>"
        "<media:description>About the video\nhttp://a.example/x</media:description></media:group>"
        "</entry>"
        f"<entry {media}><id>2</id><summary>own summary</summary>"
        "<media:description>not this</media:description></entry>"
    )
    assert contents(entries) == ["About the video\nhttp://a.example/x", "own summary"]
    items = rss(
        f"<item {media}><guid>1</guid><media:description type='html'>&lt;b&gt;b&lt;/b&gt;"
        "</media:description></item>"
        f"<item {media}><guid>2</guid><description>own</description>"
        "<media:group><media:description>not this</media:description></media:group></item>"
        f"<item {media}><guid>3</guid><content:encoded>full</content:encoded>"
        "<media:description>not this</media:description></item>"
        '<item><guid>4</guid><x:description xmlns:x="urn:example:x">not media</x:description></item>'
        f"<item {itunes}><guid>5</guid><itunes:summary>Episode notes</itunes:summary></item>"
        f"<item {itunes}><guid>6</guid><description>own</description>"
        "<itunes:summary>not this</itunes:summary></item>"
    )
    assert contents(items) == [
        "<b>b</b>",
        "own",
        "full",
        None,
        "Episode notes",
        "own",
    ]


@pytest.mark.parametrize("broken", [False, True])
def test_a_media_content_description_is_the_content_of_very_last_resort(broken: bool) -> None:
    """A photo feed's item may have no text but the caption in ``<media:content>``
    (feedparser reads it as the summary). It describes one media object, so every description
    of the item as a whole wins over it: its own, its ``media:group``'s, ``itunes:summary``."""
    media = 'xmlns:media="http://search.yahoo.com/mrss/"'
    itunes = 'xmlns:itunes="http://www.itunes.com/dtds/podcast-1.0.dtd"'
    caption = (
        '<media:content url="http://i.example/p.jpg" medium="image"><media:title>P</media:title>'
        '<media:description type="html">&lt;p&gt;Caption &lt;img src="/x.jpg"&gt;&lt;/p&gt;'
        "</media:description></media:content>"
    )
    items = rss(
        f"<item {media}><guid>1</guid>{caption}</item>"
        f'<item {media}><guid>2</guid><media:content url="http://i.example/a.jpg"/>'
        '<media:content url="http://i.example/b.jpg"><media:description>second</media:description>'
        "</media:content></item>"
        f"<item {media}><guid>3</guid><media:group>{caption}</media:group></item>"
        f"<item {media}><guid>4</guid>{caption}<media:description>own</media:description></item>"
        f"<item {media}><guid>5</guid><media:group>{caption}<media:description>group"
        "</media:description></media:group></item>"
        f"<item {media} {itunes}><guid>6</guid>{caption}<itunes:summary>notes</itunes:summary>"
        "</item>"
    )
    entries = atom(
        f"<entry {media}><id>a</id>{caption}</entry>"
        f"<entry {media}><id>b</id><media:group>{caption}</media:group></entry>"
        f"<entry {media}><id>c</id>{caption}<summary>own summary</summary></entry>"
    )
    html = '<p>Caption <img src="http://site.example/x.jpg"></p>'
    if not broken:
        assert contents(items) == [html, "second", html, "own", "group", "notes"]
        assert contents(entries) == [html, html, "own summary"]
        return
    # through feedparser: the first description in document order is the summary, as here
    for data, wanted in ((items, [html, "second", html]), (entries, [html, html])):
        unclosed = data.replace(b"</channel>", b"<x></channel>").replace(b"</feed>", b"<x></feed>")
        feed = parse_feed(unclosed, BASE_URL)
        assert feed.format.endswith("-fallback")
        assert [item.content_html for item in feed.items][: len(wanted)] == wanted


def test_atom_0_3_base64_content_is_decoded() -> None:
    data = (
        b'<feed xmlns="http://purl.org/atom/ns#" version="0.3"><title>T</title>'
        b'<entry><id>a</id><content type="text/html" mode="base64">PHA+aGkg\n4pyTPC9wPg==</content>'
        b"</entry>"
        b'<entry><id>b</id><summary mode="base64">not base64!</summary></entry></feed>'
    )
    assert contents(data) == ["<p>hi \u2713</p>", "not base64!"]


def test_items_left_beside_a_closed_channel_are_read_in_document_order() -> None:
    """A generator that closes the channel too early leaves items beside it (where RDF keeps
    them); feedparser reads them, and so does the fast path."""
    data = (
        b'<rss version="2.0"><item><title>Z</title><guid>g0</guid></item>'
        b"<channel><title>T</title><link>http://site.example/</link>"
        b"<item><title>A</title><guid>g1</guid></item></channel>"
        b"<item><title>B</title><guid>g2</guid><link>/b</link></item></rss>"
    )
    feed = parse_feed(data, BASE_URL)
    assert feed.format == "rss"
    assert [(item.guid, item.link) for item in feed.items] == [
        ("g0", None),
        ("g1", None),
        ("g2", "http://site.example/b"),
    ]


def test_truncated_atom_falls_back_and_leaves_out_the_cut_entry() -> None:
    data = atom('<entry><id>e1</id><title>A</title><link href="/a"/></entry><entry><title>B')
    feed = parse_feed(data[: -len(b"</feed>")], BASE_URL)
    assert (feed.format, feed.cut_off) == ("atom-fallback", True)
    assert [(item.guid, item.link) for item in feed.items] == [("e1", "http://site.example/a")]


WHOLE = b"<rss><channel><title>T</title><item><guid>a</guid></item><ITEM><guid>b</guid></ITEM>"


@pytest.mark.parametrize(
    ("document", "kept"),
    [
        (WHOLE + b"<item><guid>c</guid><description>cut he", WHOLE),
        (WHOLE + b'<item rdf:about="x">', WHOLE),
        (
            WHOLE.replace(b"item>", b"atom:entry>").replace(b"ITEM>", b"atom:entry>")
            + b"<atom:entry>",
            WHOLE.replace(b"item>", b"atom:entry>").replace(b"ITEM>", b"atom:entry>"),
        ),
        (WHOLE + b"<item><guid>c</guid></item></channel>", None),  # whole
        (WHOLE + b"<item><guid>c</guid></channel></rss>", None),  # an unclosed item, then the end
        (WHOLE + b"<item/>", None),
        (WHOLE + b"<items>", None),
        (b"<rss><channel><item><guid>a</guid><item><guid>b", b"<rss><channel><item><guid>a</guid>"),
        (
            b"<rss><channel><title>T</title><item><guid>a</guid><desc",
            b"<rss><channel><title>T</title>",
        ),
    ],
)
def test_a_document_is_cut_back_to_its_last_whole_item_only_when_it_ends_inside_one(
    document: bytes, kept: bytes | None
) -> None:
    assert whole_items(document) == kept


@pytest.mark.parametrize(
    ("document", "between"),
    [
        (WHOLE, True),
        (WHOLE + b"\n<br />\n<b>Fatal error</b>: Allowed memory size exhausted", True),
        (WHOLE + b"</channel>", False),
        (WHOLE + b"</rss>", False),
        (atom("<entry><id>a</id></entry>")[: -len(b"</feed>")], True),
        (atom("<entry><id>a</id></entry>"), False),
        (b"<rdf:RDF><item><title>a</title></item></rdf:RDF>", False),
        (b"<rss><channel><title>T</title>", True),  # cut before its first item
        (b"<rss><channel><title>T</title></channel></rss>", False),  # a feed of no items
    ],
)
def test_a_document_that_ends_without_closing_its_channel_is_cut_between_items(
    document: bytes, between: bool
) -> None:
    assert ends_unclosed(document) is between
    if between:
        feed = parse_feed(document, BASE_URL)
        assert (feed.cut_off, feed.unclosed) == (False, True)


def test_a_cut_off_feed_reads_its_whole_items_and_not_the_cut_one() -> None:
    """feedparser reads a cut item as far as it goes: stored, it kept its missing text for
    good (items are never updated), or came back whole under its real GUID later."""
    data = rss(
        "<item><guid>a</guid><title>A</title><description>whole</description></item>"
        "<item><title>B</title><description>cut in the mid"
    )
    cut = data[: data.index(b"mid") + 3]
    assert [item.title for item in feedparser.parse(cut).entries] == ["A", "B"]
    feed = parse_feed(cut, BASE_URL)
    assert (feed.cut_off, [item.guid for item in feed.items]) == (True, ["a"])
    assert parse_feed(data, BASE_URL).cut_off is False
    first = data[: data.index(b"whole")]  # a PHP fatal error inside the first item
    assert parse_feed(first, BASE_URL).items == ()


def _big_feed(head: str, items: int, bad_item: int | None = None) -> bytes:
    """A feed over the lenient parser's whole-document limit: items with 2 KB of text (cheap
    for feedparser: its time goes by markup), relative links, a ``<ttl>`` after the items."""
    text = "word " * 400
    parts = [f"<item><guid>g{n}</guid><link>/p{n}</link><description>{text}</description></item>"
             if n != bad_item else f"<item><guid>g{n}</guid><title><b>bad</title></item>"
             for n in range(items)]  # fmt: skip
    return rss("\n".join(parts) + "<ttl>60</ttl>", channel=head)


@pytest.mark.parametrize(
    ("head", "bad_item"),
    [
        ("<title><b>unclosed T</title><link>http://site.example/blog/</link>", None),
        ("<title>T</title><link>http://site.example/blog/</link>", 1500),
    ],
    ids=["broken-in-every-piece", "one-broken-item"],
)
def test_a_big_broken_feed_is_read_in_pieces_without_losing_an_item(
    head: str, bad_item: int | None
) -> None:
    """Over the limit, a broken feed lost every item (feedparser reads them all): it is read
    in pieces of whole items, each with the feed's head and tail, so every item keeps the
    URL base and GUID it has in the whole."""
    data = _big_feed(head, 2600, bad_item)
    assert len(data) > LENIENT_PARSE_LIMIT
    feed = parse_feed(data, BASE_URL)
    assert (feed.format, feed.ttl_minutes, feed.items_dropped) == ("rss-fallback", 60, 0)
    assert feed.title in ("<b>unclosed T", "T", "unclosed T")
    assert [item.guid for item in feed.items] == [f"g{n}" for n in range(2600)]
    links = [item.link for item in feed.items if item.guid != f"g{bad_item}"]
    assert links == [f"http://site.example/p{n}" for n in range(2600) if n != bad_item]


def test_a_big_broken_document_without_items_is_refused_with_what_to_do() -> None:
    data = rss("", channel="<title><b>T</title><description>" + "x " * 2**22 + "</description>")
    too_big = r"^parse: not well-formed XML, and at \d+ bytes too big"
    with pytest.raises(ParseError, match=too_big) as refused:
        parse_feed(data, BASE_URL)
    assert "the feed's publisher has to make it well-formed XML" in str(refused.value)


def test_pieces_are_whole_items_between_the_documents_head_and_tail() -> None:
    head, tail = b"<rss><channel><title>T</title>", b"<ttl>5</ttl></channel></rss>"
    items = [b"<item><guid>%d</guid></item>" % n for n in range(20)]
    items[3] = b"<item><description><![CDATA[</item><item>]]></description></item>"
    items[7] = b"<ITEM><guid>" + b"x" * 500 + b"</guid></ITEM>"  # bigger than a piece
    data = head + b"\n".join(items) + tail
    pieces = list(item_pieces(data, 200))
    assert len(pieces) > 3
    assert all(piece.startswith(head) and piece.endswith(tail) for piece, _ in pieces)
    runs = [piece[len(head) : -len(tail)] for piece, _ in pieces]
    assert b"".join(runs) == b"\n".join(items)
    assert all(run.lstrip().startswith((b"<item>", b"<ITEM>")) for run in runs)
    assert sum(count for _, count in pieces) == 20
    assert [*item_pieces(data, len(data) * 4)] == [(data, 20)]
    assert [*item_pieces(b"<rss><channel><title>T", 10)] == [(b"<rss><channel><title>T", 0)]


def test_external_entities_are_never_resolved(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    doctype = f'<!DOCTYPE rss [<!ENTITY xxe SYSTEM "{secret.as_uri()}">]>'
    well_formed = (
        f'{doctype}<rss version="2.0"><channel><title>t &xxe;</title>'
        "<item><title>&xxe;</title><description>a &xxe; b</description></item></channel></rss>"
    )
    broken = well_formed.replace("</channel>", "<unclosed></channel>")
    for data in (well_formed, broken):
        try:
            feed = parse_feed(data.encode(), BASE_URL)
        except ParseError:
            continue
        rendered = repr(feed)
        assert "TOP-SECRET-CONTENT" not in rendered


BILLION_LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    + "".join(
        f'<!ENTITY lol{n} "{("&lol" + str(n - 1) + ";") * 10 if n > 1 else "&lol;" * 10}">'
        for n in range(1, 10)
    )
    + "]>"
)


@pytest.mark.parametrize(
    "body",
    [
        '<rss version="2.0"><channel><title>&lol9;</title><item><title>&lol9;</title></item></channel></rss>',
        '<rss version="2.0"><channel><title>&lol9;</title><item><title>&lol9;<broken></item></channel></rss>',
    ],
)
def test_billion_laughs_is_bounded(body: str) -> None:
    started = time.monotonic()
    try:
        feed = parse_feed((BILLION_LAUGHS + body).encode(), BASE_URL)
    except ParseError:
        pass
    else:
        assert len(repr(feed)) < 10_000  # not expanded
    assert time.monotonic() - started < 30  # did not hang


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"   \n",
        b"just some text",
        b"<html><head><title>Moved</title></head><body><a href='/x'>here</a></body></html>",
        b"<?xml version='1.0'?><note><to>x</to></note>",
        b"\x00\x01\x02\xff\xfe",
        b'{"not": "a feed"}',
        b"{broken json",
        b'{"version": "https://jsonfeed.org/version/1.1", "items": "nope"}',
    ],
)
def test_things_that_are_not_feeds_raise_parse_error(data: bytes) -> None:
    with pytest.raises(ParseError, match=r"^parse: "):
        parse_feed(data, BASE_URL)


def test_json_feed() -> None:
    document = {
        "version": "https://jsonfeed.org/version/1.1",
        "title": " JSON ",
        "home_page_url": "https://site.example/blog/",
        "items": [
            {
                "id": "1",
                "url": "/p/1",
                "title": "One",
                "content_html": '<img src="a.png">',
                "date_published": "2024-01-02T03:04:05+01:00",
            },
            {"id": 2, "content_text": "a < b", "title": "Two"},
            {"url": "https://site.example/3"},
            "not an item",
            {"id": "4", "external_url": "https://elsewhere.example/a", "summary": "x & y"},
            {"id": "5", "url": "/p/5", "external_url": "https://e.example/", "content_text": "t"},
        ],
    }
    feed = parse_feed(json.dumps(document).encode(), BASE_URL)
    assert (feed.format, feed.title, feed.link) == ("json", "JSON", "https://site.example/blog/")
    one, two, three, four, five = feed.items
    assert (four.link, four.content_html) == ("https://elsewhere.example/a", "x &amp; y")
    assert (five.link, five.content_html) == ("https://site.example/p/5", "t")
    assert (one.guid, one.link, one.content_html) == (
        "1",
        "https://site.example/p/1",
        '<img src="https://site.example/blog/a.png">',
    )
    assert stamp(one.pub_date) == "2024-01-02T02:04:05Z"
    assert (two.guid, two.content_html) == ("2", "a &lt; b")
    assert three.guid == "https://site.example/3"


def test_json_feed_content_is_repaired_as_an_xml_feeds_is() -> None:
    """Titles were repaired, the content and summary were not: the same mis-encoded text read
    one way in a JSON Feed and another in an RSS feed."""
    double_encoded = "Itâ€™s a cafÃ©"
    document = {
        "version": "https://jsonfeed.org/version/1.1",
        "items": [
            {"id": "1", "title": double_encoded, "content_html": f"<p>{double_encoded}</p>"},
            {"id": "2", "content_text": "price \x80 5"},
        ],
    }
    one, two = parse_feed(json.dumps(document).encode(), BASE_URL).items
    assert (one.title, one.content_html) == ("It’s a café", "<p>It’s a café</p>")
    assert two.content_html == "price € 5"


def test_json_that_is_no_feed_is_quoted_in_its_error() -> None:
    body = b'{"error": "not found",\n  "status": 404}'
    with pytest.raises(ParseError) as refused:
        parse_feed(body, BASE_URL)
    assert str(refused.value).endswith('version): {"error": "not found", "status": 404}')


def test_item_link_relative_becomes_absolute() -> None:
    item = only_item(rss("<item><link>\n  ../up/there \n</link></item>"))
    assert item.link == "http://site.example/up/there"


SMALL_FEED = rss(
    "<item><title>One</title><link>/1</link><description><![CDATA[<img src='a.png'>]]>"
    "</description><pubDate>Tue, 10 Jun 2003 04:00:00 GMT</pubDate></item>"
)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_raise_nothing_but_parse_error(data: bytes) -> None:
    with contextlib.suppress(ParseError):
        parse_feed(data, BASE_URL)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.integers(0, len(SMALL_FEED)), st.integers(0, 40), st.binary(max_size=20))
def test_damaged_feeds_raise_nothing_but_parse_error(start: int, length: int, junk: bytes) -> None:
    data = SMALL_FEED[:start] + junk + SMALL_FEED[start + length :]
    try:
        feed = parse_feed(data, BASE_URL)
    except ParseError:
        return
    for item in feed.items:
        assert item.guid


XML_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cn", "Cc"), whitelist_characters="\t\n"),
    max_size=200,
)
"""Text XML can carry (no surrogates, noncharacters or control characters but tab/newline)."""


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(XML_TEXT)
def test_any_text_comes_back_exactly(text: str) -> None:
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    data = rss(f"<item><title>{escaped}</title><description>{escaped}</description></item>")
    item = only_item(data)
    repaired = readable(text)  # only what reads as double-encoded UTF-8 ("Â¡") changes
    assert item.title == (readable(text.strip()) or None)
    assert item.content_html == (
        absolutize(repaired, "http://site.example/blog/") if repaired.strip() else None
    )


def _many(entry: str, count: int) -> str:
    return "".join(entry.format(n=n) for n in range(count))


@pytest.mark.parametrize(
    ("document", "expected_format"),
    [
        (
            "<rss version='2.0'><channel><title>t</title>"
            + _many("<item><guid>g{n}</guid></item>", 10_003)
            + "</channel></rss>",
            "rss",
        ),
        (
            "<feed xmlns='http://www.w3.org/2005/Atom'><title>t</title>"
            + _many("<entry><id>g{n}</id></entry>", 10_003)
            + "</feed>",
            "atom",
        ),
        (
            json.dumps(
                {
                    "version": "https://jsonfeed.org/version/1.1",
                    "title": "t",
                    "items": [{"id": f"g{n}"} for n in range(10_003)],
                }
            ),
            "json",
        ),
    ],
)
def test_items_beyond_the_cap_are_counted_not_read(document: str, expected_format: str) -> None:
    from feedcollector.parse_common import MAX_ITEMS_PER_FEED

    feed = parse_feed(document.encode(), "https://example.org/feed")
    assert feed.format == expected_format
    assert len(feed.items) == MAX_ITEMS_PER_FEED == 10_000
    assert feed.items_dropped == 3
    assert feed.items[-1].guid == "g9999"


def _dated(n: int) -> str:
    return (datetime(2000, 1, 1, tzinfo=UTC) + timedelta(hours=n)).strftime(
        "%a, %d %b %Y %H:%M:%S GMT"
    )


@pytest.mark.parametrize("oldest_first", [True, False])
@pytest.mark.parametrize(
    ("shape", "expected_format"),
    [
        ("<rss version='2.0'><channel><title>t</title>{items}</channel></rss>", "rss"),
        (
            "<rss version='2.0'><channel><title><b>unclosed</title>{items}</channel></rss>",
            "rss-fallback",
        ),
        ("<feed xmlns='http://www.w3.org/2005/Atom'><title>t</title>{entries}</feed>", "atom"),
        ("json", "json"),
    ],
)
def test_past_the_cap_the_newest_items_are_read(
    shape: str, expected_format: str, oldest_first: bool
) -> None:
    """An oldest-first feed gets its new items at its end: those are read, not the oldest."""
    order = range(10_003) if oldest_first else range(10_002, -1, -1)
    if shape == "json":
        document = json.dumps(
            {
                "version": "https://jsonfeed.org/version/1.1",
                "items": [
                    {"id": f"g{n}", "date_published": f"{2000 + n // 1000}-01-01T00:00:00Z"}
                    for n in order
                ],
            }
        )
    else:
        document = shape.format(
            items="".join(
                f"<item><guid>g{n}</guid><pubDate>{_dated(n)}</pubDate></item>" for n in order
            ),
            entries="".join(
                f"<entry><id>g{n}</id><updated>{2000 + n // 1000}-01-01T00:00:00Z</updated></entry>"
                for n in order
            ),
        )
    feed = parse_feed(document.encode(), "https://example.org/feed")
    assert feed.format == expected_format
    guids = {item.guid for item in feed.items}
    assert (len(guids), feed.items_dropped) == (10_000, 3)
    assert {"g10002", "g3"} <= guids
    assert not guids & {"g0", "g1", "g2"}


MISENCODED = [
    # (as the feed writes it, as readers expect it)
    ("It&#146;s &#147;new&#148; &#150; &#128;5", "It\u2019s \u201cnew\u201d \u2013 \u20ac5"),
    ("It\u0092s a \u0093raw\u0094 paste\u0085 ok", "It\u2019s a \u201craw\u201d paste\u2026 ok"),
    ("Caf\u00c3\u00a9 cr\u00c3\u00a8me", "Caf\u00e9 cr\u00e8me"),  # UTF-8 read as latin-1
    ("It\u00e2\u20ac\u2122s Stra\u00c3\u0178e", "It\u2019s Stra\u00dfe"),  # ... as windows-1252
    ("Caf\u00c3\u0192\u00c2\u00a9", "Caf\u00e9"),  # encoded twice over
    ("x\u0081y\u009dz", "x\u0081y\u009dz"),  # undefined in windows-1252: kept, as feedparser
    ("S\u00c3O PAULO, \u00c3\u00a9 means \u00e9", "S\u00c3O PAULO, \u00c3\u00a9 means \u00e9"),
]


@pytest.mark.parametrize(("written", "expected"), MISENCODED)
def test_misencoded_text_reads_alike_on_the_fast_path_and_the_fallback(
    written: str, expected: str
) -> None:
    """feedparser maps C1 controls to windows-1252 and undoes double-encoded UTF-8; the fast
    path kept both, so a title-only item of a feed alternating between well-formed and broken
    got two fallback GUIDs and was stored twice. The channel's title reads alike too."""
    items = (
        f"<item><title>{written}</title><description>&lt;p&gt;{written}&lt;/p&gt;"
        "</description></item>"
    )
    well_formed = rss(items, channel=f"<title>{written}</title>")
    broken = well_formed.replace(b"</channel>", b"<br></channel>")
    fast, fallback = parse_feed(well_formed, BASE_URL), parse_feed(broken, BASE_URL)
    assert (fast.format, fallback.format) == ("rss", "rss-fallback")
    assert [item._replace(earlier_guid=None) for item in fast.items] == [
        item._replace(earlier_guid=None) for item in fallback.items
    ]
    assert fast.items[0].title == expected
    assert fast.items[0].guid == md5(expected)
    assert fast.items[0].content_html == f"<p>{expected}</p>"
    assert fast.title == fallback.title == expected


@pytest.mark.parametrize("element", ["pubDate", "dc:date"])
def test_a_padded_date_gives_a_guidless_item_one_guid_on_the_fast_path_and_the_fallback(
    element: str,
) -> None:
    """feedparser trims what it reads: the fast path hashed the date as written, so a body cut
    off (or broken) once stored every such item a second time under another GUID."""
    items = (
        f"<item><title>Episode 12</title><{element}>\n  Mon, 01 Jan 2024 00:00:00 GMT\n"
        f"</{element}></item><item><title>Episode 11</title><{element}> 2023-12-25T00:00:00Z"
        f"</{element}></item>"
    )
    well_formed = rss(items, channel="<title>T</title>").replace(
        b"<rss>", b'<rss xmlns:dc="http://purl.org/dc/elements/1.1/">'
    )
    cut = well_formed[: well_formed.index(b"</channel>")] + b"<item><title>Episode 13"
    fast, fallback = parse_feed(well_formed, BASE_URL), parse_feed(cut, BASE_URL)
    assert (fast.format, fallback.format, fallback.cut_off) == ("rss", "rss-fallback", True)
    assert (
        [item.guid for item in fast.items]
        == [item.guid for item in fallback.items]
        == [
            md5("Episode 12Mon, 01 Jan 2024 00:00:00 GMT"),
            md5("Episode 112023-12-25T00:00:00Z"),
        ]
    )
    assert [item.earlier_guid for item in fast.items] == [  # what versions before stored
        md5("Episode 12\n  Mon, 01 Jan 2024 00:00:00 GMT\n"),
        md5("Episode 11 2023-12-25T00:00:00Z"),
    ]
    assert fast.items[0].raw_pub_date == "\n  Mon, 01 Jan 2024 00:00:00 GMT\n"


def test_items_of_an_enclosure_alone_get_a_guid_each_on_the_fast_path_and_the_fallback() -> None:
    """Without GUID, link, title, date or text every such item hashed to md5(""), and a
    podcast feed of them kept its first episode only."""
    items = "".join(  # a blank date counts as none
        f'<item>{date}<enclosure url="http://p.example/ep{n}.mp3" type="audio/mpeg"/></item>'
        for n, date in ((1, ""), (2, "<pubDate> </pubDate>"))
    )
    well_formed = rss(items, channel="<title>T</title>")
    broken = well_formed.replace(b"</channel>", b"<br></channel>")
    fast, fallback = parse_feed(well_formed, BASE_URL), parse_feed(broken, BASE_URL)
    assert (fast.format, fallback.format) == ("rss", "rss-fallback")
    expected = [md5("http://p.example/ep1.mp3"), md5("http://p.example/ep2.mp3")]
    assert [item.guid for item in fast.items] == [item.guid for item in fallback.items] == expected
    titled = parse_feed(rss(items.replace("<item>", "<item><title>E</title>")), BASE_URL)
    assert [item.guid for item in titled.items] == [md5("E")] * 2, "the seed's chain first"


def test_a_repaired_guid_keeps_the_one_earlier_versions_stored_the_item_under() -> None:
    """Versions before the repair stored these items under the GUID as written: the store
    looks for that one too, so an upgrade stores no item twice."""
    items = (
        "<item><guid isPermaLink='false'>urn:Caf\u00c3\u00a9-8</guid><title>a</title></item>"
        "<item><guid isPermaLink='false'>urn:quote&#146;9</guid><title>b</title></item>"
        "<item><title>Caf\u00c3\u00a9 only</title><pubDate>x</pubDate></item>"
        "<item><link>https://a.example/caf\u00c3\u00a9</link><title>d</title></item>"
        "<item><guid>urn:plain</guid><title>Caf\u00c3\u00a9</title></item>"
        "<item><guid>urn:caf\u00e9</guid><title>e</title></item>"
    )
    parsed = parse_feed(rss(items), BASE_URL).items
    assert [(item.guid, item.earlier_guid) for item in parsed] == [
        ("urn:Caf\u00e9-8", "urn:Caf\u00c3\u00a9-8"),
        ("urn:quote\u20199", "urn:quote\u00929"),
        (md5("Caf\u00e9 onlyx"), md5("Caf\u00c3\u00a9 onlyx")),
        ("https://a.example/caf\u00e9", "https://a.example/caf\u00c3\u00a9"),
        ("urn:plain", None),
        ("urn:caf\u00e9", None),
    ]


def test_misencoded_atom_and_xhtml_content_is_repaired_on_the_fast_path() -> None:
    entries = (
        "<entry><id>e1</id><title type='html'>It&#146;s</title>"
        "<content type='xhtml'><div xmlns='http://www.w3.org/1999/xhtml'><p>Caf\u00c3\u00a9"
        "</p></div></content></entry>"
        "<entry><id>e2</id><summary>" + "x" * 600 + " it\u0092s</summary></entry>"
    )
    first, second = parse_feed(atom(entries), BASE_URL, lenient=False).items
    assert (first.title, first.content_html) == ("It\u2019s", "<p>Caf\u00e9</p>")
    assert second.content_html == "x" * 600 + " it\u2019s"
