"""Settings of the collector: one TOML file (``--config``), validated whole, passed down.

There are no globals: :func:`load_settings` returns a frozen :class:`Settings` that the CLI hands
to every stage. A collector runs unattended and is debugged from its log, so every problem
becomes a single :class:`~feedcollector.errors.ConfigError` paragraph that names the file, the
line, what is wrong and how to fix it. Secrets never live in the file: the D1 token and the S3
keys come from the environment. Each section's model is in :mod:`.config_sections`.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from .config_errors import (
    SettingsShape,
    line_of,
    parse_toml,
    problem_from_pydantic,
    unknown_key_problem,
)
from .config_sections import D1_TOKEN_ENV as D1_TOKEN_ENV
from .config_sections import (
    DEFAULT_DATABASE_FILE,
    DEFAULT_OBJECTS_DIR,
    MODEL_CONFIG,
    ConfigPath,
    DatabaseSettings,
    FetchSettings,
    ImageSettings,
    LogSettings,
    MetricsSettings,
    RetentionSettings,
    ScheduleSettings,
    StorageSettings,
)
from .config_sections import DEFAULT_USER_AGENT as DEFAULT_USER_AGENT
from .config_sections import PACKAGE_VERSION as PACKAGE_VERSION
from .config_sections import S3_ACCESS_KEY_ENV as S3_ACCESS_KEY_ENV
from .config_sections import S3_SECRET_KEY_ENV as S3_SECRET_KEY_ENV
from .config_values import Problem, config_error
from .config_values import format_duration as format_duration
from .errors import ConfigError
from .feeds_file import (
    load_feeds as load_feeds,
)

CONFIG_ENV = "FEEDCOLLECTOR_CONFIG"
"""Names the config file when ``--config`` does not."""
DEFAULT_FEEDS_FILE = "feeds.yaml"


class Settings(BaseModel):
    """Everything the collector is told; loaded once by the CLI and passed down."""

    model_config = MODEL_CONFIG

    config_path: Path | None = None
    config_inherited: bool = False
    """``config_path`` is the file FEEDCOLLECTOR_CONFIG names: a command the user pastes finds
    it without ``--config`` (see :meth:`command`)."""
    base_dir: Path
    """The config file's folder (the current folder without one): relative paths start here."""
    feeds_file: ConfigPath = Path(DEFAULT_FEEDS_FILE)
    fetch: FetchSettings = Field(default_factory=FetchSettings)
    schedule: ScheduleSettings = Field(default_factory=ScheduleSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    images: ImageSettings = Field(default_factory=ImageSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    log: LogSettings = Field(default_factory=LogSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)

    def command(self, *words: str) -> str:
        """``feedcollector WORDS`` as a message suggests it, a line to paste into a shell: with
        ``--config`` (absolute) when one was given, since pasted in another folder the command
        would run on the defaults there; not when the environment carries it over."""
        inherited = self.config_path is None or self.config_inherited
        return command_line(*words, config=None if inherited else self.config_path)


def command_line(*words: str, config: Path | None = None) -> str:
    """``feedcollector [--config FILE] WORDS``, quoted for a shell (see :meth:`Settings.command`,
    which library code without settings at hand takes as a parameter defaulting to this)."""
    line = ["feedcollector", *(["--config", str(config)] if config is not None else [])]
    return shlex.join([*line, *words])


_SECTIONS: Mapping[str, type[BaseModel]] = {
    "fetch": FetchSettings,
    "schedule": ScheduleSettings,
    "database": DatabaseSettings,
    "storage": StorageSettings,
    "images": ImageSettings,
    "retention": RetentionSettings,
    "log": LogSettings,
    "metrics": MetricsSettings,
}
_SECRETS: Mapping[str, Mapping[str, str]] = {
    "database": {"token": D1_TOKEN_ENV},
    "storage": {"access_key_id": S3_ACCESS_KEY_ENV, "secret_access_key": S3_SECRET_KEY_ENV},
}
_TOP_LEVEL_KEYS = ("feeds_file", *_SECTIONS)
_SHAPE = SettingsShape(Settings, _SECTIONS, _SECRETS, _TOP_LEVEL_KEYS)


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
        raw = parse_toml(text, display)
        config_path = Path(os.path.abspath(path))
        base_dir = config_path.parent
    problems, data = _screen_raw_keys(raw, text)
    data = _with_environment_secrets(data, environ)
    data = {section: {} for section in _SECTIONS} | data  # so defaults resolve against base_dir
    named = environ.get(CONFIG_ENV)
    inherited = config_path is not None and named is not None and Path(named) == path
    data |= {"config_path": config_path, "config_inherited": inherited, "base_dir": base_dir}
    try:
        settings = Settings.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        problems += [problem_from_pydantic(_SHAPE, error, text) for error in errors]
        raise config_error(display, problems) from exc
    if problems:
        raise config_error(display, problems)
    return settings


def _read_config_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise ConfigError(
            f"config: config file {path} does not exist. Check the --config path (or "
            f"{CONFIG_ENV}, which gives it when --config does not), or leave it out to run "
            f"with the defaults ({DEFAULT_FEEDS_FILE}, "
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


def _screen_raw_keys(raw: dict[str, Any], text: str) -> tuple[list[Problem], dict[str, Any]]:
    """Catch what pydantic cannot: unknown top-level keys and secrets written into the file."""
    problems: list[Problem] = []
    data: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in _TOP_LEVEL_KEYS:
            problems.append(unknown_key_problem(_SHAPE, None, key, text))
            continue
        secrets = _SECRETS.get(key, {})
        if isinstance(value, dict) and secrets.keys() & value.keys():
            for secret in secrets.keys() & value.keys():
                problems.append(
                    Problem(
                        f'"{secret}" in [{key}] is a secret and is not read from the config file',
                        f"Remove the line and set {secrets[secret]} in the environment instead.",
                        line=line_of(text, key, secret),
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
