"""Logging set-up: readable console lines by default, one JSON object per line on request."""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import UTC, datetime
from typing import TextIO

from .safe_text import without_controls

CONSOLE_TIME = "%Y-%m-%d %H:%M:%SZ"
"""UTC, said so: in local time without a zone, a line stamped 21:18 said its feeds "wait until
12:20Z", which read as long past."""


def _utc_milliseconds(created: float) -> str:
    """``2026-03-02T09:00:00.123Z``: UTC written as every other timestamp here writes it."""
    moment = datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")
    return moment.removesuffix("+00:00") + "Z"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": _utc_milliseconds(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class ConsoleFormatter(logging.Formatter):
    """Time, level, message, in UTC; the message without control characters, whatever it
    quotes: an image URL from a feed with a line break in it forged a log line of its own,
    and an escape sequence drove the terminal. A traceback keeps its lines."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(message)s", CONSOLE_TIME)
        self.converter = time.gmtime  # the times in messages, status and the database are UTC

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = without_controls(record.message)
        return super().formatMessage(record)


class StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stderr`` is at the time: a progress bar redirects it while it
    is shown, so log lines scroll above the bar instead of tearing it."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def configure_logging(level: str = "INFO", fmt: str = "console") -> None:
    """Console lines (time, level, message) or one JSON object per line, on stderr."""
    handler = StderrHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(ConsoleFormatter())
    root = logging.getLogger("feedcollector")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def logging_as_json() -> bool:
    """Whether the collector's log lines are JSON objects (``--log-format json``): then the
    commands' own errors and warnings are log lines too, not plain text among them."""
    handlers = logging.getLogger("feedcollector").handlers
    return any(isinstance(handler.formatter, JsonFormatter) for handler in handlers)
