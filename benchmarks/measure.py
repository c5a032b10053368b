"""Measuring a child process as its user would feel it: wall time, CPU seconds, peak RSS.

The figures come from the kernel (``wait4``'s rusage), so they cover the whole process:
interpreter start-up, imports, the work, and every thread it ran.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from feedcollector.backends.local import LocalObjectStore

from .peak import PEAK_FILE_VARIABLE

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, slots=True)
class ProcessRun:
    """One finished child process."""

    wall_s: float
    cpu_s: float
    """User plus system CPU seconds."""
    peak_rss_mb: float
    exit_code: int
    log: Path


def run_measured(
    args: Sequence[str],
    *,
    cwd: Path,
    log: Path,
    env: Mapping[str, str] | None = None,
) -> ProcessRun:
    """Run ``args`` to completion, output to ``log``; raise if it exits non-zero.

    Bytecode caching is on, as on a user's machine (this workplace may turn it off through
    ``PYTHONDONTWRITEBYTECODE``, which makes every start-up compile every module). The peak
    RSS is the child's own ``VmHWM`` when it runs under :mod:`benchmarks.peak` (see there why
    ``ru_maxrss`` is not enough), else ``ru_maxrss``.
    """
    environ = {k: v for k, v in (env or os.environ).items() if k != "PYTHONDONTWRITEBYTECODE"}
    peak_file = log.with_suffix(".peak")
    peak_file.unlink(missing_ok=True)
    environ[PEAK_FILE_VARIABLE] = str(peak_file)
    environ["PYTHONPATH"] = os.pathsep.join(
        [str(PROJECT_ROOT), *filter(None, [environ.get("PYTHONPATH")])]
    )
    started = time.perf_counter()
    with log.open("wb") as out:
        process = subprocess.Popen(
            list(args), cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=environ
        )
        _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    process.returncode = code  # reaped by wait4: tell Popen so it does not wait again
    if code != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(args)} exited {code}; end of its output:\n{tail}")
    peak_kib = int(peak_file.read_text()) if peak_file.exists() else usage.ru_maxrss
    return ProcessRun(
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        peak_rss_mb=peak_kib / 1024,
        exit_code=code,
        log=log,
    )


def under_peak_probe(module: str, *arguments: str) -> list[str]:
    """The command running ``python -m module arguments`` with its peak RSS recorded."""
    return [sys.executable, "-m", "benchmarks.peak", module, *arguments]


def backup_write_cpu_us(folder: Path, writes: int = 200, size: int = 46_000) -> float:
    """CPU per object written the way a first cycle writes a backup (a new key folder, a
    temporary file, a rename), in microseconds, in ``folder``: the file system's share of a
    cycle, which differs by folder and by the hour on some machines."""
    store = LocalObjectStore(Path(tempfile.mkdtemp(prefix="probe-", dir=folder)))
    body = os.urandom(size)

    async def write_all() -> None:
        for number in range(writes):
            await store.put(f"backups/{number:032x}/2026-01-01T00:00:00Z.xml", body, durable=False)

    try:
        started = time.process_time()
        asyncio.run(write_all())
        return (time.process_time() - started) / writes * 1e6
    finally:
        shutil.rmtree(store.root, ignore_errors=True)


def best_cpu_seconds(action: Callable[[], object], rounds: int) -> float:
    """The least CPU time of ``rounds`` calls of ``action`` (the least disturbed round)."""
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        action()
        best = min(best, time.process_time() - started)
    return best
