"""The baseline: what a typical feedparser collector does, for the CPU-per-new-item comparison.

Run as ``python -m benchmarks.baseline URLS_FILE DB_PATH``: for each feed, a conditional GET
(httpx, like ours), ``feedparser.parse`` with its defaults, then per entry one ``SELECT`` to
see whether the GUID is known and one ``INSERT`` if not, and a commit per feed. This is the
shape of most self-hosted collectors (and of the seed's peers). It prints one JSON line with
what it did, so the driver can check both collectors stored the same number of items.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from pathlib import Path

import feedparser
import httpx

SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    id INTEGER PRIMARY KEY,
    feed_url TEXT NOT NULL,
    guid TEXT NOT NULL,
    link TEXT,
    title TEXT,
    pub_date TEXT,
    content_html TEXT,
    created_at TEXT NOT NULL,
    UNIQUE (feed_url, guid)
);
"""


def collect(urls: list[str], db_path: Path) -> dict[str, int]:
    """One cycle over ``urls``; returns counters."""
    connection = sqlite3.connect(db_path)
    connection.executescript(SCHEMA)
    counts = {"feeds": 0, "entries": 0, "new_items": 0}
    with httpx.Client(timeout=30.0) as client:
        for url in urls:
            response = client.get(url)
            if response.status_code != 200:
                continue
            result = feedparser.parse(
                response.content,
                response_headers={"content-type": response.headers.get("content-type", "")},
            )
            counts["feeds"] += 1
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            for entry in result.entries:
                counts["entries"] += 1
                guid = entry.get("id") or entry.get("link") or entry.get("title", "")
                known = connection.execute(
                    "SELECT id FROM items WHERE feed_url = ? AND guid = ?", (url, guid)
                ).fetchone()
                if known is not None:
                    continue
                content = entry.get("content")
                html = content[0].get("value") if content else entry.get("summary")
                parsed = entry.get("published_parsed") or entry.get("updated_parsed")
                connection.execute(
                    "INSERT INTO items (feed_url, guid, link, title, pub_date, content_html, "
                    "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        url,
                        guid,
                        entry.get("link"),
                        entry.get("title"),
                        time.strftime("%Y-%m-%dT%H:%M:%SZ", parsed) if parsed else stamp,
                        html,
                        stamp,
                    ),
                )
                counts["new_items"] += 1
            connection.commit()
    connection.close()
    return counts


def main() -> None:
    urls_file, db_path = sys.argv[1], sys.argv[2]
    urls = [line for line in Path(urls_file).read_text().splitlines() if line.strip()]
    print(json.dumps(collect(urls, Path(db_path))))


if __name__ == "__main__":
    main()
