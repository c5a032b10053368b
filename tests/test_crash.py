"""Faults: the collector killed at many points of a cycle, stopped politely, or short of disk.

The collector runs as the real command (a subprocess) against a loopback server with many
feeds, items and images. It is killed with SIGKILL at varied moments: after a given number of
requests reached the server, while a slow server holds a feed or an image download, and at
times around the commit of a feed of 3000 items. After each kill the files must be consistent
(SQLite's own check; a feed's items all there or none; no duplicates; no image task without its
item; every object under its final key whole; nothing charged to an image for the crash), and
one more cycle, once the dead collector's leases have expired, must complete the work.

SIGTERM must let the in-flight feeds finish and write their state, hand the rest back, and
exit in bounded time. A full disk (a real tmpfs where this machine lets the test mount one,
else a file-size limit the kernel enforces) and a read-only database must give a clear error
and no partial state.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from feedcollector.backends.local import LocalObjectStore
from feedcollector.collector import open_collector
from feedcollector.config import load_settings
from feedcollector.image_stage import image_lease
from feedcollector.pipeline import run_cycle
from feedcollector.report import CycleReport
from feedcollector.schedule import feed_id_for
from feedcollector.spill import content_key
from feedcollector.timestamps import utc_now

from .feedserver import FeedServer, Route
from .samples import Entry, rss, write_project

MIB = 2**20
EXIT_LIMIT_S = 60.0
"""Generous "did not hang" bound for a collector asked to stop."""
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
LEASES_EXPIRED = image_lease(64, 8, timedelta(minutes=2)) + timedelta(minutes=1)
"""Past a killed collector's leases at the default settings: a feed's last 15 minutes, a page
of image tasks' (64 at concurrency 8, each within the 2-minute deadline) 32."""


# --- the site: what the server serves, kept to check the files against ----------------------------


@dataclass
class Site:
    server: FeedServer
    bodies: dict[str, bytes] = field(default_factory=dict)
    """Feed URL -> the body served."""
    guids: dict[str, list[str]] = field(default_factory=dict)
    images: dict[str, bytes] = field(default_factory=dict)
    """Image URL -> the bytes served."""
    images_of: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    """(feed URL, guid) -> the item's image URLs in order."""
    spilled: dict[str, bytes] = field(default_factory=dict)
    """Object key -> the HTML of an item, should it be too big to store inline."""

    @property
    def urls(self) -> list[str]:
        return list(self.bodies)

    def image(self, name: str, size: int, delay_s: float) -> str:
        data = PNG_SIGNATURE + hashlib.sha256(name.encode()).digest() * (size // 32)
        url = self.server.route(
            f"/img/{name}.png", Route(data, headers={"Content-Type": "image/png"}, delay_s=delay_s)
        )
        self.images[url] = data
        return url

    def feed(
        self, name: str, items: int, *, images: int = 1, delay_s: float = 0.0, image_delay_s: float = 0.0,
        image_size: int = 48 * 1024, filler: int = 0,
    ) -> str:  # fmt: skip
        entries = []
        url = self.server.url(f"/feeds/{name}")
        for n in range(items):
            guid = f"{name}-{n}"
            sources = [self.image(f"{guid}-{k}", image_size, image_delay_s) for k in range(images)]
            html = "<p>" + "x" * filler + "</p>" + "".join(f'<img src="{s}">' for s in sources)
            entries.append(Entry(f"Item {n} of {name}", guid=guid, content=html))
            self.images_of[(url, guid)] = sources
            self.spilled[content_key(feed_id_for(url), guid)] = html.encode()
        body = rss(entries, title=f"Feed {name}", link=self.server.url("/"))
        self.server.route(
            f"/feeds/{name}", Route(body, etag=f'"{name}"', delay_s=delay_s,
                                    headers={"Content-Type": "application/rss+xml"}),
        )  # fmt: skip
        self.bodies[url] = body
        self.guids[url] = [entry.guid or "" for entry in entries]
        return url

    def feed_requests(self) -> int:
        with self.server._lock:
            return sum(1 for r in self.server.requests if r.path.startswith("/feeds/"))

    def image_requests(self) -> int:
        with self.server._lock:
            return sum(1 for r in self.server.requests if r.path.startswith("/img/"))

    def hit(self, url: str) -> bool:
        return bool(self.server.hits(url.removeprefix(self.server.url(""))))


def many_feeds(
    server: FeedServer, *, feed_delay_s: float = 0.0, image_delay_s: float = 0.0
) -> Site:
    """12 feeds of 8 items with an image each, and one feed of 2500 items (a long commit)."""
    site = Site(server)
    for n in range(12):
        site.feed(f"f{n:02d}", 8, delay_s=feed_delay_s, image_delay_s=image_delay_s)
    site.feed("big", 2500, images=0, filler=600)
    return site


# --- the project: files, the command, checks ---------------------------------------------------------


@dataclass
class Project:
    folder: Path
    config: Path
    db: Path
    objects: Path

    def start(self, *args: str, wrapper: str = "") -> subprocess.Popen[bytes]:
        """``feedcollector --config ... <args>`` as a subprocess; its log goes to log.txt."""
        log = (self.folder / "log.txt").open("ab")
        command = [
            "-c",
            wrapper + "import runpy; runpy.run_module('feedcollector', run_name='__main__')",
        ]
        return subprocess.Popen(
            [sys.executable, *command, "--config", str(self.config), *args],
            cwd=self.folder,
            stdout=log,
            stderr=log,
            env={k: v for k, v in os.environ.items() if k != "FEEDCOLLECTOR_CONFIG"},
        )

    def log(self) -> str:
        return (self.folder / "log.txt").read_text(errors="replace")

    def rows(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        with contextlib.closing(sqlite3.connect(self.db)) as conn:
            conn.row_factory = sqlite3.Row
            return [dict(r) for r in conn.execute(sql, params)]

    def cycle(self, clock: Callable[[], datetime]) -> CycleReport:
        async def go() -> CycleReport:
            async with open_collector(load_settings(self.config), clock=clock) as collector:
                return await run_cycle(collector)

        return asyncio.run(go())

    def snapshot(self) -> tuple[list[dict[str, Any]], ...]:
        tables = ("feeds", "items", "image_tasks")
        return tuple(self.rows(f"SELECT * FROM {t} ORDER BY 1") for t in tables)

    def files(self) -> dict[str, bytes]:
        return {
            p.relative_to(self.objects).as_posix(): p.read_bytes()
            for p in self.objects.rglob("*")
            if p.is_file()
        }


def make_project(
    folder: Path, site: Site, *, db: Path | None = None, objects: Path | None = None
) -> Project:
    """Config and feeds file in ``folder``; the database and objects there unless moved."""
    config = write_project(folder, site.urls)
    db = db or folder / "collector.db"
    objects = objects or folder / "objects"
    text = config.read_text().replace('path = "collector.db"', f'path = "{db}"')
    config.write_text(text.replace('path = "objects"', f'path = "{objects}"'))
    return Project(folder, config, db, objects)


def kill_when(
    process: subprocess.Popen[bytes], condition: Callable[[], bool], after_s: float = 0.0
) -> bool:
    """SIGKILL once ``condition`` holds (plus ``after_s``); False if the process ended first."""
    deadline = time.monotonic() + EXIT_LIMIT_S
    while not condition():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            return False
        time.sleep(0.001)
    if after_s:
        time.sleep(after_s)
    alive = process.poll() is None
    process.kill()
    process.wait()
    return alive


def assert_consistent(project: Project, site: Site) -> dict[str, int]:
    """The rules that must hold whenever the collector stopped, however it stopped."""
    assert project.rows("PRAGMA integrity_check") == [{"integrity_check": "ok"}]
    tallies = {"stored_feeds": 0, "items": 0, "images_done": 0}
    for url, guids in site.guids.items():
        feed_id = feed_id_for(url)
        (feed,) = project.rows("SELECT * FROM feeds WHERE url = ?", url)
        stored = [
            r["guid"] for r in project.rows("SELECT guid FROM items WHERE feed_id = ?", feed_id)
        ]
        assert sorted(stored) in ([], sorted(guids)), f"{url}: {len(stored)} of {len(guids)} items"
        if stored:
            tallies["stored_feeds"] += 1
            tallies["items"] += len(stored)
            assert feed["last_fetched_at"] is not None, "items and feed state are one batch"
            assert feed["last_etag"] == f'"{url.rsplit("/", 1)[1]}"'
        else:
            assert (feed["last_fetched_at"], feed["last_etag"]) == (None, None)
    duplicates = project.rows(
        "SELECT feed_id, guid, COUNT(*) AS n FROM items GROUP BY feed_id, guid HAVING n > 1"
    )
    assert duplicates == []
    orphans = project.rows(
        "SELECT t.id FROM image_tasks t LEFT JOIN items i ON i.id = t.item_id WHERE i.id IS NULL"
    )
    assert orphans == [], "no image task without its item"
    tasks_of: dict[str, list[dict[str, Any]]] = {}
    for task in project.rows("SELECT * FROM image_tasks ORDER BY item_id, position"):
        tasks_of.setdefault(task["item_id"], []).append(task)
    items = project.rows("SELECT i.id, i.guid, f.url FROM items i JOIN feeds f ON f.id = i.feed_id")
    for item in items:
        tasks = tasks_of.get(item["id"], [])
        assert [t["original_url"] for t in tasks] == site.images_of[(item["url"], item["guid"])]
        for task in tasks:
            assert task["attempts"] == (1 if task["status"] == "success" else 0), (
                "a crash is never charged to an image"
            )
            if task["status"] == "success":
                tallies["images_done"] += 1
                stored = (project.objects / task["r2_key"]).read_bytes()
                assert stored == site.images[task["original_url"]]
            else:
                assert (task["status"], task["r2_key"]) == ("pending", None)
    assert_objects_whole(project, site)
    return tallies


def assert_objects_whole(project: Project, site: Site) -> None:
    """Every object under its final key is complete; temp files never show as keys."""
    by_feed_id = {feed_id_for(url): body for url, body in site.bodies.items()}
    image_bytes = set(site.images.values())
    for key, data in project.files().items():
        name = key.rsplit("/", 1)[-1]
        if name.startswith(".partial-"):
            continue
        if key.startswith("backups/"):
            assert data == by_feed_id[key.split("/")[1]], key
        elif key.startswith("content/"):
            assert data == site.spilled[key], key
        else:
            assert key.startswith("images/"), key
            assert data in image_bytes, f"{key} is not a whole image"
    listed = asyncio.run(_list_keys(project.objects))
    assert not any(".partial-" in key for key in listed)
    assert set(listed) == {k for k in project.files() if ".partial-" not in k}


async def _list_keys(root: Path) -> list[str]:
    return [key async for key in LocalObjectStore(root).list("")]


def assert_complete(project: Project, site: Site) -> None:
    tallies = assert_consistent(project, site)
    assert tallies["stored_feeds"] == len(site.guids)
    assert tallies["images_done"] == len(site.images)
    pending = project.rows("SELECT COUNT(*) AS n FROM image_tasks WHERE status != 'success'")
    assert pending == [{"n": 0}]


def recover(project: Project) -> CycleReport:
    """One more cycle, once the dead collector's leases have expired."""
    return project.cycle(lambda: utc_now() + LEASES_EXPIRED)


# --- SIGKILL at many points -----------------------------------------------------------------------


@dataclass(frozen=True)
class KillPoint:
    name: str
    condition: Callable[[Site], bool]
    after_s: float = 0.0
    feed_delay_s: float = 0.0
    image_delay_s: float = 0.0


def _big_feed_fetched(site: Site) -> bool:
    return site.hit(site.server.url("/feeds/big"))


FEEDS = 13
IMAGES = 12 * 8
KILL_POINTS = [
    KillPoint("at-the-first-feed-request", lambda s: s.feed_requests() >= 1),
    KillPoint("after-4-feed-requests", lambda s: s.feed_requests() >= 4),
    KillPoint("after-8-feed-requests", lambda s: s.feed_requests() >= 8),
    KillPoint("after-the-last-feed-request", lambda s: s.feed_requests() >= FEEDS),
    KillPoint("at-the-first-image", lambda s: s.image_requests() >= 1),
    KillPoint("after-30-images", lambda s: s.image_requests() >= 30),
    KillPoint("after-90-images", lambda s: s.image_requests() >= IMAGES - 6),
    *(
        KillPoint(f"{int(delay * 1000)}ms-after-the-2500-item-feed", _big_feed_fetched, delay)
        for delay in (0.0, 0.05, 0.1, 0.2, 0.35)
    ),
    KillPoint("mid-fetch-of-slow-feeds", lambda s: s.feed_requests() >= 4, 0.2, feed_delay_s=0.5),
    KillPoint(
        "mid-download-of-slow-images", lambda s: s.image_requests() >= 12, 0.05, image_delay_s=0.1
    ),
]


@pytest.mark.parametrize("point", KILL_POINTS, ids=lambda p: p.name)
def test_sigkill_leaves_consistent_files_and_the_next_cycle_completes(
    feed_server: FeedServer, tmp_path: Path, point: KillPoint
) -> None:
    site = many_feeds(
        feed_server, feed_delay_s=point.feed_delay_s, image_delay_s=point.image_delay_s
    )
    project = make_project(tmp_path, site)
    process = project.start("run", "--once")
    assert kill_when(process, lambda: point.condition(site), point.after_s), (
        "the collector finished before the kill point"
    )
    assert_consistent(project, site)

    report = recover(project)
    assert report.failed == report.aborted == 0
    assert_complete(project, site)


def test_repeated_kills_never_duplicate_and_a_final_run_once_completes(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """Kill, restart, kill again...: every restart goes on from where the files are."""
    site = many_feeds(feed_server, image_delay_s=0.01)
    project = make_project(tmp_path, site)
    for more in (2, 3, 3, 4):
        before = site.feed_requests()
        process = project.start("run", "--once")
        assert kill_when(process, lambda: site.feed_requests() >= before + more)  # noqa: B023
        assert_consistent(project, site)
        expire_leases(project)
    assert wait_exit(project.start("run", "--once"))[0] == 0, project.log()
    assert_complete(project, site)


def expire_leases(project: Project) -> None:
    """What time does to a dead collector's leases, without waiting for it."""
    with contextlib.closing(sqlite3.connect(project.db)) as conn, conn:
        past = "2000-01-01T00:00:00Z"
        conn.execute("UPDATE feeds SET lease_until = ? WHERE lease_until IS NOT NULL", (past,))
        conn.execute(
            "UPDATE image_tasks SET lease_until = ? WHERE lease_until IS NOT NULL", (past,)
        )


# --- SIGTERM and SIGINT: finish in-flight work, hand back the rest, exit in bounded time ------------


def wait_exit(process: subprocess.Popen[bytes]) -> tuple[int, float]:
    started = time.monotonic()
    try:
        code = process.wait(timeout=EXIT_LIMIT_S)
    finally:
        process.kill()
    return code, time.monotonic() - started


@pytest.mark.parametrize("command", [("run",), ("run", "--once")], ids=" ".join)
def test_sigterm_finishes_in_flight_feeds_and_hands_back_the_rest(
    feed_server: FeedServer, tmp_path: Path, command: tuple[str, ...]
) -> None:
    site = Site(feed_server)
    for n in range(15):
        site.feed(f"slow{n:02d}", 4, images=0, delay_s=1.0)
    project = make_project(tmp_path, site)
    process = project.start(*command)
    kill_when_ready = time.monotonic() + EXIT_LIMIT_S
    while site.feed_requests() < 5 and time.monotonic() < kill_when_ready:
        time.sleep(0.005)
    in_flight = {url for url in site.urls if site.hit(url)}
    process.send_signal(signal.SIGTERM)
    code, took = wait_exit(process)

    assert code == 0, project.log()
    assert took < EXIT_LIMIT_S
    assert "stopping after in-flight feeds finish" in project.log()
    assert len(in_flight) == 5, "five feeds in flight (the default concurrency)"
    assert_consistent(project, site)
    stored = set()
    for url in site.urls:
        (feed,) = project.rows("SELECT * FROM feeds WHERE url = ?", url)
        assert (feed["lease_owner"], feed["lease_until"]) == (None, None), "all handed back"
        if feed["last_fetched_at"] is not None:
            stored.add(url)
    assert in_flight <= stored, "every in-flight feed finished and wrote its state"
    assert stored == {url for url in site.urls if site.hit(url)}, "no new feed was started"
    assert len(stored) < len(site.urls)


def test_sigterm_during_image_downloads_records_them_and_hands_back_the_rest(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    site = Site(feed_server)
    for n in range(3):
        site.feed(f"pics{n}", 10, images=1, image_delay_s=1.0)
    project = make_project(tmp_path, site)
    process = project.start("run")
    ready = time.monotonic() + EXIT_LIMIT_S
    while site.image_requests() < 8 and time.monotonic() < ready:
        time.sleep(0.005)
    process.send_signal(signal.SIGTERM)
    code, _ = wait_exit(process)

    assert code == 0, project.log()
    tallies = assert_consistent(project, site)
    assert tallies["stored_feeds"] == 3
    assert 8 <= tallies["images_done"] < len(site.images), "the in-flight downloads finished"
    leased = project.rows("SELECT COUNT(*) AS n FROM image_tasks WHERE lease_until IS NOT NULL")
    assert leased == [{"n": 0}], "the tasks not started were handed back"
    project.cycle(utc_now)
    assert_complete(project, site)


def test_a_second_interrupt_exits_at_once_and_leaves_consistent_files(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    site = Site(feed_server)
    for n in range(6):
        site.feed(f"stuck{n}", 3, images=0, delay_s=30.0)
    project = make_project(tmp_path, site)
    process = project.start("run")
    ready = time.monotonic() + EXIT_LIMIT_S
    while site.feed_requests() < 5 and time.monotonic() < ready:
        time.sleep(0.005)
    process.send_signal(signal.SIGINT)
    time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    code, took = wait_exit(process)

    assert code == 130, project.log()
    assert took < 10, "the second Ctrl-C does not wait for the 30 s server"
    assert_consistent(project, site)


def test_sigterm_while_another_process_holds_the_write_lock_stops_in_bounded_time(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """The stop's last write (handing the collector's leases back) waited for another
    process's SQLite write lock (a sqlite3 shell in a transaction) for the whole
    ``[database] timeout``, here an hour, past any service manager's patience."""
    site = Site(feed_server)
    site.feed("one", 2, images=0)
    project = make_project(tmp_path, site)
    text = project.config.read_text()
    project.config.write_text(text.replace("[database]\n", '[database]\ntimeout = "1h"\n'))
    process = project.start("run")
    ready = time.monotonic() + EXIT_LIMIT_S
    while "cycle: 1 feed" not in project.log() and time.monotonic() < ready:
        time.sleep(0.02)
    holder = sqlite3.connect(project.db, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        process.send_signal(signal.SIGTERM)
        code, _ = wait_exit(process)
    finally:
        holder.close()

    log = project.log()
    assert code == 0, log
    assert "cycle: 1 feed (1 updated" in log
    assert "database: stopping, gave up waiting for another process's write lock" in log
    assert project.rows("SELECT COUNT(*) AS n FROM items") == [{"n": 2}]


# --- a stop while run starts: opening the database, migrations -----------------------------------


def has_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open (Linux: its /proc fd links)."""
    try:
        return any(os.readlink(fd) == str(path) for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:  # an fd closed while listed, or the process gone
        return False


def wait_until(process: subprocess.Popen[bytes], condition: Callable[[], bool]) -> bool:
    """True once ``condition`` holds; False if the process ended first (or it never did)."""
    deadline = time.monotonic() + EXIT_LIMIT_S
    while not condition():
        if process.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@contextlib.contextmanager
def held_in_migrations(project: Project, *command: str) -> Iterator[subprocess.Popen[bytes]]:
    """``command`` started while another process (a sqlite3 shell in a transaction) holds the
    write lock of a new database, ``[database] timeout`` an hour: its migrations wait for it.
    Yields once the process has opened the database, that is while it starts."""
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to see when the collector has opened its database")
    text = project.config.read_text()
    project.config.write_text(text.replace("[database]\n", '[database]\ntimeout = "1h"\n'))
    holder = sqlite3.connect(project.db, isolation_level=None)
    try:
        holder.execute("PRAGMA journal_mode = WAL")
        holder.execute("BEGIN IMMEDIATE")
        process = project.start(*command)
        try:
            assert wait_until(process, lambda: has_open(process.pid, project.db)), project.log()
            yield process
        finally:
            process.kill()
            process.wait()
    finally:
        holder.close()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
@pytest.mark.parametrize("command", [("run",), ("run", "--once")], ids=" ".join)
def test_a_stop_while_run_starts_is_clean(
    feed_server: FeedServer, tmp_path: Path, command: tuple[str, ...], signum: signal.Signals
) -> None:
    """SIGTERM or Ctrl-C while ``run`` opened its database and migrated it killed it by the
    signal (exit -15; with Ctrl-C, "interrupted" and 130): the handlers came with the first
    cycle. Now a service manager stopping a collector still starting sees it stop cleanly: the
    migration waiting for another process's write lock is given up after the stop's patience
    (one transaction: nothing half applied), no feed is fetched, and it exits 0."""
    site = Site(feed_server)
    site.feed("one", 2, images=0)
    project = make_project(tmp_path, site)
    with held_in_migrations(project, *command) as process:
        process.send_signal(signum)
        code, _ = wait_exit(process)

    log = project.log()
    assert code == 0, log
    assert "run: stopping after the start-up step at hand" in log
    assert "in-flight feeds" not in log
    assert "database: stopping, gave up waiting for another process's write lock" in log
    assert "run: stopped while starting" in log
    assert site.feed_requests() == 0
    assert project.rows("PRAGMA integrity_check") == [{"integrity_check": "ok"}]
    again = project.start("run", "--once")
    assert again.wait(timeout=EXIT_LIMIT_S) == 0, project.log()
    assert project.rows("SELECT COUNT(*) AS n FROM items") == [{"n": 2}]


def test_a_second_interrupt_while_run_starts_exits_at_once(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """The first Ctrl-C while ``run`` starts asks for a clean stop; a second one still exits at
    once (130), without waiting for the write lock another process holds."""
    site = Site(feed_server)
    site.feed("one", 2, images=0)
    project = make_project(tmp_path, site)
    with held_in_migrations(project, "run") as process:
        process.send_signal(signal.SIGINT)
        assert wait_until(process, lambda: "run: stopping" in project.log()), project.log()
        process.send_signal(signal.SIGINT)
        code, _ = wait_exit(process)

    log = project.log()
    assert code == 130, log
    assert "run: second interrupt, exiting now" in log
    assert project.rows("PRAGMA integrity_check") == [{"integrity_check": "ok"}]


# --- a full disk, a read-only database ------------------------------------------------------------


@dataclass
class TinyDisk:
    """A folder that holds about 1 MiB: a real tmpfs, or a kernel-enforced file-size limit."""

    path: Path
    kind: str
    wrapper: str = ""
    """Python run in the collector process before it starts (the file-size limit)."""

    def grow(self) -> None:
        """Give space back: remount bigger, or drop the limit."""
        if self.kind == "tmpfs":
            subprocess.run(["mount", "-o", "remount,size=256m", str(self.path)], check=True)
        self.wrapper = ""


def _mount_tmpfs(path: Path, size: str) -> bool:
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            check=True,
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return True


@contextlib.contextmanager
def mounted(path: Path, size: str) -> Iterator[bool]:
    path.mkdir(parents=True, exist_ok=True)
    done = _mount_tmpfs(path, size)
    try:
        yield done
    finally:
        if done:
            subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


FILE_SIZE_LIMIT = (
    "import resource, signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
    f"resource.setrlimit(resource.RLIMIT_FSIZE, ({MIB}, {MIB})); "
)


@pytest.fixture(params=["tmpfs", "file-size-limit"])
def tiny_disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TinyDisk]:
    path = tmp_path / "tiny"
    if request.param == "file-size-limit":
        path.mkdir()
        yield TinyDisk(path, "file-size-limit", FILE_SIZE_LIMIT)
        return
    with mounted(path, "1m") as done:
        if not done:
            pytest.skip("mounting a tmpfs is not permitted here; the file-size-limit case runs")
        yield TinyDisk(path, "tmpfs")


DISK_FULL = (
    "No space left on device",
    "File too large",
    "database or disk is full",
    "disk I/O error",
)


def test_a_full_disk_under_the_objects_aborts_cleanly_and_the_next_cycle_completes(
    feed_server: FeedServer, tmp_path: Path, tiny_disk: TinyDisk
) -> None:
    site = Site(feed_server)
    small = [site.feed(f"small{n}", 2, images=1, image_size=int(1.5 * MIB)) for n in range(3)]
    big = site.feed("big", 1, images=0, filler=int(1.2 * MIB))
    project = make_project(tmp_path, site, objects=tiny_disk.path / "objects")
    process = project.start("run", "--once", wrapper=tiny_disk.wrapper)
    code, _ = wait_exit(process)

    assert code == 0, project.log()
    assert any(words in project.log() for words in DISK_FULL), project.log()
    assert_consistent(project, site)
    (big_row,) = project.rows("SELECT * FROM feeds WHERE url = ?", big)
    assert (big_row["last_fetched_at"], big_row["consecutive_failures"]) == (None, 0)
    assert big_row["lease_owner"] is None, "handed back for the next cycle"
    for url in small:
        assert project.rows("SELECT last_fetched_at FROM feeds WHERE url = ?", url) != [
            {"last_fetched_at": None}
        ]
    tasks = project.rows("SELECT status, attempts, lease_until FROM image_tasks")
    assert tasks
    assert {(t["status"], t["attempts"], t["lease_until"]) for t in tasks} == {
        ("pending", 0, None)
    }, "an object-store outage charges no attempt"
    assert not list(project.objects.rglob(".partial-*")), "failed writes leave no temp files"

    tiny_disk.grow()
    project.cycle(utc_now)
    assert_complete(project, site)


def test_a_full_database_disk_keeps_every_batch_whole(
    feed_server: FeedServer, tmp_path: Path, tiny_disk: TinyDisk
) -> None:
    site = Site(feed_server)
    for n in range(8):
        site.feed(f"wordy{n}", 20, images=0, filler=20_000)
    project = make_project(tmp_path, site, db=tiny_disk.path / "collector.db")
    process = project.start("run", "--once", wrapper=tiny_disk.wrapper)
    code, _ = wait_exit(process)

    assert code in (0, 1), project.log()
    assert any(words in project.log() for words in DISK_FULL), project.log()
    tallies = assert_consistent(project, site)
    assert tallies["stored_feeds"] < len(site.guids), "the disk filled up mid-cycle"

    tiny_disk.grow()
    recover(project)
    assert_complete(project, site)


@pytest.mark.parametrize("how", ["read-only-mount", "file-permissions"])
def test_a_read_only_database_is_a_clear_error_and_changes_nothing(
    feed_server: FeedServer, tmp_path: Path, how: str
) -> None:
    site = Site(feed_server)
    site.feed("one", 3, images=1)
    folder = tmp_path / "data"
    with mounted(folder, "64m") if how == "read-only-mount" else contextlib.nullcontext(True) as ok:
        if not ok:
            pytest.skip("mounting a tmpfs is not permitted here")
        if how == "file-permissions" and os.geteuid() == 0:
            pytest.skip("file permissions do not stop root; the read-only mount case covers it")
        project = make_project(tmp_path, site, db=folder / "collector.db")
        assert wait_exit(project.start("run", "--once"))[0] == 0
        site.feed("two", 2, images=0)
        project = make_project(tmp_path, site, db=folder / "collector.db")
        before, files = project.snapshot(), project.files()
        if how == "read-only-mount":
            subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        else:
            for path in folder.iterdir():
                path.chmod(0o444)
            folder.chmod(0o555)
        try:
            code, _ = wait_exit(project.start("run", "--once"))
        finally:
            if how == "read-only-mount":
                subprocess.run(["mount", "-o", "remount,rw", str(folder)], check=True)
            else:
                folder.chmod(0o755)
        log = project.log().split("\n")
        assert code == 1, "\n".join(log)
        message = next(line for line in log if line.startswith("error: database:"))
        assert str(folder / "collector.db") in message
        assert "must be writable" in message
        assert project.snapshot() == before
        assert project.files() == files, "no object was written"
        assert not site.hit(site.server.url("/feeds/two"))
