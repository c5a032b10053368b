"""The value grammar both configuration files share, and how their problems are reported.

The TOML settings and the YAML/JSON feeds file accept the same durations, sizes and URLs, and
report mistakes in the same one-paragraph form, so both read values through this module.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

from .errors import ConfigError
from .safe_text import clipped_int, has_half_pair


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong in a file: what (no final period), how to fix it, and where."""

    what: str
    fix: str
    line: int | None = None
    column: int | None = None


class SettingProblem(ValueError):
    """Raised in settings validators: ``what`` is a predicate ("must be ...") for the key at hand,
    or, when ``key`` names the key to point at, a whole sentence."""

    def __init__(self, what: str, *, fix: str | None = None, key: str | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.fix = fix
        self.key = key


def _where(problem: Problem) -> str:
    if problem.line is None:
        return ""
    column = f", column {problem.column}" if problem.column is not None else ""
    return f"line {problem.line}{column}"


def config_error(file: str, problems: Sequence[Problem], *, stage: str = "config") -> ConfigError:
    """One paragraph: the first problem in file order in full, then where the others are;
    ``stage`` prefixes it (``import-opml`` for a file to import: it is no configuration)."""
    ordered = sorted(problems, key=lambda p: (p.line is None, p.line or 0, p.column or 0))
    first, others = ordered[0], ordered[1:]
    where = _where(first)
    message = (
        f"{stage}: {file}{' ' + where if where else ''}: {first.what.rstrip('.')}. {first.fix}"
    )
    if others:
        listed = "; ".join(f"{_where(p) or 'elsewhere'}: {p.what.rstrip('.')}" for p in others)
        message += f" Also fix: {listed}."
    return ConfigError(message)


_LONG_NUMBER = re.compile(r"\d[\d_]{4300,}")


def has_long_number(text: str) -> bool:
    """Whether ``text`` writes a number of over 4,300 digits, which int() refuses."""
    return _LONG_NUMBER.search(text) is not None


def long_number_problem(text: str) -> Problem:
    """int() refuses over 4,300 digits and the TOML, YAML and JSON readers let its words out
    (``sys.set_int_max_str_digits()``): this says where, and what to do instead."""
    found = _LONG_NUMBER.search(text)
    line = text.count("\n", 0, found.start()) + 1 if found else None
    fix = "Write a number in the range of its key (a few digits are enough for any)."
    return Problem("a whole number has more than 4300 digits", fix, line=line)


def describe_value(value: object) -> str:
    """How a wrong value is quoted back to the user."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "nothing"
    if isinstance(value, str):  # half of a UTF-16 pair cannot be printed: shown as its escape
        return json.dumps(value, ensure_ascii=False).encode("utf-8", "backslashreplace").decode()
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    tag, text = getattr(value, "tag", None), getattr(value, "value", None)
    if tag is not None and isinstance(text, str):  # YAML reads a bare "=" as a typed value
        return f"{describe_value(text)} read as YAML type {getattr(tag, 'value', tag)}"
    return f"a {type(value).__name__}"


DURATION_HINT = 'a duration like "30m", "2h" or "1h30m"'
_DURATION_UNITS: Mapping[str, float] = {
    "ms": 0.001,
    "s": 1,
    "m": 60,
    "h": 3600,
    "d": 86400,
    "w": 604800,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_DURATION_TEXT = re.compile(rf"(?:{_DURATION_PART.pattern})+")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_MAX_SECONDS = 3650 * 86400
_SHORTEST = timedelta(milliseconds=1)
"""Checked on the timedelta, not the float: it keeps microseconds, so 1e-300 seconds was zero
(and every fetch timed out at once)."""


def parse_duration(value: object, *, shortest: timedelta = _SHORTEST) -> timedelta:
    """Read "90s", "30m", "1h30m", "2d", "500ms" or a bare number of seconds, from
    ``shortest`` to 3650 days (the error names the range the caller allows)."""
    text = re.sub(r"\s+", "", value.lower()) if isinstance(value, str) else ""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int) and not isinstance(value, bool):
        seconds = float(max(-1, min(value, _MAX_SECONDS + 1)))  # float(10**400) overflows
    elif isinstance(value, float):
        seconds = value
    elif _NUMBER.fullmatch(text):
        seconds = float(text)
    elif _DURATION_TEXT.fullmatch(text):
        seconds = sum(float(n) * _DURATION_UNITS[unit] for n, unit in _DURATION_PART.findall(text))
    else:
        raise ValueError(f"must be {DURATION_HINT}, got {describe_value(value)}")
    in_range = not math.isnan(seconds) and 0 < seconds <= _MAX_SECONDS
    if not in_range or timedelta(seconds=seconds) < shortest:
        raise ValueError(
            f"must be {DURATION_HINT} from {format_duration(shortest)} to 3650d, "
            f"got {describe_value(value)}"
        )
    return timedelta(seconds=seconds)


_ZERO_DURATION = re.compile(r"0+(?:\.0+)?(?:ms|s|m|h|d|w)?")


def parse_duration_or_zero(value: object) -> timedelta:
    """Like :func:`parse_duration`, but ``0`` / ``"0s"`` mean zero (a feature turned off)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value == 0:
        return timedelta(0)
    if isinstance(value, str) and _ZERO_DURATION.fullmatch(re.sub(r"\s+", "", value.lower())):
        return timedelta(0)
    try:
        return parse_duration(value)
    except ValueError:
        raise ValueError(
            f'must be {DURATION_HINT}, or "0s" to turn it off, got {describe_value(value)}'
        ) from None


FRACTION_HINT = 'a fraction like 0.1 or "10%"'


def parse_fraction(value: object, *, most: float = 0.5) -> float:
    """Read 0.1 or "10%" (from 0 up to ``most``)."""
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str) and (found := re.fullmatch(r"(\d+(?:\.\d+)?)\s*%", value.strip())):
        number = float(found[1]) / 100
    if number is None or math.isnan(number) or not 0 <= number <= most:
        raise ValueError(
            f"must be {FRACTION_HINT}, from 0 to {most:g}, got {describe_value(value)}"
        )
    return number


def format_duration(duration: timedelta) -> str:
    """The inverse of :func:`parse_duration`, shortest form ("1h30m", "500ms")."""
    milliseconds = round(duration.total_seconds() * 1000)
    if milliseconds % 1000:
        return f"{milliseconds}ms"
    rest, parts = milliseconds // 1000, []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


BYTE_SIZE_HINT = 'a size like "20MiB" or "20MB", or a number of bytes'
_BYTE_UNITS: Mapping[str, int] = {
    "": 1,
    "b": 1,
    **{
        prefix + suffix: 1000**power
        for power, prefix in enumerate("kmgt", 1)
        for suffix in ("", "b")
    },
    **{
        prefix + suffix: 1024**power
        for power, prefix in enumerate("kmgt", 1)
        for suffix in ("i", "ib")
    },
}
_BYTE_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")


def parse_byte_size(value: object) -> int:
    """Read 20971520, "20MiB" (binary) or "20MB" (decimal); at least one byte."""
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif isinstance(value, str) and (found := _BYTE_SIZE.fullmatch(value.strip().lower())):
        factor = _BYTE_UNITS.get(found[2])
        if factor is None:
            raise ValueError(f"must be {BYTE_SIZE_HINT}, got {describe_value(value)}")
        number = float(found[1]) * factor
        if math.isinf(number):  # 400 digits: int() of an infinite float overflows
            raise ValueError(f"is too large: must be {BYTE_SIZE_HINT}, got {describe_value(value)}")
        size = int(number)
    else:
        raise ValueError(f"must be {BYTE_SIZE_HINT}, got {describe_value(value)}")
    if size < 1:
        raise ValueError(f"must be at least 1 byte, got {describe_value(value)}")
    return size


def check_storable_text(value: str) -> str:
    """``value``, or ValueError when it holds half of a UTF-16 pair (a YAML escape such as
    ``"\\ud800"`` alone writes one): no UTF-8 text holds it, so no database can store it."""
    if has_half_pair(value):
        raise ValueError(
            "must not hold half of a UTF-16 pair (an escape such as \\ud800 without its other "
            f"half), got {describe_value(value)}"
        )
    return value


_CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f]")


def check_request_text(value: str) -> str:
    """``value``, or ValueError when it holds a control character (C0 or DEL): the settings'
    text goes into request headers, where a line break made every request fail."""
    if _CONTROL_CHARACTERS.search(value):
        raise ValueError(f"must not contain control characters, got {describe_value(value)}")
    return value


def check_http_url(value: str) -> str:
    """Return the URL without surrounding whitespace, or raise ValueError with a predicate.

    Feeds and services are only reachable over http(s), and a URL without a host is a typo.
    """
    text = check_storable_text(value.strip())
    shown = describe_value(text)
    if not text:
        raise ValueError("must not be empty")
    if re.search(r"\s", text):
        raise ValueError(f"must not contain spaces, got {shown}")
    if _CONTROL_CHARACTERS.search(text):
        raise ValueError(f"must not contain control characters, got {shown}")
    try:
        parts = urlsplit(text)
    except ValueError:  # its own words ("Invalid IPv6 URL") said neither what nor how
        raise ValueError(
            "must write an IPv6 host as a whole address in [brackets], e.g. "
            f"http://[::1]:8080/, got {shown}"
        ) from None
    if parts.scheme.lower() not in ("http", "https"):
        after_colon = text[len(parts.scheme) + 1 :]
        credentials = "@" in after_colon.split("/", 1)[0] and parts.scheme.lower() != "mailto"
        other_scheme = (
            parts.scheme and "." not in parts.scheme and not after_colon[:1].isdigit()
        ) and not credentials  # mailto:..., javascript:... (not host:port, not user:secret@)
        if "://" in text or other_scheme:
            raise ValueError(f"must be an http:// or https:// address, got {shown}")
        example = f"https://{text}" if "." in text.split("/")[0] else "https://example.com/feed.xml"
        raise ValueError(
            "must be a full address starting with http:// or https:// "
            f'(e.g. "{example}"), got {shown}'
        )
    if not parts.hostname:
        raise ValueError(f"must name a host after {parts.scheme}://, got {shown}")
    if ":" not in parts.hostname:  # an IPv6 literal is no name
        try:  # what the fetch does with the name: "a..b" failed every fetch as a bug
            parts.hostname.encode("idna")
        except UnicodeError:
            raise ValueError(
                "must name a valid host: each part between its dots 1 to 63 characters long "
                f'(no ".." or leading dot), got {shown}'
            ) from None
    try:
        parts.port  # noqa: B018 (urlsplit checks the port only when asked)
    except ValueError as exc:
        raise ValueError(f"must have a port between 0 and 65535, got {shown}") from exc
    return text


def parse_path(value: object) -> Path:
    """A file or folder path; ``~`` expands (relative paths resolve later, next to the config)."""
    if isinstance(value, Path):
        return value.expanduser()
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a file or folder path in quotes, got {describe_value(value)}")
    if "\x00" in value:  # no file name holds one: opening it failed later, as a traceback
        raise ValueError(f"must not contain a NUL character (\\u0000), got {describe_value(value)}")
    path = Path(value.strip())
    try:
        return path.expanduser()
    except RuntimeError:  # "~name" of no user here (or "~" without a home folder)
        raise ValueError(
            f'must start with "~/" or "~" and a user of this machine (no home folder is known for '
            f'"{path.parts[0]}"), got {describe_value(value)}'
        ) from None


def parse_service_url(value: object) -> str:
    """An http(s) base address without a trailing slash, so clients can append paths to it."""
    if not isinstance(value, str):
        raise ValueError(
            f"must be an http:// or https:// address in quotes, got {describe_value(value)}"
        )
    if _USER_INFO_RE.match(value):  # before any check that quotes the value back
        raise ValueError(
            "must not carry a user name or password before the host (user:password@): "
            "secrets are read only from the environment, and the address is printed in error "
            "messages; write it without them"
        )
    return check_http_url(value).rstrip("/")


_USER_INFO_RE = re.compile(r"\s*[^:/?#\s]+://[^/?#]*@")
"""An address with ``user:password@`` (or a user alone) before its host."""


def is_loopback_url(url: str) -> bool:
    """Whether ``url``'s host is this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_name(value: object) -> object:
    """A name from a fixed set (``json``, ``sqlite``, ``s3``...), read in any case."""
    return value.strip().lower() if isinstance(value, str) else value


def parse_log_level_name(value: object) -> object:
    """Level names are case-insensitive, and "warn" is what people type for WARNING."""
    name = value.strip().upper() if isinstance(value, str) else value
    return "WARNING" if name == "WARN" else name


def parse_listen_address(value: object) -> str:
    """``HOST:PORT`` (``[::1]:9108`` for IPv6); port 0 asks for any free port."""
    text = value.strip() if isinstance(value, str) else ""
    host, _, port = text.rpartition(":")
    bracketed = host.startswith("[") == host.endswith("]")
    if not host or not port.isdecimal() or clipped_int(port, 65536) > 65535 or not bracketed:
        raise ValueError(
            f'must be "HOST:PORT" in quotes, e.g. "127.0.0.1:9108", got {describe_value(value)}'
        )
    return text
