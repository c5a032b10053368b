"""The ``feedcollector`` command: thin wrappers over the library, one module per group.

``app`` holds the global options and shared helpers; importing the command modules registers
their commands on it. The console script is ``feedcollector.cli:main``.
"""

from __future__ import annotations

from . import collect, feeds, maintenance, reading, status
from .app import app

__all__ = ["app", "collect", "feeds", "main", "maintenance", "reading", "status"]


def main() -> None:
    app(prog_name="feedcollector")
