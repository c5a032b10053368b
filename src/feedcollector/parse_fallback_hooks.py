"""Corrections to feedparser's reading for :mod:`.parse_fallback`, so that a feed broken one day
and well-formed the next gives its items the links, GUIDs and dates of the fast path.

They live on subclasses of feedparser's two parsers, which ``feedparser.parse`` builds only
inside :func:`corrected_parsers`: anyone else calling it in this process (the benchmarks'
baseline, the conformance tests' reference) gets feedparser as it is.

**An id is no URL.** feedparser joined an entry's Atom ``<id>`` or RSS ``<guid>`` to the
``xml:base`` in effect, to one it had left or to none (``http:///a`` became ``http://a``). The
fast path takes an id as written: reddit's ``t3_42tizy``, after a content of
``xml:base="/.rss"``, came back ``/t3_42tizy``, and a feed broken one day stored its entries
twice.

**The base an element declares ends with it.** feedparser restores the enclosing ``xml:base``
at an end tag only when that base is not empty; without a base URL of its own (none is given:
a link is made absolute against the feed's link later, as the fast path does) every base is
empty until an ``xml:base`` is declared, so the base of an item, or of a description, stayed
in effect for the rest of the feed, and the relative links after it were joined to it. The
``xml:base`` in effect at each entry is recorded too (:data:`BASE_KEY`): feedparser's details
hold a content's own base, which is no base for the entry's link.

**An entry's fields as the fast path reads them.** feedparser keeps the last ``<guid>`` and
the last date of each kind (``pubDate``, ``dcterms:issued`` and Atom's ``published`` are all
its ``published``), even an empty one, reads an ``<atom:id>`` as an RSS item's guid, and
lists an RSS ``<link>`` among the ``<atom:link>`` elements. The first text of each name in
:data:`RECORDED` among an entry's children is recorded with its place (:data:`RECORD_KEY`),
and :mod:`.parse_fallback` takes the first with text of the names the fast path reads, in its
order (:data:`.parse_tags.RSS_ITEM_SLOTS`).

**An entry's description is its first of the best kind** (:data:`SUMMARY_RANKS`): feedparser
read a second one as the entry's content. An RSS item's content is its ``content:encoded``
only: feedparser took a ``<fullitem>``, an XHTML ``<body>`` or an Atom ``<content>`` too.

**An end tag ends its element's scope.** The loose parser ended the innermost one at every end
tag, a stray one too, so an ``xml:base`` outlived its item or ended before it.

**A reference is unescaped once.** The loose parser unescaped ``&amp;quot;`` to ``"``, and
wrote an entity the DOCTYPE declares as a character (``&#8212;``) as ``&&#8212;;``.
"""

from __future__ import annotations

import contextvars
import html
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import feedparser.api
import feedparser.sanitizer

RECORDED = frozenset(
    {
        "guid",
        "id",
        "link",
        "pubdate",
        "dc:date",
        "published",
        "issued",
        "created",
        "dcterms:issued",
        "dcterms:created",
        "updated",
        "modified",
        "dcterms:modified",
    }
)
"""The element names (as feedparser names them: Atom's without a prefix) whose first text is
recorded; each is stored by feedparser under the key :data:`STORED_AS` names."""
STORED_AS = {
    "guid": "id",
    "pubdate": "published",
    "dc:date": "updated",
    "issued": "published",
    "dcterms:issued": "published",
    "dcterms:created": "created",
    "modified": "updated",
    "dcterms:modified": "updated",
}
RECORD_KEY = "feedcollector_fields"
"""Entry key of the recorded texts: element name -> (place among the entry's children, text)."""
PERMALINK_KEY = "feedcollector_permalink"
"""Entry key of whether its recorded ``<guid>`` is a permalink (no ``isPermaLink="false"``)."""
BASE_KEY = "feedcollector_base"
"""Entry key of the ``xml:base`` in effect at the entry ("" where none is)."""
FEED_LINK_KEY = "feedcollector_link"
"""Feed key of the channel's first ``<link>`` with text (feedparser keeps its last, or an
``<atom:link>``'s href)."""
SUMMARY_RANK_KEY = "feedcollector_summary_rank"
"""Entry key of the rank (:data:`SUMMARY_RANKS`) of the element its summary was read from."""
UNREAD_KEY = "feedcollector_unread"
"""Entry key a description is read into when it is not the summary (nor the content)."""
SUMMARY_RANKS = {"description": 0, "summary": 0, "media:description": 1, "itunes:summary": 2}
"""The descriptions of an entry in the fast path's order (:data:`.parse_tags.RSS_ITEM_SLOTS`:
``description`` or ``dc:description``, Media RSS's, iTunes'), the first of a rank counting."""


class _Corrections:
    """Placed before feedparser's classes: what this module changes of their reading."""

    can_be_relative_uri = frozenset(feedparser.api.StrictFeedParser.can_be_relative_uri) - {"id"}

    def _start_item(self, attributes: dict[str, str]) -> None:
        super()._start_item(attributes)  # type: ignore[misc]
        parser: Any = self
        entry = parser.entries[-1]
        entry[BASE_KEY] = parser.baseuri or ""
        entry[RECORD_KEY] = {}

    _start_entry = _start_item

    def _start_description(self, attributes: dict[str, str]) -> None:
        self._read_summary(attributes, "description")

    _start_dc_description = _start_description

    def _start_summary(self, attributes: dict[str, str]) -> None:
        self._read_summary(attributes, "summary")

    def _start_media_description(self, attributes: dict[str, str]) -> None:
        self._read_summary(attributes, "media:description")

    def _start_itunes_summary(self, attributes: dict[str, str]) -> None:
        self._read_summary(attributes, "itunes:summary")

    def _start_unread(self, attributes: dict[str, str]) -> None:
        """An element the fast path does not read, read into :data:`UNREAD_KEY`, where
        nothing looks. Media RSS's title is no title of the entry or feed: feedparser took a
        ``<media:group>``'s for an entry without ``<title>``, so the GUID an entry of no id
        or link hashes from its title differed. Userland's ``<fullitem>`` and an XHTML
        ``<body>`` are no content of an item (the fast path reads ``content:encoded``, else
        the description, as the seed says): feedparser read them as its content, which
        wins, so a broken day stored other HTML (and hashed another GUID for an item of no
        guid, link or title)."""
        parser: Any = self
        parser.push_content(UNREAD_KEY, attributes, "text/plain", 1)

    def _end_unread(self) -> None:
        parser: Any = self
        parser.pop_content(UNREAD_KEY)

    _start_media_title = _start_fullitem = _start_body = _start_xhtml_body = _start_unread
    _end_media_title = _end_fullitem = _end_body = _end_xhtml_body = _end_unread

    def _start_content(self, attributes: dict[str, str]) -> None:
        """An Atom ``<content>`` (or ``<summary>``, :meth:`_read_summary`) in an RSS item is
        not read either, as by the fast path: feedparser's won over ``content:encoded``."""
        parser: Any = self
        if parser.inentry and _in_rss(parser):
            self._start_unread(attributes)
            return
        super()._start_content(attributes)  # type: ignore[misc]

    def _end_content(self) -> None:
        parser: Any = self
        if parser.elementstack and parser.elementstack[-1][0] == UNREAD_KEY:
            self._end_unread()
            return
        super()._end_content()  # type: ignore[misc]

    def _read_summary(self, attributes: dict[str, str], name: str) -> None:
        """An entry's description as the fast path chooses it. feedparser read a second one
        (``<itunes:summary>`` or ``<media:description>`` after ``<description>``, as podcast
        and photo feeds write them) as the entry's content, which wins over the summary."""
        parser: Any = self
        if not parser.inentry or parser.insource:
            start = super()._start_summary if name == "summary" else super()._start_description  # type: ignore[misc]
            start(attributes)
            return
        entry = parser.entries[-1]
        rank = SUMMARY_RANKS[name]
        read = dict.get(entry, SUMMARY_RANK_KEY)  # not "summary": a content sets that too
        if (read is not None and rank >= read) or (name == "summary" and _in_rss(parser)):
            parser._summaryKey = UNREAD_KEY
            self._start_unread(attributes)
            return
        entry[SUMMARY_RANK_KEY] = rank
        parser.property_depth_map.get(entry, {}).pop("summary", None)  # a deeper one replaces it
        html = name in ("description", "media:description")  # feedparser's default types
        parser._summaryKey = None if html else "summary"
        parser.push_content(
            "description" if html else "summary",
            attributes,
            "text/" + ("html" if html else "plain"),
            1,
        )

    def _end_description(self) -> None:
        parser: Any = self
        if parser._summaryKey == UNREAD_KEY:
            self._end_unread()
            parser._summaryKey = None
            return
        super()._end_description()  # type: ignore[misc]

    def unknown_endtag(self, written: str) -> None:
        """feedparser's end of an element, then the record of an entry's field and the base."""
        parser: Any = self
        tag = written
        prefix, _, local = tag.rpartition(":")
        if prefix:  # the loose parser's tag is as written: its prefix mapped as feedparser does
            prefix = parser.namespacemap.get(prefix, prefix)
            tag = f"{prefix}:{local}" if prefix else local
        of_entry = tag in RECORDED and parser.inentry and not parser.insource
        of_channel = False
        if tag == "link":  # only a link of text (RSS's); an Atom link's href is no text
            stack = parser.elementstack
            text_link = bool(stack) and stack[-1][0] == "link"
            of_entry = of_entry and text_link
            elsewhere = parser.inentry or parser.insource or parser.inimage or parser.intextinput
            of_channel = text_link and not elsewhere and FEED_LINK_KEY not in parser.feeddata
        earlier = parser.feeddata.pop("link", None) if of_channel else None
        super().unknown_endtag(written)  # type: ignore[misc]
        if of_entry:
            _record(parser, tag)
        if of_channel:  # the channel's first <link> with text, as the fast path's
            text = dict.get(parser.feeddata, "link")
            if isinstance(text, str) and text.strip():
                parser.feeddata[FEED_LINK_KEY] = text
            elif earlier is not None:
                parser.feeddata["link"] = earlier
        if parser.basestack:
            parser.baseuri = parser.basestack[-1]


def _in_rss(parser: Any) -> bool:
    """Whether the document is RSS (0.9x, 1.0 or 2.0), whose items read no Atom content."""
    return str(parser.version).startswith("rss")


def _record(parser: Any, tag: str) -> None:
    """The text of the element ``tag`` that just ended, if it is the first of its name with
    text among the entry's own children (a nested one, as in ``<media:group>``, does not
    replace a shallower one in feedparser's entry, nor counts here)."""
    entry = parser.entries[-1]
    key = STORED_AS.get(tag, tag)
    text = dict.get(entry, key)
    record = dict.get(entry, RECORD_KEY)
    if not (isinstance(text, str) and text and isinstance(record, dict)) or tag in record:
        return
    if key != "link" and parser.property_depth_map.get(entry, {}).get(key) != parser.depth + 1:
        return  # the text is a shallower element's
    record[tag] = (len(record), text)
    if tag == "guid":
        entry[PERMALINK_KEY] = bool(parser.guidislink)


class _LooseCorrections(_Corrections):
    """The loose parser's unescaping of a text (HTML, or text): one reference at a time."""

    def decode_entities(self, element: str, data: str) -> str:
        """feedparser replaces ``&amp;`` before ``&quot;``, ``&apos;`` and ``&#x2f;``, so an
        escaped reference was read twice: ``&amp;quot;`` (HTML's ``&quot;`` in a description)
        became ``"``, which ends an attribute of the HTML it is in."""
        parser: Any = self
        if str(parser.contentparams.get("type", "xml")).endswith("xml"):
            return str(super().decode_entities(element, data))  # type: ignore[misc]
        return _ESCAPED_RE.sub(lambda match: html.unescape(match[0]), data)

    def handle_entityref(self, ref: str) -> None:
        """An entity the document declares as a character (``<!ENTITY mdash "&#8212;">``):
        feedparser handed the reference back to itself as a name, and wrote ``&&#8212;;``."""
        parser: Any = self
        value = parser.entities.get(ref)
        if isinstance(value, str) and value.startswith("&#") and value.endswith(";"):
            parser.handle_charref(value[2:-1])
            return
        super().handle_entityref(ref)  # type: ignore[misc]

    def unknown_starttag(self, tag: str, attributes: list[tuple[str, str]]) -> None:
        parser: Any = self
        scope = (tag, parser.depth, len(parser.basestack), len(parser.langstack))
        super().unknown_starttag(tag, attributes)  # type: ignore[misc]
        opened, counts = _open_elements(parser)
        opened.append(scope)
        counts[tag] = counts.get(tag, 0) + 1

    def unknown_endtag(self, written: str) -> None:
        """feedparser ends the innermost scope (``xml:base``, ``xml:lang``, depth) at every end
        tag; in a broken document a stray one (``</p>`` in an unescaped description) ended an
        enclosing element's, and an unclosed start tag (``<br>``) kept its own open: the
        ``xml:base`` of an item stayed in effect for the next (its links, so its GUIDs, were
        joined to it), and an item's own base was lost. An end tag ends the scope of the
        element it closes, and those left open inside it; a stray one ends none. Amortized
        constant time: a scope is pushed once and popped once."""
        parser: Any = self
        opened, counts = _open_elements(parser)
        bases, langs = parser.basestack, parser.langstack
        depth, n_bases, n_langs = parser.depth, len(bases), len(langs)
        last_base, last_lang = bases[-1] if bases else None, langs[-1] if langs else None
        super().unknown_endtag(written)
        if counts.get(written):
            tag = None
            while tag != written:
                tag, depth, n_bases, n_langs = opened.pop()
                counts[tag] -= 1
        else:  # a stray end tag: the scope feedparser ended is put back
            if len(bases) < n_bases:
                bases.append(last_base)
            if len(langs) < n_langs:
                langs.append(last_lang)
        del bases[n_bases:], langs[n_langs:]
        parser.depth = depth
        if bases:
            parser.baseuri = bases[-1]
        if langs:
            parser.lang = langs[-1]


def _open_elements(parser: Any) -> tuple[list[tuple[str, int, int, int]], dict[str, int]]:
    """The loose parser's open elements, innermost last, and how many of each tag are open."""
    found = parser.__dict__.get(_OPEN_KEY)
    if found is None:
        found = parser.__dict__[_OPEN_KEY] = ([], {})
    return found  # type: ignore[no-any-return]


_OPEN_KEY = "_feedcollector_open"
"""The loose parser's open elements: (tag, depth, base and lang stack lengths before it)."""
_ESCAPED_RE = re.compile(r"&(?:lt|gt|amp|quot|apos|#(?:60|62|38|34|39)|#x(?:3[cCeE]|2[267fF]));")
"""The references feedparser's loose parser unescapes in a text: its ``decode_entities``."""
_STRICT = type("CorrectedStrictParser", (_Corrections, feedparser.api.StrictFeedParser), {})
_LOOSE = type("CorrectedLooseParser", (_LooseCorrections, feedparser.api.LooseFeedParser), {})
_CORRECTED = contextvars.ContextVar("feedcollector_corrected_parsers", default=False)


def _chooser(corrected: type, original: type) -> Callable[..., Any]:
    """What ``feedparser.parse`` calls for ``original``: ``corrected`` inside
    :func:`corrected_parsers` (a context variable, so a parse on another thread is not
    affected), else ``original`` unchanged. One lookup per parse, none per element."""

    def make(*arguments: Any) -> Any:
        return (corrected if _CORRECTED.get() else original)(*arguments)

    return make


class _LiteralDoctype:
    """feedparser's DOCTYPE pattern, whose ``sub`` takes the new DOCTYPE as written within
    :func:`corrected_parsers`: ``replace_doctype`` gave it as a ``re.sub`` template, so an
    entity value with a backslash (``<!ENTITY path "C:\\data">``) raised ``bad escape`` and
    a broken feed declaring one failed whole (``\\n`` or ``\\1`` in one were rewritten)."""

    def __init__(self, pattern: re.Pattern[bytes]) -> None:
        self._pattern = pattern

    def findall(self, text: bytes) -> list[Any]:
        return self._pattern.findall(text)

    def sub(self, replacement: bytes, text: bytes) -> bytes:
        if _CORRECTED.get():
            return self._pattern.sub(lambda _: replacement, text)
        return self._pattern.sub(replacement, text)


feedparser.sanitizer.RE_DOCTYPE_PATTERN = _LiteralDoctype(feedparser.sanitizer.RE_DOCTYPE_PATTERN)
feedparser.api.StrictFeedParser = _chooser(_STRICT, feedparser.api.StrictFeedParser)
feedparser.api.LooseFeedParser = _chooser(_LOOSE, feedparser.api.LooseFeedParser)


@contextmanager
def corrected_parsers() -> Iterator[None]:
    """``feedparser.parse`` reads with this module's corrections within."""
    token = _CORRECTED.set(True)
    try:
        yield
    finally:
        _CORRECTED.reset(token)
