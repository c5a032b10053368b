"""Real bytes for tests: RSS/Atom documents in any encoding, and a genuine PNG image."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape


@dataclass(frozen=True)
class Entry:
    title: str
    guid: str | None = None
    link: str | None = None
    pub_date: str | None = "Mon, 02 Mar 2026 08:00:00 GMT"
    description: str | None = None
    content: str | None = None


def rss(
    entries: Sequence[Entry],
    *,
    title: str = "Test feed",
    link: str = "https://blog.example/",
    encoding: str = "utf-8",
    declare: bool = True,
) -> bytes:
    """An RSS 2.0 document encoded with ``encoding`` (declared in the prolog when ``declare``)."""
    parts = []
    for entry in entries:
        fields = [f"<title>{escape(entry.title)}</title>"]
        if entry.guid is not None:
            fields.append(f"<guid>{escape(entry.guid)}</guid>")
        if entry.link is not None:
            fields.append(f"<link>{escape(entry.link)}</link>")
        if entry.pub_date is not None:
            fields.append(f"<pubDate>{escape(entry.pub_date)}</pubDate>")
        if entry.description is not None:
            fields.append(f"<description><![CDATA[{entry.description}]]></description>")
        if entry.content is not None:
            fields.append(f"<content:encoded><![CDATA[{entry.content}]]></content:encoded>")
        parts.append("<item>" + "".join(fields) + "</item>")
    prolog = f'<?xml version="1.0" encoding="{encoding}"?>\n' if declare else ""
    text = (
        f'{prolog}<rss version="2.0" xmlns:content="http://purl.org/rss/1.0/modules/content/">'
        f"<channel><title>{escape(title)}</title><link>{escape(link)}</link>"
        + "".join(parts)
        + "</channel></rss>"
    )
    return text.encode(encoding)


def png(width: int = 2, height: int = 2) -> bytes:
    """A valid PNG of the given size (grey pixels)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    raw = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def write_project(
    folder: Path,
    feeds: Sequence[str | dict[str, str]],
    *,
    allow_private_images: bool = True,
    extra_toml: str = "",
) -> Path:
    """A config file plus a feeds file in ``folder``; returns the config path."""
    lines = ["feeds:"]
    for feed in feeds:
        if isinstance(feed, str):
            lines.append(f"  - url: {feed}")
        else:
            lines.append("  - " + "\n    ".join(f"{k}: {v}" for k, v in feed.items()))
    (folder / "feeds.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = folder / "feedcollector.toml"
    config.write_text(
        'feeds_file = "feeds.yaml"\n'
        '[database]\nbackend = "sqlite"\npath = "collector.db"\n'
        '[storage]\nbackend = "local"\npath = "objects"\n'
        f"[images]\nallow_private_addresses = {'true' if allow_private_images else 'false'}\n"
        + extra_toml,
        encoding="utf-8",
    )
    return config
