"""Deterministic synthetic feeds for the benchmark farm: realistic bytes, generated on demand.

Feed ``index`` always produces the same document, so a 10k-feed farm holds no bodies in memory
and every run parses the same bytes. The shapes rotate with the index (see :data:`VARIANTS`):
RSS 2.0 with ``content:encoded``, RSS with escaped HTML in ``description``, Atom with
``xml:base``, RSS 1.0 (RDF), in UTF-8, windows-1252, GB18030 (declared as ``gb2312``, as in
the wild), Shift_JIS and ISO-8859-1 given only by the HTTP header. Item HTML is what blogs
publish: paragraphs, relative and absolute links, relative and CDN images, a ``srcset``
now and then, entities; three shapes in ten use relative URLs (resolved by the parser), the
others absolute ones, as most publishers do.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from html import escape

_ENGLISH = (
    "the of and to in a is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there been one all we their has would when what "
    "more some out them into time only new other about could than first also after most made "
    "collector feed release update performance server network kernel compiler database river "
    "mountain garden library museum concert election market weather history science culture"
)
_WESTERN = (
    "café naïve déjà vu über Straße façade crème brûlée garçon señor niño São Paulo "
    "notícias atenção coração économie été fête größer Müller"
)
WORDS = tuple(_ENGLISH.split())
LATIN1_WORDS = tuple(_WESTERN.split())
CP1252_ONLY = ("\u201cquoted\u201d", "\u2018single\u2019", "\u2014", "\u20ac 12", "\u2026")
"""Characters windows-1252 has in 0x80-0x9F and ISO-8859-1 does not."""
CHINESE = "新闻发布更新性能服务器网络数据库历史科学文化市场天气音乐会图书馆博物馆山河花园"
JAPANESE = "ニュース更新性能サーバーネットワークデータベース歴史科学文化市場天気音楽図書館"


@dataclass(frozen=True, slots=True)
class Variant:
    """One shape of feed: format, charset, where the charset is said, and the script used."""

    name: str
    format: str
    """rss (content:encoded), rss-escaped (HTML escaped in description), atom or rdf."""
    codec: str
    declared: str | None
    """The XML declaration's encoding label (None: no encoding pseudo-attribute)."""
    content_type: str
    script: str
    """latin, western (accents and cp1252 punctuation), chinese or japanese."""
    relative: bool = False
    """Item HTML links and images by relative URL (most publishers write absolute ones)."""


VARIANTS = (
    Variant("rss-utf8", "rss", "utf-8", "UTF-8", "application/rss+xml; charset=utf-8", "latin"),
    Variant("rss-utf8-b", "rss", "utf-8", "utf-8", "application/rss+xml", "western"),
    Variant(
        "rss-escaped",
        "rss-escaped",
        "utf-8",
        "UTF-8",
        "text/xml; charset=UTF-8",
        "latin",
        relative=True,
    ),
    Variant("atom-utf8", "atom", "utf-8", "utf-8", "application/atom+xml", "latin", relative=True),
    Variant("rss-cp1252", "rss", "cp1252", "windows-1252", "text/xml", "western"),
    Variant("rss-gb2312", "rss", "gb18030", "gb2312", "application/xml", "chinese"),
    Variant(
        "atom-latin1-http",
        "atom",
        "cp1252",
        None,
        "application/atom+xml; charset=ISO-8859-1",
        "western",
    ),
    Variant("rdf-utf8", "rdf", "utf-8", "utf-8", "application/rdf+xml", "latin"),
    Variant(
        "rss-sjis", "rss", "cp932", "Shift_JIS", "application/rss+xml", "japanese", relative=True
    ),
    Variant("rss-utf8-c", "rss", "utf-8", "UTF-8", "application/rss+xml; charset=utf-8", "latin"),
)
EPOCH = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class FeedDocument:
    """What the farm serves for one feed."""

    body: bytes
    content_type: str
    etag: str
    last_modified: str
    items: int


def variant_of(index: int) -> Variant:
    return VARIANTS[index % len(VARIANTS)]


def feed_document(index: int, items: int, *, version: int = 0) -> FeedDocument:
    """Feed ``index`` (``version`` changes its validators and adds newer items)."""
    variant = variant_of(index)
    rng = random.Random(index * 7919 + version)
    site = f"https://site{index}.example.org"
    entries = [
        _entry(variant, rng, index, number, site)
        for number in range(items + version - 1, version - 1, -1)
    ]
    text = _document(variant, index, site, entries)
    body = text.encode(variant.codec, "xmlcharrefreplace")
    updated = EPOCH + timedelta(hours=version)
    return FeedDocument(
        body=body,
        content_type=variant.content_type,
        etag=f'"farm-{index}-{version}"',
        last_modified=format_datetime(updated, usegmt=True),
        items=items,
    )


@dataclass(frozen=True, slots=True)
class _Entry:
    title: str
    link: str
    guid: str
    date: datetime
    html: str


def _words(rng: random.Random, script: str, count: int) -> str:
    if script == "chinese":
        return "".join(rng.choices(CHINESE, k=count)) + "。"
    if script == "japanese":
        return "".join(rng.choices(JAPANESE, k=count)) + "。"
    words = rng.choices(WORDS, k=count)
    if script == "western":
        words[::6] = rng.choices(LATIN1_WORDS, k=len(words[::6]))
        words[3::17] = rng.choices(CP1252_ONLY, k=len(words[3::17]))
    return " ".join(words)


def _entry(variant: Variant, rng: random.Random, index: int, number: int, site: str) -> _Entry:
    slug = f"/{2024 - number // 200}/{number % 12 + 1:02d}/post-{number}.html"
    own = "" if variant.relative else site
    paragraphs = [
        f"<p>{escape(_words(rng, variant.script, rng.randint(40, 90)), quote=False)} "
        f'<a href="{own}{slug}#more">read more</a> &amp; '
        f'<a href="https://elsewhere.example.net/ref/{number}">a source</a>.</p>'
        for _ in range(rng.randint(2, 5))
    ]
    images = [
        f'<figure><img src="{own}/media/{index}/{number}-{position}.jpg" alt="figure {position}" '
        f'width="640" height="360"><figcaption>Figure {position}</figcaption></figure>'
        for position in range(rng.randint(0, 2))
    ]
    if number % 3 == 0:
        images.append(
            f'<img src="https://cdn.example.net/{index}/{number}.png" '
            f'srcset="{own}/media/{index}/{number}@2x.png 2x" loading="lazy">'
        )
    html = "\n".join(paragraphs[:1] + images + paragraphs[1:])
    return _Entry(
        title=_words(rng, variant.script, rng.randint(4, 9))[:90],
        link=site + slug,
        guid=f"farm-{index}-{number}",
        date=EPOCH - timedelta(hours=number * 7, minutes=rng.randint(0, 59)),
        html=html,
    )


def _document(variant: Variant, index: int, site: str, entries: list[_Entry]) -> str:
    declaration = (
        f'<?xml version="1.0" encoding="{variant.declared}"?>\n'
        if variant.declared
        else '<?xml version="1.0"?>\n'
    )
    if variant.format == "atom":
        return declaration + _atom(index, site, entries)
    if variant.format == "rdf":
        return declaration + _rdf(index, site, entries)
    return declaration + _rss(index, site, entries, escaped=variant.format == "rss-escaped")


def _rss(index: int, site: str, entries: list[_Entry], *, escaped: bool) -> str:
    items = []
    for number, entry in enumerate(entries):
        guid = (
            f'<guid isPermaLink="false">{entry.guid}</guid>' if number % 7 else ""
        )  # some items only have a link: the GUID chain falls back to it
        body = (
            f"<description>{escape(entry.html, quote=False)}</description>"
            if escaped
            else f"<description>{escape(entry.html[:160], quote=False)}…</description>"
            f"<content:encoded><![CDATA[{entry.html}]]></content:encoded>"
        )
        items.append(
            f"<item><title>{escape(entry.title, quote=False)}</title><link>{entry.link}</link>"
            f"{guid}<pubDate>{format_datetime(entry.date)}</pubDate>"
            f"<dc:creator>Author {index % 13}</dc:creator><category>news</category>{body}</item>"
        )
    return (
        '<rss version="2.0" xmlns:content="http://purl.org/rss/1.0/modules/content/" '
        'xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:atom="http://www.w3.org/2005/Atom">'
        f"<channel><title>Farm feed {index}</title><link>{site}/</link>"
        f'<atom:link href="{site}/feed.xml" rel="self" type="application/rss+xml"/>'
        f"<description>Synthetic feed {index}</description><ttl>30</ttl>\n"
        + "\n".join(items)
        + "</channel></rss>\n"
    )


def _atom(index: int, site: str, entries: list[_Entry]) -> str:
    parts = [
        f'<feed xmlns="http://www.w3.org/2005/Atom" xml:base="{site}/">'
        f"<title>Farm feed {index}</title><id>tag:farm.example,2024:{index}</id>"
        f'<link rel="alternate" href="{site}/"/><link rel="self" href="{site}/atom.xml"/>'
        f"<updated>{EPOCH.isoformat()}</updated>"
    ]
    for entry in entries:
        stamp = entry.date.isoformat().replace("+00:00", "Z")
        parts.append(
            f'<entry><title type="html">{escape(entry.title, quote=False)}</title>'
            f'<link rel="alternate" href="{entry.link}"/><id>tag:farm.example,2024:{entry.guid}</id>'
            f"<published>{stamp}</published><updated>{stamp}</updated>"
            f"<author><name>Author {index % 13}</name></author>"
            f'<content type="html">{escape(entry.html, quote=False)}</content></entry>'
        )
    parts.append("</feed>\n")
    return "\n".join(parts)


def _rdf(index: int, site: str, entries: list[_Entry]) -> str:
    items = "\n".join(
        f'<item rdf:about="{entry.link}"><title>{escape(entry.title, quote=False)}</title>'
        f"<link>{entry.link}</link><dc:date>{entry.date.isoformat()}</dc:date>"
        f"<description>{escape(entry.html, quote=False)}</description></item>"
        for entry in entries
    )
    return (
        '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
        'xmlns="http://purl.org/rss/1.0/" xmlns:dc="http://purl.org/dc/elements/1.1/">'
        f'<channel rdf:about="{site}/"><title>Farm feed {index}</title><link>{site}/</link>'
        f"<description>Synthetic feed {index}</description></channel>\n{items}</rdf:RDF>\n"
    )
