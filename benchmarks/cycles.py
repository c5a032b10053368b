"""Collection cycles against the farm: the collector and the baseline as child processes.

Three cycles a farm: *first* (everything new), *steady* (every feed answers 304) and
*repeat* (the farm ignores validators: every feed answers 200 with the body of the first
cycle, as servers without validators do; the baseline reads its feeds a second time too).

Every cycle is a fresh ``feedcollector run --once`` process, measured by the kernel (wall,
CPU, peak RSS), with the project's defaults except: images off (the farm serves no images;
the image tasks are still created), a one-second interval so the second cycle finds every
feed due again, and its own SQLite file and objects folder. Per-feed and per-item CPU
subtract an *idle* run (same command, empty feeds file): interpreter start-up, imports and
migrations are paid once per process, not per feed.

Database round trips are counted in-process (``CountingDatabase``) on SQLite and on D1
through the real Proxy Worker under Miniflare.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from feedcollector.claims import sync_feeds_file
from feedcollector.collector import open_collector
from feedcollector.config import load_feeds, load_settings
from feedcollector.database import CountingDatabase
from feedcollector.feeds_file_yaml import ruamel_nodes
from feedcollector.pipeline import run_cycle

from .farm import Farm
from .measure import ProcessRun, best_cpu_seconds, run_measured, under_peak_probe

INTERVAL = "1s"
IDLE_RUNS = 3
"""The idle run is short, so noise weighs on it most: the least CPU of a few counts."""
PROJECT_ROOT = Path(__file__).resolve().parent.parent
WORKER_DIR = PROJECT_ROOT / "worker"


@dataclass(frozen=True, slots=True)
class CycleFigures:
    """A first cycle (all new), a steady one (all 304) and a repeat one (every feed answers
    200 with the body of the first cycle) over ``feeds`` farm feeds."""

    feeds: int
    idle: ProcessRun
    first: ProcessRun
    steady: ProcessRun
    repeat: ProcessRun | None
    new_items: int
    steady_not_modified: int
    repeat_answered_200: int
    feeds_file_cpu_s: float
    """CPU to read and check the feeds file once (a cycle does it when the file changed)."""
    titled_feeds_file_cpu_s: float
    """The same for a feeds file with a title per feed, as ``import-opml`` writes it."""
    titled_feeds_file_ruamel_cpu_s: float
    """ruamel.yaml alone reading that titled file: the YAML reader for the files the libyaml
    reading leaves to it (and the only one before the fourteenth round)."""

    def first_cpu_per_item_ms(self) -> float:
        return (self.first.cpu_s - self.idle.cpu_s) / self.new_items * 1000

    def cpu_per_feed_ms(self, run: ProcessRun) -> float:
        return (run.cpu_s - self.idle.cpu_s) / self.feeds * 1000


@dataclass(frozen=True, slots=True)
class BaselineFigures:
    feeds: int
    idle: ProcessRun
    run: ProcessRun
    new_items: int
    repeat: ProcessRun | None = None
    """A second run over the same feeds and database, every item already stored."""

    def cpu_per_item_ms(self) -> float:
        return (self.run.cpu_s - self.idle.cpu_s) / self.new_items * 1000

    def repeat_cpu_per_feed_ms(self) -> float | None:
        if self.repeat is None:
            return None
        return (self.repeat.cpu_s - self.idle.cpu_s) / self.feeds * 1000


@dataclass(frozen=True, slots=True)
class CorpusCycle:
    """Ours and the baseline over the real-world corpus served by the farm."""

    ours: CycleFigures
    baseline: BaselineFigures | None


@dataclass(frozen=True, slots=True)
class RoundTrips:
    backend: str
    feeds: int
    first: int
    steady: int
    first_statements: int


def write_workdir(folder: Path, urls: list[str], *, database: str = "") -> Path:
    """A collector folder: feeds file, config (default values but the ones above)."""
    folder.mkdir(parents=True, exist_ok=True)
    entries = "".join(f"  - {url}\n" for url in urls)
    (folder / "feeds.yaml").write_text("feeds:\n" + entries if urls else "feeds: []\n")
    config = folder / "feedcollector.toml"
    config.write_text(
        'feeds_file = "feeds.yaml"\n'
        f'[fetch]\ndefault_interval = "{INTERVAL}"\n'
        + (database or '[database]\npath = "collector.db"\n')
        + '[storage]\npath = "objects"\n[images]\nenabled = false\n'
        # the farm is ours: no per-host gap, and every feed due again after INTERVAL (its
        # <ttl> ignored)
        + '[schedule]\nhost_gap = "0s"\nadaptive = false\njitter = 0\nmax_cache_floor = "0s"\n'
    )
    return config


def synced_workdir(folder: Path, urls: list[str]) -> Path:
    """A collector folder whose feeds file is already in its database, as after the cycle
    that first read it: the measured cycles then do only fetch, backup, parse and store work.
    Reading a changed feeds file is measured on its own (``feeds_file_cpu_s``)."""
    config = write_workdir(folder, urls)
    asyncio.run(_sync_feeds_file(config))
    return config


async def _sync_feeds_file(config: Path) -> None:
    async with open_collector(load_settings(config)) as collector:
        await sync_feeds_file(collector, collector.clock())


def _collector_once(config: Path, log: Path) -> ProcessRun:
    command = under_peak_probe("feedcollector", "--config", str(config), "run", "--once")
    return run_measured(command, cwd=config.parent, log=log)


def run_cycles(
    farm: Farm,
    scratch: Path,
    *,
    repeats: int = 1,
    alongside: Callable[[], None] | None = None,
    alongside_repeat: Callable[[], None] | None = None,
) -> CycleFigures:
    """Idle runs, then ``repeats`` first cycles over every farm feed (each with its own fresh
    database and folder; the least CPU counts, as for the baseline), then a steady cycle, then,
    when ``alongside_repeat`` is given, a repeat cycle with the farm ignoring validators.

    ``alongside`` runs after each first cycle: the baseline's attempts go there, so that both
    collectors meet this machine's drift alike instead of minutes apart; ``alongside_repeat``
    after the repeat cycle, for the baseline's. The repeat cycle runs only beside a baseline:
    at 10k feeds it would write 460 MB of backups just before the next measurement, and it
    has nothing to compare with there."""
    idle_config = synced_workdir(scratch / "idle", [])
    idle = min(
        (_collector_once(idle_config, scratch / f"idle-{n}.log") for n in range(IDLE_RUNS)),
        key=lambda run: run.cpu_s,
    )
    firsts = []
    for attempt in range(repeats):
        config = synced_workdir(scratch / f"collector-{attempt}", farm.urls())
        firsts.append((_collector_once(config, scratch / f"first-{attempt}.log"), config))
        if alongside is not None:
            alongside()
    first, config = min(firsts, key=lambda pair: pair[0].cpu_s)
    feeds_file_cpu = best_cpu_seconds(lambda: load_feeds(config.parent / "feeds.yaml"), 1)
    titled = config.parent / "feeds-titled.yaml"
    titled.write_text(
        "feeds:\n"
        + "".join(
            f"  - url: {url}\n    title: Feed number {n}\n" for n, url in enumerate(farm.urls())
        )
    )
    titled_cpu = best_cpu_seconds(lambda: load_feeds(titled), 1)
    titled_text = titled.read_text()
    titled_ruamel_cpu = best_cpu_seconds(lambda: ruamel_nodes(titled_text, str(titled)), 1)
    new_items = _count_items(config.parent / "collector.db")
    time.sleep(1.1)  # every feed due again
    before = farm.stats.not_modified
    steady = _collector_once(config, scratch / "steady.log")
    steady_not_modified = farm.stats.not_modified - before
    repeat, repeat_answered_200 = None, 0
    if alongside_repeat is not None:
        time.sleep(1.1)
        farm.honour_validators = False
        try:
            before = farm.stats.ok
            repeat = _collector_once(config, scratch / "repeat.log")
            repeat_answered_200 = farm.stats.ok - before
            alongside_repeat()
        finally:
            farm.honour_validators = True
    return CycleFigures(
        feeds=farm.feeds,
        idle=idle,
        first=first,
        steady=steady,
        repeat=repeat,
        new_items=new_items,
        steady_not_modified=steady_not_modified,
        repeat_answered_200=repeat_answered_200,
        feeds_file_cpu_s=feeds_file_cpu,
        titled_feeds_file_cpu_s=titled_cpu,
        titled_feeds_file_ruamel_cpu_s=titled_ruamel_cpu,
    )


def _count_items(database: Path) -> int:
    with sqlite3.connect(database) as connection:
        (count,) = connection.execute("SELECT COUNT(*) FROM items").fetchone()
    return int(count)


class BaselineRuns:
    """The feedparser + SELECT/INSERT collector over ``urls``: each :meth:`run` from an empty
    database; the least CPU counts, as for ours."""

    def __init__(self, urls: list[str], scratch: Path) -> None:
        scratch.mkdir(parents=True, exist_ok=True)
        self._scratch = scratch
        self._feeds = len(urls)
        self._runs: list[ProcessRun] = []
        self._repeat: ProcessRun | None = None
        (scratch / "run.urls").write_text("\n".join(urls))
        (scratch / "idle.urls").write_text("")

    def run(self) -> None:
        self._runs.append(self._once("run", len(self._runs)))

    def repeat(self) -> None:
        """The feeds again over the first run's database: every item is known by then."""
        self._repeat = self._once("run", 0, log_name="repeat")

    def figures(self) -> BaselineFigures:
        idle = min((self._once("idle", n) for n in range(2)), key=lambda run: run.cpu_s)
        run = min(self._runs, key=lambda run: run.cpu_s)
        counts = json.loads(run.log.read_text().strip().splitlines()[-1])
        return BaselineFigures(
            feeds=self._feeds,
            idle=idle,
            run=run,
            new_items=counts["new_items"],
            repeat=self._repeat,
        )

    def _once(self, name: str, attempt: int, *, log_name: str | None = None) -> ProcessRun:
        return run_measured(
            under_peak_probe(
                "benchmarks.baseline",
                str(self._scratch / f"{name}.urls"),
                str(self._scratch / f"{name}-{attempt}.db"),
            ),
            cwd=PROJECT_ROOT,
            log=self._scratch / f"{log_name or name}-{attempt}.log",
        )


def run_cycles_beside_baseline(
    farm: Farm,
    scratch: Path,
    *,
    repeats: int,
    baseline_urls: list[str] | None,
    baseline_scratch: Path,
) -> tuple[CycleFigures, BaselineFigures | None]:
    """:func:`run_cycles`, with the baseline's attempts over ``baseline_urls`` (None: no
    baseline) alternating with our first cycles, so that both meet this machine's drift alike."""
    runs = BaselineRuns(baseline_urls, baseline_scratch) if baseline_urls is not None else None
    ours = run_cycles(
        farm,
        scratch,
        repeats=repeats,
        alongside=runs.run if runs else None,
        alongside_repeat=runs.repeat if runs else None,
    )
    return ours, runs.figures() if runs else None


async def _count_round_trips(
    config: Path, environ: Mapping[str, str], backend: str, feeds: int
) -> RoundTrips:
    settings = load_settings(config, environ=environ)
    async with open_collector(settings) as collector:
        counting = CountingDatabase(collector.db)
        collector.db = counting
        await run_cycle(collector)
        first, statements = counting.round_trips, counting.statements
        await asyncio.sleep(1.1)
        counting.round_trips = 0
        await run_cycle(collector)
        return RoundTrips(backend, feeds, first, counting.round_trips, statements)


def round_trips_sqlite(farm: Farm, feeds: int, scratch: Path) -> RoundTrips:
    config = write_workdir(scratch, farm.urls()[:feeds])
    return asyncio.run(_count_round_trips(config, os.environ, "SQLite", feeds))


def round_trips_d1(farm: Farm, feeds: int, scratch: Path) -> RoundTrips | str:
    """The same on D1 through the real Worker; a reason string when it cannot run here."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        return "Node 20 and npm are needed for the Proxy Worker"
    if not (WORKER_DIR / "node_modules" / "miniflare").is_dir():
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=WORKER_DIR, check=True
        )
    sys.path.insert(0, str(PROJECT_ROOT))
    from tests.cloud import run_d1_proxy  # the test harness: the real Worker under Miniflare

    with run_d1_proxy() as proxy:
        database = f'[database]\nbackend = "d1"\nurl = "{proxy.url}"\n'
        config = write_workdir(scratch, farm.urls()[:feeds], database=database)
        environ = {**os.environ, "FEEDCOLLECTOR_D1_TOKEN": proxy.token}
        return asyncio.run(_count_round_trips(config, environ, "D1 (Worker)", feeds))
