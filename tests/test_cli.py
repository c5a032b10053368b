"""The ``feedcollector`` command end to end: a subprocess against a feed server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import os
import re
import resource
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import tomllib
from collections.abc import Mapping
from pathlib import Path

import pytest

from benchmarks.farm import run_farm
from feedcollector.backends.sqlite import SQLiteDatabase
from feedcollector.schema import latest_version, migrate

from .conftest import PROJECT_ROOT
from .feedserver import FeedServer, Route
from .samples import Entry, png, rss, write_project


def feedcollector(
    *args: str,
    cwd: Path,
    timeout: float = 120,
    open_files: tuple[int, int] | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own; ``open_files`` sets its (soft, hard) open-file limit,
    ``env`` adds to the environment (which has no FEEDCOLLECTOR_CONFIG otherwise)."""

    def limit() -> None:
        if open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, open_files)

    return subprocess.run(
        [sys.executable, "-m", "feedcollector", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in os.environ.items() if k != "FEEDCOLLECTOR_CONFIG"} | dict(env or {}),
        preexec_fn=limit,
    )


def count(db: Path, sql: str) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute(sql).fetchone()[0])


def test_run_once_on_the_embedded_defaults(feed_server: FeedServer, tmp_path: Path) -> None:
    ok = feed_server.route("/ok", body=rss([Entry("Hello", guid="1"), Entry("World", guid="2")]))
    broken = feed_server.route("/broken", status=500, body=b"no")
    (tmp_path / "feeds.yaml").write_text(f"feeds:\n  - url: {ok}\n  - url: {broken}\n")
    result = feedcollector("run", "--once", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert count(tmp_path / "collector.db", "SELECT COUNT(*) FROM items") == 2
    assert any((tmp_path / "objects" / "backups").rglob("*.xml"))
    assert f"feed {ok}: HTTP 200, 2 new of 2 items" in result.stderr
    assert f"feed {broken}" in result.stderr
    assert "500" in result.stderr
    assert "cycle: 2 feeds (1 updated, 0 not modified, 1 failed" in result.stderr


def test_a_config_file_in_the_folder_not_named_by_config_is_pointed_out(tmp_path: Path) -> None:
    """Only --config reads a config file; one beside the feeds file is not read, and a
    [storage] or [database] in it would be ignored without a word."""
    (tmp_path / "feeds.yaml").write_text("feeds: []\n")
    (tmp_path / "feedcollector.toml").write_text('[storage]\npath = "elsewhere"\n')
    result = feedcollector("run", "--once", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "warning: config: ./feedcollector.toml is not read" in result.stderr
    assert "feedcollector --config feedcollector.toml" in result.stderr
    named = feedcollector("--config", "feedcollector.toml", "run", "--once", cwd=tmp_path)
    assert named.returncode == 0, named.stderr
    assert "is not read" not in named.stderr


def test_start_up_leaves_the_libraries_of_optional_commands_unloaded(tmp_path: Path) -> None:
    """OPML (listparser), feeds-file editing and reading (ruamel.yaml and PyYAML: an unchanged
    file is not read) and metrics (prometheus_client) load on use: about 90 ms less CPU for
    every ``run --once`` a cron job starts."""
    optional = ("listparser", "prometheus_client", "ruamel.yaml", "yaml")
    code = (
        "import sys\n"
        "from feedcollector.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print([name for name in {optional!r} if name in sys.modules])"
    )
    (tmp_path / "feeds.yaml").write_text("feeds: []\n")
    assert feedcollector("run", "--once", cwd=tmp_path).returncode == 0, "reads the new file"
    result = subprocess.run(
        [sys.executable, "-c", code, "run", "--once"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stderr


def test_fetch_all_and_fetch_url_ignore_the_schedule(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    a = feed_server.route("/a", body=rss([Entry("a", guid="a")]))
    b = feed_server.route("/b", body=rss([Entry("b", guid="b")]))
    config = write_project(tmp_path, [a, b])
    assert feedcollector("--config", str(config), "run", "--once", cwd=tmp_path).returncode == 0
    assert feedcollector("--config", str(config), "run", "--once", cwd=tmp_path).returncode == 0
    assert len(feed_server.hits("/a")) == 1, "not due again yet"
    assert feedcollector("--config", str(config), "fetch", "--all", cwd=tmp_path).returncode == 0
    assert feedcollector("--config", str(config), "fetch", b, cwd=tmp_path).returncode == 0
    assert (len(feed_server.hits("/a")), len(feed_server.hits("/b"))) == (2, 3)


@pytest.mark.parametrize(
    "command",
    [["remove"], ["restore", "--feed"], ["fetch"], ["items", "--feed"]],
    ids=["remove", "restore", "fetch", "items"],
)
def test_an_address_urllib_cannot_split_is_an_error_not_a_traceback(
    tmp_path: Path, command: list[str]
) -> None:
    config = write_project(tmp_path, ["https://a.example/feed"])
    asyncio.run(_migrated(tmp_path / "collector.db"))  # a database a collector opened
    result = feedcollector("--config", str(config), *command, "http://[::1", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("error:") == 1
    assert "http://[::1" in result.stderr


async def _migrated(path: Path) -> None:
    database = SQLiteDatabase(path)
    try:
        await migrate(database)
    finally:
        await database.close()


def test_fetch_refuses_urls_outside_the_feeds_file(feed_server: FeedServer, tmp_path: Path) -> None:
    a = feed_server.route("/a", body=rss([Entry("a", guid="a")]))
    config = write_project(tmp_path, [a])
    result = feedcollector(
        "--config", str(config), "fetch", "https://elsewhere.example/feed", cwd=tmp_path
    )
    assert result.returncode == 2
    assert "not in the feeds file" in result.stderr
    assert "elsewhere.example" in result.stderr
    assert feedcollector("--config", str(config), "fetch", cwd=tmp_path).returncode == 2


def test_fetch_items_and_restore_take_a_feed_url_whose_scheme_and_host_case_differ(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """URLs compare as the feeds file compares them (``add``, ``remove``, ``import-opml``):
    ``fetch HTTP://...`` exited 2 "not in the feeds file", ``items --feed HTTP://...`` "no
    feed in the database". The file's URL respelled is the same feed: its row takes the new
    spelling, its items are not stored again."""
    url = feed_server.route("/rss.xml", body=rss([Entry("a", guid="a")]))
    config = str(write_project(tmp_path, [url]))
    shouted = url.replace("http://", "HTTP://")

    fetched = feedcollector("--config", config, "fetch", shouted, shouted, cwd=tmp_path)
    assert fetched.returncode == 0, fetched.stderr
    assert len(feed_server.hits("/rss.xml")) == 1, "once, though named twice"
    assert f"feed {url}: HTTP 200, 1 new of 1 item" in fetched.stderr, "the file's spelling"
    listed = feedcollector("--config", config, "items", "--feed", shouted, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert f"<{url}>" in listed.stdout
    restored = feedcollector("--config", config, "restore", "--feed", shouted, cwd=tmp_path)
    assert restored.returncode == 0, restored.stderr

    (tmp_path / "feeds.yaml").write_text(f"feeds:\n  - url: {shouted}\n")
    assert feedcollector("--config", config, "run", "--once", cwd=tmp_path).returncode == 0
    mixed = url.replace("http://", "Http://")
    for spelling in (url, mixed):
        listed = feedcollector("--config", config, "items", "--feed", spelling, cwd=tmp_path)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.count(f"<{shouted}>") == 1, "one feed, its one item"


def test_a_url_spelled_with_escapes_or_a_default_port_is_the_feed_already_listed(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """``/%72ss.xml`` is sent as ``/rss.xml``: listed both ways, the feed was fetched into two
    feeds, every item stored twice, and ``add`` of the other spelling subscribed it again.
    Now the file check names both lines, ``add`` says where it is listed, and the file
    respelled keeps the feed's row, id and items (no stored id changes)."""
    url = feed_server.route("/rss.xml", body=rss([Entry("a", guid="a")]))
    escaped = url.replace("/rss.xml", "/%72ss.xml")
    config = str(write_project(tmp_path, [escaped]))
    assert feedcollector("--config", config, "run", "--once", cwd=tmp_path).returncode == 0
    db = tmp_path / "collector.db"
    [(feed_id,)] = sqlite3.connect(db).execute("SELECT id FROM feeds").fetchall()

    added = feedcollector("--config", config, "add", url, cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    assert f"add: {url} is already in" in added.stdout
    assert f" as {escaped}; nothing changed." in added.stdout
    assert len(feed_server.hits("/rss.xml")) == 1, "not fetched again"

    feeds = tmp_path / "feeds.yaml"
    feeds.write_text(f"feeds:\n  - url: {escaped}\n  - url: {url}\n")
    status = feedcollector("--config", config, "status", "--json", cwd=tmp_path)
    error = json.loads(status.stdout)["feeds_file_error"]
    assert f'"{url}" on line 3 is already listed on line 2 as "{escaped}"' in error
    assert f"(both request {url})" in error

    feeds.write_text(f"feeds:\n  - url: {url}\n")
    assert feedcollector("--config", config, "run", "--once", cwd=tmp_path).returncode == 0
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT id, url FROM feeds").fetchall() == [(feed_id, url)]
        assert conn.execute("SELECT COUNT(*) FROM items").fetchone() == (1,)


def test_a_password_changed_in_the_feeds_file_keeps_the_feed(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """A rotated credential written over the old one made a new feed that stored every item
    again; the row takes the new URL and keeps its id and items."""
    url = feed_server.route("/private.xml", body=rss([Entry("a", guid="a")]))
    old, new = (url.replace("http://", f"http://ann:{word}@") for word in ("old", "new"))
    config = str(write_project(tmp_path, [old]))
    assert feedcollector("--config", config, "run", "--once", cwd=tmp_path).returncode == 0
    db = tmp_path / "collector.db"
    [(feed_id,)] = sqlite3.connect(db).execute("SELECT id FROM feeds").fetchall()

    (tmp_path / "feeds.yaml").write_text(f"feeds:\n  - url: {new}\n")
    assert feedcollector("--config", config, "run", "--once", cwd=tmp_path).returncode == 0
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT id, url FROM feeds").fetchall() == [(feed_id, new)]
        assert conn.execute("SELECT COUNT(*) FROM items").fetchone() == (1,)


def test_retry_images_queues_failed_images_again_for_the_next_run(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """An image host down for longer than the retries waited (an hour, then a day) left its
    images ``failed`` for good, with no way to queue them again. ``retry-images --feed URL``
    (URLs compare as in the feeds file) queues that feed's, the next run stores them."""
    image = png()
    a_png = feed_server.route("/a.png", status=404)
    b_png = feed_server.route("/b.png", status=404)
    feed = feed_server.route(
        "/a.xml", body=rss([Entry("a", guid="a", content=f'<img src="{a_png}">')])
    )
    other = feed_server.route(
        "/b.xml", body=rss([Entry("b", guid="b", content=f'<img src="{b_png}">')])
    )
    config = str(write_project(tmp_path, [feed, other]))
    assert feedcollector("--config", config, "run", "--once", cwd=tmp_path).returncode == 0
    db = tmp_path / "collector.db"
    assert count(db, "SELECT COUNT(*) FROM image_tasks WHERE attempts = 1 AND retry_at > ''") == 2
    with sqlite3.connect(db) as conn:  # as the retries an hour and a day later leave them
        conn.execute("UPDATE image_tasks SET status = 'failed', attempts = 3, retry_at = ''")
    feed_server.route("/a.png", body=image, headers={"Content-Type": "image/png"})

    shouted = feed.replace("http://", "HTTP://")
    queued = feedcollector("--config", config, "retry-images", "--feed", shouted, cwd=tmp_path)
    assert queued.returncode == 0, queued.stderr
    assert f"retry-images: 1 failed image of {feed} queued again" in queued.stdout
    unknown = feed_server.url("/nope.xml")
    refused = feedcollector("--config", config, "retry-images", "--feed", unknown, cwd=tmp_path)
    assert refused.returncode == 2
    assert f"retry-images: no feed {unknown} in the database" in refused.stderr
    assert feedcollector("--config", config, "run", "--once", cwd=tmp_path).returncode == 0
    (key,) = [path for path in (tmp_path / "objects" / "images").rglob("*.png")]
    assert key.read_bytes() == image
    assert count(db, "SELECT COUNT(*) FROM image_tasks WHERE status = 'success'") == 1
    assert len(feed_server.hits("/b.png")) == 1, "the other feed's image stayed failed"
    everything = feedcollector("--config", config, "retry-images", cwd=tmp_path)
    assert "retry-images: 1 failed image queued again" in everything.stdout


def test_retry_images_waiting_tries_the_waiting_images_at_the_next_run(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """A failed attempt waits an hour, then a day (a Retry-After up to a week): an operator
    who knows the host is back had no way to have them tried sooner."""
    a_png = feed_server.route("/a.png", status=503)
    feed = feed_server.route(
        "/a.xml", body=rss([Entry("a", guid="a", content=f'<img src="{a_png}">')])
    )
    config = str(write_project(tmp_path, [feed]))
    assert feedcollector("--config", config, "run", "--once", cwd=tmp_path).returncode == 0
    feed_server.route("/a.png", body=png(), headers={"Content-Type": "image/png"})
    assert feedcollector("--config", config, "run", "--once", cwd=tmp_path).returncode == 0
    assert len(feed_server.hits("/a.png")) == 1, "it waits for its hour"

    hastened = feedcollector("--config", config, "retry-images", "--waiting", cwd=tmp_path)
    assert hastened.returncode == 0, hastened.stderr
    assert "retry-images: 0 failed images queued again, 1 waiting image due now" in (
        hastened.stdout
    )
    assert feedcollector("--config", config, "run", "--once", cwd=tmp_path).returncode == 0
    db = tmp_path / "collector.db"
    assert count(db, "SELECT COUNT(*) FROM image_tasks WHERE status = 'success'") == 1
    assert count(db, "SELECT attempts FROM image_tasks") == 2, "its first attempt still counts"


def test_retry_images_missing_downloads_again_the_images_whose_objects_were_lost(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """Objects deleted by hand left ``success`` rows naming nothing, which no command found;
    ``--missing`` finds them and the next run stores them again from their sources."""
    image = png()
    a_png = feed_server.route("/a.png", body=image, headers={"Content-Type": "image/png"})
    feed = feed_server.route(
        "/a.xml", body=rss([Entry("a", guid="a", content=f'<img src="{a_png}">')])
    )
    config = str(write_project(tmp_path, [feed]))
    assert feedcollector("--config", config, "run", "--once", cwd=tmp_path).returncode == 0
    db = tmp_path / "collector.db"
    with sqlite3.connect(db) as conn:  # stored a while ago, not in the second the check begins
        conn.execute("UPDATE image_tasks SET updated_at = '2026-01-01T00:00:00Z'")
    shutil.rmtree(tmp_path / "objects" / "images")

    found = feedcollector("--config", config, "retry-images", "--missing", cwd=tmp_path)

    assert found.returncode == 0, found.stderr
    assert "of 1 stored image, 1 missing from the object store, e.g. images/" in found.stdout
    assert "1 task queued again" in found.stdout
    assert feedcollector("--config", config, "run", "--once", cwd=tmp_path).returncode == 0
    (key,) = [path for path in (tmp_path / "objects" / "images").rglob("*.png")]
    assert key.read_bytes() == image
    assert count(db, "SELECT COUNT(*) FROM image_tasks WHERE status = 'success'") == 1
    assert len(feed_server.hits("/a.png")) == 2


def test_hints_carry_the_config_they_were_given_so_they_work_from_any_folder(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """A command a message suggests ran on the defaults when pasted in another folder: it
    names the ``--config`` of the command, absolute and quoted for a shell. A config from
    FEEDCOLLECTOR_CONFIG is not repeated: the environment carries it over."""
    url = feed_server.route("/atom.xml", body=rss([Entry("a", guid="a")]))
    project = tmp_path / "my feeds"
    project.mkdir()
    write_project(project, [])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    config = shlex.quote(str(project / "feedcollector.toml"))
    assert config.startswith("'"), "the folder's name has a space"

    added = feedcollector("--config", "feedcollector.toml", "add", url, cwd=project)
    assert added.returncode == 0, added.stderr
    hint = f"feedcollector --config {config} fetch {url}"
    assert f"`{hint}` does it now" in added.stdout
    hits = len(feed_server.hits("/atom.xml"))
    pasted = feedcollector(*shlex.split(hint)[1:], cwd=elsewhere)
    assert pasted.returncode == 0, pasted.stderr
    assert len(feed_server.hits("/atom.xml")) == hits + 1
    assert list(elsewhere.iterdir()) == [], "nothing made on the defaults there"

    listed = feedcollector("-c", "feedcollector.toml", "add", "--list", url, cwd=project)
    assert f"`feedcollector --config {config} add --pick N {url}`" in listed.stderr
    unknown = feedcollector("-c", "feedcollector.toml", "fetch", url + "x", cwd=project)
    assert f"`feedcollector --config {config} add URL`" in unknown.stderr
    removed = feedcollector("--config", "feedcollector.toml", "remove", url, cwd=project)
    assert removed.returncode == 0, removed.stderr
    assert (
        f"`feedcollector --config {config} status` lists it as removed once it has been collected"
        in removed.stdout
    )

    from_env = {"FEEDCOLLECTOR_CONFIG": str(project / "feedcollector.toml")}
    again = feedcollector("add", url, cwd=elsewhere, env=from_env)
    assert again.returncode == 0, again.stderr
    assert f"`feedcollector fetch {url}` does it now" in again.stdout
    quoted = feed_server.route("/feed", body=rss([]))
    odd = feedcollector("add", quoted + "?a=1&b=2", cwd=elsewhere, env=from_env)
    assert odd.returncode == 0, odd.stderr
    assert f"`feedcollector fetch '{quoted}?a=1&b=2'` does it now" in odd.stdout


def test_arguments_that_are_not_utf8_are_usage_errors(tmp_path: Path) -> None:
    (tmp_path / "feeds.yaml").write_text("feeds:\n  - https://a.example/feed\n")
    for args, name in (
        (("items", "--feed", "\udcff"), "items: --feed"),  # argv b"\xff", surrogate-escaped
        (("item", "\udcff"), "item: ID"),
        (("add", "https://b.example/feed", "--title", "\udcff"), "add: --title"),
    ):
        result = feedcollector(*args, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert f"error: {name} is not UTF-8 text" in result.stderr
        assert "database" not in result.stderr


def test_a_file_in_place_of_the_objects_folder_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / "feeds.yaml").write_text("feeds:\n  - https://a.example/feed\n")
    (tmp_path / "objects").write_text("not a folder")
    for command in ("restore", "cleanup"):
        result = feedcollector(command, cwd=tmp_path)
        assert result.returncode == 1, result.stderr
        assert f"{tmp_path / 'objects'} is not a folder" in result.stderr
        assert "0 backups" not in result.stdout
    (tmp_path / "objects").unlink()
    assert feedcollector("cleanup", cwd=tmp_path).returncode == 0, "a missing folder is empty"


def test_cleanup_orphans_deletes_old_objects_no_row_names(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    ok = feed_server.route("/ok", body=rss([Entry("Hello", guid="1")]))
    config = str(write_project(tmp_path, [ok]))
    assert feedcollector("--config", config, "run", "--once", cwd=tmp_path).returncode == 0
    objects = tmp_path / "objects"
    backups = sorted(objects.rglob("*.xml"))
    old = time.time() - 3 * 86400
    orphans = [objects / "images/gone/aa/0.png", objects / "content/gone/bb.html"]
    young = objects / "images/gone/aa/1.png"
    for path in [*orphans, young]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"left behind")
    for path in orphans:
        os.utime(path, (old, old))

    plain = feedcollector("--config", config, "cleanup", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert all(path.exists() for path in orphans), "only --orphans looks for them"
    dry = feedcollector("--config", config, "cleanup", "--orphans", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "would delete 1 image object and 1 content object" in dry.stdout
    assert "1 younger than 1d left alone" in dry.stdout
    assert "    images/gone/aa/0.png" in dry.stdout.splitlines()
    assert all(path.exists() for path in orphans), "a dry run deletes nothing"

    done = feedcollector("--config", config, "cleanup", "--orphans", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "orphans: deleted 1 image object and 1 content object" in done.stdout
    assert not any(path.exists() for path in orphans)
    assert young.exists()
    assert sorted(objects.rglob("*.xml")) == backups


def test_a_dry_sweep_on_a_database_without_items_says_the_sweep_would_refuse(
    tmp_path: Path,
) -> None:
    """The sweep refuses (exit 2) when no row names anything, and its message points at the
    dry run; that printed "would delete 3 image objects" with no word of the refusal. It lists
    them all the same, says the real run would refuse and why, and exits 0 as dry runs do."""
    config = str(write_project(tmp_path, []))
    assert feedcollector("--config", config, "run", "--once", cwd=tmp_path).returncode == 0
    old = time.time() - 3 * 86400
    images = [tmp_path / f"objects/images/lost/{n}/0.png" for n in range(3)]
    for path in images:
        path.parent.mkdir(parents=True)
        path.write_bytes(b"archived")
        os.utime(path, (old, old))

    refused = feedcollector("--config", config, "cleanup", "--orphans", cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    reason = "the database holds no items, so every image and content object would count"
    assert f"error: cleanup: {reason}" in refused.stderr
    pasted = shlex.join(["feedcollector", "--config", str(Path(config).resolve())])
    assert f"`{pasted} cleanup --orphans --dry-run` shows what would go" in refused.stderr
    dry = feedcollector("--config", config, "cleanup", "--orphans", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "orphans: would delete" not in dry.stdout
    assert "orphans: found 3 image objects and 0 content objects that no row names" in dry.stdout
    assert f"`cleanup --orphans` would refuse (exit 2) and delete none: {reason}" in dry.stdout
    assert f"run `{pasted} restore` first" in dry.stdout, "the commands name the config"
    assert "    images/lost/0/0.png" in dry.stdout.splitlines()
    assert all(path.exists() for path in images)


@pytest.mark.parametrize(
    "command",
    [("items",), ("item", "abc"), ("retry-images",), ("cleanup", "--dry-run"), ("cleanup",)],
)
def test_commands_about_what_was_collected_refuse_where_there_is_no_database(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """They made an empty database wherever they ran (a mistyped `[database] path` too, with
    its folders), and `cleanup --orphans` over it would take every image for an orphan."""
    config = write_project(tmp_path, [])
    database = tmp_path / "elsewhere" / "collector.db"
    config.write_text(config.read_text().replace('"collector.db"', f'"{database}"'))
    result = feedcollector("--config", str(config), *command, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == (
        f"error: {command[0]}: there is no database at {database}, so nothing was collected "
        "there. The first `feedcollector run` creates it; if the collector's database is "
        "elsewhere, run from its folder or name its config with --config.\n"
    )
    assert not database.parent.exists()


def test_a_bad_feeds_file_exits_2_naming_the_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "feeds.yaml").write_text(
        "feeds:\n  - url: https://ok.example/feed\n  - url: not a url\n"
    )
    result = feedcollector("run", "--once", cwd=tmp_path)
    assert result.returncode == 2
    assert "feeds.yaml" in result.stderr
    assert "line 3" in result.stderr
    assert (
        not (tmp_path / "collector.db").exists()
        or count(tmp_path / "collector.db", "SELECT COUNT(*) FROM feeds") == 0
    )


def test_a_missing_config_file_exits_2(tmp_path: Path) -> None:
    result = feedcollector("--config", str(tmp_path / "nope.toml"), "run", "--once", cwd=tmp_path)
    assert result.returncode == 2
    assert "nope.toml" in result.stderr


def test_help_lists_the_commands(tmp_path: Path) -> None:
    result = feedcollector("--help", cwd=tmp_path)
    assert result.returncode == 0
    for command in ("run", "fetch"):
        assert command in result.stdout


def test_version_is_the_packages(tmp_path: Path) -> None:
    """Upgrade notes say what a new version does: the running one had no way to tell."""
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    result = feedcollector("--version", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (
        0,
        f"feedcollector {project['version']} (database schema {latest_version()})\n",
    ), "the schema tells builds of one version apart, and what a database was migrated to"
    assert not list(tmp_path.iterdir()), "it opens nothing"


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("status", "--config", "x.toml"), "--config"),
        (("items", "-c", "x.toml"), "-c"),
        (("run", "--once", "--log-level=DEBUG"), "--log-level"),
        (("status", "--log-format", "json"), "--log-format"),
    ],
)
def test_a_global_option_after_the_command_says_where_it_goes(
    tmp_path: Path, args: tuple[str, ...], option: str
) -> None:
    result = feedcollector(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert f"{option} is a global option: it goes before the command" in result.stderr
    assert not (tmp_path / "collector.db").exists()


@pytest.mark.parametrize("command", [("run", "--once"), ("fetch", "--all")])
def test_collecting_without_a_feeds_file_says_how_to_make_one_and_creates_nothing(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """The quick start in an empty folder: the error says how to create the file, and no
    empty database is left behind."""
    result = feedcollector(*command, cwd=tmp_path)
    assert result.returncode == 2
    assert f"feeds file {tmp_path / 'feeds.yaml'} does not exist" in result.stderr
    assert "`feedcollector add URL` subscribes to a feed" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_with_json_logs_the_commands_errors_and_warnings_are_json_lines(tmp_path: Path) -> None:
    """``--log-format json ... 2>> run.log`` (a cron job's log): a plain ``error:`` line
    among the JSON objects broke the tools that read them."""
    (tmp_path / "typo.toml").write_text("[fetch]\nconcurency = 3\n")
    for args, level, words in (
        (("-c", "typo.toml", "run", "--once"), "ERROR", 'unknown key "concurency" in [fetch]'),
        (("run", "--once"), "ERROR", "feeds.yaml does not exist"),
        (("status",), "WARNING", "new and removed feeds are not shown: config: feeds file"),
        (("items", "--limit", "0"), "ERROR", "feedcollector items: Invalid value for '--limit'"),
        (("status", "--bogus"), "ERROR", "feedcollector status: No such option: --bogus"),
    ):
        result = feedcollector("--log-format", "json", *args, cwd=tmp_path)
        lines = [json.loads(line) for line in result.stderr.splitlines()]
        assert [(line["level"], words in line["message"]) for line in lines] == [(level, True)]
    (tmp_path / "json.toml").write_text('[log]\nformat = "json"\n')
    result = feedcollector("-c", "json.toml", "items", "--limit", "0", cwd=tmp_path)
    assert result.returncode == 2
    (line,) = [json.loads(line) for line in result.stderr.splitlines()]
    assert "Invalid value for '--limit'" in line["message"], "the config's [log] format too"


def _hangup_as_a_terminal_leaves_it() -> None:
    """A child of a shell started without ``nohup``: SIGHUP does what it does by default (the
    test runner itself may have been started to ignore it)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _started_in_a_terminal(config: Path, *command: str) -> subprocess.Popen[str]:
    """A collector command as a process that a closed terminal's SIGHUP reaches."""
    return subprocess.Popen(
        [sys.executable, "-m", "feedcollector", "--config", str(config), *command],
        cwd=config.parent,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_hangup_as_a_terminal_leaves_it,
    )


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP])
def test_run_stops_cleanly_on_sigterm_after_in_flight_feeds(
    feed_server: FeedServer, tmp_path: Path, stop: signal.Signals
) -> None:
    """SIGHUP (a closed terminal, an ssh session gone) killed the process mid-fetch, its
    feeds then skipped by the next run until their lease ran out: it stops like SIGTERM."""
    slow = feed_server.route("/slow", Route(body=rss([Entry("slow", guid="s")]), delay_s=1.5))
    config = write_project(tmp_path, [slow])
    process = _started_in_a_terminal(config, "run")
    try:
        deadline = time.monotonic() + 60
        while not feed_server.hits("/slow") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert feed_server.hits("/slow"), "the scheduler never fetched the feed"
        process.send_signal(stop)
        time.sleep(0.2)
        process.send_signal(stop)  # a service manager asking again: still clean
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert "stopped cleanly" in stderr
    assert stderr.count("run: stopping after in-flight feeds finish") == 1
    assert count(tmp_path / "collector.db", "SELECT COUNT(*) FROM items") == 1, (
        "the in-flight feed finished"
    )


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP])
def test_fetch_stops_on_sigterm_as_on_ctrl_c_and_hands_back_its_feeds(
    feed_server: FeedServer, tmp_path: Path, stop: signal.Signals
) -> None:
    """SIGTERM or SIGHUP (a closed terminal) killed `fetch` by the signal: the feeds it had
    claimed stayed leased for 15 minutes (its image tasks for 32, no cycle downloading them).
    It stops as on Ctrl-C now: what it holds handed back, exit 130."""
    route = Route(body=rss([Entry("slow", guid="s")]))
    slow = feed_server.route("/slow", route)
    quick = feed_server.route("/quick", body=rss([Entry("q", guid="q")]))
    config = write_project(tmp_path, [slow, quick])
    assert feedcollector("--config", str(config), "run", "--once", cwd=tmp_path).returncode == 0
    route.delay_s = 30
    process = _started_in_a_terminal(config, "fetch", "--all")
    try:
        deadline = time.monotonic() + 60
        while len(feed_server.hits("/slow")) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(feed_server.hits("/slow")) == 2, "the fetch never asked for the slow feed"
        process.send_signal(stop)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr
    db = tmp_path / "collector.db"
    assert count(db, "SELECT COUNT(*) FROM feeds WHERE lease_owner IS NOT NULL") == 0


def test_console_lines_quote_a_feeds_control_characters_as_spaces(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """An image URL from a feed with a line break forged a log line of its own, and an
    escape sequence reached the terminal (set its title, its colours)."""
    missing = feed_server.url("/img/x.png")
    forged = "&#10;2026-01-01 00:00:00Z ERROR   storage: forged line"
    escape = "&#27;]0;pwned&#7;&#27;[31m"
    body = rss(
        [
            Entry("a", guid="a", description=f'<img src="{missing}{forged}">'),
            Entry("b", guid="b", description=f'<img src="{missing}{escape}">'),
        ]
    )
    config = write_project(tmp_path, [feed_server.route("/feed", body=body)])
    result = feedcollector("--config", str(config), "run", "--once", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ [A-Z]+ ", line) for line in lines)
    assert "forged line" in result.stderr
    assert not any(line.startswith("2026-01-01") for line in lines)
    assert "\x1b" not in result.stderr
    assert "\x07" not in result.stderr
    assert "]0;pwned" in result.stderr


def test_log_format_json_and_log_level(feed_server: FeedServer, tmp_path: Path) -> None:
    ok = feed_server.route("/ok", body=rss([Entry("Hello", guid="1")]))
    broken = feed_server.route("/broken", status=500, body=b"no")
    config = str(write_project(tmp_path, [ok, broken]))
    result = feedcollector(
        "--config", config, "--log-format", "json", "run", "--once", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    entries = [json.loads(line) for line in result.stderr.splitlines()]
    assert {entry["level"] for entry in entries} == {"INFO", "WARNING"}
    assert all(set(entry) == {"time", "level", "logger", "message"} for entry in entries)
    assert all(
        re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["time"]) for entry in entries
    ), "UTC written as every other timestamp"
    assert any(entry["message"].startswith(f"feed {broken}: HTTP 500") for entry in entries)

    quiet = feedcollector(
        "--config", config, "--log-level", "warning", "fetch", "--all", cwd=tmp_path
    )
    assert quiet.returncode == 0, quiet.stderr
    lines = quiet.stderr.splitlines()
    assert lines
    assert all(" WARNING " in line for line in lines), "console lines, no INFO"
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ WARNING feed http", lines[0])

    config_file = Path(config)
    config_file.write_text(config_file.read_text() + '[log]\nformat = "json"\nlevel = "ERROR"\n')
    from_config = feedcollector("--config", config, "fetch", "--all", cwd=tmp_path)
    assert from_config.stderr == "", "[log] level ERROR hides the WARNING"
    override = feedcollector("--config", config, "--log-level", "INFO", "cleanup", cwd=tmp_path)
    assert all(json.loads(line)["level"] == "INFO" for line in override.stderr.splitlines())
    assert override.stderr, "the option overrides the config, the format stays json"

    bad = feedcollector("--log-level", "loud", "status", cwd=tmp_path)
    assert bad.returncode == 2
    assert "--log-level" in bad.stderr
    bad_format = feedcollector("--log-format", "xml", "status", cwd=tmp_path)
    assert bad_format.returncode == 2
    assert "--log-format" in bad_format.stderr


def test_backup_db_copies_a_live_database(feed_server: FeedServer, tmp_path: Path) -> None:
    ok = feed_server.route("/ok", body=rss([Entry("Hello", guid="1"), Entry("World", guid="2")]))
    config = str(write_project(tmp_path, [ok]))
    assert feedcollector("--config", config, "run", "--once", cwd=tmp_path).returncode == 0
    writer = sqlite3.connect(tmp_path / "collector.db", isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")  # a collector in the middle of a batch
        writer.execute("DELETE FROM items")
        result = feedcollector("--config", config, "backup-db", "copy.db", cwd=tmp_path)
        writer.execute("ROLLBACK")
    finally:
        writer.close()
    assert result.returncode == 0, result.stderr
    assert "copied to copy.db" in result.stdout
    assert count(tmp_path / "copy.db", "SELECT COUNT(*) FROM items") == 2
    assert count(tmp_path / "copy.db", "SELECT COUNT(*) FROM schema_migrations") >= 4
    assert sorted(p.name for p in tmp_path.glob("*copy.db*")) == ["copy.db"]
    assert not list(tmp_path.glob(".backup-db-*")), "no partial copy is left behind"

    again = feedcollector("--config", config, "backup-db", "copy.db", cwd=tmp_path)
    assert again.returncode == 2
    assert "already exists" in again.stderr
    nowhere = feedcollector("--config", config, "backup-db", "no/such/dir/x.db", cwd=tmp_path)
    assert nowhere.returncode == 2
    assert "does not exist" in nowhere.stderr

    beside = feedcollector("--config", config, "backup-db", "collector.db-wal", cwd=tmp_path)
    assert beside.returncode == 2, "SQLite deletes it when it next opens the database"
    assert "a name SQLite uses beside the database" in beside.stderr
    not_utf8 = feedcollector("--config", config, "backup-db", "caf\udce9.db", cwd=tmp_path)
    assert not_utf8.returncode == 2
    assert "backup-db: PATH is not UTF-8 text" in not_utf8.stderr
    long_name = feedcollector("--config", config, "backup-db", "a" * 250 + ".db", cwd=tmp_path)
    assert long_name.returncode == 0, long_name.stderr
    assert "Traceback" not in long_name.stderr
    assert not list(tmp_path.glob(".backup-db-*"))


def test_backup_db_of_a_folder_says_it_is_a_folder(tmp_path: Path) -> None:
    """It said "there is no database at ... yet", sending its user to run a collector."""
    (tmp_path / "data").mkdir()
    config = tmp_path / "feedcollector.toml"
    config.write_text('[database]\npath = "data"\n')
    result = feedcollector("--config", str(config), "backup-db", "x.db", cwd=tmp_path)
    assert result.returncode == 2
    assert "data is a folder, not a database file" in result.stderr


def test_backup_db_points_d1_users_to_wrangler(tmp_path: Path) -> None:
    config = tmp_path / "cloud.toml"
    config.write_text('[database]\nbackend = "d1"\nurl = "http://127.0.0.1:9/"\n')
    result = subprocess.run(
        [sys.executable, "-m", "feedcollector", "--config", str(config), "backup-db", "x.db"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "FEEDCOLLECTOR_D1_TOKEN": "test-token"},
    )
    assert result.returncode == 2
    assert "wrangler d1 export" in result.stderr
    assert not (tmp_path / "x.db").exists()


HARD_OPEN_FILES = resource.getrlimit(resource.RLIMIT_NOFILE)[1]


@pytest.mark.skipif(
    HARD_OPEN_FILES != resource.RLIM_INFINITY and HARD_OPEN_FILES < 1024,
    reason="the hard open-file limit here is too low to lift the soft one past the need",
)
def test_run_lifts_a_low_soft_open_file_limit(tmp_path: Path) -> None:
    """100 feeds in flight under a soft limit of 64 open files: backups failed with "Too many
    open files" (the usual soft limit, 1024, runs out the same way at larger concurrency)."""
    with run_farm(100, 2, hosts=100) as farm:
        write_project(
            tmp_path, farm.urls(), extra_toml="enabled = false\n[fetch]\nconcurrency = 100\n"
        )
        result = feedcollector(
            "--config", "feedcollector.toml", "run", "--once",
            cwd=tmp_path, open_files=(64, HARD_OPEN_FILES),
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Too many open files" not in result.stderr
    assert "open-file limit" not in result.stderr
    assert count(tmp_path / "collector.db", "SELECT COUNT(*) FROM items") == 200


def test_an_open_file_limit_that_cannot_be_lifted_is_warned_about(tmp_path: Path) -> None:
    (tmp_path / "feeds.yaml").write_text("feeds: []\n")
    result = feedcollector("run", "--once", cwd=tmp_path, open_files=(64, 64))
    assert result.returncode == 0, result.stderr
    assert "the open-file limit is 64" in result.stderr
    assert "[fetch] concurrency = 5 with [images] concurrency = 8 may need about 134" in (
        result.stderr
    )
