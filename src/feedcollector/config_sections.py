"""The sections of the config file (``[fetch]``, ``[database]``...): one frozen pydantic model
each, the value types their fields share, and the defaults they fall back on.

:mod:`.config` puts them together into :class:`~.config.Settings` and loads the file; the values
themselves are read by :mod:`.config_values`, the grammar the feeds file shares.
"""

from __future__ import annotations

import os
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    model_validator,
)

from .config_values import (
    SettingProblem,
    check_request_text,
    format_duration,
    is_loopback_url,
    parse_byte_size,
    parse_duration,
    parse_duration_or_zero,
    parse_fraction,
    parse_listen_address,
    parse_log_level_name,
    parse_name,
    parse_path,
    parse_service_url,
)

D1_TOKEN_ENV = "FEEDCOLLECTOR_D1_TOKEN"  # noqa: S105 (a variable name, not a secret)
S3_ACCESS_KEY_ENV = "AWS_ACCESS_KEY_ID"
S3_SECRET_KEY_ENV = "AWS_SECRET_ACCESS_KEY"  # noqa: S105 (a variable name, not a secret)
DEFAULT_DATABASE_FILE = "collector.db"
DEFAULT_OBJECTS_DIR = "objects"


def _package_version() -> str:
    try:
        return metadata.version("feedcollector")
    except metadata.PackageNotFoundError:
        return "0"


PACKAGE_VERSION = _package_version()
"""The installed feedcollector's version: in User-Agents, and in the digest of a stored body
(:func:`.fetch.body_digest`), so a new version reads every feed once more."""
DEFAULT_USER_AGENT = f"feedcollector/{PACKAGE_VERSION} (personal RSS/Atom collector)"


def _resolve_path(value: Path, info: ValidationInfo) -> Path:
    """Relative paths mean "next to the config file"; the loader passes that folder as context."""
    base_dir = info.context.get("base_dir") if isinstance(info.context, dict) else None
    if not isinstance(base_dir, Path):
        return value
    return Path(os.path.abspath(base_dir / value))


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]
DurationOrOff = Annotated[timedelta, BeforeValidator(parse_duration_or_zero)]
Fraction = Annotated[float, BeforeValidator(parse_fraction)]
ByteSize = Annotated[int, BeforeValidator(parse_byte_size)]
MAX_CONCURRENCY = 1000
"""Workers one ``concurrency`` may start. Each holds a socket and up to a whole body in memory:
far more than a personal collector needs (one request at a time per host anyway), and low enough
that a typo in the number cannot start enough tasks to exhaust memory."""
Concurrency = Annotated[int, Field(strict=True, ge=1, le=MAX_CONCURRENCY)]
MAX_KEEP_DAYS = 36500
"""100 years, which is "keep effectively forever": the retention cutoff is today minus the days,
and a date before year 1 does not exist (1000000 days failed every cleanup)."""
KeepDays = Annotated[int, Field(strict=True, ge=1, le=MAX_KEEP_DAYS)]
Flag = Annotated[bool, Field(strict=True)]
Text = Annotated[str, Field(strict=True, min_length=1), AfterValidator(check_request_text)]
"""Text settings go into requests (User-Agent, the S3 bucket and region), so no control
characters."""
ConfigPath = Annotated[Path, BeforeValidator(parse_path), AfterValidator(_resolve_path)]
ServiceUrl = Annotated[str, BeforeValidator(parse_service_url)]
ListenAddress = Annotated[str, BeforeValidator(parse_listen_address)]
Name = BeforeValidator(parse_name)
"""Names from a fixed set match in any case, as log levels do (``format = "JSON"``)."""
LogLevel = Annotated[
    Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], BeforeValidator(parse_log_level_name)
]

MODEL_CONFIG = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class FetchSettings(BaseModel):
    """``[fetch]``: how feeds are downloaded."""

    model_config = MODEL_CONFIG

    concurrency: Concurrency = 5
    default_interval: Duration = timedelta(minutes=30)
    timeout: Duration = timedelta(seconds=30)
    deadline: Duration = timedelta(minutes=2)
    max_body_bytes: ByteSize = 20 * 2**20
    user_agent: Text = DEFAULT_USER_AGENT


class ScheduleSettings(BaseModel):
    """``[schedule]``: when feeds are fetched again, and politeness towards their servers."""

    model_config = MODEL_CONFIG

    adaptive: Flag = True
    """Learn each feed's interval from how often it posts (unless the feeds file pins one)."""
    min_interval: Duration = timedelta(minutes=15)
    max_interval: Duration = timedelta(hours=2)
    jitter: Fraction = 0.1
    """Each feed's interval is stretched or shrunk by a fixed share of up to this fraction."""
    host_gap: DurationOrOff = timedelta(seconds=1)
    """Per host: one request at a time, and this gap between them; 0s turns both off."""
    max_retry_after: Duration = timedelta(hours=24)
    max_cache_floor: DurationOrOff = timedelta(hours=24)
    """Cache-Control/Expires/<ttl> never delay a feed's next fetch by more than this (0s:
    they are ignored)."""

    @model_validator(mode="after")
    def _bounds_in_order(self) -> Self:
        if self.min_interval > self.max_interval:
            unset = "max_interval" not in self.model_fields_set
            default = ", its default: set it too" if unset else ""
            raise SettingProblem(
                f'min_interval ("{format_duration(self.min_interval)}") is longer than '
                f'max_interval ("{format_duration(self.max_interval)}"{default})',
                fix="Make min_interval at most max_interval (defaults: 15m and 2h).",
                key="min_interval",
            )
        return self


class DatabaseSettings(BaseModel):
    """``[database]``: embedded SQLite, or D1 through the Proxy Worker (token from environ)."""

    model_config = MODEL_CONFIG

    backend: Annotated[Literal["sqlite", "d1"], Name] = "sqlite"
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
        if self.url.lower().startswith("http://") and not is_loopback_url(self.url):
            raise SettingProblem(
                '"url" must be an https:// address: the Proxy Worker\'s bearer token would '
                "travel unencrypted over http://",
                fix='Write url = "https://…" (http:// is for a Worker on this machine: '
                "localhost or 127.0.0.1).",
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

    model_config = MODEL_CONFIG

    backend: Annotated[Literal["local", "s3"], Name] = "local"
    path: ConfigPath = Path(DEFAULT_OBJECTS_DIR)
    endpoint: ServiceUrl | None = None
    bucket: Text | None = None
    region: Text = "auto"
    public_base_url: ServiceUrl | None = None
    """Public URL prefix of the objects (``<public_base_url>/<key>``), without a trailing slash."""
    timeout: Duration = timedelta(seconds=60)
    """S3/R2: how long one request may take; it is tried once more after a failure, so a
    store that takes the connection and never answers holds a backup or an image write up to
    about twice this long."""
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

    model_config = MODEL_CONFIG

    enabled: Flag = True
    allow_private_addresses: Flag = False
    """Image URLs come from untrusted feeds: loopback/private targets are refused unless set."""
    concurrency: Concurrency = 8
    max_bytes: ByteSize = 25 * 2**20
    timeout: Duration = timedelta(seconds=30)
    deadline: Duration = timedelta(minutes=2)
    """The whole download, redirects and body included (a dripping server cannot hold a slot)."""


class RetentionSettings(BaseModel):
    """``[retention]``: how long items (with their images) and raw XML backups are kept."""

    model_config = MODEL_CONFIG

    item_days: KeepDays = 180
    backup_days: KeepDays = 30


class LogSettings(BaseModel):
    """``[log]``: level and line format."""

    model_config = MODEL_CONFIG

    level: LogLevel = "INFO"
    format: Annotated[Literal["console", "json"], Name] = "console"


class MetricsSettings(BaseModel):
    """``[metrics]``: the optional Prometheus endpoint served while ``run`` runs."""

    model_config = MODEL_CONFIG

    listen: ListenAddress | None = None
    """Where to serve ``/metrics``; None (the default) serves nothing."""
