"""Turning TOML and pydantic errors in the settings file into located, fixable problems.

tomllib reports positions only for syntax errors and pydantic reports key paths, not lines, so
this module finds the line of a key in the TOML text itself and words each error as a
:class:`~feedcollector.config_values.Problem` that says what is wrong and how to fix it. It knows
the settings only through a :class:`SettingsShape`, so it does not import the models.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .config_values import (
    Problem,
    SettingProblem,
    config_error,
    describe_value,
    format_duration,
    long_number_problem,
)


@dataclass(frozen=True, slots=True)
class SettingsShape:
    """What the settings file may contain: the messages name known keys and their defaults."""

    root: type[BaseModel]
    sections: Mapping[str, type[BaseModel]]
    """``[name]`` tables and the model that validates each."""
    secrets: Mapping[str, Mapping[str, str]]
    """Per section, the keys read from the environment instead, with the variable's name."""
    top_level_keys: tuple[str, ...]


_TOML_POSITION = re.compile(
    r"^(?P<message>.*?)\s*\(at line (?P<line>\d+), column (?P<column>\d+)\)$"
)


def parse_toml(text: str, display: str) -> dict[str, Any]:
    """Parse the settings text, raising a located ConfigError on a syntax error."""
    try:
        return tomllib.loads(text)
    except RecursionError as exc:  # tomllib recurses per nested array or inline table
        what = "the file nests arrays or inline tables too deeply to be a settings file"
        fix = "Write each setting as key = value under its [section] header, without nesting."
        raise config_error(display, [Problem(what, fix)]) from exc
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
    except ValueError as exc:  # int() refuses over 4,300 digits, and tomllib lets that out
        raise config_error(display, [long_number_problem(text)]) from exc


def problem_from_pydantic(shape: SettingsShape, error: Mapping[str, Any], text: str) -> Problem:
    """One pydantic error (from ``errors(include_url=False)``) as a located Problem."""
    loc = [str(part) for part in error["loc"]] or [""]
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, SettingProblem) and cause.key:  # a rule of a whole section
        line = (
            line_of(text, loc[0], cause.key, exact=True)
            or line_of(text, loc[0], "backend")
            or line_of(text, loc[0])
        )
        return Problem(cause.what, cause.fix or "Fix the value.", line=line)
    section: str | None = loc[0] if len(loc) >= 2 else None
    key = loc[1] if len(loc) >= 2 else loc[0]
    if error["type"] == "extra_forbidden":
        return unknown_key_problem(shape, section, key, text)
    line = line_of(text, section, key) if section else line_of(text, key)
    if section is None and key in shape.sections:
        return Problem(
            f"[{key}] must be a table, got {describe_value(error['input'])}",
            f"Write it as a [{key}] header with its key = value lines below.",
            line=line,
        )
    subject = f'"{key}" in [{section}]' if section else f'"{key}"'
    predicate = str(cause) if isinstance(cause, ValueError) else _predicate_for(error)
    return Problem(f"{subject} {predicate}", _default_fix(shape, section, key), line=line)


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
    if kind == "less_than_equal":
        return f"must be at most {error['ctx']['le']}{got}"
    if kind == "literal_error":
        return f"must be {str(error['ctx']['expected']).replace(chr(39), chr(34))}{got}"
    return f"is not valid ({error['msg']}){got}"


def _default_fix(shape: SettingsShape, section: str | None, key: str) -> str:
    model = shape.sections.get(section, shape.root) if section else shape.root
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


def unknown_key_problem(shape: SettingsShape, section: str | None, key: str, text: str) -> Problem:
    """A key the settings do not know, with the known ones and the closest spelling."""
    if section is None:
        plain = [name for name in shape.top_level_keys if name not in shape.sections]
        known = [*plain, *(f"[{name}]" for name in shape.sections)]
        candidates = list(shape.top_level_keys)
        where, line = "at the top level", line_of(text, key)
    else:
        secrets = shape.secrets.get(section, {})
        known = [name for name in shape.sections[section].model_fields if name not in secrets]
        candidates = known
        where, line = f"in [{section}]", line_of(text, section, key)
    fix = f"Known keys {where}: {', '.join(known)}."
    close = difflib.get_close_matches(key, candidates, n=1)
    if close:
        fix += f' Did you mean "{close[0]}"?'
    fix += " Fix the spelling or remove the line."
    secrets = shape.secrets.get(section or "", {})
    if secrets:
        fix += f" Credentials come from the environment ({', '.join(secrets.values())})."
    return Problem(f'unknown key "{key}" {where}', fix, line=line)


_TABLE_HEADER = re.compile(r"\s*\[([^\[\]]*+)\]\s*(?:#.*)?$")
"""Possessive: a lazy name beside optional spaces took quadratic time on a long unclosed line."""
_ASSIGNMENT = re.compile(
    r"\s*((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*="
)


def _dotted(text: str) -> str:
    return ".".join(part.strip().strip("\"'") for part in text.split("."))


def line_of(text: str, *path: str, exact: bool = False) -> int | None:
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
