"""The command line documents itself: every command and option registered on the Typer app
has a help text, and README.md's Commands section names each command with all its options."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from feedcollector.cli import app

from .conftest import PROJECT_ROOT

GROUP: Any = typer.main.get_command(app)  # typer's own (vendored) click group
COMMANDS: list[tuple[str, Any]] = sorted(GROUP.commands.items())


def commands_section() -> str:
    readme = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("\n## Commands\n")
    end = readme.index("\n## ", start + 1)
    return readme[start:end]


def long_options(command: Any) -> list[str]:
    return [
        name
        for param in command.params
        if param.param_type_name == "option"
        for name in param.opts
        if name.startswith("--")
    ]


def test_the_walk_finds_every_command() -> None:
    names = [name for name, _ in COMMANDS]
    assert {"run", "fetch", "status", "add", "remove", "backup-db", "import-opml"} <= set(names)
    assert len(names) >= 12


@pytest.mark.parametrize(("name", "command"), COMMANDS, ids=[name for name, _ in COMMANDS])
def test_every_command_has_help_for_itself_and_each_parameter(name: str, command: Any) -> None:
    assert (command.help or "").strip(), f"`{name}` has no help text"
    for param in command.params:
        assert (getattr(param, "help", None) or "").strip(), f"`{name} {param.name}` has no help"


def test_global_options_have_help_and_are_documented() -> None:
    section = commands_section()
    for param in GROUP.params:
        assert (getattr(param, "help", None) or "").strip(), f"--{param.name} has no help"
    for option in long_options(GROUP):
        assert f"`{option}" in section, f"README Commands: global option {option} missing"


@pytest.mark.parametrize(("name", "command"), COMMANDS, ids=[name for name, _ in COMMANDS])
def test_readme_documents_every_command_and_option(name: str, command: Any) -> None:
    section = commands_section()
    mention = re.compile(rf"`feedcollector {re.escape(name)}[ `]")
    rows = [line for line in section.splitlines() if mention.search(line)]
    assert rows, f"README Commands does not document `feedcollector {name}`"
    documented = "\n".join(rows)
    for option in long_options(command):
        assert option in documented, f"README Commands: `{name}` lacks {option}"


def test_help_output_of_every_command() -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["--help"]).exit_code == 0
    for name, command in COMMANDS:
        result = runner.invoke(app, [name, "--help"])
        assert result.exit_code == 0, result.output
        for option in long_options(command):
            assert option in result.output


def test_every_value_is_named_in_capitals_as_the_readme_names_it() -> None:
    """``--feed URL``, not ``--feed <str>``; ``[FILE]``, not ``[file]``: every parameter that
    takes a value names it as the README does (a fixed set of choices is listed instead; an
    argument's type follows its name)."""
    runner = CliRunner()
    for words in [[], *[[name] for name, _ in COMMANDS]]:
        shown = runner.invoke(app, [*words, "--help"], terminal_width=200).output
        assert not re.search(r"--[\w-]+ <(str|path|int|float|list)", shown), shown
        usage = shown.split("\n", 1)[0].split("[OPTIONS]", 1)[1]
        arguments = re.findall(r"[A-Za-z_]+", usage)
        assert all(word.isupper() for word in arguments), usage
