from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from .feedserver import FeedServer

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CORPUS = PROJECT_ROOT.parent / "shared" / "corpus"


@pytest.fixture
def feed_server() -> Iterator[FeedServer]:
    with FeedServer() as server:
        yield server


@pytest.fixture(autouse=True)
def _logger_as_it_was() -> Iterator[None]:
    """A CLI command run in-process (typer's CliRunner) configures the ``feedcollector``
    logger for the process; put it back, so a later test's caplog sees only its own lines."""
    logger = logging.getLogger("feedcollector")
    level, handlers, propagate = logger.level, logger.handlers[:], logger.propagate
    yield
    logger.setLevel(level)
    logger.handlers[:] = handlers
    logger.propagate = propagate
