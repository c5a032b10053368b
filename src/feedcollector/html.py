"""Raw-HTML helpers: make relative URLs absolute without re-serializing, and list image sources.

``content_html`` is immutable source-of-truth (seed section 3), so :func:`absolutize` rewrites
only the attribute values that change, in place, keeping their quoting; every other byte stays
as the feed wrote it. A compiled regex walks tags (skipping comments, ``<!...>``/``<?...>``
constructs and the raw text of script/style/textarea/title/xmp), which is both faster than an
HTML parser and the only way to keep the rest byte-identical.

URL-valued attributes rewritten (on any element): see :data:`URL_ATTRIBUTES` and
:data:`SRCSET_ATTRIBUTES` (each candidate URL of a srcset is resolved, descriptors are kept).
Values with a scheme (``https:``, ``data:``, ``mailto:``, ``javascript:``...), empty values and
``#fragment`` references are left alone; ``//host/path`` takes the scheme of the base.
:func:`edit_attributes` is the one attribute-editing loop: the reader's image swaps use it too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from html import unescape
from html.entities import html5
from typing import TypeVar
from urllib.parse import urljoin, urlsplit

from .html_images import image_sources

URL_ATTRIBUTES = frozenset(
    {
        "href", "src", "poster", "cite", "action", "formaction", "background", "longdesc",
        "usemap", "data", "codebase", "lowsrc", "dynsrc", "manifest", "icon", "xlink:href",
        "data-src", "data-original", "data-lazy-src", "data-hi-res-src",
    }
)  # fmt: skip
"""Attributes whose whole value is one URL (``data`` is ``<object data>``; the ``data-*`` ones
are the usual lazy-loading conventions, rewritten so that readers can load them)."""

SRCSET_ATTRIBUTES = frozenset({"srcset", "imagesrcset", "data-srcset", "data-lazy-srcset"})
"""Attributes holding a comma-separated list of ``URL [descriptor]`` candidates."""

RAW_TEXT_ELEMENTS = frozenset({"script", "style", "textarea", "title", "xmp"})
"""Elements whose content is not markup; a ``<img src=...>`` in their text is not a tag."""

_SCHEME_RE = re.compile(r"[a-zA-Z][a-zA-Z0-9+.\-]*:")
MARKUP_RE = re.compile(
    r"<!--(?:-?>|.*?(?:--!?>|\Z))"  # comment, as HTML5 ends one (an unclosed one: the end)
    r"|<[!?/][^>]*(?:>|\Z)"  # doctype, bogus comment, processing instruction, end tag
    r"|<(?P<name>[a-zA-Z][^\s/>]*)"
    r"(?P<attrs>(?:[^>=]|=\s*\"[^\"]*(?:\"|\Z)|=\s*'[^']*(?:'|\Z)|=)*+)(?:>|\Z)",
    re.DOTALL,
)
"""A comment, another ``<!``/``<?``/``</`` construct, or a start tag with its attributes.
A quote opens a value only right after ``=``, as HTML5 reads a tag (but for an ``=`` inside
an unquoted value, which opens one here too): elsewhere it is a character of an unquoted value
or a name (``alt=Don't`` took the rest of the document for its tag).
Whatever is left open (a comment, a quote, a tag) runs to the end, as in browsers, so a scan
from tag to tag reads the text once: a tag that had to end in ``>`` was read to the end
again from every following ``<`` (seconds for 65 KB of ``<a href=x`` without ``>``)."""
_ATTR_RE = re.compile(
    r"\s*(?P<name>[^\s\"'>/=]+)"
    r"(?:\s*=\s*(?:\"(?P<dq>[^\"]*)\"|'(?P<sq>[^']*)'|(?P<uq>[^\s>]+)))?"
)
"""One attribute, with the white space before it: an attribute dropped takes its gap along."""
URL_ATTRIBUTE_SUFFIXES = (
    "src", "href", "data", "original", "poster", "cite", "action", "background", "longdesc",
    "usemap", "codebase", "manifest", "icon",
)  # fmt: skip
"""Every name in URL_ATTRIBUTES ends with one of these (the pre-check relies on it)."""
_RELATIVE_VALUE_START = r"\s*[\"']?\s*(?![a-z][a-z0-9+.\-]*:|#|[\"'\s>])"
"""After an ``=``: a value that is not empty, not a fragment and has no scheme."""
_RELATIVE_VALUE_START_RE = re.compile(_RELATIVE_VALUE_START, re.IGNORECASE)
_CANDIDATE_EQUALS_RE = re.compile(
    "=(?:(?:"
    + "|".join(f"(?<={suffix}=)" for suffix in URL_ATTRIBUTE_SUFFIXES)
    + f")(?={_RELATIVE_VALUE_START})|(?<=srcset=)|(?<=\\s=))",
    re.IGNORECASE,
)
"""The ``=`` of an attribute that may need rewriting: a name ending like a URL attribute's
with a value that looks relative, a name ending in ``srcset``, or a space before the ``=``
(then Python reads the name). A literal ``=`` start and lookbehinds for the names let the
engine skip ``alt=``, ``class=``, absolute ``href=`` and the like without Python seeing them,
and without a lowercased copy of the HTML."""
_ATTRIBUTE_VALUE_RE = re.compile(r"\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s>]+))")
_UNSAFE_UNQUOTED_RE = re.compile(r"[\s\"'=<>`]")
_SRCSET_URL_RE = re.compile(r"[\s,]*(?P<url>[^\s,][^\s]*)")
_DESCRIPTOR_RE = re.compile(r"[^,(]*(?:\([^)]*\)[^,(]*)*")


def absolutize(html: str, base: str) -> str:
    """``html`` with every relative URL in a URL attribute resolved against ``base``.

    Returns ``html`` itself when ``base`` is not absolute or nothing needs rewriting.
    """
    if "=" not in html or not is_absolute_url(base):  # no attribute value, nothing to rewrite
        return html
    candidates = [match.start() for match in _CANDIDATE_EQUALS_RE.finditer(html)]
    if not candidates or not _may_need_rewriting(html, candidates):
        return html
    return _rewrite(html, base, candidates)


def rewrite_url_attributes(html: str, base: str) -> str:
    """The full pass of :func:`absolutize`, without its pre-check (``base`` must be absolute).

    Every tag is walked (comments and raw text must be skipped), but only a tag holding the
    ``=`` of a candidate attribute (:data:`_CANDIDATE_EQUALS_RE`, found in one C-level scan)
    has its attributes read; the walk stops after the last candidate.
    """
    return _rewrite(html, base, [match.start() for match in _CANDIDATE_EQUALS_RE.finditer(html)])


def _rewrite(html: str, base: str, candidates: list[int]) -> str:
    """:func:`rewrite_url_attributes` with the candidate ``=`` positions already found."""
    resolve = _resolver(base)
    pieces: list[str] = []
    done = 0
    position = 0
    next_candidate = 0
    while next_candidate < len(candidates):
        match = MARKUP_RE.search(html, position)
        if match is None:
            break
        position = match.end()
        name = match["name"]
        if name is None:
            continue
        attrs_start, attrs_end = match.span("attrs")
        while next_candidate < len(candidates) and candidates[next_candidate] < attrs_start:
            next_candidate += 1  # an "=" in text, a comment or raw text
        if next_candidate < len(candidates) and candidates[next_candidate] < attrs_end:
            rewritten = edit_attributes(match["attrs"], _URL_EDITS, resolve)
            if rewritten is not None:
                pieces.append(html[done:attrs_start])
                pieces.append(rewritten)
                done = attrs_end
        if name.lower() in RAW_TEXT_ELEMENTS:
            position = raw_text_end(html, name, position)
    if not pieces:
        return html
    pieces.append(html[done:])
    return "".join(pieces)


def raw_text_end(html: str, name: str, position: int) -> int:
    """Where the text of raw text element ``name`` from ``position`` ends: at its end tag (a
    ``<`` in it starts no tag), or at the end of ``html``."""
    close = re.compile(rf"</{re.escape(name)}[\s/>]", re.IGNORECASE).search(html, position)
    return close.start() if close is not None else len(html)


def _may_need_rewriting(html: str, candidates: list[int]) -> bool:
    """Cheap pre-check: could any URL attribute hold a relative URL?

    False only when nothing can need rewriting; a false positive merely costs a full pass.
    One regex finds the ``=`` of every attribute that might be a URL or srcset attribute
    (:data:`_CANDIDATE_EQUALS_RE`); only those get their name read back and their value
    looked at. A srcset value is read whole: a relative candidate may follow an absolute one.
    """
    for equals in candidates:
        end = equals
        while end > 0 and html[end - 1].isspace():
            end -= 1
        start = end
        while start > 0 and not _ends_name(html[start - 1]):
            start -= 1
        name = html[start:end].lower()
        if name in URL_ATTRIBUTES:
            if _RELATIVE_VALUE_START_RE.match(html, equals + 1) is not None:
                return True
        elif name in SRCSET_ATTRIBUTES and _srcset_may_need_rewriting(html, equals + 1):
            return True
    return False


_CHARREF_RE = re.compile(r"&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)")
_LITERAL_AFTER = frozenset("=0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def unescape_attribute(value: str) -> str:
    """An attribute value decoded as HTML5 decodes attributes (and the image stage's parser
    with it): a named reference without its ``;`` followed by a letter, a digit or ``=`` stays
    text. ``html.unescape`` reads text's rules: ``?a=1&timestamp=2`` became ``a=1×tamp=2``
    and ``&param=`` ``¶m=``, and a relative image URL was stored, and fetched, garbled."""
    if "&" not in value:
        return value
    return _CHARREF_RE.sub(_attribute_reference, value)


def _attribute_reference(match: re.Match[str]) -> str:
    ref = match[1]
    if ref[0] == "#" or ref in html5:
        return unescape(match[0])
    for end in range(len(ref) - 1, 1, -1):  # the longest name that may go without its ";"
        if ref[:end] in html5:
            rest = ref[end:]
            return match[0] if rest[0] in _LITERAL_AFTER else html5[ref[:end]] + rest
    return match[0]


def _srcset_may_need_rewriting(html: str, value_at: int) -> bool:
    """Could the srcset value at ``value_at`` hold a relative candidate?

    Every candidate starts the value or follows a comma, so the first token of every
    comma-separated piece of the decoded value covers them all (a comma inside a URL or a
    descriptor only adds pieces, i.e. false positives).
    """
    value = _ATTRIBUTE_VALUE_RE.match(html, value_at)
    if value is None:
        return False
    for piece in unescape_attribute(value[1] or value[2] or value[3] or "").split(","):
        tokens = piece.split(None, 1)
        if tokens and is_relative_url(tokens[0]):
            return True
    return False


def _ends_name(char: str) -> bool:
    """The characters that cannot be part of an attribute name (as ``_ATTR_RE`` reads it)."""
    return char.isspace() or char in "\"'>/=<"


def is_relative_url(value: str) -> bool:
    """True for a reference that needs a base: no scheme, not empty, not a bare fragment."""
    return bool(value) and not value.startswith("#") and _SCHEME_RE.match(value) is None


def resolve_url(value: str, base: str) -> str:
    """``value`` made absolute against ``base`` when it is relative and that is possible."""
    stripped = value.strip()
    if stripped.startswith(("http://", "https://")) or not is_relative_url(stripped):
        return value
    if not is_absolute_url(base):
        return value
    return _resolver(base)(stripped) or value


@lru_cache(maxsize=256)
def is_absolute_url(url: str) -> bool:
    """True when ``url`` has a scheme and a host, so it can serve as a base.

    Cached: every item of a feed asks about the same base or two.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return bool(parts.scheme) and bool(parts.netloc)


@lru_cache(maxsize=64)
def _resolver(base: str) -> Resolver:
    """A function: relative reference -> absolute URL, or None if the pair cannot be joined.

    Path-absolute references without dot segments (``/img/a.png``, the common case) are joined
    to the base's origin directly; everything else goes through ``urljoin``. Cached: the items
    of a feed share their base.
    """
    parts = urlsplit(base)
    origin = f"{parts.scheme}://{parts.netloc}"

    def resolve(reference: str) -> str | None:
        if reference[:1] == "/" and reference[1:2] != "/" and "/." not in reference:
            return origin + reference
        try:
            joined = urljoin(base, reference)
        except ValueError:
            return None
        return joined if _SCHEME_RE.match(joined) else None  # urljoin gives up on odd schemes

    return resolve


Resolver = Callable[[str], str | None]
_Context = TypeVar("_Context")
AttributeEdit = Callable[[str, str, _Context], str | None]
"""(raw value, its quote: ``"``, ``'`` or none, the caller's context) -> the new text, or None
to keep the attribute as it is. A bare name has the value "" and no quote."""


def edit_attributes(
    attrs: str,
    edits: Mapping[str, AttributeEdit[_Context]],
    context: _Context,
    whole: bool = False,
) -> str | None:
    """``attrs`` (a start tag's attribute text) with each attribute named in ``edits`` (in lower
    case) edited, or None when no edit changed anything; every other byte stays as written.

    The text an edit returns takes the place of the value, quotes included, or with ``whole``
    of the whole attribute and the white space before it ("" drops it). It serves URL rewriting
    on the parse path: an attribute no edit is named for costs no call, ``context`` (the
    resolver) spares building edits per base, and ``whole`` is not keyword-only (filling that
    default in made the loop 1-2% slower).
    """
    pieces: list[str] = []
    done = 0
    for attr in _ATTR_RE.finditer(attrs):
        name, double_quoted, single_quoted, unquoted = attr.groups()
        edit = edits.get(name.lower())
        if edit is None:
            continue
        if double_quoted is not None:
            raw, quote = double_quoted, '"'
        elif single_quoted is not None:
            raw, quote = single_quoted, "'"
        else:
            raw, quote = unquoted or "", ""
        new = edit(raw, quote, context)
        if new is not None:
            end = attr.end()
            cut = attr.start() if whole else end - len(raw) - 2 * len(quote)
            pieces += (attrs[done:cut], new)
            done = end
    if not pieces:
        return None
    pieces.append(attrs[done:])
    return "".join(pieces)


def _rewrite_url(raw: str, quote: str, resolve: Resolver) -> str | None:
    value = unescape_attribute(raw).strip()
    return _quoted_value(raw, quote, resolve(value)) if is_relative_url(value) else None


def _quoted_value(raw: str, quote: str, new: str | None) -> str | None:
    """The resolved value ``new`` (None: unchanged) encoded the way ``raw`` was written.

    ``&`` becomes ``&amp;`` only if the original used character references; the quote
    character of the attribute is always escaped, and an unquoted value that needs quotes
    gets them.
    """
    if new is None:
        return None
    if "&" in raw and unescape_attribute(raw) != raw:
        new = new.replace("&", "&amp;")
    if quote == '"':
        new = new.replace('"', "&quot;")
    elif quote == "'":
        new = new.replace("'", "&#39;")
    elif _UNSAFE_UNQUOTED_RE.search(new):
        quote = '"'
        new = new.replace('"', "&quot;")
    return f"{quote}{new}{quote}"


def _rewrite_srcset(raw: str, quote: str, resolve: Resolver) -> str | None:
    """Resolve each candidate URL in place; descriptors, commas and spacing are kept."""
    value = unescape_attribute(raw)
    pieces: list[str] = []
    done = 0
    position = 0
    changed = False
    while position < len(value):
        match = _SRCSET_URL_RE.match(value, position)
        if match is None:
            break
        url = match["url"]
        url_end = match.end("url")
        trailing_commas = len(url) - len(url.rstrip(","))
        url = url.rstrip(",")
        if is_relative_url(url):
            absolute = resolve(url)
            if absolute is not None and absolute != url:
                pieces.append(value[done : match.start("url")])
                pieces.append(absolute)
                done = match.start("url") + len(url)
                changed = True
        position = url_end
        if not trailing_commas:
            descriptor = _DESCRIPTOR_RE.match(value, position)
            position = descriptor.end() if descriptor is not None else position
            position += 1  # the comma ending the candidate
    if not changed:
        return None
    pieces.append(value[done:])
    return _quoted_value(raw, quote, "".join(pieces))


_URL_EDITS: dict[str, AttributeEdit[Resolver]] = dict.fromkeys(URL_ATTRIBUTES, _rewrite_url)
_URL_EDITS.update(dict.fromkeys(SRCSET_ATTRIBUTES, _rewrite_srcset))

__all__ = ["absolutize", "image_sources", "is_absolute_url", "is_relative_url", "resolve_url"]
