"""Settings (TOML) and feeds file (YAML/JSON): real files in tmp_path, every error checked for
the file name, the line and the fix the user is told."""

from __future__ import annotations

import textwrap
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from feedcollector import feeds_file
from feedcollector.config import (
    D1_TOKEN_ENV,
    S3_ACCESS_KEY_ENV,
    S3_SECRET_KEY_ENV,
    DatabaseSettings,
    load_feeds,
    load_settings,
)
from feedcollector.config_values import format_duration, parse_byte_size, parse_duration
from feedcollector.errors import ConfigError
from feedcollector.feed_urls import feed_url_key
from feedcollector.models import FeedSpec

S3_ENV = {S3_ACCESS_KEY_ENV: "AKIDEXAMPLE", S3_SECRET_KEY_ENV: "s3cr3t"}


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def config_error(path: Path | None, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load_settings(path, environ=environ or {})
    return str(caught.value)


def feeds_error(path: Path, **kwargs: timedelta) -> str:
    with pytest.raises(ConfigError) as caught:
        load_feeds(path, **kwargs)
    return str(caught.value)


# --- settings ------------------------------------------------------------------------------


def test_defaults_without_a_file_live_in_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = load_settings(None, environ={})
    assert settings.config_path is None
    assert settings.base_dir == tmp_path
    assert settings.feeds_file == tmp_path / "feeds.yaml"
    assert settings.database.backend == "sqlite"
    assert settings.database.path == tmp_path / "collector.db"
    assert settings.database.token is None
    assert settings.storage.backend == "local"
    assert settings.storage.path == tmp_path / "objects"
    assert settings.fetch.concurrency == 5
    assert settings.fetch.default_interval == timedelta(minutes=30)
    assert settings.fetch.timeout == timedelta(seconds=30)
    assert settings.fetch.deadline == timedelta(minutes=2)
    assert settings.fetch.max_body_bytes == 20 * 1024 * 1024
    assert settings.fetch.user_agent.startswith("feedcollector/")
    assert settings.images.enabled is True
    assert settings.images.allow_private_addresses is False
    assert (settings.images.concurrency, settings.images.max_bytes) == (8, 26214400)
    assert (settings.retention.item_days, settings.retention.backup_days) == (180, 30)
    assert (settings.log.level, settings.log.format) == ("INFO", "console")


def test_an_empty_config_file_means_the_defaults_next_to_it(tmp_path: Path) -> None:
    path = write(tmp_path / "conf", "collector.toml", "")
    settings = load_settings(path, environ={})
    assert settings.config_path == path
    assert settings.base_dir == tmp_path / "conf"
    assert settings.feeds_file == tmp_path / "conf" / "feeds.yaml"
    assert settings.database.path == tmp_path / "conf" / "collector.db"


def test_every_key_is_read(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "collector.toml",
        """
        feeds_file = "subs/feeds.json"
        [fetch]
        concurrency = 3
        default_interval = "1h30m"
        timeout = 12
        deadline = "2m"
        max_body_bytes = "5MB"
        user_agent = "test-agent/1.0"
        [database]
        backend = "d1"
        path = "ignored.db"
        url = "https://proxy.example.net/"
        timeout = "45s"
        [storage]
        backend = "s3"
        path = "objects"
        endpoint = "http://127.0.0.1:9000"
        bucket = "feeds"
        region = "eu-west-1"
        public_base_url = "https://cdn.example.net/objects/"
        [images]
        enabled = false
        allow_private_addresses = true
        concurrency = 2
        max_bytes = "1MiB"
        timeout = "10s"
        [retention]
        item_days = 90
        backup_days = 7
        [log]
        level = "debug"
        format = "json"
        """,
    )
    settings = load_settings(path, environ={D1_TOKEN_ENV: " tok-123 ", **S3_ENV})
    assert settings.feeds_file == tmp_path / "subs" / "feeds.json"
    fetch = settings.fetch
    assert (fetch.concurrency, fetch.default_interval) == (3, timedelta(hours=1, minutes=30))
    assert (fetch.timeout, fetch.deadline) == (timedelta(seconds=12), timedelta(minutes=2))
    assert (fetch.max_body_bytes, fetch.user_agent) == (5_000_000, "test-agent/1.0")
    database = settings.database
    assert (database.backend, database.url) == ("d1", "https://proxy.example.net")
    assert database.path == tmp_path / "ignored.db"
    assert database.timeout == timedelta(seconds=45)
    assert database.token is not None
    assert database.token.get_secret_value() == "tok-123"
    assert "tok-123" not in repr(settings)
    storage = settings.storage
    assert (storage.backend, storage.endpoint) == ("s3", "http://127.0.0.1:9000")
    assert (storage.bucket, storage.region) == ("feeds", "eu-west-1")
    assert storage.public_base_url == "https://cdn.example.net/objects"
    assert storage.access_key_id is not None
    assert storage.secret_access_key is not None
    assert storage.access_key_id.get_secret_value() == "AKIDEXAMPLE"
    assert storage.secret_access_key.get_secret_value() == "s3cr3t"
    assert "s3cr3t" not in repr(settings)
    images = settings.images
    assert (images.enabled, images.allow_private_addresses) == (False, True)
    assert (images.concurrency, images.max_bytes, images.timeout) == (
        2,
        1024 * 1024,
        timedelta(seconds=10),
    )
    assert (settings.retention.item_days, settings.retention.backup_days) == (90, 7)
    assert (settings.log.level, settings.log.format) == ("DEBUG", "json")


def test_relative_paths_start_at_the_config_folder_not_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    absolute_db = tmp_path / "abs" / "c.db"
    path = write(
        tmp_path / "etc" / "fc",
        "collector.toml",
        f"""
        feeds_file = "../feeds.yml"
        [database]
        path = "{absolute_db.as_posix()}"
        [storage]
        path = "data/objects"
        """,
    )
    settings = load_settings(Path("..") / "etc" / "fc" / "collector.toml", environ={})
    assert settings.config_path == path
    assert settings.feeds_file == tmp_path / "etc" / "feeds.yml"
    assert settings.database.path == absolute_db
    assert settings.storage.path == tmp_path / "etc" / "fc" / "data" / "objects"


def test_settings_are_frozen(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, "c.toml", ""), environ={})
    with pytest.raises(ValueError, match="frozen"):
        settings.fetch.concurrency = 9  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("30m", timedelta(minutes=30)),
        ("1h", timedelta(hours=1)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2d", timedelta(days=2)),
        ("1H 30M", timedelta(hours=1, minutes=30)),
        ("500ms", timedelta(milliseconds=500)),
        ("45", timedelta(seconds=45)),
        (45, timedelta(seconds=45)),
        (0.5, timedelta(milliseconds=500)),
    ],
)
def test_durations(text: object, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "soon",
        "",
        "0",
        0,
        -5,
        True,
        "1x",
        "m",
        "30 minutes",
        None,
        "nan",
        1e-300,
        "0.0001s",
        "0.5ms",
    ],
)
def test_bad_durations_say_what_a_duration_looks_like(text: object) -> None:
    with pytest.raises(ValueError, match=r'a duration like "30m"'):
        parse_duration(text)


@given(st.integers(min_value=1, max_value=3650 * 86400 * 1000))
def test_format_duration_reads_back(milliseconds: int) -> None:
    duration = timedelta(milliseconds=milliseconds)
    assert parse_duration(format_duration(duration)) == duration


@pytest.mark.parametrize(
    ("value", "expected"),
    [("20MiB", 20 * 2**20), ("20MB", 20_000_000), ("512 kib", 524288), (1024, 1024), ("7", 7)],
)
def test_byte_sizes(value: object, expected: int) -> None:
    assert parse_byte_size(value) == expected


@pytest.mark.parametrize("value", ["lots", 0, "5XB", True, "-1MB", 2.5])
def test_bad_byte_sizes(value: object) -> None:
    with pytest.raises(ValueError, match="must be"):
        parse_byte_size(value)


# --- settings errors -----------------------------------------------------------------------


def test_missing_config_file_names_it(tmp_path: Path) -> None:
    message = config_error(tmp_path / "nope.toml")
    assert str(tmp_path / "nope.toml") in message
    assert "does not exist" in message
    assert "--config" in message


def test_config_path_that_is_a_folder(tmp_path: Path) -> None:
    assert "is a folder" in config_error(tmp_path)


def test_malformed_toml_gives_the_parser_position(tmp_path: Path) -> None:
    path = write(tmp_path, "c.toml", '[fetch]\nconcurrency = 5\ntimeout = "30s\n')
    message = config_error(path)
    assert f"config: {path} line 3, column " in message
    assert "TOML syntax error" in message
    assert "Fix the syntax there" in message


def test_duplicate_toml_key_is_a_syntax_error(tmp_path: Path) -> None:
    path = write(tmp_path, "c.toml", "[log]\nlevel = 'INFO'\nlevel = 'DEBUG'\n")
    assert f"{path} line 3, column" in config_error(path)


@pytest.mark.parametrize(
    "value", ["[" * 2000 + "]" * 2000, "{b=" * 500 + "1" + "}" * 500], ids=["arrays", "tables"]
)
def test_deeply_nested_toml_is_a_config_error(tmp_path: Path, value: str) -> None:
    path = write(tmp_path, "c.toml", f"[fetch]\na = {value}\n")
    assert config_error(path) == (
        f"config: {path}: the file nests arrays or inline tables too deeply to be a settings "
        "file. Write each setting as key = value under its [section] header, without nesting."
    )


def test_a_number_beyond_int_digits_is_a_config_error(tmp_path: Path) -> None:
    path = write(tmp_path, "c.toml", f"[fetch]\ntimeout = 1\nconcurrency = 1_{'0' * 5000}\n")
    assert config_error(path) == (
        f"config: {path} line 3: a whole number has more than 4300 digits. Write a number in "
        "the range of its key (a few digits are enough for any)."
    )


def test_config_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(b'[fetch]\nuser_agent = "caf\xe9"\n')
    message = config_error(path)
    assert f"{path} line 2" in message
    assert "UTF-8" in message


def test_unknown_key_lists_the_known_keys_of_its_section(tmp_path: Path) -> None:
    path = write(tmp_path, "c.toml", "[fetch]\n# how many at once\nconcurency = 5\n")
    message = config_error(path)
    assert message.startswith(f'config: {path} line 3: unknown key "concurency" in [fetch].')
    assert "Known keys in [fetch]: concurrency, default_interval, timeout, deadline," in message
    assert 'Did you mean "concurrency"?' in message
    assert "\n" not in message


def test_unknown_section_lists_the_sections(tmp_path: Path) -> None:
    path = write(tmp_path, "c.toml", 'feeds_file = "f.yaml"\n\n[fetchh]\nconcurrency = 5\n')
    message = config_error(path)
    assert f'{path} line 3: unknown key "fetchh" at the top level' in message
    assert (
        "feeds_file, [fetch], [schedule], [database], [storage], [images], [retention], [log]"
        in message
    )


def test_unknown_storage_key_mentions_where_credentials_come_from(tmp_path: Path) -> None:
    path = write(tmp_path, "c.toml", '[storage]\naws_access_key_id = "x"\n')
    message = config_error(path)
    assert "line 2" in message
    assert "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY" in message
    assert "access_key_id," not in message  # secrets are not offered as keys of the file


@pytest.mark.parametrize(
    ("toml", "line", "expected"),
    [
        (
            '[fetch]\nconcurrency = 5\ntimeout = "soon"\n',
            3,
            '"timeout" in [fetch] must be a duration like "30m", "2h" or "1h30m", got "soon". '
            'Fix the value or remove the key to use the default ("30s").',
        ),
        (
            "[images]\nconcurrency = 0\n",
            2,
            '"concurrency" in [images] must be at least 1, got 0. '
            "Fix the value or remove the key to use the default (8).",
        ),
        ('[fetch]\nconcurrency = "5"\n', 2, '"concurrency" in [fetch] must be a whole number'),
        (
            "[fetch]\nconcurrency = 99999999999999999999\n",
            2,
            '"concurrency" in [fetch] must be at most 1000, got 99999999999999999999. '
            "Fix the value or remove the key to use the default (5).",
        ),
        ("[images]\nconcurrency = 1001\n", 2, '"concurrency" in [images] must be at most 1000'),
        ('[images]\nenabled = "yes"\n', 2, "must be true or false (without quotes)"),
        (
            '[database]\nbackend = "mysql"\n',
            2,
            '"backend" in [database] must be "sqlite" or "d1", got "mysql". '
            'Fix the value or remove the key to use the default ("sqlite").',
        ),
        ('[log]\nlevel = "loud"\n', 2, '"level" in [log] must be "DEBUG", "INFO", "WARNING"'),
        (
            "# keep\n\n[retention]\nitem_days = 0\n",
            4,
            '"item_days" in [retention] must be at least 1',
        ),
        (
            "[retention]\nitem_days = 1000000\n",
            2,
            '"item_days" in [retention] must be at most 36500, got 1000000. '
            "Fix the value or remove the key to use the default (180).",
        ),
        ("[retention]\nbackup_days = 36501\n", 2, '"backup_days" in [retention] must be at most'),
        (
            "[fetch]\ntimeout = 1e-300\n",
            2,
            '"timeout" in [fetch] must be a duration like "30m", "2h" or "1h30m" from 1ms to '
            "3650d, got 1e-300.",
        ),
        ('[fetch]\nmax_body_bytes = "lots"\n', 2, 'must be a size like "20MiB" or "20MB"'),
        (
            f'[fetch]\nmax_body_bytes = "{"9" * 400}MB"\n',
            2,
            '"max_body_bytes" in [fetch] is too large: must be a size like "20MiB" or "20MB"',
        ),
        (
            f"[fetch]\ntimeout = 1{'0' * 400}\n",
            2,
            '"timeout" in [fetch] must be a duration like "30m", "2h" or "1h30m" from 1ms to 3650d',
        ),
        ("feeds_file = 5\n", 1, '"feeds_file" must be a file or folder path in quotes, got 5'),
        (
            '[fetch]\nuser_agent = "a\\nX-Evil: 1"\n',
            2,
            '"user_agent" in [fetch] must not contain control characters, got "a\\nX-Evil: 1". '
            "Fix the value or remove the key to use the default",
        ),
        ('[storage]\nregion = "eu\\u007f"\n', 2, '"region" in [storage] must not contain control'),
        ('[storage]\nbucket = "b\\u0000"\n', 2, '"bucket" in [storage] must not contain control'),
        (
            '[database]\npath = "~nosuchuser-fc/x.db"\n',
            2,
            '"path" in [database] must start with "~/" or "~" and a user of this machine (no '
            'home folder is known for "~nosuchuser-fc"), got "~nosuchuser-fc/x.db". Fix the '
            'value or remove the key to use the default ("collector.db").',
        ),
        (
            '[database]\npath = "a\\u0000b"\n',
            2,
            '"path" in [database] must not contain a NUL character (\\u0000), got "a\\u0000b". '
            'Fix the value or remove the key to use the default ("collector.db").',
        ),
        ('feeds_file = "a\\u0000.yaml"\n', 1, '"feeds_file" must not contain a NUL character'),
        ('[storage]\npath = "o\\u0000"\n', 2, '"path" in [storage] must not contain a NUL'),
        (
            '[database]\nurl = "http://[::1"\n',
            2,
            '"url" in [database] must write an IPv6 host as a whole address in [brackets], e.g. '
            'http://[::1]:8080/, got "http://[::1". Fix the value.',
        ),
        (
            f'[metrics]\nlisten = "a:{"9" * 5000}"\n',
            2,
            '"listen" in [metrics] must be "HOST:PORT" in quotes, e.g. "127.0.0.1:9108", got "a:99',
        ),
        ("fetch = 5\n", 1, "[fetch] must be a table, got 5"),
        ("fetch = { concurrency = 0 }\n", 1, '"concurrency" in [fetch] must be at least 1'),
        ("fetch.deadline = 'x'\n", 1, '"deadline" in [fetch] must be a duration'),
        (
            '[storage]\npublic_base_url = "cdn.example.net"\n',
            2,
            'must be a full address starting with http:// or https:// (e.g. "https://cdn.example.net")',
        ),
    ],
)
def test_bad_values_name_the_line_and_the_fix(
    tmp_path: Path, toml: str, line: int, expected: str
) -> None:
    path = write(tmp_path, "collector.toml", toml)
    message = config_error(path)
    assert message.startswith(f"config: {path} line {line}: ")
    assert expected in message
    assert "\n" not in message


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "c.toml",
        '[fetch]\ntimeout = "soon"\n[images]\nconcurrency = -1\n[bogus]\n',
    )
    message = config_error(path)
    assert message.startswith(f"config: {path} line 2: ")
    assert 'Also fix: line 4: "concurrency" in [images]' in message
    assert 'line 5: unknown key "bogus"' in message


def test_d1_needs_the_token_from_the_environment(tmp_path: Path) -> None:
    path = write(
        tmp_path, "c.toml", '[database]\nurl = "https://proxy.example.net"\nbackend = "d1"\n'
    )
    message = config_error(path, {D1_TOKEN_ENV: "  "})  # blank counts as unset
    assert message.startswith(f"config: {path} line 3: ")
    assert f"{D1_TOKEN_ENV} is not set in the environment" in message
    assert f"Set {D1_TOKEN_ENV} to the token" in message
    settings = load_settings(path, environ={D1_TOKEN_ENV: "secret-token"})
    assert settings.database.token is not None
    assert settings.database.token.get_secret_value() == "secret-token"


def test_d1_needs_a_url(tmp_path: Path) -> None:
    path = write(tmp_path, "c.toml", '[database]\nbackend = "d1"\n')
    message = config_error(path, {D1_TOKEN_ENV: "t"})
    assert message.startswith(f"config: {path} line 2: ")
    assert 'needs "url"' in message
    assert "Add url = " in message


def test_d1_url_must_be_http(tmp_path: Path) -> None:
    path = write(tmp_path, "c.toml", '[database]\nbackend = "d1"\nurl = "ftp://proxy.example"\n')
    message = config_error(path, {D1_TOKEN_ENV: "t"})
    assert f"{path} line 3: " in message
    assert '"url" in [database] must be an http:// or https:// address' in message


@pytest.mark.parametrize(
    ("section", "key", "url"),
    [
        ("database", "url", "https://user:pw@proxy.example"),
        ("storage", "endpoint", "https://key:secret@acc.r2.example"),
        ("storage", "public_base_url", "https://token@img.example"),
        ("database", "url", "https://user:pw@proxy example"),  # a space too: still not quoted
        ("storage", "endpoint", "ftp://key:secret@acc.r2.example"),
    ],
)
def test_a_service_address_with_a_password_in_it_is_refused_without_printing_it(
    tmp_path: Path, section: str, key: str, url: str
) -> None:
    """Secrets come from the environment only; one written into an address was taken, and
    then printed in every error that named the address."""
    backend = "d1" if section == "database" else "s3"
    path = write(tmp_path, "c.toml", f'[{section}]\nbackend = "{backend}"\n{key} = "{url}"\n')
    message = config_error(path, {D1_TOKEN_ENV: "t"})
    assert message.startswith(f"config: {path} line 3: ")
    assert "must not carry a user name or password before the host" in message
    assert url.split("//")[1].split("@")[0] not in message, "the secret is not printed"


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("http://proxy.example", True),
        ("HTTP://10.0.0.5:8787", True),
        ("http://127.0.0.1:8787", False),
        ("http://localhost:8787", False),
        ("http://[::1]:8787", False),
        ("https://proxy.example", False),
    ],
)
def test_the_d1_token_travels_over_plain_http_only_to_this_machine(
    tmp_path: Path, url: str, refused: bool
) -> None:
    path = write(tmp_path, "c.toml", f'[database]\nbackend = "d1"\nurl = "{url}"\n')
    if not refused:
        assert load_settings(path, environ={D1_TOKEN_ENV: "t"}).database.url == url
        return
    message = config_error(path, {D1_TOKEN_ENV: "t"})
    assert message.startswith(f"config: {path} line 3: ")
    assert '"url" must be an https:// address: the Proxy Worker\'s bearer token' in message


def test_names_from_a_fixed_set_match_in_any_case(tmp_path: Path) -> None:
    """``level = "debug"`` was taken and ``format = "JSON"`` refused."""
    path = write(
        tmp_path,
        "c.toml",
        '[log]\nlevel = "debug"\nformat = "JSON"\n[database]\nbackend = "SQLite"\n'
        '[storage]\nbackend = " Local "\n',
    )
    settings = load_settings(path, environ={})
    assert (settings.log.level, settings.log.format) == ("DEBUG", "json")
    assert (settings.database.backend, settings.storage.backend) == ("sqlite", "local")


def test_token_written_into_the_file_is_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "c.toml",
        '[database]\nbackend = "d1"\nurl = "https://p.example"\ntoken = "oops"\n',
    )
    message = config_error(path, {D1_TOKEN_ENV: "t"})
    assert message.startswith(f"config: {path} line 4: ")
    assert "is a secret" in message
    assert f"set {D1_TOKEN_ENV} in the environment" in message


@pytest.mark.parametrize(
    ("storage", "environ", "line", "expected"),
    [
        ('backend = "s3"\nbucket = "b"\n', S3_ENV, 2, 'needs "endpoint"'),
        ('backend = "s3"\nendpoint = "https://s3.example"\n', S3_ENV, 2, 'needs "bucket"'),
        (
            'backend = "s3"\nendpoint = "https://s3.example"\nbucket = "b"\n',
            {S3_ACCESS_KEY_ENV: "k"},
            2,
            f"{S3_ACCESS_KEY_ENV} or {S3_SECRET_KEY_ENV} is not set in the environment",
        ),
    ],
)
def test_s3_needs_endpoint_bucket_and_keys(
    tmp_path: Path, storage: str, environ: dict[str, str], line: int, expected: str
) -> None:
    path = write(tmp_path, "c.toml", "[storage]\n" + storage)
    message = config_error(path, environ)
    assert message.startswith(f"config: {path} line {line}: ")
    assert expected in message


def test_database_settings_can_be_built_directly() -> None:
    with pytest.raises(ValueError, match="FEEDCOLLECTOR_D1_TOKEN"):
        DatabaseSettings(backend="d1", url="https://p.example")
    assert DatabaseSettings(path=Path("x.db")).path == Path("x.db")


# --- feeds file ----------------------------------------------------------------------------


def test_yaml_feeds_with_mappings_and_bare_urls(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "feeds.yaml",
        """
        # subscriptions
        feeds:
          - url: https://example.com/a.xml
            interval: 15m
            title: "  Example A  "
          - http://example.org/b.rss
          - url: "  https://example.net/c  "
            interval: 2h
            title:
        """,
    )
    assert load_feeds(path) == [
        FeedSpec(
            url="https://example.com/a.xml", interval=timedelta(minutes=15), title="Example A"
        ),
        FeedSpec(url="http://example.org/b.rss"),
        FeedSpec(url="https://example.net/c", interval=timedelta(hours=2)),
    ]


def test_json_feeds(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "feeds.json",
        """
        {"feeds": [
          {"url": "https://example.com/a.xml", "interval": 900, "title": "A"},
          "http://example.org/b.rss"
        ]}
        """,
    )
    assert load_feeds(path) == [
        FeedSpec(url="https://example.com/a.xml", interval=timedelta(minutes=15), title="A"),
        FeedSpec(url="http://example.org/b.rss"),
    ]


def test_load_feeds_is_the_same_from_both_modules(tmp_path: Path) -> None:
    path = write(tmp_path, "feeds.yml", "feeds:\n  - https://example.com/feed\n")
    assert feeds_file.load_feeds(path) == load_feeds(path) == [FeedSpec("https://example.com/feed")]


@pytest.mark.parametrize(
    ("name", "text"),
    [("f.yaml", "feeds: []\n"), ("f.yaml", "feeds:\n"), ("f.json", '{"feeds": []}')],
)
def test_an_empty_list_is_fine(tmp_path: Path, name: str, text: str) -> None:
    assert load_feeds(write(tmp_path, name, text)) == []


def test_duplicate_urls_name_both_lines(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "feeds.yaml",
        """
        feeds:
          - url: https://example.com/a.xml
          - https://example.com/b.xml
          - url: HTTPS://Example.COM/a.xml
            title: again
        """,
    )
    message = feeds_error(path)
    assert message.startswith(f"config: {path} line 4: ")
    assert 'on line 4 is already listed on line 2 as "https://example.com/a.xml" (both' in (message)
    assert "Remove one of the two entries." in message


def test_an_address_with_a_fragment_repeats_the_one_without(tmp_path: Path) -> None:
    """No request carries a #fragment: both entries fetched the same document into two
    feeds, every item stored twice."""
    path = write(
        tmp_path,
        "feeds.yaml",
        "feeds:\n  - https://example.com/a.xml\n  - https://example.com/a.xml#news\n",
    )
    message = feeds_error(path)
    assert "on line 3 is already listed on line 2" in message
    assert "(both request https://example.com/a.xml)" in message


def test_user_names_and_passwords_keep_their_case(tmp_path: Path) -> None:
    """Only the scheme and host ignore case: two accounts whose names or passwords differ in
    case are two feeds (they were refused as one listed twice), and each keeps its own."""
    path = write(
        tmp_path,
        "feeds.yaml",
        "feeds:\n  - https://Ann:Secret@example.com/feed\n  - https://ann:secret@EXAMPLE.com/feed\n",
    )
    assert [spec.url for spec in load_feeds(path)] == [
        "https://Ann:Secret@example.com/feed",
        "https://ann:secret@EXAMPLE.com/feed",
    ]
    assert feed_url_key("HTTPS://Ann:Secret@EXAMPLE.com/feed") == (
        "https://Ann:Secret@example.com/feed"
    )
    path.write_text(path.read_text() + "  - https://ann:secret@example.com/feed#x\n")
    assert "on line 4 is already listed on line 3" in feeds_error(path)


@pytest.mark.parametrize(
    ("first", "again", "sent"),
    [
        ("https://bücher.example/feed", "https://xn--bcher-kva.example/feed", "xn--bcher-kva"),
        ("https://example.com:443/feed", "https://example.com/feed", "https://example.com/feed"),
        ("http://example.com:80/feed", "http://example.com/feed", "http://example.com/feed"),
        ("https://example.com/%66eed?q=%7e", "https://example.com/feed?q=~", "/feed?q=~"),
        ("https://example.com", "https://example.com/", "https://example.com/"),
    ],
)
def test_spellings_of_one_request_are_one_feed(
    tmp_path: Path, first: str, again: str, sent: str
) -> None:
    """An international host and its xn-- form, a default port and none, ``%66`` and ``f``:
    the fetch sends the same request for both, so both entries stored every item twice."""
    text = f"feeds:\n  - url: {first}\n  - url: {again}\n"
    message = feeds_error(write(tmp_path, "feeds.yaml", text))
    assert f'on line 3 is already listed on line 2 as "{first}" (both request ' in message
    assert sent in message


def test_another_port_or_an_escaped_slash_is_another_feed(tmp_path: Path) -> None:
    """Port 443 on http, and ``%2F`` in a path (a server may route it apart from ``/``)."""
    urls = ["http://example.com:443/a/b", "http://example.com/a/b", "http://example.com/a%2Fb"]
    text = "feeds:\n" + "".join(f"  - {url}\n" for url in urls)
    assert [spec.url for spec in load_feeds(write(tmp_path, "feeds.yaml", text))] == urls


def test_duplicate_urls_in_json_name_both_lines(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "feeds.json",
        '{\n  "feeds": [\n    "https://example.com/a",\n\n    {"url": "https://example.com/a"}\n  ]\n}\n',
    )
    assert "line 5 is already listed on line 3" in feeds_error(path)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "ftp://example.com/feed",
            'must be an http:// or https:// address, got "ftp://example.com/feed"',
        ),
        ("http:///feed.xml", 'must name a host after http://, got "http:///feed.xml"'),
        (  # its "e.g." was "https://mailto:x@example.org"
            "mailto:x@example.org",
            'must be an http:// or https:// address, got "mailto:x@example.org"',
        ),
        (
            "localhost:8080/feed",
            'starting with http:// or https:// (e.g. "https://example.com/feed.xml")',
        ),
        (
            "user:secret@example.org/feed",
            'starting with http:// or https:// (e.g. "https://user:secret@example.org/feed")',
        ),
        (
            "example.com",
            'starting with http:// or https:// (e.g. "https://example.com"), got "example.com"',
        ),
        ("https://exa mple.com/", "must not contain spaces"),
        ('"https://a.example/\\x01"', 'must not contain control characters, got "https'),
        (
            '"https://a.example/\\ud800"',
            "must not hold half of a UTF-16 pair (an escape such as \\ud800 without its other "
            'half), got "https://a.example/\\ud800"',
        ),
        ("http://example.com:99999/", "must have a port between 0 and 65535"),
        ("http://[zz]/feed", "must write an IPv6 host as a whole address in [brackets]"),
        (
            "http://a..b/feed",
            "must name a valid host: each part between its dots 1 to 63 characters long "
            '(no ".." or leading dot), got "http://a..b/feed"',
        ),
        (f"https://{'a' * 64}.example/", "must name a valid host: each part between its dots"),
        ("''", "must not be empty"),
    ],
)
def test_invalid_urls(tmp_path: Path, url: str, expected: str) -> None:
    path = write(tmp_path, "feeds.yaml", f"feeds:\n  - title: x\n    url: {url}\n")
    message = feeds_error(path)
    assert message.startswith(f'config: {path} line 3: "url" ')
    assert expected in message
    assert "Write the feed's full address, e.g. https://example.com/feed.xml." in message


def test_ip_and_international_hosts_are_valid(tmp_path: Path) -> None:
    urls = [
        "http://[::1]:8080/f",
        "http://127.0.0.1/f",
        "https://bücher.example/f",
        "http://a_b.example./f",
    ]
    path = write(tmp_path, "feeds.yaml", "feeds:\n" + "".join(f"  - {url}\n" for url in urls))
    assert [spec.url for spec in load_feeds(path)] == urls


def test_invalid_bare_url_in_json(tmp_path: Path) -> None:
    path = write(
        tmp_path, "feeds.json", '{"feeds": [\n  "https://ok.example/",\n  "example.com"\n]}'
    )
    message = feeds_error(path)
    assert message.startswith(f"config: {path} line 3: the feed address must be a full address")


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("feeds.yaml", "feeds:\n  - url: https://example.com/a\n    interval: 1e-9\n"),
        ("feeds.json", '{"feeds": [\n  {"url": "https://example.com/a",\n   "interval": 1e-9}]}'),
    ],
)
def test_an_interval_under_a_millisecond_is_refused(tmp_path: Path, name: str, text: str) -> None:
    """The range named is a feed interval's (it said "from 1ms", and 500ms was then refused)."""
    path = write(tmp_path, name, text)
    assert feeds_error(path).startswith(
        f'config: {path} line 3: "interval" must be a duration like "30m", "2h" or "1h30m" '
        "from 1s to 3650d, got 1e-09. Fix the value, or remove the key"
    )


@pytest.mark.parametrize("interval", ["500ms", "0.5", "999ms"])
def test_a_feed_interval_under_a_second_is_refused(tmp_path: Path, interval: str) -> None:
    """Pinned intervals are stored in whole seconds: under one second it became 0, read as
    no pin at all, and the feed fell back to a learned interval of up to a day."""
    path = write(
        tmp_path,
        "feeds.yaml",
        f"feeds:\n  - url: https://example.com/a\n    interval: {interval}\n",
    )
    assert feeds_error(path).startswith(
        f'config: {path} line 3: "interval" must be a duration like "30m", "2h" or "1h30m" '
        "from 1s to 3650d, got "
    )
    one = write(tmp_path, "one.yaml", "feeds:\n  - url: https://example.com/a\n    interval: 1s\n")
    assert [spec.interval for spec in load_feeds(one)] == [timedelta(seconds=1)]


def test_an_interval_too_large_for_a_float_is_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "feeds.yaml",
        f"feeds:\n  - url: https://example.com/a\n    interval: -1{'0' * 400}\n",
    )
    assert feeds_error(path).startswith(
        f'config: {path} line 3: "interval" must be a duration like "30m", "2h" or "1h30m" '
        "from 1s to 3650d, got -1000"
    )


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("feeds.yaml", f"feeds:\n  - url: https://example.com/a\n    interval: 1{'0' * 5000}\n"),
        (
            "feeds.json",
            f'{{"feeds": [{{"url": "https://example.com/a",\n"interval": 1{"0" * 5000}}}]}}',
        ),
    ],
)
def test_a_number_beyond_int_digits_in_the_feeds_file(tmp_path: Path, name: str, text: str) -> None:
    path = write(tmp_path, name, text)
    assert feeds_error(path).startswith(
        f"config: {path} line {2 if name.endswith('json') else 3}: a whole number has more than "
        "4300 digits. Write a number in the range of its key"
    )


def test_bad_interval_shows_the_default(tmp_path: Path) -> None:
    text = "feeds:\n  - url: https://example.com/a\n\n  - url: https://example.com/b\n    interval: soon\n"
    path = write(tmp_path, "feeds.yaml", text)
    assert feeds_error(path, default_interval=timedelta(minutes=30)) == (
        f'config: {path} line 5: "interval" must be a duration like "30m", "2h" or "1h30m", '
        'got "soon". Fix the value, or remove the key: the collector then learns the interval '
        "from how often the feed posts (30m until it knows, or always with [schedule] adaptive "
        "= false)."
    )
    assert "posts ([fetch] default_interval until it knows" in feeds_error(path)


@pytest.mark.parametrize(
    ("text", "line", "expected"),
    [
        (
            "feeds:\n  - url: https://a.example/\n    intervall: 1h\n",
            3,
            'unknown key "intervall" in this entry. Known keys: url, interval, title.',
        ),
        ("feeds:\n  - title: no url\n", 2, 'this entry has no "url"'),
        ("feeds:\n  - url: 42\n", 2, '"url" must be the feed\'s address, got 42'),
        (
            "feeds:\n  - url: https://a.example/\n    title: 1984\n",
            3,
            '"title" must be text, got 1984. Put the title in quotes.',
        ),
        (  # YAML 1.1's "value" type; a TaggedScalar was all the error said
            "feeds:\n  - url: https://a.example/\n    title: =\n",
            3,
            '"title" must be text, got "=" read as YAML type tag:yaml.org,2002:value. Put',
        ),
        (
            'feeds:\n  - url: https://a.example/\n    title: "a \\udc00"\n',
            3,
            '"title" must not hold half of a UTF-16 pair',
        ),
        (
            "feeds:\n  - https://a.example/\n  -\n",
            3,
            "each entry must be a feed address or a mapping",
        ),
        ("feeds:\n  - [https://a.example/]\n", 2, "got a list"),
        (
            "feeds: https://a.example/\n",
            1,
            '"feeds" must be a list of feeds, got "https://a.example/"',
        ),
        ("feeds: []\nsettings: {}\n", 2, 'unknown top-level key "settings"'),
        ("subscriptions:\n  - https://a.example/\n", 1, 'the top-level "feeds" key is missing'),
        ("- https://a.example/\n", 1, 'must be a mapping with a top-level "feeds" key, got a list'),
    ],
)
def test_feeds_file_shape_errors(tmp_path: Path, text: str, line: int, expected: str) -> None:
    path = write(tmp_path, "feeds.yaml", text)
    message = feeds_error(path)
    assert message.startswith(f"config: {path} line {line}: ")
    assert expected in message


def test_malformed_yaml_gives_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "feeds.yaml", "feeds:\n  - url: https://a.example/\n   title: x\n")
    message = feeds_error(path)
    assert message.startswith(f"config: {path} line 3, column 4: YAML syntax error: ")
    assert 'list entries start with "- "' in message


def test_duplicate_yaml_keys_are_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path, "feeds.yaml", "feeds:\n  - url: https://a.example/\n    url: https://b.example/\n"
    )
    message = feeds_error(path)
    assert f"{path} line 3, column 5" in message
    assert 'the key "url" is written twice in one mapping. Keep one of the two' in message
    many = "".join(f"  - https://f{n}.example/feed\n" for n in range(5000))
    twice = write(tmp_path, "twice.yaml", f"feeds:\n{many}feeds:\n  - https://g.example/\n")
    message = feeds_error(twice)
    assert 'line 5002, column 1: the key "feeds" is written twice' in message
    assert len(message) < 300, "the two lists were quoted whole: 448,125 characters"


def test_malformed_json_gives_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "feeds.json", '{"feeds": [\n  {"url": "https://a.example/",}\n]}\n')
    message = feeds_error(path)
    assert message.startswith(f"config: {path} line 2, column 32: JSON syntax error: ")
    assert 'keys and text in "double quotes"' in message


def test_duplicate_json_keys_are_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "feeds.json",
        '{"feeds": [\n  {"url": "https://a.example/",\n   "url": "https://b.example/"}\n]}',
    )
    message = feeds_error(path)
    assert message.startswith(
        f'config: {path} line 3: key "url" is given twice in one mapping (first on line 2)'
    )


@pytest.mark.parametrize(
    ("name", "example_line"),
    [("feeds.yaml", "  - url: https://example.com/feed.xml"), ("feeds.json", '{"feeds": [')],
)
def test_missing_feeds_file_shows_an_example(tmp_path: Path, name: str, example_line: str) -> None:
    message = feeds_error(tmp_path / name)
    assert message.startswith(f"config: feeds file {tmp_path / name} does not exist.")
    assert example_line in message
    assert len(message.splitlines()) == 4  # the sentence, then the 3-line example


def test_empty_feeds_file_shows_an_example(tmp_path: Path) -> None:
    message = feeds_error(write(tmp_path, "feeds.yaml", "\n  \n"))
    assert "is empty" in message
    assert "interval: 30m" in message


def test_feeds_file_needs_a_known_extension(tmp_path: Path) -> None:
    message = feeds_error(write(tmp_path, "feeds.txt", "feeds: []\n"))
    assert "must end in .yaml, .yml or .json" in message
    assert "else point feeds_file in the config at the feeds file" in message


def test_a_feeds_file_that_is_a_folder_is_not_told_to_be_renamed(tmp_path: Path) -> None:
    for folder in (tmp_path / "feeds", tmp_path / "feeds.yaml"):
        folder.mkdir()
        assert feeds_error(folder) == (
            f"config: feeds file {folder} is a folder; point feeds_file in the config at a "
            "file of feeds (.yaml, .yml or .json)."
        )


def test_feeds_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "feeds.yaml"
    path.write_bytes(b"feeds:\n  - url: https://a.example/\n    title: caf\xe9\n")
    assert f"{path} line 3: the file is not UTF-8 text" in feeds_error(path)


def test_the_readme_documents_every_config_key_with_its_default() -> None:
    """The README's annotated config block is the reference users copy: it must stay whole."""
    import re
    import tomllib

    from pydantic import BaseModel

    from feedcollector.config import Settings

    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Configuration", 1)[1]
    block = re.search(r"```toml\n(.*?)```", section, re.DOTALL)
    assert block, "README's Configuration section has a toml block"
    documented = tomllib.loads(block.group(1))
    defaults = Settings(base_dir=Path("."))
    secrets = {"token", "access_key_id", "secret_access_key"}
    for name in Settings.model_fields:
        if name in ("config_path", "config_inherited", "base_dir"):
            continue
        value = getattr(defaults, name)
        if not isinstance(value, BaseModel):
            assert name in documented, f"README lacks the top-level key {name}"
            continue
        keys = set(type(value).model_fields) - secrets
        assert set(documented.get(name, {})) == keys, f"README's [{name}] section != the model"


def test_schedule_section_defaults_and_values(tmp_path: Path) -> None:
    schedule = load_settings(None).schedule
    assert (schedule.adaptive, schedule.min_interval, schedule.max_interval) == (
        True,
        timedelta(minutes=15),
        timedelta(hours=2),
    )
    assert (schedule.jitter, schedule.host_gap) == (0.1, timedelta(seconds=1))
    assert (schedule.max_retry_after, schedule.max_cache_floor) == (
        timedelta(hours=24),
        timedelta(hours=24),
    )
    path = write(
        tmp_path,
        "c.toml",
        '[schedule]\nadaptive = false\nmin_interval = "5m"\nmax_interval = "2h"\n'
        'jitter = "20%"\nhost_gap = "0s"\nmax_retry_after = "1h"\nmax_cache_floor = "6h"\n',
    )
    schedule = load_settings(path).schedule
    assert (schedule.adaptive, schedule.jitter, schedule.host_gap) == (False, 0.2, timedelta(0))
    assert (schedule.min_interval, schedule.max_interval) == (
        timedelta(minutes=5),
        timedelta(hours=2),
    )
    assert (schedule.max_retry_after, schedule.max_cache_floor) == (
        timedelta(hours=1),
        timedelta(hours=6),
    )


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        (
            '[schedule]\nmin_interval = "2h"\nmax_interval = "1h"\n',
            'line 2: min_interval ("2h") is longer than max_interval ("1h"). Make min_interval',
        ),
        (  # a config from before the default of max_interval went from 24h down to 2h
            '[schedule]\nmin_interval = "3h"\n',
            'line 2: min_interval ("3h") is longer than max_interval ("2h", its default: set it '
            "too). Make min_interval",
        ),
        (
            "[schedule]\njitter = 0.9\n",
            'line 2: "jitter" in [schedule] must be a fraction like 0.1 or "10%", from 0 to 0.5, '
            "got 0.9. Fix the value or remove the key to use the default (0.1).",
        ),
        (
            '[schedule]\nhost_gap = "polite"\n',
            'line 2: "host_gap" in [schedule] must be a duration like "30m", "2h" or "1h30m", '
            'or "0s" to turn it off, got "polite". Fix the value or remove the key to use the '
            'default ("1s").',
        ),
        ('[schedule]\nmax_retry_after = "0s"\n', '"max_retry_after" in [schedule] must be'),
        ('[schedule]\nmax_cache_floor = "-1h"\n', '"max_cache_floor" in [schedule] must be'),
    ],
    ids=["bounds", "bounds-by-default", "jitter", "host-gap", "zero-cap", "negative-floor-cap"],
)
def test_schedule_section_problems_name_the_line_and_the_fix(
    tmp_path: Path, toml: str, expected: str
) -> None:
    assert expected in config_error(write(tmp_path, "c.toml", toml))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("feeds:\n  - <<: {url: https://c.example/}\n", "https://c.example/"),
        ("feeds: !x\n  - https://a.example/\n", "https://a.example/"),
    ],
)
def test_merged_or_tagged_feed_entries_are_read(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "feeds.yaml"
    path.write_text(text)
    assert [spec.url for spec in load_feeds(path)] == [expected]


def test_a_value_its_yaml_tag_cannot_build_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "feeds.yaml"
    path.write_text("feeds: !!int 12\n  - https://a.example/\n")
    with pytest.raises(ConfigError) as caught:
        load_feeds(path)
    assert "YAML error" in str(caught.value)
    assert "feeds.yaml" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [  # ruamel.yaml builds these with no check of its own, and fails as Python does
        ("feeds:\n  - !!bool maybe\n", "a value YAML cannot build (KeyError: 'maybe')"),
        ("feeds:\n  - url: !!int 0x\n", "a value YAML cannot build (IndexError: "),
        ("feeds:\n  ? - {a: b}\n  : x\n", "a value YAML cannot build (TypeError: unhashable"),
        # these it builds, as plain Python values the checks then name
        ("feeds: !!pairs [a: 1]\n", "each entry must be a feed address or a mapping"),
        ("feeds:\n  - !!omap [url: 12]\n", '"url" must be the feed\'s address, got 12'),
        ("feeds:\n  - url: !!binary aGk=\n", '"url" must be the feed\'s address, got a bytes'),
    ],
)
def test_values_yaml_tags_build_are_config_errors(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "feeds.yaml"
    path.write_text(text)
    message = feeds_error(path)
    assert message.startswith(f"config: {path}")
    assert expected in message


def test_a_character_yaml_refuses_is_reported_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "feeds.yaml"
    path.write_bytes(b"feeds:\r\n  - url: https://a.example/\r\n    title: x\x00\r\n")
    message = feeds_error(path)
    assert message.startswith(f"config: {path} line 3, column 13: the file holds a character ")
    assert "#x0000" in message
    assert "position" not in message


def test_a_feed_repeated_by_an_alias_is_not_said_to_repeat_its_own_line(tmp_path: Path) -> None:
    path = write(tmp_path, "feeds.yaml", "feeds:\n  - &x https://a.example/\n  - *x\n")
    message = feeds_error(path)
    assert 'the feed "https://a.example/" on line 2 is listed again by an alias' in message
    assert "already listed on line 2" not in message
