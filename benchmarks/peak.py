"""``python -m benchmarks.peak MODULE ARGS...``: run MODULE as ``__main__``, then record its
peak RSS (``VmHWM``) in the file named by ``FEEDCOLLECTOR_BENCH_PEAK_FILE``.

The kernel's rusage cannot say it: a child's ``ru_maxrss`` starts from the RSS of the process
that forked it (Linux keeps the larger of the two across ``exec``), so every child of a big
benchmark driver would report the driver's size. ``VmHWM`` belongs to the child's own memory.
"""

from __future__ import annotations

import atexit
import os
import runpy
import sys
from pathlib import Path

PEAK_FILE_VARIABLE = "FEEDCOLLECTOR_BENCH_PEAK_FILE"


def peak_rss_kib() -> int | None:
    status = Path("/proc/self/status")
    if not status.exists():
        return None
    for line in status.read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return None


def _record() -> None:
    target = os.environ.get(PEAK_FILE_VARIABLE)
    peak = peak_rss_kib()
    if target and peak is not None:
        Path(target).write_text(str(peak))


def main() -> None:
    module, *arguments = sys.argv[1:]
    atexit.register(_record)
    sys.argv = [module, *arguments]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
