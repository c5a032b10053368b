"""The Proxy Worker itself (worker/src/index.js), spoken to over HTTP under Miniflare's local D1.

These pin the wire contract the Python client relies on: auth, request shapes, error shapes
with D1's own message, batch atomicity, value binding, size limits, and the D1 quirks the
collector is designed around (exec splits on newlines, no BEGIN, 100 parameters, JSON numbers).
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from . import cloud
from .cloud import D1Proxy, run_d1_proxy

pytestmark = pytest.mark.cloud

d1_proxy = cloud.d1_proxy


def post(proxy: D1Proxy, endpoint: str, body: Any, *, token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {proxy.token if token is None else token}"}
    return httpx.post(f"{proxy.url}{endpoint}", json=body, headers=headers, timeout=30)


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def error_of(response: httpx.Response, status: int) -> dict[str, str]:
    assert response.status_code == status, response.text
    error: dict[str, str] = response.json()["error"]
    return error


@pytest.fixture(scope="module")
def shared_proxy() -> Iterator[D1Proxy]:
    """One Worker for the tests that create nothing, so they need not pay a start each."""
    with run_d1_proxy() as proxy:
        yield proxy


@pytest.fixture
def proxy_with_table(d1_proxy: D1Proxy) -> D1Proxy:
    ok(
        post(
            d1_proxy,
            "/query",
            {
                "sql": "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, n INTEGER)"
            },
        )
    )
    return d1_proxy


def test_missing_or_wrong_token_is_401_without_detail(shared_proxy: D1Proxy) -> None:
    body = {"sql": "SELECT 1 AS one"}
    answers = [
        httpx.post(f"{shared_proxy.url}/query", json=body),
        post(shared_proxy, "/query", body, token="wrong"),
        post(shared_proxy, "/query", body, token=shared_proxy.token[:-1]),
        post(shared_proxy, "/query", body, token=shared_proxy.token + "x"),
        httpx.post(
            f"{shared_proxy.url}/query", json=body, headers={"Authorization": shared_proxy.token}
        ),
        post(shared_proxy, "/no-such-endpoint", body, token="wrong"),
    ]
    for answer in answers:
        assert answer.status_code == 401
        assert answer.headers["WWW-Authenticate"] == "Bearer"
        assert answer.json() == {"error": {"kind": "unauthorized", "message": "unauthorized"}}
    assert ok(post(shared_proxy, "/query", body))["results"] == [{"one": 1}]


def test_unknown_endpoint_and_wrong_method(shared_proxy: D1Proxy) -> None:
    assert error_of(post(shared_proxy, "/drop", {}), 404)["kind"] == "not_found"
    answer = httpx.get(
        f"{shared_proxy.url}/query", headers={"Authorization": f"Bearer {shared_proxy.token}"}
    )
    assert error_of(answer, 405)["message"] == "/query accepts POST only"


@pytest.mark.parametrize(
    ("endpoint", "body", "named"),
    [
        ("/query", [1, 2], "body must be an object"),
        ("/query", {"params": []}, "body.sql must be a non-empty string"),
        ("/query", {"sql": "SELECT ?", "params": "x"}, "body.params must be an array"),
        ("/query", {"sql": "SELECT ?", "params": [[1]]}, "body.params[0] must be a string"),
        ("/query", {"sql": "SELECT ?", "params": [{"base64": "%%"}]}, "params[0].base64 is not"),
        ("/batch", {"statements": "SELECT 1"}, 'body must be {"statements"'),
        ("/batch", {"statements": [{"sql": "SELECT 1"}, {"sql": " "}]}, "statements[1].sql"),
        ("/exec", {"sql": ""}, "non-empty sql"),
        ("/exec", {"sql": "SELECT 1", "params": [1]}, "/exec takes no params"),
    ],
)
def test_bad_shapes_are_400_naming_the_problem(
    shared_proxy: D1Proxy, endpoint: str, body: Any, named: str
) -> None:
    error = error_of(post(shared_proxy, endpoint, body), 400)
    assert error["kind"] == "bad_request"
    assert named in error["message"]


def test_bad_json_is_400(shared_proxy: D1Proxy) -> None:
    headers = {"Authorization": f"Bearer {shared_proxy.token}"}
    for content in (b"{", b"", b"\xff\xfe{}"):
        answer = httpx.post(f"{shared_proxy.url}/query", content=content, headers=headers)
        error = error_of(answer, 400)
        assert error["kind"] in {"bad_json", "bad_request"}, error


def test_parameter_binding_of_every_json_type(proxy_with_table: D1Proxy) -> None:
    ok(
        post(
            proxy_with_table,
            "/query",
            {"sql": "CREATE TABLE v (i INTEGER, r REAL, s TEXT, b BLOB, z)"},
        )
    )
    blob = bytes(range(256))
    params = [42, 2.5, "中文 🎉 \u0000 end", {"base64": base64.b64encode(blob).decode()}, None]
    row = ok(
        post(
            proxy_with_table,
            "/query",
            {
                "sql": "INSERT INTO v VALUES (?, ?, ?, ?, ?) RETURNING i, r, s, b, z, "
                "typeof(i) AS ti, typeof(r) AS tr, typeof(s) AS ts, typeof(b) AS tb, typeof(z) AS tz",
                "params": params,
            },
        )
    )["results"][0]
    assert row["i"] == 42
    assert row["r"] == 2.5
    assert row["s"] == "中文 🎉 \u0000 end"
    assert base64.b64decode(row["b"]["base64"]) == blob
    assert row["z"] is None
    assert (row["ti"], row["tr"], row["ts"], row["tb"], row["tz"]) == (
        "integer",
        "real",
        "text",
        "blob",
        "null",
    )


def test_numbers_bind_as_real_and_booleans_as_numbers(shared_proxy: D1Proxy) -> None:
    """D1 binds every JS number as REAL; INTEGER column affinity turns it back into an integer."""
    row = ok(
        post(
            shared_proxy,
            "/query",
            {"sql": "SELECT typeof(?) AS t, ? + 1 AS plus, ? AS flag", "params": [3, 3, True]},
        )
    )["results"][0]
    assert row == {"t": "real", "plus": 4, "flag": 1}


def test_integers_beyond_2_53_lose_precision_in_json(shared_proxy: D1Proxy) -> None:
    """Why the Python client refuses such integers: JSON numbers are doubles in the Worker."""
    row = ok(post(shared_proxy, "/query", {"sql": "SELECT 9007199254740993 AS big"}))["results"][0]
    assert row["big"] == 9007199254740992


def test_batch_returns_rows_per_statement(proxy_with_table: D1Proxy) -> None:
    statements = [
        {"sql": "INSERT INTO t (name, n) VALUES (?, ?) RETURNING id", "params": ["a", 1]},
        {"sql": "INSERT OR IGNORE INTO t (name, n) VALUES (?, ?) RETURNING id", "params": ["a", 2]},
        {"sql": "UPDATE t SET n = n + 1 WHERE name = ?", "params": ["a"]},
        {"sql": "SELECT name, n FROM t"},
    ]
    answer = ok(post(proxy_with_table, "/batch", {"statements": statements}))
    assert answer["results"] == [[{"id": 1}], [], [], [{"name": "a", "n": 2}]]
    assert [m["changes"] for m in answer["meta"]] == [1, 0, 1, 0]
    assert ok(post(proxy_with_table, "/batch", {"statements": []}))["results"] == []


def test_batch_rolls_back_entirely_on_a_constraint_error(proxy_with_table: D1Proxy) -> None:
    statements = [
        {"sql": "INSERT INTO t (name) VALUES (?)", "params": ["first"]},
        {"sql": "INSERT INTO t (name) VALUES (?)", "params": ["second"]},
        {"sql": "INSERT INTO t (name) VALUES (?)", "params": ["first"]},
    ]
    error = error_of(post(proxy_with_table, "/batch", {"statements": statements}), 409)
    assert error["kind"] == "constraint"
    assert "UNIQUE constraint failed: t.name" in error["message"]
    rows = ok(post(proxy_with_table, "/query", {"sql": "SELECT count(*) AS n FROM t"}))["results"]
    assert rows == [{"n": 0}]


@pytest.mark.parametrize(
    ("sql", "params", "d1_says"),
    [
        ("SELEC 1", [], "syntax error"),
        ("SELECT * FROM missing_table", [], "no such table: missing_table"),
        ("SELECT ?", [1, 2], "Wrong number of parameter bindings"),
        ("SELECT " + ", ".join("?" * 101), list(range(101)), "too many SQL variables"),
        ("BEGIN", [], "BEGIN TRANSACTION or SAVEPOINT"),
        ("SAVEPOINT s1", [], "BEGIN TRANSACTION or SAVEPOINT"),
    ],
)
def test_sql_errors_are_400_with_d1s_message(
    shared_proxy: D1Proxy, sql: str, params: list[int], d1_says: str
) -> None:
    error = error_of(post(shared_proxy, "/query", {"sql": sql, "params": params}), 400)
    assert error["kind"] == "sql"
    assert d1_says in error["message"]


def test_hundred_parameters_are_accepted(shared_proxy: D1Proxy) -> None:
    sql = "SELECT " + ", ".join(f"? AS c{i}" for i in range(100))
    row = ok(post(shared_proxy, "/query", {"sql": sql, "params": list(range(100))}))["results"][0]
    assert row == {f"c{i}": i for i in range(100)}


def test_string_over_d1s_limit_is_refused_with_sqlite_toobig(proxy_with_table: D1Proxy) -> None:
    body = {"sql": "INSERT INTO t (name) VALUES (?)", "params": ["x" * 3_000_000]}
    error = error_of(post(proxy_with_table, "/query", body), 413)
    assert "SQLITE_TOOBIG" in error["message"]
    body = {
        "sql": "INSERT INTO t (name) VALUES (?) RETURNING length(name) AS n",
        "params": ["x" * 1_000_000],
    }
    assert ok(post(proxy_with_table, "/query", body))["results"] == [{"n": 1_000_000}]


def test_oversized_requests_are_refused_before_d1(shared_proxy: D1Proxy) -> None:
    """Default limit 16 MiB (wrangler.toml), by Content-Length or by counting a chunked body."""
    headers = {"Authorization": f"Bearer {shared_proxy.token}", "Content-Type": "application/json"}
    body = b'{"sql": "SELECT ?", "params": ["' + b"x" * (16 * 1024 * 1024) + b'"]}'
    answer = httpx.post(f"{shared_proxy.url}/query", content=body, headers=headers, timeout=60)
    assert error_of(answer, 413)["kind"] == "too_large"

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(body), 1 << 20):
            yield body[start : start + (1 << 20)]

    answer = httpx.post(f"{shared_proxy.url}/query", content=chunks(), headers=headers, timeout=60)
    assert answer.request.headers["Transfer-Encoding"] == "chunked"
    assert "Content-Length" not in answer.request.headers
    assert error_of(answer, 413)["message"].startswith("request body over 16777216 bytes")


def test_body_limit_is_configurable(tmp_path: Path) -> None:
    with run_d1_proxy(max_body_bytes=200) as proxy:
        small = {"sql": "SELECT ? AS v", "params": ["x" * 50]}
        assert ok(post(proxy, "/query", small))["results"] == [{"v": "x" * 50}]
        big = {"sql": "SELECT ? AS v", "params": ["x" * 300]}
        assert error_of(post(proxy, "/query", big), 413)["kind"] == "too_large"


def test_exec_splits_on_newlines(d1_proxy: D1Proxy) -> None:
    """Why DDL goes through /batch: exec treats every line as its own statement."""
    answer = ok(post(d1_proxy, "/exec", {"sql": "CREATE TABLE a (x);\nCREATE TABLE b (y);"}))
    assert answer["meta"]["count"] == 2
    error = error_of(post(d1_proxy, "/exec", {"sql": "CREATE TABLE c (\n  x TEXT\n)"}), 400)
    assert error["kind"] == "sql"
    tables = ok(
        post(
            d1_proxy,
            "/query",
            {
                "sql": "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('a', 'b', 'c') ORDER BY name"
            },
        )
    )["results"]
    assert tables == [{"name": "a"}, {"name": "b"}]


def test_foreign_keys_are_enforced(d1_proxy: D1Proxy) -> None:
    statements = [
        {"sql": "CREATE TABLE parent (id TEXT PRIMARY KEY)"},
        {"sql": "CREATE TABLE child (id TEXT PRIMARY KEY, parent_id TEXT REFERENCES parent (id))"},
    ]
    ok(post(d1_proxy, "/batch", {"statements": statements}))
    body = {"sql": "INSERT INTO child VALUES (?, ?)", "params": ["c1", "nobody"]}
    assert (
        "FOREIGN KEY constraint failed" in error_of(post(d1_proxy, "/query", body), 409)["message"]
    )


def test_persisted_database_survives_a_restart(tmp_path: Path) -> None:
    with run_d1_proxy(persist_dir=tmp_path) as proxy:
        ok(
            post(
                proxy,
                "/batch",
                {
                    "statements": [
                        {"sql": "CREATE TABLE kept (v TEXT)"},
                        {"sql": "INSERT INTO kept VALUES (?)", "params": ["still here"]},
                    ]
                },
            )
        )
    with run_d1_proxy(persist_dir=tmp_path) as proxy:
        assert ok(post(proxy, "/query", {"sql": "SELECT v FROM kept"}))["results"] == [
            {"v": "still here"}
        ]


def test_harness_stops_the_server_cleanly() -> None:
    with run_d1_proxy() as proxy:
        port = httpx.URL(proxy.url).port
        assert port is not None
        ok(post(proxy, "/query", {"sql": "SELECT 1"}))
    assert proxy.process.returncode == 0, proxy.log()
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(("127.0.0.1", port))


def test_wrangler_config_is_valid_and_bundles(tmp_path: Path) -> None:
    """`wrangler deploy --dry-run` reads wrangler.toml and bundles the Worker without network."""
    node = cloud.require_node()
    result = subprocess.run(
        [node, "node_modules/.bin/wrangler", "deploy", "--dry-run", "--outdir", str(tmp_path)],
        cwd=cloud.WORKER_DIR,
        env={**os.environ, **cloud.OFFLINE_ENV},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "env.DB (feedcollector)" in result.stdout
    assert (tmp_path / "index.js").is_file()
