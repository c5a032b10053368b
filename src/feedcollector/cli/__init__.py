"""The ``feedcollector`` command: thin wrappers over the library, one module per group.

``app`` holds the global options and shared helpers; importing the command modules registers
their commands on it. The console script is ``feedcollector.cli:main``.
"""

from __future__ import annotations

import logging
import os
import sys

from . import collect, feeds, images, maintenance, reading, status
from .app import app

__all__ = ["app", "collect", "feeds", "images", "main", "maintenance", "reading", "status"]

STORAGE_UNUSABLE = 1
"""The exit code of a command the database or object store stopped."""


def main() -> None:
    """The console script. A command the object store stopped leaves without the
    interpreter's teardown: obstore's runtime threads, still busy with the failed request's
    retries, crashed it now and then (SIGABRT, "Fatal Python error: Aborted") instead of
    exit code 1."""
    try:
        app(prog_name="feedcollector")
    except SystemExit as leaving:
        if leaving.code != STORAGE_UNUSABLE:
            raise
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(STORAGE_UNUSABLE)
