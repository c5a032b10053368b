"""The YAML side of the feeds file: the document turned into positioned nodes.

ruamel.yaml (YAML 1.2) is the reference reading, and its messages name the line of every
syntax error. It is pure Python, though: about 130 us per entry with a title, 2.6 s for a file
of 10,000 feeds, read again by every cycle that finds the file changed and three times by
``add``. The usual feeds file (mappings, lists, text, no tags, anchors or numbers) is read
instead from libyaml's events (PyYAML's C parser, about 10x faster), its plain scalars typed by
ruamel.yaml's own YAML 1.2 rules; anything where the two could differ goes to ruamel.yaml
(:func:`libyaml_nodes`).

A module of its own so that only a cycle that finds the feeds file changed imports the YAML
libraries (about 40 ms of CPU, paid by every ``run --once`` otherwise). The checks that follow are
the same for YAML and JSON (:mod:`.feeds_file`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import ScalarNode
from ruamel.yaml.reader import ReaderError
from ruamel.yaml.resolver import VersionedResolver
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, SingleQuotedScalarString

from .config_values import Problem, config_error, has_long_number, long_number_problem
from .feeds_file import FLAT_LIST_FIX, MAX_DOCUMENT_VALUES, Node, line_and_column, too_deep
from .safe_text import QUOTED_CHARS, one_line

COMMENT_FIX = (
    'Move the comments between a key and its value (a comment after "key:" with the value '
    "on a later line) onto the key's line or a line of their own."
)


_DUPLICATE_KEY_RE = re.compile(r'duplicate key "([^"]{0,200})')


def parse_yaml(text: str, display: str) -> Node:
    """The document as nodes; a ConfigError naming the line for bad syntax or a bomb."""
    simple = libyaml_nodes(text)
    return simple if simple is not None else ruamel_nodes(text, display)


def ruamel_nodes(text: str, display: str) -> Node:
    """The document as ruamel.yaml's round trip reads it (YAML 1.2), turned into nodes."""
    reader = YAML(typ="rt")
    reader.preserve_quotes = True  # the quoting of scalars, for editing in the file's style
    try:
        document = reader.load(text)
    except RecursionError as exc:
        raise too_deep(display) from exc
    except DuplicateKeyError as exc:  # its message quotes both values whole (a 5,000-feed list)
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (None, None)
        key = _DUPLICATE_KEY_RE.search(str(exc.problem))
        what = f'the key "{key[1] if key else "?"}" is written twice in one mapping'
        fix = "Keep one of the two (merge the entries of two feeds: lists into one)."
        raise config_error(display, [Problem(what, fix, line=line, column=column)]) from exc
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (None, None)
        what = f"YAML syntax error: {one_line(str(exc.problem or exc.context), QUOTED_CHARS)}"
        fix = (
            'Fix the syntax there: list entries start with "- " under "feeds:", with a space '
            "after every colon and consistent indentation (spaces, not tabs)."
        )
        raise config_error(display, [Problem(what, fix, line=line, column=column)]) from exc
    except ReaderError as exc:  # a character YAML refuses (NUL...): ruamel gives its index
        line, column = line_and_column(text, exc.position)
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        what = f"the file holds a character YAML does not allow (#x{code:04x}, {exc.reason})"
        fix = "Remove it: a YAML file holds no control characters."
        raise config_error(display, [Problem(what, fix, line=line, column=column)]) from exc
    except NotImplementedError as exc:  # ruamel.yaml's round trip on some comment layouts
        what = f"a comment the YAML reader cannot place ({str(exc).partition(' [')[0]})"
        raise config_error(display, [Problem(what, COMMENT_FIX)]) from exc
    except (YAMLError, ValueError) as exc:  # ValueError: a value its tag cannot build (!!int x)
        problem = Problem(f"YAML error: {exc}", "Fix the file.")
        if isinstance(exc, ValueError) and has_long_number(text):  # int()'s 4,300-digit limit
            problem = long_number_problem(text)
        raise config_error(display, [problem]) from exc
    except Exception as exc:  # ruamel.yaml's builders on odd input: see _unbuildable
        raise config_error(display, [_unbuildable(exc)]) from exc
    try:
        return _yaml_node(document, 1, 1, _ExpansionBudget(display))
    except RecursionError as exc:
        raise too_deep(display) from exc


def _unbuildable(exc: Exception) -> Problem:
    """ruamel.yaml builds some tagged or complex values with no check of its own, and fails
    as Python does (``!!bool maybe``: KeyError, ``!!int 0x``: IndexError, a list holding a
    mapping as a key: TypeError); a feeds file holds none of them."""
    what = f"YAML error: a value YAML cannot build ({type(exc).__name__}: {exc})"
    return Problem(what, "Remove the tags (!!...) and write keys as plain text.")


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


def _yaml_node(
    value: object, line: int, column: int, budget: _ExpansionBudget, placed: bool = True
) -> Node:
    """Turn ruamel's round-trip data into plain nodes; its ``lc`` positions are 0-based."""
    budget.spend()
    if isinstance(value, CommentedMap):
        members: dict[str, Node] = {}
        for key, item in value.items():
            try:
                position = value.lc.key(key)
            except KeyError:  # merged in from an anchor (or tagged): no position of its own
                position = None
            key_line, key_column = position or (line - 1, column - 1)
            members[str(key)] = _yaml_node(
                item, key_line + 1, key_column + 1, budget, position is not None
            )
        return Node(members, line, column, "flow" if value.fa.flow_style() else "", placed)
    if isinstance(value, CommentedSeq):
        items = []
        for index, item in enumerate(value):
            position = value.lc.item(index)  # None in a tagged list
            item_line, item_column = position or (line - 1, column - 1)
            items.append(
                _yaml_node(item, item_line + 1, item_column + 1, budget, position is not None)
            )
        return Node(items, line, column, "flow" if value.fa.flow_style() else "", placed)
    if isinstance(value, dict):  # built by a tag (!!omap...): no positions of its own
        built = {
            str(key): _yaml_node(item, line, column, budget, False) for key, item in value.items()
        }
        return Node(built, line, column, "", placed)
    if isinstance(value, list | tuple | set | frozenset):  # built by a tag (!!pairs, !!set)
        elements = [_yaml_node(item, line, column, budget, False) for item in value]
        return Node(elements, line, column, "", placed)
    if isinstance(value, str):
        quote = next((mark for kind, mark in _QUOTED if isinstance(value, kind)), "")
        return Node(str(value), line, column, quote, placed)
    if isinstance(value, float):
        value = float(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        value = int(value)
    return Node(value, line, column, "", placed)


_QUOTED = ((DoubleQuotedScalarString, '"'), (SingleQuotedScalarString, "'"))


class _LeftToRuamel(Exception):
    """The document holds something the libyaml reading leaves to ruamel.yaml."""


_RESOLVER = VersionedResolver()  # YAML 1.2, as ruamel.yaml's round trip types plain scalars
_RULES_BY_START: dict[str | None, object] = getattr(_RESOLVER, "versioned_resolver", {None: 0})
_TYPED_STARTS = None if None in _RULES_BY_START else frozenset(_RULES_BY_START)
"""First characters of the plain scalars YAML 1.2 may type (digits, ``t``, ``n``, ``~``...);
one that starts otherwise (most URLs and titles) is text without asking the resolver, whose
version lookup is the slow part of a call. (A key None in the resolver's table would mean rules
for any first character, and so does a ruamel.yaml without that table: then every scalar is
asked.)"""
NOT_PRINTABLE = re.compile("[^\t\n\r\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
"""The characters YAML 1.2 does not allow in a document (as ruamel.yaml's reader checks)."""
_STR, _NULL, _BOOL = "tag:yaml.org,2002:str", "tag:yaml.org,2002:null", "tag:yaml.org,2002:bool"
_LEFT_TO_RUAMEL_CHARACTERS = re.compile("[\t\x85\u2028\u2029\ufeff]")
"""Characters read differently: YAML 1.1 (libyaml) breaks lines at NEL, LS and PS, ruamel.yaml
refuses a tab inside a plain scalar where libyaml keeps it, and the two count columns
differently after a byte order mark inside the text."""
_LIBYAML_LOADER = getattr(yaml, "CBaseLoader", None)
"""PyYAML's loader over libyaml; None where PyYAML was installed without it (then every file
is read by ruamel.yaml). Its resolver is never used: scalars are typed here."""
_BLOCK_STYLES = ("|", ">")
MAX_LIBYAML_DEPTH = 32
"""Nesting read from libyaml's events; deeper documents (no feeds file) go to ruamel.yaml,
which says whether they are too deep."""


def libyaml_nodes(text: str) -> Node | None:
    """The nodes ruamel.yaml's reading would give, read from libyaml's events; None when the
    document holds anything where the two might differ or that is unusual in a feeds file:
    characters YAML 1.2 refuses or that the two read differently (tabs too), directives,
    tags, anchors and aliases, block scalars, keys that are not text or repeat, numbers and
    dates, more than one document, deep nesting, more values than allowed, syntax errors
    (ruamel.yaml words those)."""
    if _LIBYAML_LOADER is None:
        return None
    if NOT_PRINTABLE.search(text) or _LEFT_TO_RUAMEL_CHARACTERS.search(text):
        return None
    try:
        return _nodes(yaml.parse(text, Loader=_LIBYAML_LOADER))
    except (_LeftToRuamel, yaml.YAMLError):
        return None


def _nodes(events: Iterable[yaml.Event]) -> Node:
    """Build the nodes from the events: a value in a mapping is placed at its key, an item at
    its own start, the document at line 1 (as :func:`_yaml_node` places ruamel.yaml's)."""
    root = Node(None, 1, 1)
    open_values: list[_Open] = []
    values = documents = 0
    for event in events:
        kind = event.__class__
        if kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            open_values.pop()
            continue
        if kind is yaml.DocumentStartEvent:
            documents += 1
            if documents > 1 or event.version is not None or event.tags:
                raise _LeftToRuamel
            continue
        if kind not in _VALUE_EVENTS:
            if kind is yaml.AliasEvent:
                raise _LeftToRuamel
            continue  # the stream's and the document's ends
        if event.anchor is not None or event.tag is not None:
            raise _LeftToRuamel
        parent = open_values[-1] if open_values else None
        if parent is not None and parent.members is not None and parent.key is None:
            parent.take_key(event)
            continue
        value = _value(event)
        style = _style(event)
        if parent is None:
            root = Node(value, 1, 1, style)
        else:
            parent.add(value, style, event.start_mark)
        values += 1
        if values > MAX_DOCUMENT_VALUES:
            raise _LeftToRuamel
        if kind is not yaml.ScalarEvent:
            if len(open_values) == MAX_LIBYAML_DEPTH:
                raise _LeftToRuamel
            open_values.append(_Open(value))  # type: ignore[arg-type]
    return root


_VALUE_EVENTS = frozenset((yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent))


class _Open:
    """A mapping or list being read; for a mapping, the key whose value comes next."""

    __slots__ = ("items", "key", "key_column", "key_line", "members")

    def __init__(self, value: dict[str, Node] | list[Node]) -> None:
        self.members = value if isinstance(value, dict) else None
        self.items = value if isinstance(value, list) else None
        self.key: str | None = None
        self.key_line = self.key_column = 0

    def take_key(self, event: yaml.Event) -> None:
        """The scalar ``event`` as the next key; text only, and not one already given."""
        assert self.members is not None
        if event.__class__ is not yaml.ScalarEvent or event.style in _BLOCK_STYLES:
            raise _LeftToRuamel
        key = _plain_key(event.value) if event.implicit[0] else event.value
        if key.__class__ is not str or key in self.members:
            raise _LeftToRuamel  # ruamel.yaml refuses a repeated key, naming its line
        self.key = key
        self.key_line, self.key_column = event.start_mark.line + 1, event.start_mark.column + 1

    def add(self, value: object, style: str, start: yaml.Mark) -> None:
        if self.members is not None:
            assert self.key is not None
            self.members[self.key] = Node(value, self.key_line, self.key_column, style)
            self.key = None
        else:
            assert self.items is not None
            self.items.append(Node(value, start.line + 1, start.column + 1, style))


def _value(event: yaml.Event) -> object:
    """A new (still empty) mapping or list, or a scalar's value."""
    kind = event.__class__
    if kind is yaml.MappingStartEvent:
        return {}
    if kind is yaml.SequenceStartEvent:
        return []
    if event.style in _BLOCK_STYLES:  # libyaml takes block headers ruamel.yaml refuses
        raise _LeftToRuamel
    return _plain(event.value) if event.implicit[0] else event.value


def _style(event: yaml.Event) -> str:
    """:attr:`Node.style` of the value an event starts."""
    if event.__class__ is yaml.ScalarEvent:
        return event.style if event.style in _QUOTE_MARKS else ""
    return "flow" if event.flow_style else ""


_QUOTE_MARKS = ('"', "'")


@lru_cache(maxsize=64)
def _plain_key(value: str) -> str | bool | None:
    """:func:`_plain` for keys, remembered: a feeds file repeats a few keys thousands of
    times (``title`` asks the resolver: ``t`` may start ``true``)."""
    return _plain(value)


def _plain(value: str) -> str | bool | None:
    """A plain scalar typed as ruamel.yaml types it (YAML 1.2: ``yes`` and ``on`` are text);
    numbers and dates are left to it."""
    if value and _TYPED_STARTS is not None and value[0] not in _TYPED_STARTS:
        return value
    tag = str(_RESOLVER.resolve(ScalarNode, value, (True, False)))
    if tag == _STR:
        return value
    if tag == _NULL:
        return None
    if tag == _BOOL:
        return value.lower() == "true"
    raise _LeftToRuamel
