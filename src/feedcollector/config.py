"""Settings of the collector: one TOML file (``--config``), validated whole, passed down.

There are no globals: :func:`load_settings` returns a frozen :class:`Settings` that the CLI hands
to every stage. A collector runs unattended and is debugged from its log, so every problem
becomes a single :class:`~feedcollector.errors.ConfigError` paragraph that names the file, the
line, what is wrong and how to fix it. Secrets never live in the file: the D1 token and the S3
keys come from the environment.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from .errors import ConfigError
from .feeds_file import (
    Problem,
    SettingProblem,
    check_http_url,
    config_error,
    describe_value,
    format_duration,
    parse_byte_size,
    parse_duration,
)
from .feeds_file import (
    load_feeds as load_feeds,
)

D1_TOKEN_ENV = "FEEDCOLLECTOR_D1_TOKEN"  # noqa: S105 (a variable name, not a secret)
S3_ACCESS_KEY_ENV = "AWS_ACCESS_KEY_ID"
S3_SECRET_KEY_ENV = "AWS_SECRET_ACCESS_KEY"  # noqa: S105 (a variable name, not a secret)
DEFAULT_FEEDS_FILE = "feeds.yaml"
DEFAULT_DATABASE_FILE = "collector.db"
DEFAULT_OBJECTS_DIR = "objects"


def _package_version() -> str:
    try:
        return metadata.version("feedcollector")
    except metadata.PackageNotFoundError:
        return "0"


DEFAULT_USER_AGENT = f"feedcollector/{_package_version()} (personal RSS/Atom collector)"


def _path_input(value: object) -> Path:
    if isinstance(value, Path):
        return value.expanduser()
    if isinstance(value, str) and value.strip():
        return Path(value.strip()).expanduser()
    raise ValueError(f"must be a file or folder path in quotes, got {describe_value(value)}")


def _resolve_path(value: Path, info: ValidationInfo) -> Path:
    """Relative paths mean "next to the config file"; the loader passes that folder as context."""
    base_dir = info.context.get("base_dir") if isinstance(info.context, dict) else None
    if not isinstance(base_dir, Path):
        return value
    return Path(os.path.abspath(base_dir / value))


def _service_url(value: object) -> str:
    """An http(s) base address without a trailing slash, so clients can append paths to it."""
    if not isinstance(value, str):
        raise ValueError(
            f"must be an http:// or https:// address in quotes, got {describe_value(value)}"
        )
    return check_http_url(value).rstrip("/")


def _log_level_name(value: object) -> object:
    """Level names are case-insensitive, and "warn" is what people type for WARNING."""
    name = value.strip().upper() if isinstance(value, str) else value
    return "WARNING" if name == "WARN" else name


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]
ByteSize = Annotated[int, BeforeValidator(parse_byte_size)]
AtLeastOne = Annotated[int, Field(strict=True, ge=1)]
Flag = Annotated[bool, Field(strict=True)]
Text = Annotated[str, Field(strict=True, min_length=1)]
ConfigPath = Annotated[Path, BeforeValidator(_path_input), AfterValidator(_resolve_path)]
ServiceUrl = Annotated[str, BeforeValidator(_service_url)]
LogLevel = Annotated[
    Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], BeforeValidator(_log_level_name)
]

_MODEL_CONFIG = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class FetchSettings(BaseModel):
    """``[fetch]``: how feeds are downloaded."""

    model_config = _MODEL_CONFIG

    concurrency: AtLeastOne = 5
    default_interval: Duration = timedelta(minutes=30)
    timeout: Duration = timedelta(seconds=30)
    deadline: Duration = timedelta(minutes=2)
    max_body_bytes: ByteSize = 20 * 2**20
    user_agent: Text = DEFAULT_USER_AGENT


class DatabaseSettings(BaseModel):
    """``[database]``: embedded SQLite, or D1 through the Proxy Worker (token from environ)."""

    model_config = _MODEL_CONFIG

    backend: Literal["sqlite", "d1"] = "sqlite"
    path: ConfigPath = Path(DEFAULT_DATABASE_FILE)
    url: ServiceUrl | None = None
    timeout: Duration = timedelta(seconds=30)
    token: SecretStr | None = None

    @model_validator(mode="after")
    def _d1_needs_url_and_token(self) -> Self:
        if self.backend != "d1":
            return self
        if self.url is None:
            raise SettingProblem(
                'backend = "d1" needs "url", the address of the Proxy Worker',
                fix='Add url = "https://<your proxy worker>" under [database].',
                key="url",
            )
        if self.token is None:
            raise SettingProblem(
                f'backend = "d1" needs the Proxy Worker\'s bearer token, but {D1_TOKEN_ENV} is '
                "not set in the environment",
                fix=f"Set {D1_TOKEN_ENV} to the token the Proxy Worker was deployed with "
                "(secrets are never read from the config file).",
                key="backend",
            )
        return self


class StorageSettings(BaseModel):
    """``[storage]``: a local folder, or S3/R2 (keys from the environment)."""

    model_config = _MODEL_CONFIG

    backend: Literal["local", "s3"] = "local"
    path: ConfigPath = Path(DEFAULT_OBJECTS_DIR)
    endpoint: ServiceUrl | None = None
    bucket: Text | None = None
    region: Text = "auto"
    public_base_url: ServiceUrl | None = None
    """Public URL prefix of the objects (``<public_base_url>/<key>``), without a trailing slash."""
    access_key_id: SecretStr | None = None
    secret_access_key: SecretStr | None = None

    @model_validator(mode="after")
    def _s3_needs_endpoint_bucket_and_keys(self) -> Self:
        if self.backend != "s3":
            return self
        examples = {"endpoint": "https://<account>.r2.cloudflarestorage.com", "bucket": "feeds"}
        for key, example in examples.items():
            if getattr(self, key) is None:
                raise SettingProblem(
                    f'backend = "s3" needs "{key}"',
                    fix=f'Add {key} = "{example}" under [storage].',
                    key=key,
                )
        if self.access_key_id is None or self.secret_access_key is None:
            raise SettingProblem(
                f'backend = "s3" needs credentials, but {S3_ACCESS_KEY_ENV} or '
                f"{S3_SECRET_KEY_ENV} is not set in the environment",
                fix="Set both to the bucket's access key (secrets are never read from the "
                "config file).",
                key="backend",
            )
        return self


class ImageSettings(BaseModel):
    """``[images]``: archiving the images of stored items."""

    model_config = _MODEL_CONFIG

    enabled: Flag = True
    allow_private_addresses: Flag = False
    """Image URLs come from untrusted feeds: loopback/private targets are refused unless set."""
    concurrency: AtLeastOne = 8
    max_bytes: ByteSize = 25 * 2**20
    timeout: Duration = timedelta(seconds=30)


class RetentionSettings(BaseModel):
    """``[retention]``: how long items (with their images) and raw XML backups are kept."""

    model_config = _MODEL_CONFIG

    item_days: AtLeastOne = 180
    backup_days: AtLeastOne = 30


class LogSettings(BaseModel):
    """``[log]``: level and line format."""

    model_config = _MODEL_CONFIG

    level: LogLevel = "INFO"
    format: Literal["console", "json"] = "console"


class Settings(BaseModel):
    """Everything the collector is told; loaded once by the CLI and passed down."""

    model_config = _MODEL_CONFIG

    config_path: Path | None = None
    base_dir: Path
    """The config file's folder (the current folder without one): relative paths start here."""
    feeds_file: ConfigPath = Path(DEFAULT_FEEDS_FILE)
    fetch: FetchSettings = Field(default_factory=FetchSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    images: ImageSettings = Field(default_factory=ImageSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    log: LogSettings = Field(default_factory=LogSettings)


_SECTIONS: Mapping[str, type[BaseModel]] = {
    "fetch": FetchSettings,
    "database": DatabaseSettings,
    "storage": StorageSettings,
    "images": ImageSettings,
    "retention": RetentionSettings,
    "log": LogSettings,
}
_SECRETS: Mapping[str, Mapping[str, str]] = {
    "database": {"token": D1_TOKEN_ENV},
    "storage": {"access_key_id": S3_ACCESS_KEY_ENV, "secret_access_key": S3_SECRET_KEY_ENV},
}
_TOP_LEVEL_KEYS = ("feeds_file", *_SECTIONS)


def load_settings(path: Path | None, *, environ: Mapping[str, str] = os.environ) -> Settings:
    """Read and validate the whole config file (``None``: the defaults, relative to the cwd).

    Nothing is applied unless everything is valid; secrets are read from ``environ``.
    """
    if path is None:
        display, text, raw = "(built-in defaults)", "", {}
        config_path, base_dir = None, Path.cwd()
    else:
        display = str(path)
        text = _read_config_text(path)
        raw = _parse_toml(text, display)
        config_path = Path(os.path.abspath(path))
        base_dir = config_path.parent
    problems, data = _screen_raw_keys(raw, text)
    data = _with_environment_secrets(data, environ)
    data = {section: {} for section in _SECTIONS} | data  # so defaults resolve against base_dir
    data |= {"config_path": config_path, "base_dir": base_dir}
    try:
        settings = Settings.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as exc:
        problems += [_problem_from_pydantic(error, text) for error in exc.errors(include_url=False)]
        raise config_error(display, problems) from exc
    if problems:
        raise config_error(display, problems)
    return settings


def _read_config_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise ConfigError(
            f"config: config file {path} does not exist. Check the --config path, or leave "
            f"--config out to run with the defaults ({DEFAULT_FEEDS_FILE}, "
            f"{DEFAULT_DATABASE_FILE} and the {DEFAULT_OBJECTS_DIR}/ folder in the current folder)."
        ) from exc
    except IsADirectoryError as exc:
        raise ConfigError(
            f"config: config file {path} is a folder. Point --config at the TOML file itself."
        ) from exc
    except OSError as exc:
        raise ConfigError(
            f"config: config file {path} cannot be read ({exc.strerror}). Check its permissions."
        ) from exc
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise config_error(
            str(path),
            [Problem("the file is not UTF-8 text", "Save it as UTF-8.", line=line)],
        ) from exc


_TOML_POSITION = re.compile(
    r"^(?P<message>.*?)\s*\(at line (?P<line>\d+), column (?P<column>\d+)\)$"
)


def _parse_toml(text: str, display: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        found = _TOML_POSITION.match(message)
        if found:
            line: int | None = int(found["line"])
            column: int | None = int(found["column"])
            message = found["message"]
        else:
            line, column = len(text.splitlines()) or 1, None
            message = message.replace("(at end of document)", "at the end of the file").strip()
        fix = (
            'Fix the syntax there: key = value pairs one per line, text in "quotes", '
            "sections as [name] headers, each key at most once per section."
        )
        problem = Problem(f"TOML syntax error: {message}", fix, line=line, column=column)
        raise config_error(display, [problem]) from exc


def _screen_raw_keys(raw: dict[str, Any], text: str) -> tuple[list[Problem], dict[str, Any]]:
    """Catch what pydantic cannot: unknown top-level keys and secrets written into the file."""
    problems: list[Problem] = []
    data: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in _TOP_LEVEL_KEYS:
            problems.append(_unknown_key_problem(None, key, text))
            continue
        secrets = _SECRETS.get(key, {})
        if isinstance(value, dict) and secrets.keys() & value.keys():
            for secret in secrets.keys() & value.keys():
                problems.append(
                    Problem(
                        f'"{secret}" in [{key}] is a secret and is not read from the config file',
                        f"Remove the line and set {secrets[secret]} in the environment instead.",
                        line=_line_of(text, key, secret),
                    )
                )
            value = {name: item for name, item in value.items() if name not in secrets}
        data[key] = value
    return problems, data


def _with_environment_secrets(data: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    result = dict(data)
    for section, secrets in _SECRETS.items():
        found = {
            key: environ[name].strip()
            for key, name in secrets.items()
            if environ.get(name, "").strip()
        }
        if found and isinstance(result.get(section, {}), dict):
            result[section] = {**result.get(section, {}), **found}
    return result


def _problem_from_pydantic(error: Mapping[str, Any], text: str) -> Problem:
    loc = [str(part) for part in error["loc"]] or [""]
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, SettingProblem) and cause.key:  # a rule of a whole section
        line = (
            _line_of(text, loc[0], cause.key, exact=True)
            or _line_of(text, loc[0], "backend")
            or _line_of(text, loc[0])
        )
        return Problem(cause.what, cause.fix or "Fix the value.", line=line)
    section: str | None = loc[0] if len(loc) >= 2 else None
    key = loc[1] if len(loc) >= 2 else loc[0]
    if error["type"] == "extra_forbidden":
        return _unknown_key_problem(section, key, text)
    line = _line_of(text, section, key) if section else _line_of(text, key)
    if section is None and key in _SECTIONS:
        return Problem(
            f"[{key}] must be a table, got {describe_value(error['input'])}",
            f"Write it as a [{key}] header with its key = value lines below.",
            line=line,
        )
    subject = f'"{key}" in [{section}]' if section else f'"{key}"'
    predicate = str(cause) if isinstance(cause, ValueError) else _predicate_for(error)
    return Problem(f"{subject} {predicate}", _default_fix(section, key), line=line)


def _predicate_for(error: Mapping[str, Any]) -> str:
    got = f", got {describe_value(error['input'])}"
    kind = error["type"]
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be a whole number{got}"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false (without quotes){got}"
    if kind in ("string_type", "string_too_short"):
        return f"must be non-empty text in quotes{got}"
    if kind == "greater_than_equal":
        return f"must be at least {error['ctx']['ge']}{got}"
    if kind == "literal_error":
        return f"must be {str(error['ctx']['expected']).replace(chr(39), chr(34))}{got}"
    return f"is not valid ({error['msg']}){got}"


def _default_fix(section: str | None, key: str) -> str:
    model = _SECTIONS.get(section, Settings) if section else Settings
    field = model.model_fields.get(key)
    default = field.default if field is not None else None
    if default is None or field is None or field.is_required():
        return "Fix the value."
    if isinstance(default, timedelta):
        shown = f'"{format_duration(default)}"'
    elif isinstance(default, bool):
        shown = str(default).lower()
    elif isinstance(default, Path | str):
        shown = f'"{default}"'
    else:
        shown = str(default)
    return f"Fix the value or remove the key to use the default ({shown})."


def _unknown_key_problem(section: str | None, key: str, text: str) -> Problem:
    if section is None:
        known = ["feeds_file", *(f"[{name}]" for name in _SECTIONS)]
        candidates = list(_TOP_LEVEL_KEYS)
        where, line = "at the top level", _line_of(text, key)
    else:
        secrets = _SECRETS.get(section, {})
        known = [name for name in _SECTIONS[section].model_fields if name not in secrets]
        candidates = known
        where, line = f"in [{section}]", _line_of(text, section, key)
    fix = f"Known keys {where}: {', '.join(known)}."
    close = difflib.get_close_matches(key, candidates, n=1)
    if close:
        fix += f' Did you mean "{close[0]}"?'
    fix += " Fix the spelling or remove the line."
    secrets = _SECRETS.get(section or "", {})
    if secrets:
        fix += f" Credentials come from the environment ({', '.join(secrets.values())})."
    return Problem(f'unknown key "{key}" {where}', fix, line=line)


_TABLE_HEADER = re.compile(r"\s*\[\s*([^\[\]]+?)\s*\]\s*(?:#.*)?$")
_ASSIGNMENT = re.compile(
    r"\s*((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*="
)


def _dotted(text: str) -> str:
    return ".".join(part.strip().strip("\"'") for part in text.split("."))


def _line_of(text: str, *path: str, exact: bool = False) -> int | None:
    """The line where ``section.key`` (or a table) is set: a best-effort scan of the TOML text.

    tomllib reports no positions for values, so semantic errors find their line here; an exact
    match wins, else the enclosing table's header or inline-table line.
    """
    target = ".".join(path)
    fallback: int | None = None
    table = ""
    for number, line in enumerate(text.splitlines(), start=1):
        header = _TABLE_HEADER.match(line)
        if header:
            table = _dotted(header.group(1))
            name = table
        else:
            assignment = _ASSIGNMENT.match(line)
            if not assignment:
                continue
            name = ".".join(filter(None, (table, _dotted(assignment.group(1)))))
        if name == target:
            return number
        if fallback is None and target.startswith(f"{name}."):
            fallback = number
    return None if exact else fallback
