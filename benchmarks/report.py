"""The benchmark's printout: markdown tables (pasted into docs/performance.md) and targets."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib.metadata import version
from pathlib import Path

from .cycles import BaselineFigures, CorpusCycle, CycleFigures, RoundTrips
from .parse_stage import ParseFigures

TARGET_VS_FEEDPARSER = 25.0
TARGET_VS_RSS_PARSER = 2.0
TARGET_VS_BASELINE = 10.0
TARGET_STEADY_MS_PER_FEED = 1.0
TARGET_PEAK_RSS_MB = 200.0


def machine_description(node: str | None) -> dict[str, str]:
    cpu = "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = ""
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        total_kib = int(meminfo.read_text().split()[1])
        memory = f"{total_kib / 1024 / 1024:.0f} GiB"
    node_version = ""
    if node is not None:
        node_version = subprocess.run(
            [node, "--version"], capture_output=True, text=True, check=False
        ).stdout.strip()
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "memory": memory,
        "os": platform.platform(),
        "python": platform.python_version(),
        "lxml": version("lxml"),
        "feedparser": version("feedparser"),
        "node": node_version or "not installed",
    }


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}x"


def _verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def render(
    figures: dict[str, object],
    parse: list[ParseFigures],
    cycles: list[CycleFigures],
    baseline: BaselineFigures | None,
    corpus: tuple[CorpusCycle | None, CorpusCycle | None],
    round_trips: list[RoundTrips | str],
) -> str:
    machine = figures["machine"]
    assert isinstance(machine, dict)
    lines = [
        "",
        "Machine: " + ", ".join(f"{key} {value}" for key, value in machine.items()),
        "",
        "### Parse stage, CPU MB/s (fastest of interleaved rounds)",
        "",
        "feedcollector = decode + parse (GUIDs, dates, absolute URLs); + records = also ids, "
        "timestamps and every item's image URLs (HTML parser).",
        "",
        "| documents | MB | items | feedcollector | + records | feedparser | rss-parser "
        "| vs feedparser | vs rss-parser | + records vs feedparser | + records vs rss-parser |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in parse:
        rss = "n/a" if p.rss_parser_mb_s is None else f"{p.rss_parser_mb_s:.1f}"
        with_records_vs_rss = (
            None if p.rss_parser_mb_s is None else p.ours_with_records_mb_s / p.rss_parser_mb_s
        )
        lines.append(
            f"| {p.label} ({p.documents}) | {p.megabytes:.1f} | {p.items} | {p.ours_mb_s:.1f} "
            f"| {p.ours_with_records_mb_s:.1f} | {p.feedparser_mb_s:.2f} | {rss} "
            f"| {_ratio(p.vs_feedparser)} | {_ratio(p.vs_rss_parser)} "
            f"| {_ratio(p.ours_with_records_mb_s / p.feedparser_mb_s)} "
            f"| {_ratio(with_records_vs_rss)} |"
        )
    lines += [
        "",
        "### Cycles (one `feedcollector run --once` process each; per feed/item: minus an idle "
        "run)",
        "",
        "| feeds | cycle | wall s | CPU s | CPU ms/feed | CPU ms/new item | peak RSS MB |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for c in cycles:
        lines.append(
            f"| {c.feeds} | idle (no feeds) | {c.idle.wall_s:.2f} | {c.idle.cpu_s:.2f} | | "
            f"| {c.idle.peak_rss_mb:.0f} |"
        )
        lines.append(
            f"| {c.feeds} | first ({c.new_items} new items) | {c.first.wall_s:.1f} "
            f"| {c.first.cpu_s:.1f} | {c.cpu_per_feed_ms(c.first):.2f} "
            f"| {c.first_cpu_per_item_ms():.3f} | {c.first.peak_rss_mb:.0f} |"
        )
        lines.append(
            f"| {c.feeds} | steady ({c.steady_not_modified} x 304) | {c.steady.wall_s:.1f} "
            f"| {c.steady.cpu_s:.1f} | {c.cpu_per_feed_ms(c.steady):.2f} | "
            f"| {c.steady.peak_rss_mb:.0f} |"
        )
        if c.repeat is not None:
            lines.append(
                f"| {c.feeds} | repeat ({c.repeat_answered_200} x 200, the same bodies) "
                f"| {c.repeat.wall_s:.1f} | {c.repeat.cpu_s:.1f} "
                f"| {c.cpu_per_feed_ms(c.repeat):.2f} | | {c.repeat.peak_rss_mb:.0f} |"
            )
    if cycles:
        lines.append("")
        lines += [
            f"Feeds file ({c.feeds} feeds) read and checked once: {c.feeds_file_cpu_s * 1000:.0f}"
            f" ms CPU ({c.feeds_file_cpu_s / c.feeds * 1e6:.0f} us per feed, in cycles that find it"
            f" changed); with a title per feed {c.titled_feeds_file_cpu_s * 1000:.0f} ms"
            f" ({c.titled_feeds_file_cpu_s / c.feeds * 1e6:.0f} us per feed), where ruamel.yaml"
            f" alone takes {c.titled_feeds_file_ruamel_cpu_s * 1000:.0f} ms to read it"
            f" ({c.titled_feeds_file_ruamel_cpu_s / c.titled_feeds_file_cpu_s:.1f}x)."
            for c in cycles
        ]
    comparisons = _item_comparisons(cycles, baseline, corpus)
    if comparisons:
        lines += [
            "",
            "### CPU per new item: feedcollector vs a feedparser + SELECT/INSERT collector",
            "",
            "| feeds | collector | feeds | new items | CPU ms per new item | ratio |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for label, ours, theirs in comparisons:
            lines += [
                f"| {label} | baseline (feedparser, SELECT + INSERT per item, commit per feed) "
                f"| {theirs.feeds} | {theirs.new_items} | {theirs.cpu_per_item_ms():.3f} | |",
                f"| {label} | feedcollector first cycle (fetch, backup, parse, store) "
                f"| {ours.feeds} | {ours.new_items} | {ours.first_cpu_per_item_ms():.3f} "
                f"| {theirs.cpu_per_item_ms() / ours.first_cpu_per_item_ms():.1f}x |",
            ]
    repeats = [
        (label, ours, ours.repeat, theirs, theirs_ms)
        for label, ours, theirs in comparisons
        if ours.repeat is not None and (theirs_ms := theirs.repeat_cpu_per_feed_ms()) is not None
    ]
    if repeats:
        lines += [
            "",
            "### Bodies fetched again unchanged (every feed answers 200 with the same bytes)",
            "",
            "| feeds | collector | feeds | CPU ms per feed | ratio |",
            "|---|---|---:|---:|---:|",
        ]
        for label, ours, repeat, theirs, theirs_ms in repeats:
            ours_ms = ours.cpu_per_feed_ms(repeat)
            lines += [
                f"| {label} | baseline (feedparser, a SELECT per item, commit per feed) "
                f"| {theirs.feeds} | {theirs_ms:.2f} | |",
                f"| {label} | feedcollector repeat cycle (fetch, backup, digest) "
                f"| {ours.feeds} | {ours_ms:.2f} | {theirs_ms / ours_ms:.1f}x |",
            ]
    lines += [
        "",
        "### Database round trips",
        "",
        "| backend | feeds | first cycle | per feed | steady cycle | per feed | statements "
        "(first) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in round_trips:
        if isinstance(r, str):
            lines.append(f"| D1 (Worker) | not run: {r} | | | | | |")
            continue
        lines.append(
            f"| {r.backend} | {r.feeds} | {r.first} | {r.first / r.feeds:.2f} | {r.steady} "
            f"| {r.steady / r.feeds:.3f} | {r.first_statements} |"
        )
    lines += ["", "### Targets", ""]
    lines += _targets(parse, cycles, comparisons)
    return "\n".join(lines)


def _item_comparisons(
    cycles: list[CycleFigures],
    baseline: BaselineFigures | None,
    corpus: tuple[CorpusCycle | None, CorpusCycle | None],
) -> list[tuple[str, CycleFigures, BaselineFigures]]:
    """(label, our first cycle, the baseline) on the same feeds: farm, real-world corpus (in
    the scratch folder, then with its files in RAM)."""
    found = []
    if baseline is not None and cycles:
        found.append(("farm", cycles[0], baseline))
    labels = ("real-world corpus", "real-world corpus, files in RAM")
    for label, cycle in zip(labels, corpus, strict=True):
        if cycle is not None and cycle.baseline is not None:
            found.append((label, cycle.ours, cycle.baseline))
    return found


def _targets(
    parse: list[ParseFigures],
    cycles: list[CycleFigures],
    comparisons: list[tuple[str, CycleFigures, BaselineFigures]],
) -> list[str]:
    lines = []
    for p in parse:
        lines.append(
            f"- parse, {p.label}: {_ratio(p.vs_feedparser)} feedparser (target "
            f"{TARGET_VS_FEEDPARSER:g}x: {_verdict(p.vs_feedparser >= TARGET_VS_FEEDPARSER)})"
            + (
                f", {_ratio(p.vs_rss_parser)} rss-parser (target {TARGET_VS_RSS_PARSER:g}x: "
                f"{_verdict(p.vs_rss_parser >= TARGET_VS_RSS_PARSER)})"
                if p.vs_rss_parser is not None
                else ""
            )
        )
    for label, ours, theirs in comparisons:
        ratio = theirs.cpu_per_item_ms() / ours.first_cpu_per_item_ms()
        lines.append(
            f"- CPU per new item, {label}: {ratio:.1f}x lower than the baseline (target "
            f"{TARGET_VS_BASELINE:g}x: {_verdict(ratio >= TARGET_VS_BASELINE)})"
        )
    for c in cycles:
        steady = c.cpu_per_feed_ms(c.steady)
        lines.append(
            f"- steady cycle, {c.feeds} feeds: {steady:.2f} ms CPU per unchanged feed (target "
            f"< {TARGET_STEADY_MS_PER_FEED:g} ms: {_verdict(steady < TARGET_STEADY_MS_PER_FEED)})"
        )
    if cycles:
        peak = max(max(c.first.peak_rss_mb, c.steady.peak_rss_mb) for c in cycles)
        smallest, largest = cycles[0], cycles[-1]
        growth = largest.first.peak_rss_mb - smallest.first.peak_rss_mb
        lines.append(
            f"- peak RSS: {smallest.first.peak_rss_mb:.0f} MB at {smallest.feeds} feeds, "
            f"{largest.first.peak_rss_mb:.0f} MB at {largest.feeds} (+{growth:.0f} MB); highest "
            f"{peak:.0f} MB (target < {TARGET_PEAK_RSS_MB:g} MB: "
            f"{_verdict(peak < TARGET_PEAK_RSS_MB)})"
        )
    return lines
