"""Text and markup values of lxml elements, for the XML fast path of the parse stage.

Text values: entities resolved. An entity the parser left unresolved (a document whose external
DTD is not loaded, e.g. RSS 0.91's) becomes its HTML character when it has one and stays
``&name;`` otherwise: characters are never dropped. Markup values (content, description,
summary) are the element's text, i.e. the raw HTML for CDATA or escaped HTML; when the element
holds real child elements (inline XHTML, Atom ``type="xhtml"``) they are serialized back, without
the XHTML namespace declarations lxml would otherwise repeat on every top-level element; a text
construct (Atom ``type="text"``, Media RSS ``plain``) is escaped into HTML
(:func:`typed_markup`). Markup values come repaired (:mod:`.text_repair`); titles, links and
GUIDs are repaired later, by :func:`.parse_common.finish_values`.
"""

from __future__ import annotations

import binascii
import re
from copy import deepcopy
from html import escape
from html.entities import html5

from lxml import etree

from .text_repair import may_need_repair, readable, repaired

XHTML_NAMESPACE = "http://www.w3.org/1999/xhtml"


def text_of(element: etree._Element) -> str:
    """The text content of ``element``: entities resolved, comments and PIs left out."""
    if len(element) == 0:
        return element.text or ""
    parts = [element.text or ""]
    for child in element:
        tag = child.tag
        if isinstance(tag, str):
            parts.append(text_of(child))
        elif tag is etree.Entity:
            parts.append(entity_value(child))
        parts.append(child.tail or "")
    return "".join(parts)


def markup_of(element: etree._Element) -> str:
    """The element's value as HTML: its text, or its serialized children if it has any;
    repaired (:mod:`.text_repair`)."""
    if len(element) == 0 or not any(isinstance(child.tag, str) for child in element):
        text = text_of(element)
        return text if text.isascii() else _readable_text(element, text)
    return readable(serialize_inner(element))


LXML_BYTES_FROM = 512
"""Characters from which a text is checked on the UTF-8 bytes lxml serializes (a copy, about
ten times cheaper than encoding a long str); shorter ones are encoded."""


def _readable_text(element: etree._Element, text: str) -> str:
    """``text``, the text of ``element`` (not ASCII), repaired."""
    if len(element) == 0 and len(text) >= LXML_BYTES_FROM:
        utf8 = etree.tostring(element, method="text", encoding="utf-8", with_tail=False)
    else:
        utf8 = text.encode("utf-8", "surrogatepass")
    return repaired(text, utf8) if may_need_repair(utf8) else text


def from_base64(text: str) -> str:
    """Base64 text decoded as UTF-8 (bad sequences replaced); ``text`` itself if it is not
    base64."""
    try:
        return binascii.a2b_base64(text.encode("ascii")).decode("utf-8", "replace")
    except (binascii.Error, UnicodeEncodeError):
        return text


def serialize_inner(container: etree._Element) -> str:
    """The children of ``container`` as markup, without the XHTML/parent namespace noise."""
    inner = _inner_as_serialized(container)
    return _inner_renamed(container) if inner is None else inner


def _inner_renamed(container: etree._Element) -> str:
    """:func:`serialize_inner` in every case: a copy with the XHTML and the container's own
    namespace taken off the tags and the declarations left unused dropped."""
    copy = deepcopy(container)
    own_namespace = etree.QName(container).namespace
    for node in copy.iter():
        tag = node.tag
        if isinstance(tag, str) and tag.startswith("{"):
            namespace, _, local = tag[1:].partition("}")
            if namespace in (XHTML_NAMESPACE, own_namespace):
                node.tag = local
    etree.cleanup_namespaces(copy)
    parts = [escape(copy.text or "", quote=False)]
    parts.extend(etree.tostring(child, encoding="unicode", with_tail=True) for child in copy)
    return "".join(parts)


_XML_ATTRIBUTE = "{http://www.w3.org/XML/1998/namespace}"
_PREFIXED_NAME_RE = re.compile(r""":[^\s<>"'=/!?]+[=\s/>]""")
"""In markup serialized by libxml2, what may be a prefixed name: a colon, a local name and
what ends a tag's or an attribute's name (a URL's ``https://`` is not; ``10:30 am`` in a text
merely costs the renamed copy). It starts with a literal, so the engine skips to each colon
in C, where an alternation tried at every character took 15 us for 1 KB."""


def _inner_as_serialized(container: etree._Element) -> str | None:
    """What :func:`_inner_renamed` returns, cut from one serialization of ``container``, when
    that is the same (several times cheaper than the renamed copy): the container has no
    prefix and no namespaced attribute but ``xml:``, and nothing below it declares a namespace
    or uses a prefix, i.e. every element is in the container's own namespace (the usual
    ``<div xmlns="...xhtml">``). None otherwise, also when text merely looks like such noise.
    The start tag ends at the first ``>``: attribute values have it escaped, and libxml2
    refuses a namespace name holding one."""
    if container.prefix is not None or "\r" in (container.text or ""):
        return None  # libxml2 writes a CR as "&#13;", escape() keeps it
    if any(key.startswith("{") and not key.startswith(_XML_ATTRIBUTE) for key in container.attrib):
        return None  # its own xml:base or xml:lang is no declaration, and not serialized
    serialized = etree.tostring(container, encoding="unicode", with_tail=False)
    if serialized.endswith("/>"):
        return ""
    tag = container.tag
    inner = serialized[serialized.index(">") + 1 : -(len(tag) - tag.find("}") + 2)]
    if "xmlns" in inner or _PREFIXED_NAME_RE.search(inner):
        return None  # a declaration below the container, a prefixed tag or attribute
    return inner


def xhtml_container(element: etree._Element) -> etree._Element:
    """The ``<div>`` an Atom ``type="xhtml"`` construct must wrap its content in, when it is
    the whole content; else the construct itself, so that nothing after a first ``<div>``
    (a second one, a ``<p>``, text) is lost, as feedparser keeps it too."""
    children = [child for child in element if isinstance(child.tag, str)]
    if len(children) != 1 or etree.QName(children[0]).localname != "div":
        return element
    (div,) = children
    if (element.text or "").strip() or (div.tail or "").strip():
        return element
    return div


def entity_value(entity: etree._Element) -> str:
    """An entity lxml left unresolved: its HTML character if it has one, else ``&name;``."""
    name = str(entity.text or "").strip("&;")
    return html5.get(f"{name};", f"&{name};")


def atom_text(element: etree._Element) -> str:
    """A title: its text (HTML titles keep their markup as text); XHTML titles' text content."""
    if element.get("type") == "xhtml":
        return text_of(xhtml_container(element))
    return text_of(element)


def typed_markup(element: etree._Element) -> str | None:
    """An Atom content or summary (or a Media RSS or iTunes description, text constructs too)
    as HTML, by its ``type``: XHTML serialized, HTML as it is, text escaped (:func:`text_html`).
    Out-of-line content (``src=``) has none; Atom 0.3's ``mode="base64"`` is decoded (as
    feedparser does; kept as written if it is not base64)."""
    if element.get("src") is not None and not text_of(element).strip():
        return None
    kind = element.get("type")
    if kind == "xhtml":
        return readable(serialize_inner(xhtml_container(element)))
    value = (
        readable(from_base64(text_of(element)))
        if element.get("mode") == "base64"
        else markup_of(element)
    )
    if kind is None or kind in TEXT_TYPES:
        return text_html(value, typed=kind is not None)
    return value


def text_html(value: str, *, typed: bool) -> str:
    """A text construct's value as HTML: escaped, so ``a < b`` reads as written and a
    ``<script>`` in a text is no script. Untyped (text by default), it is taken as HTML when
    it looks like HTML (:func:`looks_like_html`): publishers who leave the type out often
    mean HTML."""
    return value if not typed and looks_like_html(value) else escape(value, quote=False)


TEXT_TYPES = frozenset(("text", "text/plain", "plain"))
"""Atom's, Atom 0.3's and Media RSS's names for plain text."""

_HTML_SIGN_RE = re.compile(r"</\w+>|&#?\w+;|<(?:br|hr|img)\b[^<>]*>", re.IGNORECASE)
_TAG_NAME_RE = re.compile(r"</?(\w+)")
_CODE_TAGS = frozenset(("script", "style"))
"""Tags that make a text of unknown type text: one written about (a tutorial's
``<script>alert(1)</script>``) more often than one meant to run."""


def looks_like_html(value: str) -> bool:
    """Whether a text of unknown type is HTML: it has a closing tag, an entity or a line
    break or image (feedparser's test, which wants the first two), no script or style, and
    every named entity is an HTML one. Plain text with a stray ``<`` or ``&`` is not."""
    if "<" not in value and "&" not in value:
        return False
    if _HTML_SIGN_RE.search(value) is None:
        return False
    if any(name.lower() in _CODE_TAGS for name in _TAG_NAME_RE.findall(value)):
        return False
    return all(f"{name};" in html5 for name in re.findall(r"&(\w+);", value))
