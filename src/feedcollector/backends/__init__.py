"""Concrete backends behind the Database and ObjectStore protocols, chosen by the settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..config import Settings
    from ..database import Database
    from ..objectstore import ObjectStore


def open_database(settings: Settings) -> Database:
    """The database the settings name: a SQLite file, or D1 through the Proxy Worker."""
    db = settings.database
    if db.backend == "d1":
        from .d1 import D1Database

        assert db.url is not None
        assert db.token is not None
        return D1Database(db.url, db.token.get_secret_value(), timeout_s=db.timeout.total_seconds())
    from .sqlite import SQLiteDatabase

    return SQLiteDatabase(db.path, busy_timeout_s=db.timeout.total_seconds())


def open_object_store(settings: Settings) -> ObjectStore:
    """The object store the settings name: a local folder, or S3/R2."""
    st = settings.storage
    if st.backend == "s3":
        from .s3 import S3ObjectStore

        assert st.endpoint
        assert st.bucket
        assert st.access_key_id
        assert st.secret_access_key
        return S3ObjectStore(
            st.endpoint,
            st.bucket,
            st.region,
            st.access_key_id.get_secret_value(),
            st.secret_access_key.get_secret_value(),
            public_base_url=st.public_base_url,
            timeout_s=st.timeout.total_seconds(),
        )
    from .local import LocalObjectStore

    return LocalObjectStore(st.path, public_base_url=st.public_base_url)


def no_database_file(settings: Settings) -> bool:
    """Whether the database is a SQLite file that does not exist (yet): opening it creates it."""
    return settings.database.backend == "sqlite" and not settings.database.path.exists()


def require_database_file(settings: Settings, command: str) -> None:
    """ConfigError, before opening it, when the database is a SQLite file that does not exist:
    opening it made an empty database, in a mistyped folder too, read as "nothing collected"
    (and ``cleanup --orphans`` over an empty database takes every archived image for an
    orphan)."""
    if no_database_file(settings):
        raise ConfigError(
            f"{command}: there is no database at {settings.database.path}, so nothing was "
            "collected there. The first `feedcollector run` creates it; if the collector's "
            "database is elsewhere, run from its folder or name its config with --config."
        )
