"""Harness for the cloud shape: the real Proxy Worker under Miniflare, moto's S3 server, fakes.

- :func:`run_d1_proxy` starts ``worker/scripts/local-server.mjs`` (Miniflare + local D1) on a
  random loopback port and stops it cleanly; fixture ``d1_proxy``.
- :class:`S3Server` runs moto's S3 app on loopback behind a middleware that logs every request
  (so a test can count ``DeleteObjects`` calls); fixture ``s3_server`` yields a fresh bucket.
- :class:`FakeProxy` is a scripted HTTP server for faults the real Worker cannot be made to
  produce on demand (500s, slowness, garbage).
- :class:`FaultyRelay` puts the real Worker behind a relay that injects those faults into
  chosen requests only (say, the batch storing a feed's items), so a fault lands mid-cycle.
- :func:`write_cloud_config` and :func:`cloud_environ` set a collector up on the cloud pair.

Without Node or ``worker/node_modules`` the D1 tests skip with the fix (``npm ci`` in worker/),
unless ``CI`` is set: CI must run them, so there they fail.
"""

from __future__ import annotations

import asyncio
import http.client
import io
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

from feedcollector.backends.d1 import D1Database
from feedcollector.backends.s3 import S3ObjectStore

from .conftest import PROJECT_ROOT
from .samples import TEST_SCHEDULE

WORKER_DIR = PROJECT_ROOT / "worker"
LOCAL_SERVER = WORKER_DIR / "scripts" / "local-server.mjs"
OFFLINE_ENV = {
    "WRANGLER_SEND_METRICS": "false",
    "WRANGLER_HIDE_BANNER": "true",
    "CLOUDFLARE_CF_FETCH_ENABLED": "false",
}
STARTUP_TIMEOUT_S = 60.0
S3_ACCESS_KEY = "testing-access-key"
S3_SECRET_KEY = "testing-secret-key"
S3_REGION = "us-east-1"


class Closeable(Protocol):
    async def close(self) -> None: ...


T = TypeVar("T")
B = TypeVar("B", bound=Closeable)


def require_node() -> str:
    """Return the node executable, or skip (fail under CI) with how to get the Worker deps."""
    node = shutil.which("node")
    if node is None:
        problem = "node is not installed; the D1 Proxy Worker tests need Node 20+"
    elif not (WORKER_DIR / "node_modules" / "miniflare").is_dir():
        problem = "worker/node_modules is missing; run `npm ci` in worker/ (it pins wrangler and miniflare)"
    else:
        return node
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the cloud tests: {problem}")
    pytest.skip(problem)


@dataclass
class D1Proxy:
    """A running local Proxy Worker: its base URL and bearer token."""

    url: str
    token: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextmanager
def run_d1_proxy(
    *, persist_dir: Path | None = None, max_body_bytes: int | None = None
) -> Iterator[D1Proxy]:
    """Start the Worker under Miniflare (in-memory D1 unless ``persist_dir``); stop it after."""
    node = require_node()
    token = secrets.token_urlsafe(24)
    args = [node, str(LOCAL_SERVER), "--exit-on-stdin-close"]
    if persist_dir is not None:
        args += ["--persist", str(persist_dir)]
    if max_body_bytes is not None:
        args += ["--max-body-bytes", str(max_body_bytes)]
    with tempfile.TemporaryDirectory(prefix="d1-proxy-") as scratch:
        out_path, log_path = Path(scratch, "stdout"), Path(scratch, "stderr")
        with out_path.open("wb") as out, log_path.open("wb") as err:
            process = subprocess.Popen(
                args,
                cwd=WORKER_DIR,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                env={**os.environ, **OFFLINE_ENV, "D1_PROXY_TOKEN": token},
                start_new_session=True,
            )
        try:
            url = _wait_for_url(process, out_path, log_path)
            yield D1Proxy(url.rstrip("/"), token, process, log_path)
        finally:
            stop_process(process)


def _wait_for_url(process: subprocess.Popen[bytes], out_path: Path, log_path: Path) -> str:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        text = out_path.read_text()
        if text.endswith("\n"):
            return str(json.loads(text.splitlines()[0])["url"])
        if process.poll() is not None:
            pytest.fail(f"local D1 proxy exited with {process.returncode}: {log_path.read_text()}")
        time.sleep(0.02)
    pytest.fail(f"local D1 proxy did not start within {STARTUP_TIMEOUT_S}s: {log_path.read_text()}")


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Close stdin (the server's cue to dispose Miniflare), then escalate if it lingers."""
    if process.stdin is not None and not process.stdin.closed:
        process.stdin.close()
    try:
        process.wait(timeout=15)
        return
    except subprocess.TimeoutExpired:
        pass
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture
def d1_proxy() -> Iterator[D1Proxy]:
    with run_d1_proxy() as proxy:
        yield proxy


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    body: bytes


class S3Server:
    """moto's S3 on 127.0.0.1, every request recorded (moto's own log is not exposed)."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        app = DomainDispatcherApplication(create_backend_app)

        def recording_app(environ: dict[str, Any], start_response: Any) -> Any:
            size = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(size) if size else b""
            environ["wsgi.input"] = io.BytesIO(body)
            with self._lock:
                self.requests.append(
                    RecordedRequest(
                        environ["REQUEST_METHOD"],
                        environ.get("PATH_INFO", ""),
                        parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True),
                        body,
                    )
                )
            return app(environ, start_response)

        self._server = make_server(
            "127.0.0.1", 0, recording_app, threaded=True, request_handler=MotoRequestHandler
        )
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._running = False

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def start(self) -> S3Server:
        self._thread.start()
        self._running = True
        return self

    def stop(self) -> None:
        if self._running:
            self._running = False
            self._server.shutdown()
            self._server.server_close()

    def create_bucket(self) -> str:
        bucket = f"test-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=bucket)
        return bucket

    def client(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=S3_REGION,
            aws_access_key_id=S3_ACCESS_KEY,
            aws_secret_access_key=S3_SECRET_KEY,
        )

    def delete_objects_calls(self, bucket: str) -> list[RecordedRequest]:
        with self._lock:
            return [
                r
                for r in self.requests
                if r.method == "POST" and "delete" in r.query and r.path.strip("/") == bucket
            ]

    def store(self, bucket: str, **kwargs: Any) -> S3ObjectStore:
        return S3ObjectStore(
            self.endpoint, bucket, S3_REGION, S3_ACCESS_KEY, S3_SECRET_KEY, **kwargs
        )


@dataclass
class S3Bucket:
    server: S3Server
    bucket: str

    def store(self, **kwargs: Any) -> S3ObjectStore:
        return self.server.store(self.bucket, **kwargs)


@pytest.fixture
def s3_server() -> Iterator[S3Bucket]:
    server = S3Server().start()
    try:
        yield S3Bucket(server, server.create_bucket())
    finally:
        server.stop()


def d1_database(proxy: D1Proxy, *, timeout_s: float = 30.0) -> D1Database:
    return D1Database(proxy.url, proxy.token, timeout_s=timeout_s)


@dataclass
class Live(Generic[B]):
    """A backend plus the one event loop it lives on for a whole test (setup to teardown)."""

    name: str
    backend: B
    runner: asyncio.Runner

    def run(self, step: Awaitable[T]) -> T:
        async def await_it() -> T:
            return await step

        return self.runner.run(await_it())


@contextmanager
def live(name: str, open_backend: Callable[[], B]) -> Iterator[Live[B]]:
    """Open a backend on a fresh loop and close it on the same loop afterwards."""
    with asyncio.Runner() as runner:
        backend = open_backend()
        try:
            yield Live(name, backend, runner)
        finally:
            runner.run(backend.close())


async def collect(keys: AsyncIterator[str]) -> list[str]:
    return [key async for key in keys]


@dataclass
class FakeReply:
    status: int = 200
    body: bytes = b'{"results": []}'
    delay_s: float = 0.0
    content_type: str = "application/json"


@dataclass
class FakeProxy:
    """A scripted stand-in for the Worker: answers every POST with ``reply`` (or ``respond``)."""

    reply: FakeReply = field(default_factory=FakeReply)
    respond: Callable[[dict[str, Any]], FakeReply] | None = None
    requests: list[tuple[str, dict[str, Any], tuple[str, int]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return None

            def do_POST(self) -> None:
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append((self.path, payload, self.client_address))
                reply = fake.respond(payload) if fake.respond else fake.reply
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.content_type)
                    self.send_header("Content-Length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up waiting (timeout tests)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def fake_proxy() -> Iterator[FakeProxy]:
    fake = FakeProxy()
    try:
        yield fake
    finally:
        fake.close()


DROP = "drop"
"""A :class:`FaultyRelay` rule's answer: cut this connection unanswered and stop listening."""


class FaultyRelay:
    """The real Worker behind a relay that turns chosen requests into faults, mid-cycle.

    ``rule(path, payload)`` returns None to forward the request to ``upstream`` untouched, a
    :class:`FakeReply` to answer instead of the Worker (500, 401, or a ``delay_s`` longer than the
    client's timeout; the Worker never sees those), or :data:`DROP` to close the connection
    without an answer and stop listening, so every later request is refused, as when the proxy
    goes down. ``port`` lets a new relay come back at the address of one that went down.
    """

    def __init__(
        self,
        upstream: str,
        rule: Callable[[str, dict[str, Any]], FakeReply | str | None] | None = None,
        *,
        port: int = 0,
    ) -> None:
        self.upstream = upstream
        self.rule = rule
        self.faults: list[tuple[str, dict[str, Any]]] = []
        relay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return None

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if not relay._open:  # down: kept-alive connections die too
                    self.close_connection = True
                    return
                payload = json.loads(body)
                fault = relay.rule(self.path, payload) if relay.rule else None
                if fault is None:
                    status, content_type, answer = relay._forward(self.path, body, self.headers)
                    reply = FakeReply(status, answer, content_type=content_type)
                else:
                    relay.faults.append((self.path, payload))
                    if fault == DROP:
                        self.close_connection = True
                        relay.close()
                        return
                    assert isinstance(fault, FakeReply)
                    reply = fault
                    time.sleep(reply.delay_s)
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.content_type)
                    self.send_header("Content-Length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client stopped waiting (timeout faults)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._httpd.daemon_threads = True
        self._open = True
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _forward(self, path: str, body: bytes, headers: Any) -> tuple[int, str, bytes]:
        connection = http.client.HTTPConnection(urlsplit(self.upstream).netloc, timeout=60)
        try:
            connection.request(
                "POST",
                path,
                body=body,
                headers={
                    "Authorization": headers.get("Authorization", ""),
                    "Content-Type": "application/json",
                },
            )
            response = connection.getresponse()
            content_type = response.getheader("Content-Type") or "application/json"
            return response.status, content_type, response.read()
        finally:
            connection.close()

    def close(self) -> None:
        if self._open:
            self._open = False
            self._httpd.shutdown()
            self._httpd.server_close()


def items_batch(path: str, payload: dict[str, Any]) -> bool:
    """True for the batch that stores a feed's items (the one a storage fault should hit)."""
    statements = payload.get("statements") or []
    return path == "/batch" and any(
        s.get("sql", "").startswith("INSERT OR IGNORE INTO items") for s in statements
    )


def cloud_environ(token: str) -> dict[str, str]:
    """The secrets a cloud-shape collector reads from its environment."""
    return {
        "FEEDCOLLECTOR_D1_TOKEN": token,
        "AWS_ACCESS_KEY_ID": S3_ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": S3_SECRET_KEY,
    }


def write_cloud_config(
    folder: Path,
    *,
    proxy_url: str,
    s3_endpoint: str,
    bucket: str,
    database_timeout: str = "30s",
    extra_toml: str = "",
) -> Path:
    """A config for the cloud pair (D1 through the proxy, S3) next to an existing feeds.yaml."""
    config = folder / "feedcollector.toml"
    config.write_text(
        'feeds_file = "feeds.yaml"\n'
        f'[database]\nbackend = "d1"\nurl = "{proxy_url}"\ntimeout = "{database_timeout}"\n'
        f'[storage]\nbackend = "s3"\nendpoint = "{s3_endpoint}"\nbucket = "{bucket}"\n'
        f'region = "{S3_REGION}"\n'
        "[images]\nallow_private_addresses = true\n" + extra_toml + TEST_SCHEDULE,
        encoding="utf-8",
    )
    return config
