from __future__ import annotations

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
