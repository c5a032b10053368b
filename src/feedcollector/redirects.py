"""The rules of a redirect chain followed by hand, whatever HTTP client follows it.

Feeds are fetched with aiohttp and images with httpx (its transport carries the image
downloader's address guard); both follow redirects themselves so that every hop is checked:
http(s) only, no URL visited twice, at most ``max_redirects`` hops.
"""

from __future__ import annotations

import urllib.parse

from .httpbody import TransferError

WEB_SCHEMES = frozenset({"http", "https"})
_URL_SAFE = "".join(chr(code) for code in range(0x21, 0x7F))
"""Printable ASCII, ``%`` included: what a Location may hold as it is."""


def location_target(location: bytes) -> str:
    """A Location header's bytes as browsers follow them: those beyond printable ASCII
    percent-encoded (a Latin-1 ``é``, one byte E9, stays ``%E9``; each client decodes the
    header its own way: aiohttp keeps such bytes as half surrogate pairs, which yarl dropped,
    httpx reads them as Latin-1, which it encoded again as UTF-8: both redirected elsewhere),
    and backslashes read as slashes (:func:`browser_slashes`)."""
    text = (
        location.decode("ascii")
        if location.isascii()
        else urllib.parse.quote(location, safe=_URL_SAFE)
    )
    return browser_slashes(text)


def browser_slashes(url: str) -> str:
    """``url`` with the backslashes before its query or fragment read as slashes, as browsers
    read an http(s) URL: ``images\\a.jpg`` (written on Windows) loads ``images/a.jpg`` in a
    browser, while the server was asked for ``images\\a.jpg`` itself: a 404 three times over
    (IIS alone reads it as a slash)."""
    if "\\" not in url:
        return url
    end = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=len(url))
    return url[:end].replace("\\", "/") + url[end:]


def require_web_scheme(scheme: str, context: str) -> None:
    if scheme not in WEB_SCHEMES:
        raise TransferError("scheme", f"{context}: only http and https are supported")


class RedirectChain:
    """The URLs one request has visited so far."""

    def __init__(self, url: str, max_redirects: int) -> None:
        self.start = url
        self.max_redirects = max_redirects
        self._visited = {url}

    def hops(self) -> range:
        """One request, plus one per redirect allowed."""
        return range(self.max_redirects + 1)

    def location(self, status: int, current: str, location: str | None) -> str:
        """The Location to join against ``current``: refused when there is none, or an empty
        one (``Location: `` from a script whose target was empty: joined, it named ``current``
        itself and the failure read as a redirect loop)."""
        if location is None or not location.strip():
            raise TransferError(
                "redirect",
                f"HTTP {status} from {current} without a Location to follow",
                status=status,
            )
        return location

    def visit(self, current: str, target: str, scheme: str) -> None:
        """Accept the hop ``current -> target`` or refuse it (scheme, loop)."""
        require_web_scheme(scheme, f"redirect from {current} to {target} refused")
        if target in self._visited:
            raise TransferError("redirect", f"redirect loop: {current} leads back to {target}")
        self._visited.add(target)

    def too_long(self, last: str) -> TransferError:
        return TransferError(
            "redirect",
            f"more than {self.max_redirects} redirects starting at {self.start} (last: {last})",
        )
