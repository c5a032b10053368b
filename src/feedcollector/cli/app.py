"""The Typer application, its global options and the helpers every command shares.

Exit codes: 0 done (also when some feeds failed: that is recorded, not fatal), 1 the database
or object store is unusable, 2 a config or feeds file problem, or a command used wrongly (the
message says how to fix it).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException

from ..backends import require_database_file
from ..collector import Collector, open_collector, termination_signals
from ..config import CONFIG_ENV, PACKAGE_VERSION, Settings, load_feeds, load_settings
from ..config_sections import LogSettings
from ..config_values import describe_value
from ..database import Database
from ..errors import ConfigError, StorageError
from ..logs import configure_logging, logging_as_json
from ..reading import parse_since, stored_feed_urls
from ..report import CycleObserver
from ..safe_text import has_half_pair
from ..schema import latest_version

T = TypeVar("T")

log = logging.getLogger("feedcollector")

OPEN_FILES_SPARE = 100
"""Files besides the sockets and temporary files of work in flight: the database and its
journal, logs, idle keep-alive connections."""

GLOBAL_OPTIONS = ("--config", "-c", "--log-level", "--log-format")
USAGE_EXIT_CODE = 2
"""click's exit code for a command used wrongly (its UsageError), ours for a config problem."""


class _Commands(TyperGroup):
    """The command group: a global option given after the command (``status --config x``)
    is refused with the fix, where click said only "No such option"; with ``--log-format
    json`` a command used wrongly says so in a JSON log line, not in click's plain text that
    broke the tools reading the log."""

    def invoke(self, ctx: Any) -> Any:  # typer's vendored click Context has no public name
        for arg in ctx.args:
            if arg == "--":
                break
            name = arg.split("=", 1)[0]
            if name in GLOBAL_OPTIONS:
                ctx.fail(
                    f"{name} is a global option: it goes before the command "
                    f"(feedcollector {name} ... COMMAND ...)"
                )
        try:
            return super().invoke(ctx)
        except TyperException as exc:  # click's usage errors (bad value, unknown option...)
            usage = getattr(exc, "exit_code", None) == USAGE_EXIT_CODE
            if not usage or not isinstance(ctx.obj, GlobalOptions) or not _logs_json(ctx.obj):
                raise
            where = getattr(exc, "ctx", None) or ctx
            say_error(f"{where.command_path}: {exc.format_message()} (see --help)")
            raise typer.Exit(USAGE_EXIT_CODE) from None


def _logs_json(options: GlobalOptions) -> bool:
    """Whether the logs are JSON (``--log-format``, else the config's ``[log] format``), set
    up so; for a command that failed before it loaded its settings."""
    log_settings = None
    if options.log_format is None:
        try:
            loaded = load_settings(options.config).log
        except ConfigError:  # the command's own run would have said why
            return False
        # Its format only: the usage error is said whatever level [log] asks (CRITICAL).
        log_settings = LogSettings(format=loaded.format)
    _set_up_logging(options, log_settings)
    return logging_as_json()


app = typer.Typer(
    name="feedcollector",
    cls=_Commands,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class LogLevel(StrEnum):
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"


class LogFormat(StrEnum):
    console = "console"
    json = "json"


@dataclass(frozen=True)
class GlobalOptions:
    config: Path | None
    log_level: LogLevel | None
    log_format: LogFormat | None


@app.callback()
def _global_options(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            envvar=CONFIG_ENV,
            metavar="PATH",
            help="TOML config file (paths in it are relative to its folder). "
            "Without it: feeds.yaml, collector.db and objects/ in the current folder.",
        ),
    ] = None,
    log_level: Annotated[
        LogLevel | None,
        typer.Option(
            case_sensitive=False,
            help="Least severe log lines shown (default: [log] level of the config, INFO).",
        ),
    ] = None,
    log_format: Annotated[
        LogFormat | None,
        typer.Option(
            case_sensitive=False,
            help="console: readable lines (default); json: one JSON object per line.",
        ),
    ] = None,
    _version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Collect RSS/Atom feeds into a database and object storage, reliably and fast.

    Exit codes: 0 done (failed feeds are recorded, not fatal), 1 the database or object
    store cannot be used, 2 a config or feeds file problem or a command used wrongly, 130
    interrupted (Ctrl-C; SIGTERM or SIGHUP but for `run`, which stops cleanly on them).
    """
    ctx.obj = GlobalOptions(config, log_level, log_format)


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"feedcollector {PACKAGE_VERSION} (database schema {latest_version()})")
        raise typer.Exit


def load_command_settings(ctx: typer.Context) -> Settings:
    """Settings of the command, loaded once; logging is set up from them and the options."""
    options: GlobalOptions = ctx.obj
    if options.log_format is not None:  # a config file's error is said in the format asked for
        _set_up_logging(options)
    settings = guard(lambda: load_settings(options.config))
    _set_up_logging(options, settings.log)
    if options.config is None:
        _warn_of_unread_config()
    return settings


UNREAD_CONFIG_NAMES = ("feedcollector.toml", "config.toml")
"""Config files a user may expect to be read from the current folder: only ``--config`` (or
its environment variable) names one, and a ``[storage]`` or ``[database]`` written there
while the defaults run would send everything elsewhere without a word."""


def _warn_of_unread_config() -> None:
    for name in UNREAD_CONFIG_NAMES:
        if Path(name).is_file():
            say_warning(
                f"config: ./{name} is not read (a config file is read only when --config or "
                f"{CONFIG_ENV} names it): running on the built-in defaults. To use it, run "
                f"feedcollector --config {name} ..."
            )
            return


def _set_up_logging(options: GlobalOptions, log_settings: LogSettings | None = None) -> None:
    """Set logging up as the global options ask, and where they leave it open as the config's
    ``[log]`` (``log_settings``, once loaded) says, else at INFO on the console."""
    fallback = LogSettings() if log_settings is None else log_settings
    level = options.log_level.value if options.log_level else fallback.level
    fmt = options.log_format.value if options.log_format else fallback.format
    configure_logging(level, fmt)


def guard(action: Callable[[], T]) -> T:
    """Turn the errors a user can act on into a message and an exit code."""
    try:
        return action()
    except ConfigError as exc:
        say_error(str(exc))
        raise typer.Exit(2) from exc
    except StorageError as exc:
        say_error(str(exc))
        raise typer.Exit(1) from exc


def say_error(message: str) -> None:
    """``error: message`` on stderr, or an ERROR log line when the logs are JSON."""
    _say(logging.ERROR, message)


def say_warning(message: str) -> None:
    """``warning: message`` on stderr, or a WARNING log line when the logs are JSON."""
    _say(logging.WARNING, message)


def _say(level: int, message: str) -> None:
    if logging_as_json():
        log.log(level, "%s", message)
    else:
        typer.echo(f"{logging.getLevelName(level).lower()}: {message}", err=True)


def require_feeds_file(settings: Settings) -> None:
    """Refuse (exit 2, saying how to create it) a command that collects when the feeds file
    does not exist, before the database is opened: it left an empty database behind."""
    if not settings.feeds_file.exists():
        guard(lambda: load_feeds(settings.feeds_file))


def require_database(settings: Settings, command: str) -> None:
    """Refuse (exit 2) a command about what was collected when its SQLite file does not exist."""
    guard(lambda: require_database_file(settings, command))


def run_async(main: Callable[[], Coroutine[Any, Any, None]], *, signals: bool = True) -> None:
    """Run a coroutine to completion; Ctrl-C cancels it (``run``: a second one) and exits 130.

    ``signals``: SIGTERM and SIGHUP cancel it too, as Ctrl-C does (``run`` installs handlers
    of its own). They killed a `fetch` outright: the feeds and image tasks it held stayed
    leased, the image tasks for 32 minutes, in which no cycle downloaded them."""

    async def cancellable() -> None:
        if signals:
            _cancel_on_termination()
        await main()

    def run_main() -> None:
        try:
            asyncio.run(cancellable())
        except (KeyboardInterrupt, asyncio.CancelledError):
            say_warning("interrupted")  # a JSON line with --log-format json
            raise typer.Exit(130) from None

    guard(run_main)


def _cancel_on_termination() -> None:
    """SIGTERM, and SIGHUP (a closed terminal; not under ``nohup``, which ignores it), cancel
    the running command as Ctrl-C does, so its ``finally`` blocks hand back what it holds."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    if task is None:
        return
    for signum in termination_signals():
        try:
            loop.add_signal_handler(signum, task.cancel)
        except (NotImplementedError, RuntimeError):  # Windows, or not the main thread
            return


def with_collector(
    settings: Settings,
    work: Callable[[Collector], Awaitable[Any]],
    *,
    observer: CycleObserver | None = None,
) -> None:
    """Open the collector (backends, migrations, HTTP clients), run ``work``, close it all."""

    raise_open_file_limit(settings)

    async def main() -> None:
        async with open_collector(settings, observer=observer) as collector:
            # What start-up built (modules, settings, clients) lives as long as the process:
            # kept out of the garbage collector's passes, which would walk it all again each
            # time (a first cycle of 310 real-world feeds: 30 ms of collection, now 10).
            gc.freeze()
            await work(collector)

    run_async(main)


def raise_open_file_limit(settings: Settings) -> None:
    """Lift the soft limit on open files to the hard one, as servers (and Go programs) do.

    Every feed in flight holds a socket and a backup's temporary file, every image download a
    socket and a file, and keep-alive connections stay open a while after: at 120 feeds in
    flight under the usual soft limit of 1024 (64 here in the tests), backups failed with
    "Too many open files". A limit still too low after this gets a warning.
    """
    try:
        import resource
    except ImportError:  # not on this platform
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):  # macOS refuses "unlimited"; keep what we have
            pass
    needed = 2 * settings.fetch.concurrency + 3 * settings.images.concurrency + OPEN_FILES_SPARE
    if soft != resource.RLIM_INFINITY and soft < needed:
        logging.getLogger("feedcollector").warning(
            "run: the open-file limit is %d, and [fetch] concurrency = %d with [images] "
            "concurrency = %d may need about %d; raise the limit (ulimit -n, or LimitNOFILE= "
            "in a systemd unit) or lower the concurrency, or fetches and backups will fail "
            'with "Too many open files"',
            soft,
            settings.fetch.concurrency,
            settings.images.concurrency,
            needed,
        )


def since_option(text: str | None, now: datetime) -> datetime | None:
    if text is None:
        return None
    try:
        return parse_since(text, now)
    except ValueError as exc:
        usage_error(str(exc))


async def feeds_named(db: Database, url: str, command: str) -> list[str]:
    """The database's spellings of the feed ``url`` names (:func:`stored_feed_urls`), or a
    usage error saying there is none."""
    found = await stored_feed_urls(db, url)
    if not found:
        usage_error(f"{command}: no feed {url} in the database (see the feeds file)")
    return found


def text_argument(value: str, name: str) -> str:
    """``value``, or a usage error naming the argument: argv bytes that are no UTF-8 arrive as
    half pairs (surrogate escapes), which no database holds, so a query would fail on them."""
    if has_half_pair(value):
        usage_error(
            f"{name} is not UTF-8 text (got {describe_value(value)}). Give it in UTF-8, "
            "or copy it from the output of feedcollector."
        )
    return value


def usage_error(message: str) -> NoReturn:
    say_error(message)
    raise typer.Exit(2)


def quiet_on_broken_pipe(action: Callable[[], None]) -> None:
    """``feedcollector items | head`` closes the pipe early; that is not an error."""
    try:
        action()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise typer.Exit(0) from None
