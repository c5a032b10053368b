"""``python -m benchmarks``: the whole suite, printed as the tables of docs/performance.md.

    .venv/bin/python -m benchmarks            # full: 1k and 10k feeds (about 6-7 minutes on 2 cores)
    .venv/bin/python -m benchmarks --quick    # the same at small sizes (about 30 seconds)

Options pick the sizes (``--feeds 1000,10000 --items 20``...) and skip parts (``--skip-node``,
``--skip-d1``, ``--skip-baseline``...); ``--json PATH`` also writes every figure as JSON. The
full run measures the real-world corpus cycle twice: in the scratch folder, and with every
database and object on a RAM file system (``/dev/shm``), so the disk's share shows in the run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from .cycles import (
    BaselineFigures,
    CorpusCycle,
    CycleFigures,
    RoundTrips,
    round_trips_d1,
    round_trips_sqlite,
    run_cycles_beside_baseline,
)
from .farm import run_farm
from .measure import backup_write_cpu_us
from .parse_stage import (
    ParseFigures,
    corpus_documents,
    ensure_node_packages,
    farm_documents,
    measure,
    served_corpus,
)
from .report import machine_description, render

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CORPUS = PROJECT_ROOT.parent / "shared" / "corpus"
RAM_SCRATCH_BYTES = 256 * 2**20
"""Free space the corpus cycle in RAM wants (it holds about 150 MB at most); containers often
give ``/dev/shm`` 64 MiB."""


@dataclass(frozen=True, slots=True)
class Sizes:
    feeds: tuple[int, ...]
    items: int
    parse_sample: int
    baseline_feeds: int
    round_trip_feeds: int
    rounds: int
    feedparser_rounds: int
    latency_ms: float
    hosts: int
    corpus_copies: int
    """Each real-world corpus feed is served at this many URLs for the corpus cycle."""
    repeats: int
    """First cycles and baseline runs per comparison; the least CPU of each counts (this
    machine's speed drifts by tens of percent from one minute to the next)."""


FULL = Sizes((1000, 10000), 20, 300, 1000, 200, 10, 3, 0.0, 8, 10, 2)
QUICK = Sizes((100, 400), 10, 40, 100, 30, 5, 1, 0.0, 4, 2, 1)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes (about 30 seconds)")
    parser.add_argument("--feeds", help="comma-separated farm sizes for the cycles")
    parser.add_argument("--items", type=int, help="items per farm feed")
    parser.add_argument("--parse-sample", type=int, help="farm feeds in the parse comparison")
    parser.add_argument("--baseline-feeds", type=int, help="feeds the baseline collector reads")
    parser.add_argument("--round-trip-feeds", type=int, help="feeds for the round-trip counts")
    parser.add_argument("--rounds", type=int, help="parse rounds (the fastest counts)")
    parser.add_argument("--latency-ms", type=float, help="farm latency per response")
    parser.add_argument(
        "--corpus-copies", type=int, help="URLs per real-world feed in the corpus cycle"
    )
    parser.add_argument(
        "--repeats", type=int, help="first cycles and baseline runs (the least CPU counts)"
    )
    parser.add_argument("--skip-node", action="store_true", help="no rss-parser comparison")
    parser.add_argument("--skip-d1", action="store_true", help="no D1 round-trip count")
    parser.add_argument("--skip-baseline", action="store_true", help="no baseline collector")
    parser.add_argument("--skip-corpus", action="store_true", help="no real-world corpus")
    parser.add_argument(
        "--ram-scratch",
        type=Path,
        help="folder on a RAM file system where the real-world corpus cycle (ours and the "
        "baseline) is measured again (default: /dev/shm where it exists, except with --quick)",
    )
    parser.add_argument(
        "--skip-ram", action="store_true", help="no second corpus cycle on a RAM file system"
    )
    parser.add_argument(
        "--scratch",
        type=Path,
        help="folder for the collectors' databases, objects and logs (default: the system's "
        "temporary folder); the run's own subfolder is removed afterwards",
    )
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    return parser.parse_args(argv)


def _sizes(arguments: argparse.Namespace) -> Sizes:
    base = QUICK if arguments.quick else FULL
    rounds = arguments.rounds or base.rounds
    return Sizes(
        feeds=tuple(int(n) for n in arguments.feeds.split(",")) if arguments.feeds else base.feeds,
        items=arguments.items or base.items,
        parse_sample=arguments.parse_sample or base.parse_sample,
        baseline_feeds=arguments.baseline_feeds or base.baseline_feeds,
        round_trip_feeds=arguments.round_trip_feeds or base.round_trip_feeds,
        rounds=rounds,
        feedparser_rounds=min(base.feedparser_rounds, rounds),
        latency_ms=arguments.latency_ms if arguments.latency_ms is not None else base.latency_ms,
        hosts=base.hosts,
        corpus_copies=arguments.corpus_copies or base.corpus_copies,
        repeats=arguments.repeats or base.repeats,
    )


def _ram_scratch(arguments: argparse.Namespace) -> Path | None:
    """Where the corpus cycle is measured a second time, its files in RAM (None: not)."""
    if arguments.skip_ram or arguments.skip_corpus:
        return None
    if arguments.ram_scratch is not None:
        return Path(arguments.ram_scratch)
    shm = Path("/dev/shm")
    if arguments.quick or not shm.is_dir():
        return None
    if arguments.scratch is not None and arguments.scratch.resolve().is_relative_to(shm):
        return None  # the first measurement was in RAM already
    if shutil.disk_usage(shm).free < RAM_SCRATCH_BYTES:
        print(f"{shm} has less than {RAM_SCRATCH_BYTES >> 20} MiB free: no corpus cycle in RAM")
        return None
    return shm


def _corpus_cycle(sizes: Sizes, scratch: Path, *, baseline: bool, where: str = "") -> CorpusCycle:
    """A first cycle over the real-world corpus (each feed at several URLs), and the baseline
    collector over the same feeds: CPU per new item on real-world bytes."""
    served = served_corpus(CORPUS)
    feeds = len(served) * sizes.corpus_copies
    print(f"cycles: real-world corpus, {feeds} feeds{where}...", flush=True)
    with run_farm(feeds, 0, hosts=sizes.hosts, documents=served) as farm:
        ours, theirs = run_cycles_beside_baseline(
            farm,
            scratch / "cycles-corpus",
            repeats=sizes.repeats,
            baseline_urls=farm.urls() if baseline else None,
            baseline_scratch=scratch / "baseline-corpus",
        )
    return CorpusCycle(ours, theirs)


def main(argv: list[str] | None = None) -> dict[str, object]:
    """Run the suite; print the report; return every figure (also for the tests)."""
    arguments = _arguments(argv)
    sizes = _sizes(arguments)
    parse: list[ParseFigures] = []
    cycles: list[CycleFigures] = []
    baseline: BaselineFigures | None = None
    corpus_cycle: CorpusCycle | None = None
    corpus_cycle_ram: CorpusCycle | None = None
    ram_backup_write_us: float | None = None
    round_trips: list[RoundTrips | str] = []
    load_at_start = os.getloadavg()[0]
    node = None if arguments.skip_node else ensure_node_packages()
    if arguments.scratch is not None:
        arguments.scratch.mkdir(parents=True, exist_ok=True)
    ram = _ram_scratch(arguments)
    with tempfile.TemporaryDirectory(
        prefix="feedcollector-bench-", dir=arguments.scratch
    ) as temporary:
        scratch = Path(temporary)
        backup_write_us = backup_write_cpu_us(scratch)
        documents = [
            ("farm feeds", farm_documents(scratch / "farm", sizes.parse_sample, sizes.items))
        ]
        if not arguments.skip_corpus:
            documents.insert(0, ("real-world corpus", corpus_documents(CORPUS)))
        for label, docs in documents:
            print(f"parse stage: {label} ({len(docs)} documents)...", flush=True)
            parse.append(
                measure(
                    label,
                    docs,
                    node=node,
                    scratch=scratch,
                    rounds=sizes.rounds,
                    feedparser_rounds=sizes.feedparser_rounds,
                )
            )
        for index, count in enumerate(sizes.feeds):
            print(f"cycles: {count} feeds x {sizes.items} items...", flush=True)
            with run_farm(
                count, sizes.items, hosts=sizes.hosts, latency_s=sizes.latency_ms / 1000
            ) as farm:
                # the baseline runs beside the first size's first cycles
                with_baseline = index == 0 and not arguments.skip_baseline
                figures, theirs = run_cycles_beside_baseline(
                    farm,
                    scratch / f"cycles-{count}",
                    repeats=sizes.repeats,
                    baseline_urls=farm.urls()[: sizes.baseline_feeds] if with_baseline else None,
                    baseline_scratch=scratch / "baseline",
                )
                cycles.append(figures)
                baseline = theirs or baseline
        if not arguments.skip_corpus:
            corpus_cycle = _corpus_cycle(sizes, scratch, baseline=not arguments.skip_baseline)
        if ram is not None:
            ram.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix="feedcollector-bench-", dir=ram) as in_ram:
                ram_backup_write_us = backup_write_cpu_us(Path(in_ram))
                corpus_cycle_ram = _corpus_cycle(
                    sizes, Path(in_ram), baseline=not arguments.skip_baseline, where=f" in {ram}"
                )
        with run_farm(sizes.round_trip_feeds, sizes.items) as farm:
            print(f"round trips: {sizes.round_trip_feeds} feeds...", flush=True)
            round_trips.append(
                round_trips_sqlite(farm, sizes.round_trip_feeds, scratch / "rt-sqlite")
            )
            if not arguments.skip_d1:
                round_trips.append(round_trips_d1(farm, sizes.round_trip_feeds, scratch / "rt-d1"))
    machine = machine_description(node)
    machine["one backup write in the scratch folder (new folder, 46 KB), CPU"] = (
        f"{backup_write_us:.0f} us"
    )
    if ram_backup_write_us is not None:
        machine[f"one backup write in {ram}, CPU"] = f"{ram_backup_write_us:.0f} us"
    machine["load average (1 min) at start, end"] = f"{load_at_start:.2f}, {os.getloadavg()[0]:.2f}"
    figures: dict[str, object] = {
        "machine": machine,
        "sizes": asdict(sizes),
        "parse": [asdict(figure) for figure in parse],
        "cycles": [asdict(figure) for figure in cycles],
        "baseline": asdict(baseline) if baseline else None,
        "corpus_cycle": asdict(corpus_cycle) if corpus_cycle else None,
        "corpus_cycle_ram": asdict(corpus_cycle_ram) if corpus_cycle_ram else None,
        "round_trips": [asdict(r) if isinstance(r, RoundTrips) else r for r in round_trips],
    }
    print(render(figures, parse, cycles, baseline, (corpus_cycle, corpus_cycle_ram), round_trips))
    if arguments.json:
        arguments.json.write_text(json.dumps(figures, indent=2, default=str))
    return figures


if __name__ == "__main__":
    print(f"feedcollector benchmarks on {platform.node() or 'this machine'}", flush=True)
    main()
