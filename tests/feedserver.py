"""A real HTTP server on 127.0.0.1 serving configurable routes, for tests.

Each route is a :class:`Route`: status, body bytes, headers, optional validators (the server
answers 304 to a matching ``If-None-Match`` / ``If-Modified-Since``), an optional delay, or a
handler for anything custom. Every request is recorded so tests can assert on headers and
counts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Route:
    body: bytes = b""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    etag: str | None = None
    last_modified: str | None = None
    delay_s: float = 0.0
    handler: Callable[[BaseHTTPRequestHandler], None] | None = None
    """Takes over the whole response when set."""


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    at: float


class FeedServer:
    """Start with ``with FeedServer() as server:``; ``server.url('/feed')`` gives the address."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return None

            def do_GET(self) -> None:
                server._handle(self)

            def do_HEAD(self) -> None:
                server._handle(self)

        self._httpd = ThreadingHTTPServer((host, 0), Handler)
        self.host = host
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    def route(self, path: str, route: Route | None = None, **kwargs: object) -> str:
        """Register ``path`` and return its full URL."""
        self.routes[path] = route if route is not None else Route(**kwargs)  # type: ignore[arg-type]
        return self.url(path)

    def hits(self, path: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.path.split("?", 1)[0] == path]

    def __enter__(self) -> FeedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self.requests.append(
                Request(request.command, request.path, dict(request.headers.items()), time.time())
            )
        route = self.routes.get(request.path.split("?", 1)[0]) or self.routes.get(request.path)
        if route is None:
            _send(request, 404, b"not found", {"Content-Type": "text/plain"})
            return
        if route.delay_s:
            time.sleep(route.delay_s)
        if route.handler is not None:
            route.handler(request)
            return
        headers = dict(route.headers)
        if route.etag:
            headers["ETag"] = route.etag
        if route.last_modified:
            headers["Last-Modified"] = route.last_modified
        if route.status == 200 and _not_modified(request, route):
            _send(
                request,
                304,
                b"",
                {k: v for k, v in headers.items() if k in ("ETag", "Last-Modified")},
            )
            return
        _send(request, route.status, route.body, headers)


def _not_modified(request: BaseHTTPRequestHandler, route: Route) -> bool:
    if_none_match = request.headers.get("If-None-Match")
    if route.etag and if_none_match is not None:
        return if_none_match == route.etag
    if_modified_since = request.headers.get("If-Modified-Since")
    return bool(route.last_modified and if_modified_since == route.last_modified)


def _send(
    request: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str]
) -> None:
    request.send_response(status)
    for name, value in headers.items():
        request.send_header(name, value)
    if status != 304 and "Content-Length" not in headers:
        request.send_header("Content-Length", str(len(body)))
    request.end_headers()
    if request.command != "HEAD" and status != 304:
        request.wfile.write(body)
