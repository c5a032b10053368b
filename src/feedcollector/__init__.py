"""feedcollector: collect RSS/Atom feeds reliably and fast.

The library API: load settings, open a collector, run a cycle. The CLI is a thin wrapper.
"""

from .collector import Collector, open_collector
from .config import Settings, load_feeds, load_settings
from .errors import (
    ConfigError,
    DatabaseError,
    FeedCollectorError,
    FetchError,
    ImageError,
    ObjectStoreError,
    ParseError,
    StorageError,
)
from .pipeline import refresh_feed, run_cycle

__version__ = "0.1.0"

__all__ = [
    "Collector",
    "ConfigError",
    "DatabaseError",
    "FeedCollectorError",
    "FetchError",
    "ImageError",
    "ObjectStoreError",
    "ParseError",
    "Settings",
    "StorageError",
    "__version__",
    "load_feeds",
    "load_settings",
    "open_collector",
    "refresh_feed",
    "run_cycle",
]
