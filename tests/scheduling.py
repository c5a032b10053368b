"""Helpers of the scheduling tests: a project with politeness on, direct looks at its rows,
and feed routes that record when the server was busy with each request."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from feedcollector import store_sync
from feedcollector.collector import open_collector
from feedcollector.config import load_feeds, load_settings
from feedcollector.timestamps import format_timestamp

from .feedserver import FeedServer
from .samples import Clock, write_project
from .test_pipeline import Project


def schedule_toml(host_gap: str = "1s", **keys: str) -> str:
    """A ``[schedule]`` section: politeness on (the default gap), jitter off unless given."""
    values = {"host_gap": f'"{host_gap}"', "jitter": "0", **keys}
    return "[schedule]\n" + "".join(f"{key} = {value}\n" for key, value in values.items())


def polite_project(
    folder: Path, feeds: list[Any], *, host_gap: str = "1s", concurrency: int = 5, **keys: str
) -> Project:
    """A project in ``folder`` with politeness on; ``keys`` are more ``[schedule]`` keys."""
    config = write_project(
        folder,
        feeds,
        extra_toml=f"[fetch]\nconcurrency = {concurrency}\n",
        schedule_toml=schedule_toml(host_gap, **keys),
    )
    return Project(folder, config, Clock())


def execute(project: Project, sql: str, *params: Any) -> None:
    with sqlite3.connect(project.folder / "collector.db") as conn:
        conn.execute(sql, params)


def register(project: Project) -> None:
    """Sync the feeds file into the table without fetching (to arrange rows first)."""

    async def go() -> None:
        settings = load_settings(project.config)
        async with open_collector(settings, clock=project.clock) as collector:
            await store_sync.sync_feeds(
                collector.db, load_feeds(settings.feeds_file), project.clock()
            )

    asyncio.run(go())


def claim_first(project: Project, urls: list[str], due: datetime) -> None:
    """Make these feeds the first claimed (due earlier than the others)."""
    for url in urls:
        execute(
            project, "UPDATE feeds SET next_fetch_at = ? WHERE url = ?", format_timestamp(due), url
        )


def stamp(moment: datetime) -> str:
    return format_timestamp(moment)


@dataclass(frozen=True)
class Served:
    """When the server started a request and when it began sending the last bytes."""

    server: str
    path: str
    start: float
    end: float


class BusyLog:
    """Records :class:`Served` for the routes made with :meth:`feed` (thread-safe)."""

    def __init__(self) -> None:
        self.served: list[Served] = []
        self._lock = threading.Lock()

    def feed(self, server: FeedServer, path: str, body: bytes, *, delay_s: float = 0.0) -> str:
        name = server.url("")

        def handle(request: BaseHTTPRequestHandler) -> None:
            start = time.time()
            time.sleep(delay_s)
            request.send_response(200)
            request.send_header("Content-Type", "application/rss+xml")
            request.send_header("Content-Length", str(len(body)))
            request.end_headers()
            end = time.time()  # before the body: the client cannot be done any earlier
            with self._lock:
                self.served.append(Served(name, path, start, end))
            request.wfile.write(body)

        return server.route(path, handler=handle)

    def of(self, server: FeedServer) -> list[Served]:
        with self._lock:
            return sorted(
                (s for s in self.served if s.server == server.url("")), key=lambda s: s.start
            )

    def most_at_once(self) -> int:
        with self._lock:
            edges = sorted([(s.start, 1) for s in self.served] + [(s.end, -1) for s in self.served])
        busy = peak = 0
        for _, change in edges:
            busy += change
            peak = max(peak, busy)
        return peak
