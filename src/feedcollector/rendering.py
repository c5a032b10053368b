"""Rendering a stored item's HTML for display; pure: the stored HTML is never changed.

``content_html`` is immutable and keeps the feed's original image URLs. At read time
:func:`render_item_html` swaps the ``src`` of every image archived successfully for its public
object URL (under ``[storage] public_base_url`` when set, on S3/R2 or for a served local folder;
else a ``file://`` URL for the local folder), so the item displays even after the source site is
gone (seed section 6). ``pending`` and ``failed`` images keep their original URL, and so do all
images when the store has no public URL (S3/R2 without a base URL). Only ``src`` values of
``<img>`` tags change, compared after decoding character references (``&amp;``) exactly as the
image stage read them; an ``<img>`` whose ``src`` is replaced loses its ``srcset``, which
browsers would otherwise prefer and which points at the originals. Optional sanitizing (nh3) is
for display: scripts, event handlers and ``javascript:`` URLs go (:func:`sanitize_html`).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import nh3

from .html import (
    MARKUP_RE,
    RAW_TEXT_ELEMENTS,
    SRCSET_ATTRIBUTES,
    URL_ATTRIBUTES,
    AttributeEdit,
    edit_attributes,
    raw_text_end,
    unescape_attribute,
)
from .html_images import attribute_url
from .objectstore import ObjectStore

IMAGE_TAGS = frozenset({"img", "image"})
"""Tags an HTML5 parser reads as ``<img>``: the image stage archives an ``<image src>`` too."""
DROPPED_WITH_SRC = frozenset({"srcset", "data-srcset", "sizes"})
_DROPPING: dict[str, AttributeEdit[None]] = {name: lambda *_: "" for name in DROPPED_WITH_SRC}


@dataclass(frozen=True, slots=True)
class StoredImage:
    """One image task as a reader needs it."""

    position: int
    original_url: str
    status: str
    r2_key: str | None
    attempts: int = 0
    last_error: str | None = None
    retry_at: str = ""
    """When a pending task is tried again after a failed attempt ('' = due now)."""


def public_image_urls(images: Iterable[StoredImage], objects: ObjectStore) -> dict[str, str]:
    """Original URL -> public object URL, for the ``success`` images that have one."""
    urls: dict[str, str] = {}
    for image in images:
        if image.status != "success" or not image.r2_key or image.original_url in urls:
            continue
        public = objects.public_url(image.r2_key)
        if public:
            urls[image.original_url] = public
    return urls


def render_item_html(
    content_html: str,
    tasks: Iterable[StoredImage],
    objects: ObjectStore,
    *,
    sanitize: bool = False,
) -> str:
    """The item's HTML for display; the stored ``content_html`` itself is never changed.

    Sanitizing runs first, on the feed's HTML alone, so that our own ``file://`` URLs (which
    nh3 would refuse) are added after it.
    """
    text = sanitize_html(content_html) if sanitize else content_html
    return replace_image_sources(text, public_image_urls(tasks, objects))


def sanitize_html(content_html: str) -> str:
    """HTML safe to display: no scripts, event handlers or ``javascript:`` URLs (nh3's
    defaults, which keep text formatting, links and images).

    Two things nh3 alone loses: the images of a ``<noscript>`` (nh3 reads its content as
    text, so ``<img src=...>`` showed as words; lazy-loading pages put the real image there,
    and the image stage archives it), and ``data:`` images (a ``data:`` URL is kept in an
    ``<img src>`` of an image type only, where it runs nothing; a link to one goes)."""
    return _CLEANER.clean(_NOSCRIPT_TAG_RE.sub("", content_html))


def _data_url_only_for_images(element: str, attribute: str, value: str) -> str | None:
    if attribute not in URL_ATTRIBUTES and attribute not in SRCSET_ATTRIBUTES:
        return value  # text: alt="Data: sales by region" stays
    url = value.translate(_URL_IGNORED).strip(_URL_ENDS).lower()
    if not url.startswith("data:"):
        return value
    return value if element == "img" and attribute == "src" and url[5:11] == "image/" else None


_URL_IGNORED = str.maketrans("", "", "\t\n\r")
_URL_ENDS = "".join(chr(code) for code in range(0x21))
"""A URL as browsers (and nh3's URL parser) read it: tabs and line breaks anywhere dropped,
C0 controls and spaces at its ends stripped (``da&#10;ta:`` is a ``data:`` URL)."""
_NOSCRIPT_TAG_RE = re.compile(r"</?noscript\b[^>]*>", re.IGNORECASE)
"""A ``<noscript>`` tag, taken out so that its content is read as the markup it is."""
_CLEANER = nh3.Cleaner(
    url_schemes=nh3.ALLOWED_URL_SCHEMES | {"data"}, attribute_filter=_data_url_only_for_images
)


def replace_image_sources(content_html: str, replacements: Mapping[str, str]) -> str:
    """Swap ``<img src>`` values found in ``replacements`` (keys: URLs as
    :func:`.html_images.attribute_url` reads them).

    A swapped image loses its ``srcset``, and so do the ``<source>`` elements of its
    ``<picture>``: browsers prefer those, which point at the originals."""
    if not replacements or "<" not in content_html:
        return content_html
    edits: list[tuple[int, int, str]] = []
    sources: list[tuple[int, int, str]] | None = None  # in a <picture>: its sources' edits
    swapped_in_picture = False
    position = 0
    while (match := MARKUP_RE.search(content_html, position)) is not None:
        position = match.end()
        name = (match["name"] or "").lower()
        if name in IMAGE_TAGS:
            attrs = _replace_src(match["attrs"], replacements)
            if attrs is not None:
                edits.append((match.start("attrs"), match.end("attrs"), attrs))
                swapped_in_picture = sources is not None
        elif name == "picture":
            sources, swapped_in_picture = [], False
        elif name == "source" and sources is not None:
            kept = _without_srcset(match["attrs"])
            if kept is not None:
                sources.append((match.start("attrs"), match.end("attrs"), kept))
        elif name in RAW_TEXT_ELEMENTS:
            position = raw_text_end(content_html, name, position)
        elif match[0][:9].lower() == "</picture":
            edits += sources if sources is not None and swapped_in_picture else []
            sources = None
    if sources is not None and swapped_in_picture:  # a <picture> left open
        edits += sources
    if not edits:
        return content_html
    pieces: list[str] = []
    done = 0
    for begin, finish, text in sorted(edits):
        pieces += [content_html[done:begin], text]
        done = finish
    pieces.append(content_html[done:])
    return "".join(pieces)


def _replace_src(attrs: str, replacements: Mapping[str, str]) -> str | None:
    """The attribute text with ``src`` replaced and srcset dropped, or None when unchanged.

    Only the first ``src`` counts, as in browsers; it is written anew as `` src="..."``."""
    first = True

    def swap(raw: str, quote: str, _: None) -> str | None:
        nonlocal first
        new = replacements.get(attribute_url(unescape_attribute(raw))) if first else None
        first = False
        return None if new is None else f' src="{html.escape(new, quote=True)}"'

    swapped = edit_attributes(attrs, {"src": swap}, None, whole=True)
    return None if swapped is None else _without_srcset(swapped) or swapped


def _without_srcset(attrs: str) -> str | None:
    """The attribute text without :data:`DROPPED_WITH_SRC`, or None when it has none."""
    return edit_attributes(attrs, _DROPPING, None, whole=True)
