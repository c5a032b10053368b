"""The cloud database: Cloudflare D1 through the Proxy Worker (``worker/``).

One keep-alive ``httpx.AsyncClient`` talks to ``POST /query``, ``/batch`` and ``/exec`` with a
Bearer token; each call is exactly one round trip. Every failure (refused connection, timeout,
401, 4xx/5xx, a body that is not the Worker's JSON) becomes a :class:`DatabaseError` that names
the request and the response, because the pipeline logs it and aborts the feed (seed section 8).

Values cross JSON, so D1's own rules apply: ``bytes`` travel as ``{"base64": ...}`` (the Worker
binds them as BLOBs and returns BLOB columns the same way); D1 binds every number as REAL
(INTEGER columns convert it back by affinity) and results come back as JSON numbers, so an
integral REAL reads as ``int``; integers beyond 2**53 cannot cross JSON exactly and are refused
here rather than silently rounded.

A stopping collector bounds its waits (:meth:`D1Database.stop_waiting`): a Worker that takes
connections and never answers otherwise held every request of the stop for the whole
``[database] timeout``, one after another.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
from collections.abc import Sequence
from typing import Any

import httpx

from ..database import Row, SqlValue, Statement, naming_statement
from ..errors import TOO_LARGE, DatabaseError

MAX_PARAMS_PER_STATEMENT = 100
"""D1 refuses statements with more bound parameters ("too many SQL variables")."""

MAX_SAFE_INTEGER = 2**53 - 1
"""The largest integer a JSON number carries exactly to and from JavaScript."""

_SHOWN_SQL = 300
_SHOWN_PARAM = 80
_SHOWN_PARAMS = 20
_SHOWN_BODY = 500

log = logging.getLogger("feedcollector")


class D1Database:
    """D1 through the Proxy Worker at ``url`` (e.g. ``https://proxy.example.workers.dev``)."""

    def __init__(self, url: str, token: str, *, timeout_s: float = 30.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise DatabaseError(f"database: D1 proxy url must be http(s)://..., got {url!r}")
        if not token:
            raise DatabaseError(
                "database: no D1 proxy token; set FEEDCOLLECTOR_D1_TOKEN to the Worker's "
                "D1_PROXY_TOKEN secret"
            )
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._client = httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            timeout=httpx.Timeout(timeout_s),
            follow_redirects=False,
        )
        self._patience_s: float | None = None
        """Once stopping, how long a request may still wait for its answer (None: not stopping)."""
        self._stopped_at = 0.0
        self._waiting: set[asyncio.Timeout] = set()
        self.gave_up = False
        """Whether a stop gave up waiting: nothing is sent any more."""

    def stop_waiting(self, patience_s: float) -> None:
        """The collector is stopping: no request waits more than ``patience_s`` (at most
        ``timeout_s``) for its answer any more, those in flight counted from now. The first
        that gets none gives up on the Worker: every request still unanswered is abandoned
        and none is sent after it, so a hung Worker holds a stop that long in all, not a
        timeout per request. Abandoning is safe: a batch is atomic on the Worker and items
        are inserted OR IGNORE, so one whose answer never came is either written or not, and
        the feed is fetched again next time; the leases this collector holds expire."""
        loop = asyncio.get_running_loop()
        patience = max(min(patience_s, self.timeout_s), 0.0)
        if self._patience_s is None:
            self._stopped_at = loop.time()
        elif patience >= self._patience_s:
            return
        self._patience_s = patience
        if patience == 0.0:
            self._give_up(len(self._waiting))
            return
        deadline = loop.time() + patience
        for bound in self._waiting:
            when = bound.when()
            if not bound.expired() and (when is None or when > deadline):
                bound.reschedule(deadline)

    def _give_up(self, unanswered: int) -> None:
        """Abandon every request in flight and refuse the ones to come (see stop_waiting)."""
        if self.gave_up:
            return
        self.gave_up = True
        for bound in self._waiting:
            if not bound.expired():
                bound.reschedule(asyncio.get_running_loop().time())
        waited = asyncio.get_running_loop().time() - self._stopped_at
        log.warning(
            "database: stopping, gave up waiting for the D1 proxy %s after %.1f s: %d "
            "unanswered request(s) abandoned, none sent after them (a write among them may or "
            "may not have been applied: its feed is fetched again next time, and no item is "
            "stored twice); the leases this collector holds expire by themselves",
            self.url,
            waited,
            unanswered,
        )

    async def query(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        statement = Statement(sql, tuple(params))
        payload = {"sql": sql, "params": _encode_params(statement, self.url)}
        answer = await self._post("/query", payload, statement)
        return _rows(answer.get("results"), "/query", self.url, statement)

    async def batch(self, statements: Sequence[Statement]) -> list[list[Row]]:
        if not statements:
            return []
        payload = {
            "statements": [
                {"sql": s.sql, "params": _encode_params(s, self.url)} for s in statements
            ]
        }
        named = naming_statement(statements)
        described = Statement(f"[{len(statements)} statements] {named.sql}", named.params)
        answer = await self._post("/batch", payload, described)
        results = answer.get("results")
        if not isinstance(results, list) or len(results) != len(statements):
            raise DatabaseError(
                f"database: D1 proxy {self.url}/batch answered {len(statements)} statements "
                f"with a malformed result list ({_shorten(repr(results), _SHOWN_BODY)})"
            )
        return [_rows(r, "/batch", self.url, s) for r, s in zip(results, statements, strict=True)]

    async def exec(self, sql: str) -> None:
        await self._post("/exec", {"sql": sql}, Statement(sql))

    async def close(self) -> None:
        await self._client.aclose()

    async def _post(
        self, endpoint: str, payload: dict[str, Any], shown: Statement
    ) -> dict[str, Any]:
        where = f"{self.url}{endpoint}"
        request = describe_statement(shown)
        try:
            body = json.dumps(payload, ensure_ascii=False, allow_nan=False).encode()
        except ValueError as exc:
            raise DatabaseError(
                f"database: D1 proxy {where}: cannot encode {request}: {exc}"
            ) from exc
        if self.gave_up:
            raise DatabaseError(
                f"database: D1 proxy {where}: not sent, the collector is stopping and gave up "
                f"waiting for the proxy; {request}"
            )
        try:
            response = await self._answer(endpoint, body, where, request)
        except httpx.TimeoutException as exc:
            raise DatabaseError(
                f"database: D1 proxy {where} timed out after {self.timeout_s:g}s "
                f"({type(exc).__name__}); {request}"
            ) from exc
        except httpx.HTTPError as exc:
            raise DatabaseError(
                f"database: D1 proxy {where} unreachable ({type(exc).__name__}: {exc}); check "
                "that the Worker is deployed and running and that [database] url is its "
                f"address; {request}"
            ) from exc
        if response.status_code == 401:
            raise DatabaseError(
                f"database: D1 proxy {where} refused the token (401); check that "
                "FEEDCOLLECTOR_D1_TOKEN equals the Worker secret D1_PROXY_TOKEN"
            )
        answer = _json_object(response)
        if response.status_code != 200:
            raise DatabaseError(
                f"database: D1 proxy {where} answered {response.status_code}: "
                f"{_error_message(answer, response)}; {request}",
                kind=_error_kind(answer) or (TOO_LARGE if response.status_code == 413 else None),
            )
        if answer is None:
            raise DatabaseError(
                f"database: D1 proxy {where} answered 200 without a JSON object "
                f"({_shorten(response.text, _SHOWN_BODY)!r}); {request}"
            )
        return answer

    async def _answer(self, endpoint: str, body: bytes, where: str, request: str) -> httpx.Response:
        """POST ``body``, for as long as a stop lets it wait (:meth:`stop_waiting`). A request
        that runs out of its own ``timeout_s`` during a stop gives up on the Worker too."""
        patience = self._patience_s
        bound = asyncio.timeout(patience)
        try:
            async with bound:
                self._waiting.add(bound)
                try:
                    return await self._client.post(endpoint, content=body)
                finally:
                    self._waiting.discard(bound)
        except httpx.TimeoutException:
            if self._patience_s is not None:  # its own timeout ran out first, as good a sign
                self._give_up(len(self._waiting) + 1)
            raise
        except TimeoutError as exc:
            if not bound.expired():
                raise
            self._give_up(len(self._waiting) + 1)
            raise DatabaseError(
                f"database: D1 proxy {where}: gave up waiting for the answer, the collector is "
                f"stopping (what it asked may or may not have been done); {request}"
            ) from exc


def describe_statement(statement: Statement) -> str:
    """A one-line, bounded description of a request for error messages and logs."""
    sql = _shorten(" ".join(statement.sql.split()), _SHOWN_SQL)
    shown = [_shorten_value(p) for p in statement.params[:_SHOWN_PARAMS]]
    more = len(statement.params) - _SHOWN_PARAMS
    suffix = f" +{more} more" if more > 0 else ""
    return f"sql: {sql}; params: {shown}{suffix}"


def _encode_params(statement: Statement, url: str) -> list[Any]:
    """Turn Python values into the Worker's JSON, refusing what D1 would mangle or reject."""
    if len(statement.params) > MAX_PARAMS_PER_STATEMENT:
        raise DatabaseError(
            f"database: D1 proxy {url}: {len(statement.params)} bound parameters, D1 allows at "
            f"most {MAX_PARAMS_PER_STATEMENT} per statement; {describe_statement(statement)}"
        )
    encoded: list[Any] = []
    for value in statement.params:
        if isinstance(value, bytes | bytearray | memoryview):
            encoded.append({"base64": base64.b64encode(bytes(value)).decode("ascii")})
        elif isinstance(value, bool) or value is None or isinstance(value, str):
            encoded.append(value)
        elif isinstance(value, int):
            if abs(value) > MAX_SAFE_INTEGER:
                raise DatabaseError(
                    f"database: D1 proxy {url}: integer {value} exceeds 2**53-1 and would be "
                    f"rounded in JSON; {describe_statement(statement)}"
                )
            encoded.append(value)
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise DatabaseError(
                    f"database: D1 proxy {url}: {value} is not a finite number; "
                    f"{describe_statement(statement)}"
                )
            encoded.append(value)
        else:
            raise DatabaseError(
                f"database: D1 proxy {url}: cannot bind {type(value).__name__}; "
                f"{describe_statement(statement)}"
            )
    return encoded


def _rows(raw: object, endpoint: str, url: str, statement: Statement) -> list[Row]:
    if not isinstance(raw, list) or not all(isinstance(row, dict) for row in raw):
        raise DatabaseError(
            f"database: D1 proxy {url}{endpoint} answered rows that are not a list of objects "
            f"({_shorten(repr(raw), _SHOWN_BODY)}); {describe_statement(statement)}"
        )
    return [{name: _decode_value(value) for name, value in row.items()} for row in raw]


def _decode_value(value: object) -> object:
    if isinstance(value, dict) and set(value) == {"base64"} and isinstance(value["base64"], str):
        return base64.b64decode(value["base64"])
    return value


def _json_object(response: httpx.Response) -> dict[str, Any] | None:
    try:
        decoded = response.json()
    except ValueError:
        return None
    return decoded if isinstance(decoded, dict) else None


def _error_message(answer: dict[str, Any] | None, response: httpx.Response) -> str:
    error = answer.get("error") if answer else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        kind = error.get("kind")
        return f"{error['message']}" + (f" [{kind}]" if isinstance(kind, str) else "")
    return f"(not the Worker's JSON) {_shorten(response.text, _SHOWN_BODY)!r}"


def _error_kind(answer: dict[str, Any] | None) -> str | None:
    error = answer.get("error") if answer else None
    kind = error.get("kind") if isinstance(error, dict) else None
    return kind if isinstance(kind, str) else None


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _shorten_value(value: SqlValue) -> SqlValue:
    if isinstance(value, str):
        return _shorten(value, _SHOWN_PARAM)
    if isinstance(value, bytes):
        return value[:_SHOWN_PARAM] + (b"..." if len(value) > _SHOWN_PARAM else b"")
    return value
