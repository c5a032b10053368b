"""Image archiving helpers: the object key and the guarded download.

The database side (claiming tasks, recording success or failure) lives in the store; this
module only decides names and fetches bytes, refusing anything that is not an image (what is
one: :mod:`.image_types`).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from http import HTTPStatus

import httpx

from .errors import ImageError, ImageNotTried
from .fetch import MIB, status_text
from .http_hints import response_hints, retry_after, wait_words
from .httpbody import (
    NOT_TRIED,
    TransferError,
    Unreachable,
    describe_http_error,
    endpoint,
    ends_at_close,
    read_body,
    refuse_unreachable,
    remember_unreachable,
)
from .image_types import (
    cut_short,
    extension_for,
    media_type,
    settle_image_type,
    surely_not_an_image,
)
from .netguard import IMAGE_ACCEPT, NetGuard
from .netguard import make_image_client as make_image_client
from .redirects import RedirectChain, browser_slashes, location_target, require_web_scheme
from .timestamps import utc_now

RETRY_AFTER_STATUSES = frozenset({429, 503})
"""Answers whose ``Retry-After`` says when the image server wants the next request."""


class ImageRetryLater(ImageError):
    """A failed attempt whose server (429/503) asked to wait ``wait`` before the next one: the
    task's next attempt comes no sooner (:data:`.store_images.MAX_RETRY_AFTER` caps it)."""

    def __init__(self, message: str, wait: timedelta) -> None:
        super().__init__(message)
        self.wait = wait


@dataclass(frozen=True, slots=True)
class ImageLimits:
    """How long and how much one image download may take, and whether the guard is lifted."""

    timeout_s: float = 30.0
    deadline_s: float = 120.0
    max_bytes: int = 25 * MIB
    max_redirects: int = 5
    allow_private_addresses: bool = False


@dataclass(frozen=True, slots=True)
class DownloadedImage:
    """An accepted image: its bytes, its media type (sniffed when the server gave none)."""

    data: bytes
    content_type: str
    ext: str
    final_url: str


IMAGE_PREFIX = "images/"
"""Where archived images live: ``images/{feed_id}/{md5(guid)[:8]}/{position}.{ext}``."""


def guid_digest(guid: str, *, full: bool = False) -> str:
    """The item's part of its object keys: ``md5(guid)[:8]``, or all 32 hex digits if ``full``."""
    digest = hashlib.md5(guid.encode("utf-8"), usedforsecurity=False).hexdigest()
    return digest if full else digest[:8]


def object_key(feed_id: str, guid: str, position: int, ext: str, *, full: bool = False) -> str:
    """``images/{feed_id}/{md5(guid)[:8]}/{position}.{ext}``, the layout the seed prescribes.

    Two GUIDs of a feed can share the 8 hex digits, so this key may already belong to another
    item: then the image goes under ``full`` md5 (32 hex digits) instead, see
    :func:`feedcollector.store_images.image_key`. Readers follow ``image_tasks.r2_key``.
    """
    return f"{IMAGE_PREFIX}{feed_id}/{guid_digest(guid, full=full)}/{position}.{ext}"


async def download_image(
    client: httpx.AsyncClient,
    url: str,
    *,
    limits: ImageLimits,
    unreachable: Unreachable | None = None,
) -> DownloadedImage:
    """Download one image or raise ImageError saying why it was refused.

    Use a client from :func:`feedcollector.netguard.make_image_client`: it performs the full
    private-address guard (DNS, every redirect, connect time). Here, unless private addresses
    are allowed, every hop is also refused early when its host literally names one.

    An endpoint that takes no connection is added to ``unreachable``, and a hop to one in it is
    not sent: ImageNotTried (see :data:`.httpbody.Unreachable`). So is the failure of an
    attempt already on its way when another found its endpoint dead: up to ``[images]
    concurrency`` of them were, and each charged its image an attempt.
    """
    literal_check = None if limits.allow_private_addresses else NetGuard().check_literal
    dead: Unreachable = {} if unreachable is None else unreachable

    def check_url(hop: httpx.URL) -> None:
        if literal_check is not None:
            literal_check(hop)
        refuse_unreachable(dead, hop)

    try:
        async with asyncio.timeout(limits.deadline_s):
            response = await open_response(
                client,
                url,
                headers={"Accept": IMAGE_ACCEPT},
                timeout_s=limits.timeout_s,
                max_redirects=limits.max_redirects,
                check_url=check_url,
            )
            wait = _asked_wait(response)
            try:
                limited = response.status_code == HTTPStatus.TOO_MANY_REQUESTS
                if limited and not _rest_host(dead, response.url, wait):
                    raise ImageNotTried(
                        f"image: {response.url} answered 429 Too Many Requests too, on its way "
                        "when another image of the host met it first (that one pays the attempt)",
                        wait,
                    )
                return await _accept_image(response, limits, wait)
            finally:
                await response.aclose()
    except TimeoutError as exc:
        raise ImageError(
            f"image: {url} did not finish within the {limits.deadline_s:g} s deadline"
        ) from exc
    except TransferError as exc:
        not_tried = exc.kind == NOT_TRIED or exc.unreachable in dead
        remember_unreachable(dead, exc)
        if not_tried:
            raise ImageNotTried(f"image: {exc.detail}", exc.retry_after) from exc
        raise ImageError(f"image: {exc.detail}") from exc


def _asked_wait(response: httpx.Response) -> timedelta | None:
    """How long a 429 or 503 asks to wait (Retry-After; an HTTP-date is measured against the
    server's Date)."""
    if response.status_code not in RETRY_AFTER_STATUSES:
        return None
    return retry_after(response_hints(response.headers), utc_now())


def _rest_host(dead: Unreachable, url: httpx.URL, wait: timedelta | None) -> bool:
    """A 429 speaks for the whole host: its other images are not requested this cycle (handed
    back uncharged, as a dead host's), so a rate-limited CDN is asked once, and one image
    pays the attempt instead of every image of the page (those already on their way, up to
    ``[images] concurrency``, meet the 429 too and go uncharged). With a Retry-After, they
    wait that long (:class:`.ImageNotTried` carries it), not just for the next cycle.
    Returns whether this 429 was the host's first."""
    where = endpoint(url)
    detail = f"{where} answered 429 Too Many Requests"
    error = TransferError(NOT_TRIED, detail, 429, unreachable=where, retry_after=wait)
    return dead.setdefault(where, error) is error


async def _accept_image(
    response: httpx.Response, limits: ImageLimits, wait: timedelta | None
) -> DownloadedImage:
    """The image, or ImageError saying why not (ImageRetryLater when the server asked to
    ``wait``)."""
    final_url = str(response.url)
    status = response.status_code
    if not 200 <= status < 300:
        refused = (
            f"image: HTTP {status} {status_text(status, response.reason_phrase)} from {final_url}"
        )
        if wait is not None:
            raise ImageRetryLater(f"{refused} (the server asks to wait {wait_words(wait)})", wait)
        raise ImageError(refused)
    if status == HTTPStatus.PARTIAL_CONTENT and not whole_range(response.headers):
        raise ImageError(
            f"image: {final_url} answered 206 Partial Content "
            f"({response.headers.get('Content-Range') or 'no Content-Range'}) to a request for "
            "the whole image: only a part of it, not stored"
        )
    declared = media_type(response.headers.get("Content-Type"))
    if surely_not_an_image(declared):
        raise ImageError(f"image: {final_url} answered with {declared}, not an image")
    data = await read_body(response, max_bytes=limits.max_bytes)
    if not data:
        raise ImageError(f"image: {final_url} answered with an empty body")
    content_type = settle_image_type(declared, data)
    if content_type is None:
        if declared.startswith("image/"):
            raise ImageError(
                f"image: {final_url} declares {declared} but its bytes are not an image "
                f"(they start with {data[:16]!r})"
            )
        raise ImageError(
            f"image: {final_url} answered with {declared or 'no Content-Type'} and its bytes "
            "are not a known image format"
        )
    if ends_at_close(response.headers) and cut_short(content_type, data):
        raise ImageError(
            f"image: {final_url} ended before its {content_type} data did ({len(data)} bytes; "
            "the connection closed early); the next attempt downloads it again"
        )
    return DownloadedImage(
        data=data,
        content_type=content_type,
        ext=extension_for(content_type, final_url),
        final_url=final_url,
    )


_CONTENT_RANGE_RE = re.compile(r"\s*bytes\s+0-(\d{1,18})/(\d{1,18})\s*", re.IGNORECASE)


def whole_range(headers: httpx.Headers) -> bool:
    """Whether a 206's ``Content-Range`` spans the whole image (``bytes 0-70/71``). No Range
    is ever asked for, yet a misbehaving server or cache answers 206 with a slice: stored, it
    was a success never fetched again, a broken image for good."""
    match = _CONTENT_RANGE_RE.fullmatch(headers.get("Content-Range", ""))
    return match is not None and int(match[1]) + 1 == int(match[2])


async def open_response(
    client: httpx.AsyncClient,
    url: str,
    *,
    headers: Mapping[str, str],
    timeout_s: float,
    max_redirects: int,
    check_url: Callable[[httpx.URL], None] | None = None,
) -> httpx.Response:
    """Send GET, following redirects by hand; the caller must ``aclose()`` the streaming answer.

    Every hop obeys :class:`~.redirects.RedirectChain` and passes ``check_url``.
    """
    current = _valid_url(
        lambda: httpx.URL(browser_slashes(url)), "protocol", f"{url!r} is not a valid URL"
    )
    require_web_scheme(current.scheme, f"{url} is not an http(s) URL")
    chain = RedirectChain(str(current), max_redirects)
    for _ in chain.hops():
        if check_url is not None:
            check_url(current)
        response = await _send(client, current, headers, timeout_s)
        if not 300 <= response.status_code < 400 or response.status_code == 304:
            return response
        await response.aclose()
        location = chain.location(
            response.status_code, str(current), response.headers.get("Location")
        )
        target = _redirect_target(current, location, response.headers.encoding)
        chain.visit(str(current), str(target), target.scheme)
        current = target
    raise chain.too_long(str(current))


def _redirect_target(current: httpx.URL, location: str, encoding: str) -> httpx.URL:
    """``location`` (decoded by httpx in ``encoding``) joined to ``current``."""
    what = f"{current} redirects to an invalid URL {location!r}"
    target = location_target(location.encode(encoding))
    return _valid_url(lambda: current.join(target), "redirect", what)


def _valid_url(make: Callable[[], httpx.URL], kind: str, what: str) -> httpx.URL:
    """The URL ``make`` builds, its host decoded once here: httpx reads an IDNA host lazily,
    and a malformed one (``xn--``) raised out of the image stage on first use, as a port over
    65535 did when connecting."""
    try:
        url = make()
        url.host  # noqa: B018 (decodes the host)
    except (httpx.InvalidURL, ValueError) as exc:  # idna's errors are UnicodeErrors
        raise TransferError(kind, f"{what} ({exc})") from exc
    if url.port is not None and not 0 < url.port < 65536:  # httpx takes any; connect refuses
        raise TransferError(kind, f"{what} (port {url.port} is out of range)")
    return url


async def _send(
    client: httpx.AsyncClient, url: httpx.URL, headers: Mapping[str, str], timeout_s: float
) -> httpx.Response:
    request = client.build_request("GET", url, headers=headers, timeout=httpx.Timeout(timeout_s))
    try:
        return await client.send(request, stream=True, follow_redirects=False)
    except httpx.HTTPError as exc:
        raise describe_http_error(exc, str(url), timeout_s) from exc
    except httpx.InvalidURL as exc:
        # httpx prepares the next request of a redirect even when it is not following it, and
        # a Location it cannot rebuild (``data:...``, ``javascript:...``) fails right there.
        raise TransferError(
            "redirect",
            f"redirect from {url} to a Location that is no usable URL refused ({exc}): "
            "only http and https are supported",
        ) from exc
