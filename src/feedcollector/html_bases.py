"""``xml:base`` declared inside content (Atom XHTML: ``<div><p xml:base="...">``): the
relative URLs below such an element are made absolute against its base, as XML Base says,
not against the content's. Both parsers keep the attribute in the markup they hand over, so
one pass over the HTML serves the fast path and the fallback alike.

Looked for only in content that has relative URLs to rewrite (:func:`absolutize` changed
something), so content without any pays nothing.
"""

from __future__ import annotations

import re
from html import unescape

from .html import MARKUP_RE, absolutize, resolve_url, rewrite_url_attributes

_XML_BASE_RE = re.compile(
    r"(?:^|\s)xml:base\s*=\s*(?:\"(?P<dq>[^\"]*)\"|'(?P<sq>[^']*)'|(?P<uq>[^\s>]+))", re.I
)
VOID_ELEMENTS = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
     "track", "wbr"}
)  # fmt: skip
"""Elements without an end tag in HTML: their own base ends with them."""


def absolutize_scoped(html: str, base: str) -> str:
    """:func:`.html.absolutize`, honouring the ``xml:base`` of elements inside ``html``."""
    rewritten = absolutize(html, base)
    if rewritten is html or "xml:base" not in html:
        return rewritten
    return "".join(
        rewrite_url_attributes(html[start:end], part_base)
        for start, end, part_base in _parts(html, base)
    )


def _parts(html: str, base: str) -> list[tuple[int, int, str]]:
    """``html`` cut at the tags that open and close an ``xml:base`` scope, each part with the
    base in effect in it (a declaring element's own attributes are in its scope)."""
    names: list[str] = []  # the scopes open, innermost last: the declaring element's name,
    bases: list[str] = []  # its base,
    depths: list[int] = []  # and how many elements of that name are open in it
    parts: list[tuple[int, int, str]] = []
    start = 0
    for match in MARKUP_RE.finditer(html):
        current = bases[-1] if bases else base
        name = match["name"]
        if name is not None:
            name = name.lower()
            closed = name in VOID_ELEMENTS or match["attrs"].rstrip().endswith("/")
            if not closed:
                depths = [d + (n == name) for n, d in zip(names, depths, strict=True)]
            declared = _XML_BASE_RE.search(match["attrs"])
            if declared is None:
                continue
            value = unescape(declared["dq"] or declared["sq"] or declared["uq"] or "")
            inner = resolve_url(value, current)
            parts.append((start, match.start(), current))
            if closed:
                parts.append((match.start(), match.end(), inner))
                start = match.end()
            else:
                names.append(name)
                bases.append(inner)
                depths.append(1)
                start = match.start()
        elif names and match.group().startswith("</"):
            name = match.group()[2:].strip(" \t\r\n>").lower()
            depths = [d - (n == name) for n, d in zip(names, depths, strict=True)]
            if depths[-1] == 0:
                parts.append((start, match.end(), current))
                start = match.end()
                del names[-1], bases[-1], depths[-1]
    parts.append((start, len(html), bases[-1] if bases else base))
    return parts
