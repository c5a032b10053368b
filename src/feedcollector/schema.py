"""The database schema as numbered migrations, applied automatically on open.

The same SQL runs on SQLite and on D1 (which is SQLite). Each migration is one ``batch``
(D1's ``exec`` splits on newlines, and a batch is its only transaction) that also records its
version, so it applies whole or not at all. Two collectors may migrate at once: ``CREATE ...
IF NOT EXISTS`` cannot clash, and a statement that can (``ALTER TABLE ... ADD COLUMN``) fails
only for the one that came second, which then finds the version recorded and carries on.
Timestamps are ``YYYY-MM-DDTHH:MM:SSZ`` text, always supplied by the caller.
"""

from __future__ import annotations

import logging

from .database import Database, Statement
from .errors import DatabaseError
from .timestamps import format_timestamp, utc_now

log = logging.getLogger("feedcollector")

MIGRATIONS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (
        1,
        "feeds, items and image_tasks as in the seed, plus scheduling and lease columns",
        (
            """CREATE TABLE IF NOT EXISTS feeds (
                id TEXT PRIMARY KEY,
                url TEXT NOT NULL UNIQUE,
                title TEXT,
                last_etag TEXT,
                last_modified TEXT,
                last_fetched_at TEXT,
                consecutive_failures INTEGER NOT NULL DEFAULT 0,
                next_fetch_at TEXT,
                created_at TEXT NOT NULL,
                active INTEGER NOT NULL DEFAULT 1,
                config_title TEXT,
                interval_seconds INTEGER,
                last_error TEXT,
                last_status INTEGER,
                lease_owner TEXT,
                lease_until TEXT
            )""",
            "CREATE INDEX IF NOT EXISTS feeds_due ON feeds (active, next_fetch_at)",
            """CREATE TABLE IF NOT EXISTS items (
                id TEXT PRIMARY KEY,
                feed_id TEXT NOT NULL REFERENCES feeds (id),
                guid TEXT NOT NULL,
                link TEXT,
                title TEXT,
                pub_date TEXT,
                content_html TEXT,
                created_at TEXT NOT NULL,
                UNIQUE (feed_id, guid)
            )""",
            "CREATE INDEX IF NOT EXISTS items_created_at ON items (created_at)",
            """CREATE TABLE IF NOT EXISTS image_tasks (
                id TEXT PRIMARY KEY,
                item_id TEXT NOT NULL REFERENCES items (id),
                original_url TEXT NOT NULL,
                r2_key TEXT,
                status TEXT NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'success', 'failed')),
                attempts INTEGER NOT NULL DEFAULT 0,
                last_error TEXT,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                position INTEGER NOT NULL,
                lease_until TEXT,
                UNIQUE (item_id, position)
            )""",
            "CREATE INDEX IF NOT EXISTS image_tasks_item ON image_tasks (item_id)",
            "CREATE INDEX IF NOT EXISTS image_tasks_status ON image_tasks (status, created_at)",
        ),
    ),
    (
        2,
        "items.content_key: the object holding content_html too big to store inline",
        ("ALTER TABLE items ADD COLUMN content_key TEXT",),
    ),
    (
        3,
        "item_tombstones (expired items are not re-ingested) and maintenance (daily cleanup)",
        (
            """CREATE TABLE IF NOT EXISTS item_tombstones (
                feed_id TEXT NOT NULL,
                guid TEXT NOT NULL,
                deleted_at TEXT NOT NULL,
                PRIMARY KEY (feed_id, guid)
            ) WITHOUT ROWID""",
            "CREATE INDEX IF NOT EXISTS item_tombstones_deleted_at ON item_tombstones (deleted_at)",
            """CREATE TABLE IF NOT EXISTS maintenance (
                task TEXT PRIMARY KEY,
                last_done_at TEXT,
                lease_owner TEXT,
                lease_until TEXT
            )""",
        ),
    ),
    (
        4,
        "feeds.gone_at (410 Gone: no longer scheduled) and feeds.moved_to (permanent redirect)",
        (
            "ALTER TABLE feeds ADD COLUMN gone_at TEXT",
            "ALTER TABLE feeds ADD COLUMN moved_to TEXT",
        ),
    ),
    (
        5,
        "feeds: Retry-After deadline, the feed's own ttl and its posting rate (scheduling)",
        (
            "ALTER TABLE feeds ADD COLUMN retry_after_until TEXT",
            "ALTER TABLE feeds ADD COLUMN feed_ttl_seconds INTEGER",
            "ALTER TABLE feeds ADD COLUMN post_gap_seconds INTEGER",
            "ALTER TABLE feeds ADD COLUMN newest_item_at TEXT",
        ),
    ),
    (
        6,
        "collector_state: small facts about the collector itself (the feeds file last synced)",
        (
            """CREATE TABLE IF NOT EXISTS collector_state (
                key TEXT PRIMARY KEY,
                value TEXT NOT NULL,
                updated_at TEXT NOT NULL
            )""",
        ),
    ),
    (
        7,
        "drop image_tasks_item: UNIQUE (item_id, position) already indexes item_id first",
        ("DROP INDEX IF EXISTS image_tasks_item",),
    ),
    (
        8,
        "object-key owners: who holds a content_key or an r2_key (keys of colliding GUIDs)",
        (
            "CREATE INDEX IF NOT EXISTS items_content_key ON items (content_key) "
            "WHERE content_key IS NOT NULL",
            "CREATE INDEX IF NOT EXISTS image_tasks_r2_key ON image_tasks (r2_key) "
            "WHERE r2_key IS NOT NULL",
        ),
    ),
    (
        9,
        "claim cursors: feeds_due and image_tasks_status end with id, so a page starts at its "
        "cursor even among rows of one second",
        (
            "DROP INDEX IF EXISTS feeds_due",
            "CREATE INDEX IF NOT EXISTS feeds_due ON feeds (active, next_fetch_at, id)",
            "DROP INDEX IF EXISTS image_tasks_status",
            "CREATE INDEX IF NOT EXISTS image_tasks_status ON image_tasks (status, created_at, id)",
        ),
    ),
    (
        10,
        "feeds: the digest of the last body stored, so the same body again is not read again",
        ("ALTER TABLE feeds ADD COLUMN body_digest TEXT",),
    ),
    (
        11,
        "items_created_at ends with id, so a page of items (listing, expiry) starts at its "
        "cursor even among the thousands of rows a first cycle stores in one second",
        (
            "DROP INDEX IF EXISTS items_created_at",
            "CREATE INDEX IF NOT EXISTS items_created_at ON items (created_at, id)",
        ),
    ),
    (
        12,
        "feeds.rate_limited_by: the URL that answered the last 429 (a redirect's target may be "
        "on another host), so every process defers the host that asked",
        ("ALTER TABLE feeds ADD COLUMN rate_limited_by TEXT",),
    ),
    (
        13,
        "feeds.channel_title: the feed's own title, kept beside title (the feeds file's title "
        "when it has one), so that deleting a feeds-file title brings the channel's back",
        ("ALTER TABLE feeds ADD COLUMN channel_title TEXT",),
    ),
    (
        14,
        "image_tasks.retry_at: a failed attempt's task waits for it ('' = due now), and "
        "image_tasks_status puts it after status, so a claim's range skips the waiting tasks",
        (
            "ALTER TABLE image_tasks ADD COLUMN retry_at TEXT NOT NULL DEFAULT ''",
            "DROP INDEX IF EXISTS image_tasks_status",
            "CREATE INDEX IF NOT EXISTS image_tasks_status "
            "ON image_tasks (status, retry_at, created_at, id)",
        ),
    ),
    (
        15,
        "items.pub_date of a year before 1000 (Go's zero time, 0001-01-01) was stored without "
        "its leading zeros ('1-01-01T00:00:00Z'), which neither orders as text nor reads as "
        "ISO 8601: padded to four digits",
        (
            "UPDATE items SET pub_date = substr('000' || pub_date, -20) "
            "WHERE length(pub_date) BETWEEN 17 AND 19 AND pub_date GLOB '[0-9]*-[0-9][0-9]-*Z'",
        ),
    ),
    (
        16,
        "image_tasks.lease_owner: the collector that leased a task, so that the tasks of one "
        "that was killed are taken back by the next process of its machine instead of waiting "
        "for the lease to run out; image_tasks_leased finds them among the leased tasks alone",
        (
            "ALTER TABLE image_tasks ADD COLUMN lease_owner TEXT",
            "CREATE INDEX IF NOT EXISTS image_tasks_leased "
            "ON image_tasks (lease_owner) WHERE lease_until IS NOT NULL",
        ),
    ),
)


async def migrate(db: Database) -> list[int]:
    """Apply every migration not yet recorded; return the versions applied now."""
    await db.query(
        "CREATE TABLE IF NOT EXISTS schema_migrations "
        "(version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    return await _apply_pending(db)


async def migrate_existing(db: Database) -> bool:
    """:func:`migrate` a database a collector opened before, for a command that reads it:
    False, and nothing created, when none did (:func:`has_schema`). That question takes the
    place of ``migrate``'s CREATE TABLE IF NOT EXISTS, so it costs no extra round trip."""
    if not await has_schema(db):
        return False
    await _apply_pending(db)
    return True


async def _apply_pending(db: Database) -> list[int]:
    """The migrations ``schema_migrations`` (which exists) does not record, applied."""
    done = {row["version"] for row in await db.query("SELECT version FROM schema_migrations")}
    newer = sorted(version for version in done if version > latest_version())
    if newer:
        log.warning(
            "database: it holds migration%s %s of a newer feedcollector (this one knows up to "
            "%d): upgrade this collector; meanwhile it may store an item twice, or write "
            "values the newer code repairs",
            "s" if len(newer) > 1 else "",
            ", ".join(map(str, newer)),
            latest_version(),
        )
    applied: list[int] = []
    for version, description, statements in MIGRATIONS:
        if version in done:
            continue
        record = Statement(
            "INSERT OR IGNORE INTO schema_migrations (version, description, applied_at) "
            "VALUES (?, ?, ?)",
            (version, description, format_timestamp(utc_now())),
        )
        try:
            await db.batch([*(Statement(" ".join(sql.split())) for sql in statements), record])
        except DatabaseError:
            if not await _recorded(db, version):
                raise
            continue  # another collector applied it between our check and our batch
        applied.append(version)
    return applied


async def has_schema(db: Database) -> bool:
    """Whether a collector ever opened this database (it holds ``schema_migrations``): an
    empty D1, or a wrong ``[database] url``, read as "nothing collected yet" otherwise."""
    rows = await db.query(
        "SELECT 1 AS found FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    )
    return bool(rows)


async def _recorded(db: Database, version: int) -> bool:
    rows = await db.query("SELECT 1 AS done FROM schema_migrations WHERE version = ?", (version,))
    return bool(rows)


def latest_version() -> int:
    return MIGRATIONS[-1][0]
