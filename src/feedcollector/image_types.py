"""What makes a downloaded body an image, and which: media types, signatures, extensions.

Pure: the downloader (:mod:`.images`) asks these for every answer. The bytes win over the
Content-Type where a format has a signature; the extension of an archived image's key comes
from the type, else from the URL.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from urllib.parse import urlsplit

EXTENSION_BY_TYPE: dict[str, str] = {
    "image/jpeg": "jpg",
    "image/jpg": "jpg",
    "image/pjpeg": "jpg",
    "image/png": "png",
    "image/x-png": "png",
    "image/apng": "png",
    "image/gif": "gif",
    "image/webp": "webp",
    "image/avif": "avif",
    "image/svg+xml": "svg",
    "image/bmp": "bmp",
    "image/x-bmp": "bmp",
    "image/x-ms-bmp": "bmp",
    "image/x-icon": "ico",
    "image/vnd.microsoft.icon": "ico",
    "image/tiff": "tiff",
    "image/heic": "heic",
    "image/heif": "heif",
    "image/jxl": "jxl",
}
EXTENSION_BY_SUFFIX: dict[str, str] = {
    "jpg": "jpg",
    "jpeg": "jpg",
    "jpe": "jpg",
    "png": "png",
    "apng": "png",
    "gif": "gif",
    "webp": "webp",
    "avif": "avif",
    "svg": "svg",
    "bmp": "bmp",
    "ico": "ico",
    "tif": "tiff",
    "tiff": "tiff",
    "heic": "heic",
    "heif": "heif",
    "jxl": "jxl",
}
NOT_IMAGE_TYPES = frozenset({"text/html", "application/xhtml+xml"})
"""Web pages (an error page, a login wall): refused unread, as are videos, sounds and fonts
(:func:`surely_not_an_image`). An answer of any other type is read, and its bytes decide:
images are served as ``text/plain`` or ``application/xml`` by misconfigured servers, and a
signature or an SVG root proves them."""
_NOT_IMAGE_KINDS = ("video/", "audio/", "font/")


def surely_not_an_image(declared: str) -> bool:
    """Whether a media type rules an image out before its body is read (up to the size
    limit: a video is not downloaded to be refused)."""
    return declared in NOT_IMAGE_TYPES or declared.startswith(_NOT_IMAGE_KINDS)


SIGNED_IMAGE_TYPES = frozenset(
    {
        "image/jpeg",
        "image/jpg",
        "image/pjpeg",
        "image/png",
        "image/x-png",
        "image/apng",
        "image/gif",
        "image/webp",
        "image/bmp",
        "image/x-bmp",
        "image/x-ms-bmp",
        "image/tiff",
        "image/avif",
        "image/heic",
        "image/heif",
        "image/x-icon",
        "image/vnd.microsoft.icon",
        "image/jxl",
        "image/svg+xml",
    }
)
"""Formats whose files always start with a signature :func:`sniff_image_type` knows (an SVG:
its root element), so a body of this declared type without one is not an image (an HTML page
behind a lying header)."""
ISO_MEDIA_TYPES = frozenset({"image/avif", "image/heic", "image/heif"})
"""Share the ``ftyp`` box, whose brands overlap: between these the header is believed."""
_BMP_HEADER_SIZES = frozenset({12, 40, 52, 56, 64, 108, 124})
_HEIF_BRANDS = frozenset({b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1"})


def media_type(content_type: str | None) -> str:
    """``"Image/PNG; charset=x"`` -> ``"image/png"``; missing -> ``""``."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def extension_for(content_type: str | None, url: str) -> str:
    """The extension from the Content-Type, else a known image suffix of the URL, else ``bin``."""
    by_type = EXTENSION_BY_TYPE.get(media_type(content_type))
    if by_type is not None:
        return by_type
    try:
        path = urlsplit(url).path
    except ValueError:  # e.g. an unbalanced "[" in the host
        return "bin"
    suffix = PurePosixPath(path).suffix.lower().lstrip(".")
    return EXTENSION_BY_SUFFIX.get(suffix, "bin")


def sniff_image_type(data: bytes) -> str | None:
    """The image media type the leading bytes prove, or None (used when the server gave none)."""
    head = data[:32]
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[4:8] == b"ftyp" and head[8:12] in (b"avif", b"avis"):
        return "image/avif"
    if head[4:8] == b"ftyp" and head[8:12] in _HEIF_BRANDS:
        return "image/heic"
    if head.startswith((b"\xff\x0a", b"\x00\x00\x00\x0cJXL \r\n\x87\n")):
        return "image/jxl"
    if head[:2] == b"BM" and int.from_bytes(head[14:18], "little") in _BMP_HEADER_SIZES:
        return "image/bmp"
    if head[:4] in (b"\x00\x00\x01\x00", b"\x00\x00\x02\x00") and head[4:6] != b"\x00\x00":
        return "image/x-icon"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "image/tiff"
    if _looks_like_svg(data[:SVG_HEAD_BYTES]):
        return "image/svg+xml"
    return None


def settle_image_type(declared: str, data: bytes) -> str | None:
    """The media type to store an image under, or None when the bytes are not an image.

    The bytes win over the header: a known signature decides (a PNG sent as image/jpeg is
    stored as .png), and a header naming a format that always has a signature, over bytes
    without one, is a lie. Other image types (``image/*``, ``image/x-tga``) keep their
    declared type, unless the bytes are markup: a web page.
    """
    sniffed = sniff_image_type(data)
    if sniffed is not None:
        if declared in ISO_MEDIA_TYPES and sniffed in ISO_MEDIA_TYPES:
            return declared
        return sniffed
    if not declared.startswith("image/") or declared in SIGNED_IMAGE_TYPES:
        return None
    if data[:64].lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<"):
        return None
    return declared


def cut_short(content_type: str, data: bytes) -> bool:
    """Whether an image's bytes end before its format says it does: PNG without its ``IEND``
    chunk, JPEG without an end-of-image marker, GIF without its trailer, WebP shorter than
    its RIFF size. Asked of a body whose end was only the connection closing (no length),
    which a connection cut early looks like. Lenient where files carry extra bytes: any
    ``IEND`` or end marker counts (a JPEG's EXIF thumbnail has one too, data appended after
    the image is fine), a GIF's trailer may have a few bytes after it."""
    if content_type == "image/png":
        return b"IEND" not in data
    if content_type == "image/jpeg":
        return b"\xff\xd9" not in data
    if content_type == "image/gif":
        return b";" not in data[-8:]
    if content_type == "image/webp":
        return len(data) < int.from_bytes(data[4:8], "little") + 8
    return False


SVG_HEAD_BYTES = 64 * 1024
"""How far into the bytes an SVG's root element is looked for. Editors write a prolog of
comments (a license) and a doctype of entities (Illustrator) before it: a 4 KiB one took a
valid SVG for a web page behind an image type, refused three times and failed for good."""
_SVG_ROOT = re.compile(
    rb"(?:\s++|<\?(?:(?!\?>).)*+\?>|<!--(?:(?!-->).)*+-->|<!doctype\s++svg(?:[^\[>]|\[[^\]]*+\])*+>)*+"
    rb"<(?:[a-z_][\w.-]*+:)?svg[\s/>]",
    re.DOTALL | re.IGNORECASE,
)
"""An SVG document: its root element is ``svg`` (after an XML declaration, comments, an SVG
doctype). A web page with an inline ``<svg>`` (an error page's icon) is not one. Every part
matches one way only and never gives back (possessive): a body of many comments took time
doubling with each."""


def _looks_like_svg(head: bytes) -> bool:
    return _SVG_ROOT.match(head.removeprefix(b"\xef\xbb\xbf")) is not None
