"""The contract suite: every Database and ObjectStore backend must behave the same way.

Databases: the SQLite file and D1 through the real Proxy Worker (Miniflare). Object stores: the
local folder and S3 through moto's server on loopback. Where D1 differs by design (100 bound
parameters, ~2 MB strings, integers beyond 2**53) the test names the difference. Fault tests for
the D1 client and the S3 store follow the contract.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import random
import re
import shutil
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from feedcollector.backends import open_database, open_object_store
from feedcollector.backends import sqlite as sqlite_backend
from feedcollector.backends.d1 import D1Database
from feedcollector.backends.local import LocalObjectStore
from feedcollector.backends.sqlite import SQLiteDatabase
from feedcollector.config import load_settings
from feedcollector.database import CountingDatabase, Database, Statement
from feedcollector.dbbackup import backup_sqlite
from feedcollector.errors import ConfigError, DatabaseError, ObjectNotFoundError, ObjectStoreError
from feedcollector.objectstore import ListedObject, ObjectStore
from feedcollector.schema import has_schema, latest_version, migrate, migrate_existing

from . import cloud
from .cloud import FakeProxy, FakeReply, Live, S3Bucket, collect, d1_database, live, run_d1_proxy
from .samples import closed_port

d1_proxy = cloud.d1_proxy
s3_server = cloud.s3_server
fake_proxy = cloud.fake_proxy

TABLE = (
    "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, n INTEGER, r REAL, b BLOB)"
)


@pytest.fixture(params=["sqlite", pytest.param("d1", marks=pytest.mark.cloud)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Live[Database]]:
    if request.param == "sqlite":
        with live("sqlite", lambda: SQLiteDatabase(tmp_path / "contract.db")) as db:
            yield db
    else:
        with run_d1_proxy() as proxy, live("d1", lambda: d1_database(proxy)) as db:
            yield db


@pytest.fixture
def table(database: Live[Database]) -> Live[Database]:
    database.run(database.backend.batch([Statement(TABLE)]))
    return database


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.cloud)])
def object_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Live[ObjectStore]]:
    if request.param == "local":
        with live("local", lambda: LocalObjectStore(tmp_path / "objects")) as store:
            yield store
    else:
        server = cloud.S3Server().start()
        try:
            bucket = server.create_bucket()
            with live("s3", lambda: server.store(bucket)) as store:
                yield store
        finally:
            server.stop()


def test_migrations_apply_once_and_are_idempotent(database: Live[Database]) -> None:
    db = database.backend
    all_versions = list(range(1, latest_version() + 1))
    assert not database.run(has_schema(db)), "a database no collector opened yet"
    assert database.run(migrate(db)) == all_versions
    assert database.run(has_schema(db))
    assert database.run(migrate(db)) == []
    rows = database.run(
        db.query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    )
    names = {row["name"] for row in rows}
    assert {"feeds", "items", "image_tasks", "schema_migrations"} <= names
    versions = database.run(db.query("SELECT version FROM schema_migrations ORDER BY version"))
    assert versions == [{"version": v} for v in all_versions]


def test_readers_migrate_only_a_database_a_collector_opened(database: Live[Database]) -> None:
    """``status`` and the readers: a database no collector opened is left as it is (nothing
    created); one that was is migrated in two round trips (the check, the recorded versions)."""
    db = CountingDatabase(database.backend)
    assert not database.run(migrate_existing(db)), "a database no collector opened yet"
    assert db.round_trips == 1
    ours = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT GLOB '_cf_*'"
    assert database.run(db.query(ours)) == [], "nothing created (D1 keeps its own _cf_ table)"
    database.run(migrate(db))
    rerun = 15  # an UPDATE, which may run twice (an ADD COLUMN may not)
    database.run(db.query("DELETE FROM schema_migrations WHERE version = ?", (rerun,)))
    db.round_trips = 0
    assert database.run(migrate_existing(db))
    assert db.round_trips == 3, "the check, the versions, the one migration left"
    assert database.run(migrate(db)) == [], "applied and recorded"
    db.round_trips = 0
    assert database.run(migrate_existing(db))
    assert db.round_trips == 2


def test_query_binds_parameters_and_returns_dict_rows(table: Live[Database]) -> None:
    db = table.backend
    table.run(db.query("INSERT INTO t (name, n, r) VALUES (?, ?, ?)", ("a", 7, 1.5)))
    table.run(db.query("INSERT INTO t (name, n, r) VALUES (?, ?, ?)", ("b", 8, None)))
    rows = table.run(db.query("SELECT name, n, r FROM t WHERE n >= ? ORDER BY name", (7,)))
    assert rows == [{"name": "a", "n": 7, "r": 1.5}, {"name": "b", "n": 8, "r": None}]
    assert table.run(db.query("SELECT name FROM t WHERE name = ?", ("zzz",))) == []


def test_returning_and_insert_or_ignore(table: Live[Database]) -> None:
    db = table.backend
    sql = "INSERT OR IGNORE INTO t (name, n) VALUES (?, ?) RETURNING id, name"
    assert table.run(db.query(sql, ("a", 1))) == [{"id": 1, "name": "a"}]
    assert table.run(db.query(sql, ("a", 2))) == []
    assert table.run(db.query("SELECT n FROM t")) == [{"n": 1}]


def test_batch_returns_each_statements_rows(table: Live[Database]) -> None:
    db = table.backend
    results = table.run(
        db.batch(
            [
                Statement("INSERT INTO t (name, n) VALUES (?, ?) RETURNING id", ("a", 1)),
                Statement("INSERT OR IGNORE INTO t (name, n) VALUES (?, ?) RETURNING id", ("a", 9)),
                Statement("UPDATE t SET n = n + 10 WHERE name = ?", ("a",)),
                Statement("SELECT name, n FROM t"),
            ]
        )
    )
    assert results == [[{"id": 1}], [], [], [{"name": "a", "n": 11}]]
    assert table.run(db.batch([])) == []


def test_batch_is_all_or_nothing(table: Live[Database]) -> None:
    db = table.backend
    table.run(db.query("INSERT INTO t (name) VALUES ('existing')"))
    statements = [
        Statement("INSERT INTO t (name) VALUES (?)", ("new-1",)),
        Statement("UPDATE t SET n = 99"),
        Statement("INSERT INTO t (name) VALUES (?)", ("existing",)),
    ]
    with pytest.raises(DatabaseError, match="UNIQUE constraint failed"):
        table.run(db.batch(statements))
    assert table.run(db.query("SELECT name, n FROM t")) == [{"name": "existing", "n": None}]


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELEC 1", "syntax error"),
        ("SELECT * FROM missing_table", "no such table"),
        ("INSERT INTO t (name) VALUES (NULL)", "NOT NULL constraint failed"),
    ],
)
def test_errors_are_database_errors(table: Live[Database], sql: str, message: str) -> None:
    with pytest.raises(DatabaseError, match=message) as caught:
        table.run(table.backend.query(sql))
    assert str(caught.value).startswith("database: ")
    assert sql in str(caught.value)


def test_text_no_utf_8_holds_is_a_database_error_and_the_next_batch_works(
    table: Live[Database],
) -> None:
    """Half of a UTF-16 pair (a JSON escape can make one) cannot be stored: the batch fails
    whole as a DatabaseError, and the connection stays usable (SQLite's open transaction
    used to fail every later batch of the process)."""
    db = table.backend
    broken = [
        Statement("INSERT INTO t (name) VALUES (?)", ("kept out",)),
        Statement("INSERT INTO t (name) VALUES (?)", ("half \ud800 of a pair",)),
    ]
    with pytest.raises(DatabaseError, match="surrogates not allowed"):
        table.run(db.batch(broken))
    with pytest.raises(DatabaseError, match="surrogates not allowed"):
        table.run(db.query("INSERT INTO t (name) VALUES (?)", ("\udc00",)))
    table.run(db.batch([Statement("INSERT INTO t (name) VALUES (?)", ("next",))]))
    assert table.run(db.query("SELECT name FROM t")) == [{"name": "next"}]


def test_foreign_keys_are_enforced(database: Live[Database]) -> None:
    db = database.backend
    database.run(migrate(db))
    insert = "INSERT INTO items (id, feed_id, guid, created_at) VALUES (?, ?, ?, ?)"
    with pytest.raises(DatabaseError, match="FOREIGN KEY constraint failed"):
        database.run(db.query(insert, ("i1", "no-such-feed", "g", "2026-01-01T00:00:00Z")))


def test_unicode_round_trips(table: Live[Database]) -> None:
    db = table.backend
    texts = [
        "中文标题",
        "emoji 🎉👩‍👩‍👧",
        "mixed ÅÄÖ ß \u2028 line\nbreak",
        "nul\u0000inside",
        "'quotes\" \\",
    ]
    for text in texts:
        table.run(db.query("INSERT INTO t (name) VALUES (?)", (text,)))
    rows = table.run(db.query("SELECT name FROM t ORDER BY id"))
    assert [row["name"] for row in rows] == texts
    assert table.run(db.query("SELECT '中文 🎉' AS literal")) == [{"literal": "中文 🎉"}]


def test_numbers_and_blobs_round_trip(table: Live[Database]) -> None:
    db = table.backend
    blob = bytes(range(256)) * 4
    table.run(
        db.query(
            "INSERT INTO t (name, n, r, b) VALUES (?, ?, ?, ?)", ("x", -(2**53 - 1), 0.1, blob)
        )
    )
    row = table.run(db.query("SELECT n, r, b, typeof(n) AS tn, typeof(b) AS tb FROM t"))[0]
    assert row == {"n": -(2**53 - 1), "r": 0.1, "b": blob, "tn": "integer", "tb": "blob"}
    assert isinstance(row["n"], int)


def test_integers_beyond_2_53(table: Live[Database]) -> None:
    """SQLite stores them exactly; D1's JSON would round them, so the client refuses them."""
    db = table.backend
    big = 2**53 + 1
    insert = db.query("INSERT INTO t (name, n) VALUES (?, ?) RETURNING n", ("big", big))
    if table.name == "d1":
        with pytest.raises(DatabaseError, match="exceeds 2\\*\\*53-1"):
            table.run(insert)
    else:
        assert table.run(insert) == [{"n": big}]


def test_hundred_parameters_work_and_d1_refuses_more(table: Live[Database]) -> None:
    db = table.backend
    sql = "SELECT " + ", ".join(f"? AS c{i}" for i in range(100))
    assert table.run(db.query(sql, tuple(range(100)))) == [{f"c{i}": i for i in range(100)}]
    over = db.query(sql + ", ? AS c100", tuple(range(101)))
    if table.name == "d1":
        with pytest.raises(DatabaseError, match="at most 100"):
            table.run(over)
    else:
        assert table.run(over)[0]["c100"] == 100


def test_big_strings(table: Live[Database]) -> None:
    """1 MB fits everywhere; D1 refuses values over ~2 MB (SQLITE_TOOBIG), SQLite does not."""
    db = table.backend
    sql = "INSERT INTO t (name) VALUES (?) RETURNING length(name) AS n"
    assert table.run(db.query(sql, ("é" * 500_000,))) == [{"n": 500_000}]
    huge = db.query(sql, ("x" * 3_000_000,))
    if table.name == "d1":
        with pytest.raises(DatabaseError, match="SQLITE_TOOBIG"):
            table.run(huge)
    else:
        assert table.run(huge) == [{"n": 3_000_000}]


def test_exec_runs_one_statement_per_line(database: Live[Database]) -> None:
    db = database.backend
    database.run(
        db.exec("CREATE TABLE a (x TEXT);\nCREATE TABLE b (y TEXT);\nINSERT INTO a VALUES ('1');")
    )
    assert database.run(db.query("SELECT x FROM a")) == [{"x": "1"}]
    assert database.run(db.query("SELECT y FROM b")) == []


def test_put_get_round_trip_of_binary_data(object_store: Live[ObjectStore]) -> None:
    store = object_store.backend
    data = bytes(range(256)) * 4096
    object_store.run(store.put("images/feed1/abcd1234/0.png", data, "image/png"))
    object_store.run(store.put("backups/feed1/empty.xml", b""))
    assert object_store.run(store.get("images/feed1/abcd1234/0.png")) == data
    assert object_store.run(store.get("backups/feed1/empty.xml")) == b""


def test_put_overwrites(object_store: Live[ObjectStore]) -> None:
    store = object_store.backend
    object_store.run(store.put("k/v.txt", b"first"))
    object_store.run(store.put("k/v.txt", b"second"))
    assert object_store.run(store.get("k/v.txt")) == b"second"
    assert object_store.run(collect(store.list("k/"))) == ["k/v.txt"]


def test_get_missing_raises_object_not_found(object_store: Live[ObjectStore]) -> None:
    with pytest.raises(ObjectNotFoundError, match="no object"):
        object_store.run(object_store.backend.get("backups/nobody/never.xml"))


def test_list_by_prefix_in_lexical_order(object_store: Live[ObjectStore]) -> None:
    store = object_store.backend
    mine = [f"backups/f1/2026-01-{day:02d}T00:00:00Z.xml" for day in (1, 2, 10, 11, 20)]
    others = [
        "backups/f10/2026-01-01T00:00:00Z.xml",
        "backups/f2/x.xml",
        "images/f1/aa/0.png",
        "backupsX",
    ]
    keys = mine + others
    random.Random(7).shuffle(keys)
    for key in keys:
        object_store.run(store.put(key, key.encode()))
    assert object_store.run(collect(store.list("backups/f1/"))) == sorted(mine)
    prefix_only = object_store.run(collect(store.list("backups/f1")))
    assert prefix_only == sorted([*mine, "backups/f10/2026-01-01T00:00:00Z.xml"])
    assert object_store.run(collect(store.list("backups/"))) == sorted(
        k for k in keys if k.startswith("backups/")
    )
    assert object_store.run(collect(store.list("nothing/here/"))) == []


def test_list_with_times_lists_as_list_does_with_times_and_sizes(
    object_store: Live[ObjectStore],
) -> None:
    """Same keys, same order, same prefix rules as ``list``; each with an aware UTC time of
    its last write (S3 keeps whole seconds) and its size. The local store reads a folder's
    keys in order: ``f1-x`` and ``f1.x`` sort before the keys of folder ``f1/``."""
    store = object_store.backend
    keys = [
        "images/f1/aa/0.png",
        "images/f1/aa/10.png",
        "images/f1/aa/2.png",
        "images/f1-x.png",
        "images/f1.x/0.png",
        "images/f10/b/0.png",
        "images/f1/ab/0.png",
        "content/f1/aa.html",
        "imagesX",
    ]
    random.Random(3).shuffle(keys)
    before = datetime.now(UTC) - timedelta(seconds=2)
    for n, key in enumerate(keys):
        object_store.run(store.put(key, b"x" * n))
    after = datetime.now(UTC) + timedelta(seconds=2)

    async def listed(prefix: str) -> list[ListedObject]:
        return [found async for found in store.list_with_times(prefix)]

    for prefix in ("images/", "images/f1", "images/f1/", "images/f1/aa/1", "", "none/"):
        with_times = object_store.run(listed(prefix))
        expected = sorted(key for key in keys if key.startswith(prefix))
        assert [found.key for found in with_times] == expected, prefix
        assert object_store.run(collect(store.list(prefix))) == expected, prefix
        for found in with_times:
            assert found.last_modified.utcoffset() == timedelta(0)
            assert before <= found.last_modified <= after
            assert found.size == keys.index(found.key)
    object_store.run(store.put("images/f1-x.png", b"again"))
    (rewritten,) = object_store.run(listed("images/f1-x.png"))
    assert rewritten.size == 5


def test_the_local_store_lists_the_files_modification_time(tmp_path: Path) -> None:
    with live("local", lambda: LocalObjectStore(tmp_path / "objects")) as store:
        store.run(store.backend.put("images/f/aa/0.png", b"png"))
        old = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
        os.utime(tmp_path / "objects/images/f/aa/0.png", (old.timestamp(), old.timestamp()))

        async def listed() -> list[ListedObject]:
            return [found async for found in store.backend.list_with_times("images/")]

        assert store.run(listed()) == [ListedObject("images/f/aa/0.png", old, 3)]


def test_the_local_store_writes_files_readable_as_the_umask_allows(tmp_path: Path) -> None:
    """A web server running as another user serves the folder (public_base_url): objects
    get the mode any new file gets, not a temporary file's 0600."""
    old_umask = os.umask(0o022)
    try:
        with live("local", lambda: LocalObjectStore(tmp_path / "objects")) as store:
            store.run(store.backend.put("images/f/aa/0.png", b"png"))
            store.run(store.backend.put("images/f/aa/0.png", b"png again"))
        assert (tmp_path / "objects/images/f/aa/0.png").stat().st_mode & 0o777 == 0o644
        os.umask(0o077)
        with live("local", lambda: LocalObjectStore(tmp_path / "private")) as store:
            store.run(store.backend.put("backups/f/1.xml", b"<rss/>"))
        assert (tmp_path / "private/backups/f/1.xml").stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(old_umask)


def test_a_durable_local_write_reaches_the_disk_before_its_rename_and_the_rename_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A power cut can only be simulated: the order of the flushes and the rename is what
    makes a row never name an empty file (the new folders' entries too, up to the root)."""
    root = tmp_path / "objects"
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(handle: int) -> None:
        target = Path(os.readlink(f"/proc/self/fd/{handle}"))
        events.append(f"fsync {target.relative_to(tmp_path).as_posix()}")
        real_fsync(handle)

    def replace(source: str | Path, target: str | Path) -> None:
        events.append(f"rename to {Path(target).relative_to(tmp_path).as_posix()}")
        real_replace(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    with live("local", lambda: LocalObjectStore(root)) as store:
        store.run(store.backend.put("images/f/aa/0.png", b"png"))
        flushed_temp, *rest = events
        assert flushed_temp.startswith("fsync objects/.partial/.partial-")
        assert rest == [
            "rename to objects/images/f/aa/0.png",  # the first try finds no folder
            "rename to objects/images/f/aa/0.png",
            "fsync objects/images/f/aa",
            "fsync objects/images/f",
            "fsync objects/images",
            "fsync objects",
        ]
        events.clear()
        store.run(store.backend.put("images/f/aa/1.png", b"png"))
        assert events[1:] == ["rename to objects/images/f/aa/1.png", "fsync objects/images/f/aa"]
        events.clear()
        store.run(store.backend.put("images/f/bb/0.png", b"png"))  # its parent is there
        assert events[1:] == [
            "rename to objects/images/f/bb/0.png",
            "rename to objects/images/f/bb/0.png",
            "fsync objects/images/f/bb",
            "fsync objects/images/f",
        ]
        events.clear()
        store.run(store.backend.put("backups/f/1.xml", b"<rss/>", durable=False))
        assert [event for event in events if event.startswith("fsync")] == []
        assert (root / "backups/f/1.xml").read_bytes() == b"<rss/>"


def test_a_local_write_whose_temporary_name_is_taken_takes_another(tmp_path: Path) -> None:
    """Temporary names are a nonce and a count: a forked process counts from where its parent
    was, and a name another write holds must not be written over (or fail the write)."""
    root = tmp_path / "objects"
    store_a, store_b = LocalObjectStore(root), LocalObjectStore(root)
    store_b._nonce, store_b._count = store_a._nonce, itertools.count()  # as after a fork
    with live("local", lambda: store_a) as store:
        store.run(store.backend.put("backups/f/1.xml", b"first"))
        held = store_a._next_temporary()  # a write of store_a in progress holds this name
        held.write_bytes(b"a write in progress")
        store_b._count = itertools.count(int(held.name.rsplit("-", 1)[1]))
        store.run(store_b.put("backups/f/2.xml", b"second"))
        assert held.read_bytes() == b"a write in progress"
        assert (root / "backups/f/2.xml").read_bytes() == b"second"
        assert store_b._nonce != store_a._nonce


def test_delete_many_deletes_only_given_keys_and_ignores_missing(
    object_store: Live[ObjectStore],
) -> None:
    store = object_store.backend
    for key in ("d/1", "d/2", "d/3"):
        object_store.run(store.put(key, b"x"))
    object_store.run(store.delete_many(["d/1", "d/3", "d/never", "other/never"]))
    object_store.run(store.delete_many([]))
    assert object_store.run(collect(store.list("d/"))) == ["d/2"]


def test_delete_many_beyond_one_request(object_store: Live[ObjectStore]) -> None:
    store = object_store.backend
    keys = [f"images/feed/{i:05d}.bin" for i in range(2500)]
    for key in keys[:50] + keys[-50:]:
        object_store.run(store.put(key, b"x"))
    object_store.run(store.put("images/keep.bin", b"x"))
    object_store.run(store.delete_many(keys))
    assert object_store.run(collect(store.list("images/"))) == ["images/keep.bin"]


def test_local_store_sweeps_temp_files_of_killed_writes_and_never_lists_them(
    tmp_path: Path,
) -> None:
    """A SIGKILL mid-write leaves a temp file; the next writer removes it once it is old."""
    root = tmp_path / "objects"
    temp = root / ".partial"
    temp.mkdir(parents=True)
    abandoned, recent = temp / ".partial-abandoned", temp / ".partial-recent"
    abandoned.write_bytes(b"half an obj")
    recent.write_bytes(b"a write in progress")
    old = time.time() - 2 * 3600
    os.utime(abandoned, (old, old))
    with live("local", lambda: LocalObjectStore(root)) as store:
        assert store.run(collect(store.backend.list(""))) == []
        store.run(store.backend.put("backups/f/1.xml", b"<rss/>"))
        assert not abandoned.exists(), "a temp file older than an hour is swept"
        assert recent.exists(), "a recent temp file may belong to a live write"
        assert store.run(collect(store.backend.list(""))) == ["backups/f/1.xml"]
        with pytest.raises(ObjectStoreError, match="invalid object key"):
            store.run(store.backend.put(".partial/x", b"x"))


@pytest.mark.cloud
def test_s3_delete_many_sends_one_delete_objects_per_1000_keys(s3_server: S3Bucket) -> None:
    """moto accepts more than 1000 keys per call (real S3 and R2 refuse), so count the calls."""
    keys = [f"images/f/{i:05d}.png" for i in range(2500)]
    with live("s3", s3_server.store) as store:
        for key in keys[::100]:
            store.run(store.backend.put(key, b"img"))
        store.run(store.backend.delete_many(keys))
        assert store.run(collect(store.backend.list("images/"))) == []
    calls = s3_server.server.delete_objects_calls(s3_server.bucket)
    per_call = [len(re.findall(rb"<Key>", call.body)) for call in calls]
    assert per_call == [1000, 1000, 500]


@pytest.mark.cloud
def test_s3_listing_a_key_starts_at_it_not_at_its_folders_start(s3_server: S3Bucket) -> None:
    """Whether a spilled item's HTML exists was asked by listing its whole folder from the
    start: slower as a feed's folder grew, a paid list request per 1,000 keys on R2 (a
    9,000-item feed: 21 min on the cloud shape against 16 s locally)."""
    keys = [f"content/f/{n:04d}.html" for n in range(1200)]
    with live("s3", s3_server.store) as store:
        for key in keys:
            store.run(store.backend.put(key, b"<p>x</p>"))
        before = len(s3_server.server.requests)
        assert store.run(collect(store.backend.list("content/f/1150.html"))) == [keys[1150]]
        assert store.run(collect(store.backend.list("content/f/115"))) == keys[1150:1160]
        assert store.run(collect(store.backend.list("content/f/"))) == keys
    lists = [r for r in s3_server.server.requests[before:] if r.method == "GET"]
    assert [r.query.get("start-after") for r in lists] == [
        ["content/f/1150.htm"],
        ["content/f/11"],
        None,
        None,
    ]


@pytest.mark.cloud
def test_s3_public_url_and_content_type(s3_server: S3Bucket) -> None:
    with live("s3", lambda: s3_server.store(public_base_url="https://img.example.com/")) as store:
        assert (
            store.backend.public_url("images/f/ab/0.png")
            == "https://img.example.com/images/f/ab/0.png"
        )
        store.run(store.backend.put("images/f/ab/0.png", b"\x89PNG", "image/png"))
    head = s3_server.server.client().head_object(Bucket=s3_server.bucket, Key="images/f/ab/0.png")
    assert head["ContentType"] == "image/png"
    assert s3_server.store().public_url("images/f/ab/0.png") is None


@pytest.mark.cloud
def test_an_s3_key_obstore_cannot_read_is_named_with_what_to_do(s3_server: S3Bucket) -> None:
    """Another tool's ``backups/x//y.xml`` made every listing of backups/ fail (cleanup and
    restore every day) with obstore's words alone."""
    s3_server.server.client().put_object(Bucket=s3_server.bucket, Key="backups/x//y.xml", Body=b"")
    with (
        live("s3", s3_server.store) as store,
        pytest.raises(ObjectStoreError, match="delete or rename that object"),
    ):
        store.run(collect(store.backend.list("backups/")))


@pytest.mark.cloud
def test_s3_wrong_bucket_and_stopped_server_raise_object_store_error(s3_server: S3Bucket) -> None:
    with live("s3", lambda: s3_server.server.store("no-such-bucket")) as wrong:
        with pytest.raises(ObjectStoreError, match="bucket does not exist") as caught:
            wrong.run(wrong.backend.get("a/b"))
        assert not isinstance(caught.value, ObjectNotFoundError)
        assert "create it, or correct [storage] bucket" in str(caught.value)
        for code in ("SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied"):
            refused = wrong.backend._error("put", "a/b", OSError(f"403 Forbidden: <Code>{code}"))
            assert "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in str(refused), code
        with pytest.raises(ObjectStoreError, match="no-such-bucket"):
            wrong.run(wrong.backend.put("a/b", b"x"))
    with live("s3", lambda: s3_server.store(timeout_s=5)) as store:
        store.run(store.backend.put("a/b", b"x"))
        s3_server.server.stop()
        started = time.monotonic()
        for step in (
            store.backend.put("a/c", b"x"),
            store.backend.get("a/b"),
            collect(store.backend.list("a/")),
            store.backend.delete_many(["a/b"]),
        ):
            with pytest.raises(
                ObjectStoreError, match=f"at {re.escape(s3_server.server.endpoint)}"
            ) as stopped:
                store.run(step)
            assert "(no answer from the store: check [storage] endpoint" in str(stopped.value)
        assert time.monotonic() - started < 60, "did not hang"


def test_a_failed_database_copy_leaves_no_file_behind(tmp_path: Path) -> None:
    """On a full disk VACUUM INTO leaves its own journal beside the partial copy: a nightly
    backup-db then left one stray file a night."""
    source = tmp_path / "collector.db"
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE t (v)")
    partial = tmp_path / f".backup-db-{os.getpid()}.partial"
    partial.mkdir()  # the copy cannot be written
    (tmp_path / f"{partial.name}-journal").write_bytes(b"left by the failed copy")
    with pytest.raises(DatabaseError, match="backup-db: cannot copy"):
        backup_sqlite(source, tmp_path / "copy.db")
    left = sorted(path.name for path in tmp_path.iterdir())
    assert left == sorted(["collector.db", partial.name]), "the folder in its way stays"


def test_a_database_copy_never_replaces_a_file_made_while_it_was_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name was checked before the copy and the copy renamed over it after: a file made
    there meanwhile (another backup-db's, a user's) was replaced."""
    source = tmp_path / "collector.db"
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE t (v)")
    target = tmp_path / "copy.db"
    connect = sqlite3.connect

    def then_someone_writes_the_target(database: Any, *args: Any, **kwargs: Any) -> Any:
        if str(database).endswith(".partial"):  # the check of the finished copy
            target.write_bytes(b"made meanwhile")
        return connect(database, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", then_someone_writes_the_target)
    with pytest.raises(ConfigError, match="was created while the copy was made"):
        backup_sqlite(source, target)
    assert target.read_bytes() == b"made meanwhile"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["collector.db", "copy.db"]


def test_a_sqlite_file_replaced_while_open_gets_no_stale_write_ahead_log(tmp_path: Path) -> None:
    """``mv new.db collector.db`` while a collector runs: SQLite leaves the old file's
    write-ahead log beside the new one, and the next process to open it applied those pages
    to the new file (a corrupt database). Closing empties that log first."""
    path = tmp_path / "collector.db"

    async def scenario() -> None:
        db = SQLiteDatabase(path)
        await db.exec("CREATE TABLE t (v TEXT)")
        insert = [Statement("INSERT INTO t VALUES (?)", ("x" * 500,))] * 400
        await db.batch(insert)
        await db.exec(f"VACUUM INTO '{tmp_path / 'copy.db'}'")
        os.replace(tmp_path / "copy.db", path)
        await db.batch(insert)  # the old file's WAL grows until the replacement is noticed
        assert (tmp_path / "collector.db-wal").stat().st_size > 0
        await db.close()

    asyncio.run(scenario())
    wal = tmp_path / "collector.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    with sqlite3.connect(path) as reopened:
        assert reopened.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert reopened.execute("SELECT COUNT(*) FROM t").fetchall() == [(400,)]


def test_a_replaced_file_whose_log_a_reader_holds_says_what_to_delete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A reader of the old file keeps its write-ahead log from being emptied (SQLite says so
    in the checkpoint's result, raising nothing): the ERROR says what to do by hand."""
    monkeypatch.setattr(sqlite_backend, "WAL_EMPTYING_PATIENCE_MS", 50)
    path = tmp_path / "collector.db"

    async def scenario() -> None:
        db = SQLiteDatabase(path)
        await db.exec("CREATE TABLE t (v TEXT)")
        await db.batch([Statement("INSERT INTO t VALUES ('x')")] * 50)
        reader = sqlite3.connect(path, isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM t").fetchall()  # a read transaction on the old file
        await db.exec(f"VACUUM INTO '{tmp_path / 'copy.db'}'")
        os.replace(tmp_path / "copy.db", path)
        await db.batch([Statement("INSERT INTO t VALUES ('y')")] * 50)
        try:
            await db.close()
        finally:
            reader.close()

    with caplog.at_level(logging.ERROR, logger="feedcollector"):
        asyncio.run(scenario())
    assert "was replaced while open, and the write-ahead log beside it could not be" in caplog.text
    assert f"delete {path}-wal and {path}-shm" in caplog.text


def test_a_sqlite_file_locked_by_another_process_opens_and_reads_at_once(tmp_path: Path) -> None:
    """Commands that only read (``status``, ``items``, a dry run) open the file beside a
    writer without waiting: opening checked writability by taking the write lock, so they
    waited for it and failed after ``[database] timeout``. A write still waits, then says
    what holds it."""
    path = tmp_path / "locked.db"

    async def scenario() -> tuple[list[dict[str, object]], list[list[dict[str, object]]], str]:
        seed = SQLiteDatabase(path)
        await seed.batch(
            [Statement("CREATE TABLE t (v INTEGER)"), Statement("INSERT INTO t VALUES (1)")]
        )
        await seed.close()
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            db = SQLiteDatabase(path, busy_timeout_s=0.05)
            rows = await db.query("SELECT v FROM t")
            lookups = await db.batch([Statement("SELECT v FROM t"), Statement("SELECT 2 AS v")])
            with pytest.raises(DatabaseError) as caught:
                await db.query("INSERT INTO t VALUES (3)")
            await db.close()
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        return rows, lookups, str(caught.value)

    rows, lookups, message = asyncio.run(scenario())
    assert rows == [{"v": 1}]
    assert lookups == [[{"v": 1}], [{"v": 2}]]
    assert f"SQLite {path}: database is locked (waited 0.05 s)" in message
    assert "Another process holds a write lock" in message


def test_a_locked_sqlite_file_this_user_may_not_write_is_still_refused_at_open(
    tmp_path: Path,
) -> None:
    if os.geteuid() == 0:
        pytest.skip("file permissions do not stop root")
    path = tmp_path / "locked.db"
    asyncio.run(SQLiteDatabase(path).close())
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    path.chmod(0o444)
    try:
        with pytest.raises(DatabaseError, match="must be writable"):
            SQLiteDatabase(path, busy_timeout_s=0.05)
    finally:
        path.chmod(0o644)
        holder.execute("ROLLBACK")
        holder.close()


def test_a_path_that_is_no_sqlite_file_says_what_it_is_and_is_left_as_it_was(
    tmp_path: Path,
) -> None:
    """Such a path was met with advice about permissions and full disks."""
    feeds = tmp_path / "feeds.yaml"
    feeds.write_text("feeds:\n  - https://a.example/feed\n" * 200, encoding="utf-8")
    written = feeds.read_bytes()
    with pytest.raises(DatabaseError) as not_sqlite:
        SQLiteDatabase(feeds)
    assert str(not_sqlite.value) == (
        f"database: {feeds} is not an SQLite database (file is not a database: another kind "
        "of file, or a damaged database); nothing was written to it. Point [database] path at "
        "another file (a damaged database: put back a `backup-db` copy)."
    )
    assert feeds.read_bytes() == written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["feeds.yaml"]
    with pytest.raises(DatabaseError) as folder:
        SQLiteDatabase(tmp_path)
    assert str(folder.value) == (
        f"database: {tmp_path} is a folder, not a database file; point [database] path at a "
        "file (it is created on first use)."
    )


def test_the_sqlite_busy_wait_is_the_configured_database_timeout(tmp_path: Path) -> None:
    """``[database] timeout`` bounds the wait for another process's write lock (it was 30 s
    whatever the setting said, while only D1 obeyed it)."""
    config = tmp_path / "feedcollector.toml"
    config.write_text('[database]\npath = "locked.db"\ntimeout = "50ms"\n', encoding="utf-8")
    settings = load_settings(config)
    asyncio.run(SQLiteDatabase(settings.database.path).close())  # created, in WAL mode
    holder = sqlite3.connect(settings.database.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")

    async def write() -> None:
        db = open_database(settings)
        try:
            await db.batch([Statement("PRAGMA user_version = 1")])
        finally:
            await db.close()

    try:
        with pytest.raises(DatabaseError) as caught:
            asyncio.run(write())
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "database is locked (waited 0.05 s)" in str(caught.value)


def test_a_write_lock_held_elsewhere_is_waited_for_while_the_event_loop_runs(
    tmp_path: Path,
) -> None:
    """Another process's write lock is waited out with the loop free: here only a callback
    of this loop lets go of the lock, so SQLite's own busy wait (the loop frozen for the
    whole timeout: fetches in flight missed their deadlines) ends in an error instead."""
    path = tmp_path / "shared.db"

    async def scenario() -> list[dict[str, object]]:
        db = SQLiteDatabase(path, busy_timeout_s=60)
        await db.batch([Statement("CREATE TABLE t (v INTEGER)")])
        holder = sqlite3.connect(path, isolation_level=None, timeout=30)
        loop = asyncio.get_running_loop()
        try:
            for write in (
                lambda: db.batch([Statement("INSERT INTO t VALUES (1)")]),
                lambda: db.query("INSERT INTO t VALUES (2) RETURNING v"),
            ):
                holder.execute("BEGIN IMMEDIATE")
                loop.call_later(0.2, holder.execute, "ROLLBACK")
                await asyncio.wait_for(write(), timeout=30)
            return await db.query("SELECT v FROM t ORDER BY v")
        finally:
            holder.close()
            await db.close()

    assert asyncio.run(scenario()) == [{"v": 1}, {"v": 2}]


def test_a_write_lock_held_past_the_timeout_fails_the_batch_whole(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"

    async def scenario() -> tuple[str, list[dict[str, object]]]:
        db = SQLiteDatabase(path, busy_timeout_s=0.05)
        await db.batch([Statement("CREATE TABLE t (v INTEGER)")])
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(DatabaseError) as caught:
                await db.batch([Statement("INSERT INTO t VALUES (1)")])
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        await db.batch([Statement("INSERT INTO t VALUES (2)")])  # the connection is usable
        rows = await db.query("SELECT v FROM t")
        await db.close()
        return str(caught.value), rows

    message, rows = asyncio.run(scenario())
    assert "database is locked (waited 0.05 s)" in message
    assert "sql: INSERT INTO t VALUES (1);" in message, "what could not begin"
    assert "Another process holds a write lock" in message
    assert rows == [{"v": 2}]


def test_d1_proxy_down_is_a_database_error() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with (
        live("d1", lambda: D1Database(url, "token")) as db,
        pytest.raises(DatabaseError, match="unreachable") as caught,
    ):
        db.run(db.backend.query("SELECT ? AS v", ("param-value",)))
    assert f"{url}/query" in str(caught.value)
    assert "SELECT ? AS v" in str(caught.value)
    assert "param-value" in str(caught.value)
    assert "check that the Worker is deployed and running and that [database] url" in str(
        caught.value
    ), "it says what to check"


def test_d1_proxy_500_is_a_database_error_with_the_details(fake_proxy: FakeProxy) -> None:
    fake_proxy.reply = FakeReply(
        500, b'{"error": {"kind": "d1", "message": "D1 DB is overloaded"}}'
    )
    long_sql = "INSERT INTO items (content_html) VALUES (?) -- " + "x" * 1000
    with live("d1", lambda: D1Database(fake_proxy.url, "token")) as db:
        with pytest.raises(DatabaseError) as caught:
            db.run(db.backend.batch([Statement(long_sql, ("y" * 5000,))]))
        message = str(caught.value)
        assert message.startswith(
            f"database: D1 proxy {fake_proxy.url}/batch answered 500: D1 DB is overloaded [d1]"
        )
        assert "INSERT INTO items" in message
        assert len(message) < 1000
        fake_proxy.reply = FakeReply(502, b"<html>Bad gateway</html>", content_type="text/html")
        with pytest.raises(DatabaseError, match=r"answered 502: .*Bad gateway"):
            db.run(db.backend.query("SELECT 1"))
        fake_proxy.reply = FakeReply(200, b"[1, 2]")
        with pytest.raises(DatabaseError, match="without a JSON object"):
            db.run(db.backend.query("SELECT 1"))


def test_d1_proxy_timeout_is_a_database_error(fake_proxy: FakeProxy) -> None:
    fake_proxy.reply = FakeReply(delay_s=3.0)
    with live("d1", lambda: D1Database(fake_proxy.url, "token", timeout_s=0.3)) as db:
        started = time.monotonic()
        with pytest.raises(DatabaseError, match=r"timed out after 0\.3s"):
            db.run(db.backend.query("SELECT 1"))
        assert time.monotonic() - started < 2.5, "did not wait for the slow proxy"


@pytest.mark.cloud
def test_d1_wrong_token_names_the_environment_variable(d1_proxy: cloud.D1Proxy) -> None:
    with (
        live("d1", lambda: D1Database(d1_proxy.url, "not-the-token")) as db,
        pytest.raises(DatabaseError, match=r"401.*FEEDCOLLECTOR_D1_TOKEN"),
    ):
        db.run(db.backend.query("SELECT 1"))


def test_d1_client_keeps_one_connection_and_one_request_per_batch(fake_proxy: FakeProxy) -> None:
    fake_proxy.respond = lambda payload: FakeReply(
        body=b'{"results": [' + b",".join(b"[]" for _ in payload.get("statements", [])) + b"]}"
        if "statements" in payload
        else b'{"results": []}'
    )
    statements = [Statement("INSERT OR IGNORE INTO items VALUES (?)", (str(i),)) for i in range(50)]
    with live("d1", lambda: D1Database(fake_proxy.url, "token")) as db:
        assert db.run(db.backend.batch(statements)) == [[] for _ in statements]
        db.run(db.backend.query("SELECT 1"))
        db.run(db.backend.exec("CREATE TABLE x (y)"))
    assert [path for path, _, _ in fake_proxy.requests] == ["/batch", "/query", "/exec"]
    assert len(fake_proxy.requests[0][1]["statements"]) == 50
    assert len({client for _, _, client in fake_proxy.requests}) == 1, "one keep-alive connection"


def test_the_local_store_makes_missing_folders_again(tmp_path: Path) -> None:
    """Folders are made when a write finds them missing, even if removed while running."""
    root = tmp_path / "objects"
    objects = LocalObjectStore(root)
    asyncio.run(objects.put("backups/feed/one.xml", b"1"))
    shutil.rmtree(root / ".partial")
    shutil.rmtree(root / "backups")
    asyncio.run(objects.put("backups/feed/two.xml", b"2"))
    assert (root / "backups" / "feed" / "two.xml").read_bytes() == b"2"
    assert list((root / ".partial").iterdir()) == []


def test_the_local_store_removes_the_folders_deletes_leave_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Expired items left their folders behind, empty, forever; a write whose new folder a
    delete (of another process) removed meanwhile makes it again."""
    root = tmp_path / "objects"
    objects = LocalObjectStore(root)
    keys = ["images/f/aa/0.png", "images/f/aa/1.png", "images/f/bb/0.png", "backups/f/1.xml"]
    for key in keys:
        asyncio.run(objects.put(key, b"x"))
    asyncio.run(objects.delete_many(["images/f/aa/0.png", "images/f/aa/1.png"]))
    assert not (root / "images/f/aa").exists()
    assert (root / "images/f/bb/0.png").exists()
    asyncio.run(objects.delete_many(["images/f/bb/0.png", "backups/f/1.xml", "images/none.png"]))
    assert sorted(path.name for path in root.iterdir()) == [".partial"]

    real_mkdir = Path.mkdir

    def made_then_removed(path: Path, *args: Any, **kwargs: Any) -> None:
        real_mkdir(path, *args, **kwargs)
        if path.name == "cc" and not made:
            made.append(path)
            path.rmdir()  # a delete of the folder's last object, between mkdir and rename

    made: list[Path] = []
    monkeypatch.setattr(Path, "mkdir", made_then_removed)
    asyncio.run(objects.put("images/f/cc/0.png", b"png"))
    assert (root / "images/f/cc/0.png").read_bytes() == b"png"
    assert made


def test_the_s3_request_bound_is_the_storage_timeout_setting(tmp_path: Path) -> None:
    """A store that takes the connection and never answers held every backup and image write
    for a fixed 60 s; ``[storage] timeout`` sets that bound."""
    silent = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept_and_say_nothing() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(silent.accept()[0])

    threading.Thread(target=accept_and_say_nothing, daemon=True).start()
    port = silent.getsockname()[1]
    config = tmp_path / "feedcollector.toml"
    config.write_text(
        f'[storage]\nbackend = "s3"\nendpoint = "http://127.0.0.1:{port}"\nbucket = "feeds"\n'
        'timeout = "1s"\n'
    )
    environ = {"AWS_ACCESS_KEY_ID": "key", "AWS_SECRET_ACCESS_KEY": "secret"}
    settings = load_settings(config, environ=environ)
    assert settings.storage.timeout == timedelta(seconds=1)
    store = open_object_store(settings)

    async def put() -> None:
        try:
            await store.put("backups/x/1.xml", b"<rss/>")
        finally:
            await store.close()

    started = time.monotonic()
    try:
        with pytest.raises(ObjectStoreError, match=f"127.0.0.1:{port}"):
            asyncio.run(put())
    finally:
        silent.close()
        for connection in held:
            connection.close()
    assert time.monotonic() - started < 30, "gave up after the configured second or two"
