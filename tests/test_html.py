from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from feedcollector.html import (
    MARKUP_RE,
    SRCSET_ATTRIBUTES,
    URL_ATTRIBUTE_SUFFIXES,
    URL_ATTRIBUTES,
    absolutize,
    edit_attributes,
    image_sources,
    resolve_url,
    rewrite_url_attributes,
    unescape_attribute,
)
from feedcollector.html_bases import absolutize_scoped
from feedcollector.html_images import image_sources_of_items

BASE = "https://example.com/blog/post.html"

ABSOLUTIZE_CASES = {
    # relative forms, each resolved like a browser would
    '<img src="a.png">': '<img src="https://example.com/blog/a.png">',
    '<img src="/img/a.png">': '<img src="https://example.com/img/a.png">',
    '<img src="../a.png">': '<img src="https://example.com/a.png">',
    '<img src="./x/../a.png">': '<img src="https://example.com/blog/a.png">',
    '<a href="?page=2">': '<a href="https://example.com/blog/post.html?page=2">',
    '<a href="//cdn.example.net/x">': '<a href="https://cdn.example.net/x">',
    # quoting kept: single, double, none
    "<a href='rel'>x</a>": "<a href='https://example.com/blog/rel'>x</a>",
    "<a href=rel>x</a>": "<a href=https://example.com/blog/rel>x</a>",
    # whitespace around = and inside the value; uppercase names
    '<IMG SRC = " a.png ">': '<IMG SRC = "https://example.com/blog/a.png">',
    # entities in the value: decoded to resolve, re-encoded the same way
    '<a href="/s?a=1&amp;b=2">': '<a href="https://example.com/s?a=1&amp;b=2">',
    '<a href="/s?a=1&b=2">': '<a href="https://example.com/s?a=1&b=2">',
    # every candidate of a srcset; descriptors and spacing kept
    '<img srcset="a.png 1x, /b.png 2x,c.png">': (
        '<img srcset="https://example.com/blog/a.png 1x, https://example.com/b.png 2x,'
        'https://example.com/blog/c.png">'
    ),
    '<source srcset="https://cdn.example.net/a.png 480w, b.png 800w">': (
        '<source srcset="https://cdn.example.net/a.png 480w, https://example.com/blog/b.png 800w">'
    ),
    # other URL attributes
    '<video poster="p.jpg" src="v.mp4"></video>': (
        '<video poster="https://example.com/blog/p.jpg" src="https://example.com/blog/v.mp4"></video>'
    ),
    '<blockquote cite="/q">': '<blockquote cite="https://example.com/q">',
    '<form action="send">': '<form action="https://example.com/blog/send">',
    '<td background="bg.gif">': '<td background="https://example.com/blog/bg.gif">',
    '<object data="movie.swf">': '<object data="https://example.com/blog/movie.swf">',
    '<img data-src="lazy.png" src="data:image/gif;base64,R0lGOD">': (
        '<img data-src="https://example.com/blog/lazy.png" src="data:image/gif;base64,R0lGOD">'
    ),
    '<svg><image xlink:href="i.svg"/></svg>': (
        '<svg><image xlink:href="https://example.com/blog/i.svg"/></svg>'
    ),
    # comments as HTML5 ends them: abruptly (<!--> and <!--->) and with --!>; the parser that
    # finds the images reads them so, and an image after one was left relative, untracked
    '<!--><img src="a.png">': '<!--><img src="https://example.com/blog/a.png">',
    '<!---><img src="a.png">': '<!---><img src="https://example.com/blog/a.png">',
    '<!-- c --!><img src="a.png"><!-- d -->': (
        '<!-- c --!><img src="https://example.com/blog/a.png"><!-- d -->'
    ),
    # attributes glued together, self-closing tags
    '<img alt="x"src="a.png"/>': '<img alt="x"src="https://example.com/blog/a.png"/>',
}

UNCHANGED = [
    '<img src="https://cdn.example.net/a.png">',
    '<img src="HTTP://CDN.EXAMPLE.NET/a.png">',
    '<img src="data:image/png;base64,iVBORw0KGgo=">',
    '<a href="mailto:someone@example.com">mail</a>',
    '<a href="javascript:void(0)">js</a>',
    '<a href="tel:+123">tel</a>',
    '<a href="#section">here</a>',
    '<a href="">empty</a>',
    "<a href>bare</a>",
    "<p class='note' title=\"a/b\" data-x='y.png'>text</p>",
    "plain text with src=relative.png outside any tag",
    '<!-- <img src="commented.png"> -->',
    "<script>var s = '<img src=\"in-script.png\">';</script>",
    "<style>.a { background: url(in-style.png) }</style>",
    "<textarea><a href='in-textarea'></a></textarea>",
    "<![CDATA[<img src='x.png'>]]>",
    "",
]


@pytest.mark.parametrize(("html", "expected"), ABSOLUTIZE_CASES.items())
def test_relative_urls_become_absolute(html: str, expected: str) -> None:
    assert absolutize(html, BASE) == expected


@pytest.mark.parametrize("html", UNCHANGED)
def test_everything_else_is_left_alone(html: str) -> None:
    assert absolutize(html, BASE) == html


def test_only_the_rewritten_values_change_byte_for_byte() -> None:
    html = (
        '<div  class="post"\n data-id=7>\n'
        "  <!-- note: <img src='old.png'> -->\n"
        "  <p>Caf&eacute; &amp; <b>bold</b>&nbsp;text</p>\n"
        '  <img   width=640  SRC="pics/a.png"  alt="A &quot;pic&quot;" >\n'
        "  <a href='https://other.example/x'>abs</a> <a href=/y>rel</a>\n"
        "  <script>document.write('<img src=\"js.png\">')</script>\n"
        "</div>"
    )
    expected = html.replace(
        'SRC="pics/a.png"', 'SRC="https://example.com/blog/pics/a.png"'
    ).replace("href=/y>", "href=https://example.com/y>")
    assert absolutize(html, BASE) == expected


def test_a_base_that_is_not_absolute_changes_nothing() -> None:
    html = '<img src="a.png">'
    assert absolutize(html, "") == html
    assert absolutize(html, "/relative/base") == html
    assert absolutize(html, "http://[::1") == html
    assert absolutize(html, "feed://example.com/x") == html  # urljoin cannot join this scheme


def test_an_unquoted_value_gets_quotes_when_the_url_needs_them() -> None:
    assert absolutize("<a href=a&quot;b>", BASE) == '<a href="https://example.com/blog/a&quot;b">'


def test_a_quote_inside_a_resolved_value_is_escaped_for_its_quoting() -> None:
    assert absolutize("<a href='it&#39;s'>", BASE) == "<a href='https://example.com/blog/it&#39;s'>"


def test_a_quote_opens_a_value_only_right_after_an_equals_sign() -> None:
    """As in HTML5: ``alt=Don't`` is an unquoted value with a quote in it, not a quoted value
    running to the next quote (the scan took the rest of the item for one tag, and the reader
    swapped no image after it for its archived copy)."""
    html = "<img alt=Don't src=a.png> it's <img src=b.png><a href = 'b' x=\"c>\" y='>'>z</a>"
    tags = [(m["name"], m["attrs"]) for m in MARKUP_RE.finditer(html)]
    assert tags == [
        ("img", " alt=Don't src=a.png"),
        ("img", " src=b.png"),
        ("a", " href = 'b' x=\"c>\" y='>'"),
        (None, None),
    ]
    resolved = {
        "=a.png": "=https://example.com/blog/a.png",
        "=b.png": "=https://example.com/blog/b.png",
    }
    expected = html.replace("'b'", "'https://example.com/blog/b'")
    for written, absolute in resolved.items():
        expected = expected.replace(written, absolute)
    assert absolutize(html, BASE) == expected


def test_edit_attributes_replaces_a_value_or_a_whole_attribute() -> None:
    """A value edit keeps the name and spacing as written; a whole one takes the white space
    before the attribute along, so a dropped attribute leaves no gap."""
    attrs = " ALT=\"a\"\n  SRC = 'x' srcset=y.png sizes checked"
    seen: list[tuple[str, str]] = []
    names = ("alt", "src", "srcset", "sizes")
    assert edit_attributes(attrs, dict.fromkeys(names, lambda *v: seen.append(v[:2])), 0) is None
    assert seen == [("a", '"'), ("x", "'"), ("y.png", ""), ("", "")]
    assert edit_attributes(attrs, {"src": lambda raw, _, mark: f'"{mark}{raw}"'}, "~") == (
        ' ALT="a"\n  SRC = "~x" srcset=y.png sizes checked'
    )
    dropped = dict.fromkeys(("srcset", "sizes"), lambda *_: "")
    assert edit_attributes(attrs, dropped, None, whole=True) == " ALT=\"a\"\n  SRC = 'x' checked"
    assert edit_attributes(attrs, {"src": lambda *_: ' src="z"'}, None, whole=True) == (
        ' ALT="a" src="z" srcset=y.png sizes checked'
    )


def test_resolve_url() -> None:
    assert resolve_url("/a", BASE) == "https://example.com/a"
    assert resolve_url("  /a ", BASE) == "https://example.com/a"
    assert resolve_url("https://x.example/", BASE) == "https://x.example/"
    assert resolve_url("a", "not a base") == "a"


def test_pre_check_suffixes_cover_every_url_attribute() -> None:
    for name in URL_ATTRIBUTES:
        assert name.endswith(URL_ATTRIBUTE_SUFFIXES), name
    for name in SRCSET_ATTRIBUTES:
        assert "srcset" in name


IMAGE_CASES = {
    '<p><img src="a.png"><img src="/b.png"></p>': ["a.png", "/b.png"],
    '<img src=" https://x.example/a.png\n">': ["https://x.example/a.png"],
    '<img src="https://x.example/new\nline/\ttab&#10;.png">': ["https://x.example/newline/tab.png"],
    '<img src="https://x.example/a.png?w=1&amp;h=2">': ["https://x.example/a.png?w=1&h=2"],
    "<img src='https://x.example/&#233;t&eacute;.png'>": ["https://x.example/été.png"],
    '<IMG SRC="UPPER.PNG">': ["UPPER.PNG"],
    '<img src=""><img><img src="   "><img src="data:image/png;base64,AAAA">': [],
    '<img src="DATA:image/png;base64,AAAA"><img src="ok.png">': ["ok.png"],
    '<img srcset="a.png 1x"><picture><source srcset="b.png"></picture>': [],
    "<noscript><img src='real.jpg'></noscript><img src='placeholder.gif'>": [
        "real.jpg",
        "placeholder.gif",
    ],
    "<template><img src='t.png'></template>": [],
    "<!-- <img src='c.png'> -->": [],
    "<!--><img src='d.png'><!-- c --!><img src='e.png'>": ["d.png", "e.png"],
    "no markup at all": [],
    '<img src="a.png"><img src="a.png">': ["a.png", "a.png"],
    '<img src="javascript:alert(1)">': ["javascript:alert(1)"],
}


@pytest.mark.parametrize(("html", "expected"), IMAGE_CASES.items())
def test_image_sources(html: str, expected: list[str]) -> None:
    assert image_sources(html) == expected


def test_image_sources_of_items_reads_each_item_as_its_own_document() -> None:
    htmls = list(IMAGE_CASES)
    assert image_sources_of_items(htmls) == list(IMAGE_CASES.values())


_ITEM_PIECES = st.sampled_from(
    ["<img", "<IMG", "<img/", " src", " SRC", "=", '"', "'", "a.png", " b.png ", ">", "/", " ",
     "\n", "\r", "\x00", "\ufffd", "&amp;", "&#0;", "<p>", "</p>", "<a>", "</a>", "<b>", "<div>",
     "<!--", "-->", "<!", "<?", "</ ", "<script>", "</script>", "<title>", "<template>",
     "</template>", "<svg>", "</svg>", "<math>", "<select>", "</select>", "<table>", "<td>",
     "</table>", "<frameset>", "<image src=i.png>", "<noscript>", "<plaintext>", "<head>",
     "<body>", "<form>", "<nobr>", '<img src="d.png">', "<img src=data:x>", "<img alt=x ",
     "<img src=", "<a title='", '<a title="', '<img src="http://x/f.png" src=g>']
)  # fmt: skip
_ITEM_HTML = st.lists(_ITEM_PIECES, max_size=12).map("".join)


@given(st.lists(_ITEM_HTML, min_size=2, max_size=6))
def test_image_sources_of_items_equals_one_document_per_item(htmls: list[str]) -> None:
    """Joining the items into one document never moves, drops or adds an image."""
    assert image_sources_of_items(htmls) == [image_sources(html) for html in htmls]


_NAMES = st.sampled_from(
    ["src", "SRC", "href", "srcset", "data-src", "poster", "class", "alt", "data", "xsrc"]
)
_VALUES = st.sampled_from(
    ["a.png", "/b", "https://x.example/c", "#f", "", " d.png ", "e.png 2x, f.png", "mailto:z",
     "g?h=1&amp;i=2", "j&#47;k", "//cdn.example/l", "  ", "http://", "../m"]
)  # fmt: skip
_ATTRIBUTE = st.tuples(
    _NAMES, st.sampled_from(["=", " = ", "=\n"]), st.sampled_from(['"', "'", ""]), _VALUES
).map(lambda parts: f"{parts[0]}{parts[1]}{parts[2]}{parts[3]}{parts[2]}")
_TAG = st.tuples(
    st.sampled_from(["img", "a", "IMG", "source", "script", "p"]),
    st.lists(_ATTRIBUTE, max_size=4),
).map(lambda parts: f"<{parts[0]} {' '.join(parts[1])}>")
_HTML = st.lists(
    st.one_of(_TAG, st.sampled_from(["text ", "<!-- c -->", "</a>", "a = b ", "</script>"])),
    max_size=8,
).map("".join)


@given(_HTML)
def test_pre_check_never_hides_a_rewrite(html: str) -> None:
    assert absolutize(html, BASE) == rewrite_url_attributes(html, BASE)


@given(_HTML)
def test_absolutize_is_idempotent(html: str) -> None:
    once = absolutize(html, BASE)
    assert absolutize(once, BASE) == once


@given(st.text(max_size=300))
def test_absolutize_never_raises(html: str) -> None:
    absolutize(html, BASE)
    rewrite_url_attributes(html, BASE)


@given(st.text(alphabet=st.sampled_from("<>\"'= /&;#:asrchefimg.pn\n"), max_size=200))
def test_absolutize_never_raises_on_markup_like_text(html: str) -> None:
    result = absolutize(html, BASE)
    assert result == rewrite_url_attributes(html, BASE)
    image_sources(html)


ATTRIBUTE_REFERENCES = [
    "/i.png?a=1&timestamp=2&param=3&amp;b=4",
    "x&copy;y",
    "x&copy y",
    "x&copyz",
    "x&notit;",
    "x&notin;",
    "&#38;&#x26;&#38",
    "a&amp=1",
    "a&lt",
    "a&unknown;b",
    "&region=us&section=2&currency=eur&times=3",
]


@pytest.mark.parametrize("value", ATTRIBUTE_REFERENCES)
def test_attribute_values_are_decoded_as_the_image_stage_reads_them(value: str) -> None:
    """HTML5 leaves ``&times`` in ``&timestamp=`` as text inside an attribute (a reference
    without its ``;`` before a letter, digit or ``=``); ``html.unescape`` made it ``×tamp``."""
    (read,) = image_sources(f'<img src="{value}">')
    assert unescape_attribute(value) == read


def test_a_relative_url_with_entity_like_parameters_is_made_absolute_intact() -> None:
    """``?a=1&timestamp=2&param=3`` was stored as ``?a=1×tamp=2¶m=3``, and the image
    fetched at that garbled URL."""
    html = '<img src="/i.png?a=1&timestamp=2&param=3&section=4">'
    expected = '<img src="https://example.com/i.png?a=1&timestamp=2&param=3&section=4">'
    assert absolutize(html, BASE) == expected
    assert image_sources(absolutize(html, BASE)) == [
        "https://example.com/i.png?a=1&timestamp=2&param=3&section=4"
    ]


@pytest.mark.parametrize(
    ("html", "expected"),
    [
        ('<a href="x">', '<a href="http://b.example/d/x">'),
        (
            '<div xml:base="/o/"><a href="x"></a></div><a href="y">',
            '<div xml:base="/o/"><a href="http://b.example/o/x"></a></div>'
            '<a href="http://b.example/d/y">',
        ),
        (
            '<div xml:base="/o/"><div><a href="x"></a></div><a href="z"></a></div><a href="y">',
            '<div xml:base="/o/"><div><a href="http://b.example/o/x"></a></div>'
            '<a href="http://b.example/o/z"></a></div><a href="http://b.example/d/y">',
        ),
        (
            "<img xml:base='http://i.example/' src=i.png><img src=j.png>",
            "<img xml:base='http://i.example/' src=http://i.example/i.png>"
            "<img src=http://b.example/d/j.png>",
        ),
        ('<p xml:base="http://a.example/"><a href="https://x.example/">', None),
    ],
)
def test_an_xml_base_inside_html_scopes_the_urls_below_it(html: str, expected: str | None) -> None:
    assert absolutize_scoped(html, "http://b.example/d/") == (expected or html)
