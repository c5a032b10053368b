"""The YAML side of the feeds file: ruamel.yaml's round trip, turned into positioned nodes.

A module of its own so that only a cycle that finds the feeds file changed imports ruamel.yaml
(30 ms of CPU, paid by every ``run --once`` otherwise). The checks that follow are the same
for YAML and JSON (:mod:`.feeds_file`).
"""

from __future__ import annotations

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.reader import ReaderError

from .config_values import Problem, config_error, has_long_number, long_number_problem
from .feeds_file import FLAT_LIST_FIX, MAX_DOCUMENT_VALUES, Node, line_and_column, too_deep


def parse_yaml(text: str, display: str) -> Node:
    """The document as nodes; a ConfigError naming the line for bad syntax or a bomb."""
    try:
        document = YAML(typ="rt").load(text)
    except RecursionError as exc:
        raise too_deep(display) from exc
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (None, None)
        what = f"YAML syntax error: {exc.problem or exc.context}"
        fix = (
            'Fix the syntax there: list entries start with "- " under "feeds:", with a space '
            "after every colon and consistent indentation."
        )
        raise config_error(display, [Problem(what, fix, line=line, column=column)]) from exc
    except ReaderError as exc:  # a character YAML refuses (NUL...): ruamel gives its index
        line, column = line_and_column(text, exc.position)
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        what = f"the file holds a character YAML does not allow (#x{code:04x}, {exc.reason})"
        fix = "Remove it: a YAML file holds no control characters."
        raise config_error(display, [Problem(what, fix, line=line, column=column)]) from exc
    except (YAMLError, ValueError) as exc:  # ValueError: a value its tag cannot build (!!int x)
        problem = Problem(f"YAML error: {exc}", "Fix the file.")
        if isinstance(exc, ValueError) and has_long_number(text):  # int()'s 4,300-digit limit
            problem = long_number_problem(text)
        raise config_error(display, [problem]) from exc
    try:
        return _yaml_node(document, 1, 1, _ExpansionBudget(display))
    except RecursionError as exc:
        raise too_deep(display) from exc


class _ExpansionBudget:
    """Counts the values built from a YAML document, so aliases cannot expand it without end."""

    def __init__(self, display: str) -> None:
        self.display = display
        self.left = MAX_DOCUMENT_VALUES

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            what = (
                f"the file expands to more than {MAX_DOCUMENT_VALUES} values (its aliases "
                "repeat anchors inside anchors)"
            )
            raise config_error(self.display, [Problem(what, FLAT_LIST_FIX)])


def _yaml_node(value: object, line: int, column: int, budget: _ExpansionBudget) -> Node:
    """Turn ruamel's round-trip data into plain nodes; its ``lc`` positions are 0-based."""
    budget.spend()
    if isinstance(value, CommentedMap):
        members: dict[str, Node] = {}
        for key, item in value.items():
            try:
                key_line, key_column = value.lc.key(key) or (line - 1, column - 1)
            except KeyError:  # merged in from an anchor (or tagged): no position of its own
                key_line, key_column = line - 1, column - 1
            members[str(key)] = _yaml_node(item, key_line + 1, key_column + 1, budget)
        return Node(members, line, column)
    if isinstance(value, CommentedSeq):
        items = []
        for index, item in enumerate(value):
            item_line, item_column = value.lc.item(index) or (line - 1, column - 1)
            items.append(_yaml_node(item, item_line + 1, item_column + 1, budget))
        return Node(items, line, column)
    if isinstance(value, str):
        return Node(str(value), line, column)
    if isinstance(value, float):
        return Node(float(value), line, column)
    if isinstance(value, int) and not isinstance(value, bool):
        return Node(int(value), line, column)
    return Node(value, line, column)
