"""The ``feedcollector`` command: thin wrappers over the library.

Exit codes: 0 done (also when some feeds failed: that is recorded, not fatal), 1 the database
or object store is unusable, 2 a config or feeds file problem (the message says how to fix it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from .collector import Collector, open_collector
from .config import Settings, load_feeds, load_settings
from .errors import ConfigError, StorageError
from .logs import configure_logging
from .pipeline import run_cycle
from .service import run_forever

T = TypeVar("T")

app = typer.Typer(
    name="feedcollector",
    help="Collect RSS/Atom feeds into a database and object storage, reliably and fast.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@dataclass(frozen=True)
class GlobalOptions:
    config: Path | None
    log_level: str | None
    log_format: str | None


@app.callback()
def _global_options(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            envvar="FEEDCOLLECTOR_CONFIG",
            help="TOML config file (paths in it are relative to its folder). "
            "Without it: feeds.yaml, collector.db and objects/ in the current folder.",
        ),
    ] = None,
    log_level: Annotated[
        str | None, typer.Option(help="DEBUG, INFO, WARNING or ERROR (default from config: INFO).")
    ] = None,
    log_format: Annotated[
        str | None, typer.Option(help="console (default) or json (one object per line).")
    ] = None,
) -> None:
    ctx.obj = GlobalOptions(config, log_level, log_format)


def _settings(ctx: typer.Context) -> Settings:
    options: GlobalOptions = ctx.obj
    settings = _guard(lambda: load_settings(options.config))
    configure_logging(
        options.log_level or settings.log.level, options.log_format or settings.log.format
    )
    return settings


def _guard(action: Callable[[], T]) -> T:
    """Turn the errors a user can act on into a message and an exit code."""
    try:
        return action()
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except StorageError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


def _with_collector(settings: Settings, work: Callable[[Collector], Awaitable[Any]]) -> None:
    async def main() -> None:
        async with open_collector(settings) as collector:
            await work(collector)

    def run_main() -> None:
        coroutine: Coroutine[Any, Any, None] = main()
        try:
            asyncio.run(coroutine)
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(130) from None

    _guard(run_main)


@app.command()
def run(
    ctx: typer.Context,
    once: Annotated[
        bool,
        typer.Option(
            "--once",
            help="Run one cycle (due feeds, then their images and pending image retries) and "
            "exit 0, even if some feeds failed.",
        ),
    ] = False,
) -> None:
    """Run the scheduler: fetch due feeds, store items, download images; repeat until stopped."""
    settings = _settings(ctx)
    _with_collector(settings, run_cycle if once else run_forever)


@app.command()
def fetch(
    ctx: typer.Context,
    urls: Annotated[
        list[str] | None, typer.Argument(help="Feed URLs from the feeds file to fetch now.")
    ] = None,
    all_feeds: Annotated[
        bool, typer.Option("--all", help="Fetch every feed of the feeds file now.")
    ] = False,
) -> None:
    """Fetch feeds now, regardless of their schedule (then download their images)."""
    settings = _settings(ctx)
    if bool(urls) == all_feeds:
        typer.echo("error: give feed URLs or --all (not both)", err=True)
        raise typer.Exit(2)
    if urls:
        known = {spec.url for spec in _guard(lambda: load_feeds(settings.feeds_file))}
        unknown = [url for url in urls if url not in known]
        if unknown:
            typer.echo(
                f"error: not in the feeds file {settings.feeds_file}: {', '.join(unknown)}. "
                "Add them to the file first (it is the source of truth).",
                err=True,
            )
            raise typer.Exit(2)

    async def forced(collector: Collector) -> None:
        await run_cycle(collector, urls=urls or None, force=True)

    _with_collector(settings, forced)


def main() -> None:
    app(prog_name="feedcollector")


if __name__ == "__main__":
    main()
