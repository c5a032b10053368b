"""When two feed addresses are one feed: when they make the same request.

The feeds file's duplicate check, ``add``, ``import-opml`` and every command that takes a
feed's URL compare addresses by the request the fetch sends for them, as yarl (so aiohttp)
writes it: ``/%66eed`` is sent as ``/feed``, ``bücher.example`` as ``xn--bcher-kva.example``,
``https://host:443/`` as ``https://host/``; each pair fetched one document into two feeds,
every item stored twice. The host gate (:func:`.politeness.host_key`) reads hosts through yarl
too, so the two never disagree about a server.

Only the comparison changes: a feed's id still derives from its URL as the file first wrote it
(:func:`.schedule.feed_id_for`), so no stored id, object key or backup moves. A URL respelled
in the file takes over its row (:func:`.schedule.plan_feed_sync`).
"""

from __future__ import annotations

from urllib.parse import urlsplit

import yarl


def feed_url_key(url: str) -> str:
    """The request ``url`` makes: scheme and host in lower case, the host as IDNA, no default
    port, ``%``-escapes of letters, digits and ``-._~`` read as those characters, no
    ``#fragment`` (no request carries it), an empty path as ``/``. A user name and password
    keep their case: they are sent as written, and two accounts' feeds on one server are two
    feeds. Text yarl cannot read is compared by :func:`spelled_url_key`."""
    try:
        parsed = yarl.URL(url)
        if not parsed.raw_host:
            return spelled_url_key(url)
        head, mark, query = str(parsed.with_fragment(None)).partition("?")
    except (ValueError, TypeError, IndexError):  # IndexError: yarl on ``http://]a[@``
        return spelled_url_key(url)
    if head.count("/") == 2:  # "http://host" asks for "/" as "http://host/" does
        head += "/"
    return f"{head}{mark}{query}"


def spelled_url_key(url: str) -> str:
    """:func:`feed_url_key` from the text as written (scheme and host ignore case, no
    fragment). Text urllib cannot split either (a bracket left open, as a typed command
    argument may have) is compared as written: the file lists no such address."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    userinfo, at, host = parts.netloc.rpartition("@")
    return parts._replace(
        scheme=parts.scheme.lower(), netloc=f"{userinfo}{at}{host.lower()}", fragment=""
    ).geturl()


def password_free_key(url: str) -> str | None:
    """:func:`feed_url_key` without the password, for a URL that has one, else None: a feed
    whose password the file changes (a rotated credential) stays the feed it was
    (:func:`.schedule.plan_feed_sync`), where another user name is another account's feed."""
    try:
        parsed = yarl.URL(url)
        if parsed.password is None or not parsed.raw_host:
            return None
        return feed_url_key(str(parsed.with_password(None)))
    except (ValueError, TypeError, IndexError):
        return None
