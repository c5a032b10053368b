"""The feeds file's YAML reader: libyaml's events for the usual file, ruamel.yaml for the rest.

ruamel.yaml's round trip is the reference: whatever the libyaml reading accepts must come out
as the same nodes (values, lines, columns, quoting, flow style), and whatever it declines goes
to ruamel.yaml, which words the errors. Documents are generated from a seeded random source, so
a failure names the document and reproduces.
"""

from __future__ import annotations

import contextlib
import random
from pathlib import Path

import pytest
from ruamel.yaml.nodes import ScalarNode
from ruamel.yaml.reader import Reader
from ruamel.yaml.resolver import VersionedResolver

from feedcollector import feeds_file_yaml
from feedcollector.config import load_feeds
from feedcollector.errors import ConfigError
from feedcollector.feeds_file import Node
from feedcollector.feeds_file_yaml import COMMENT_FIX, libyaml_nodes, parse_yaml, ruamel_nodes
from feedcollector.models import FeedSpec

from .samples import COMMENT_RUAMEL_CANNOT_PLACE


def _reference(text: str) -> Node | ConfigError:
    try:
        return ruamel_nodes(text, "feeds.yaml")
    except ConfigError as exc:
        return exc


def _described(node: Node) -> object:
    """Everything a node says, its style and placement too (which ``==`` leaves out)."""
    value = node.value
    if isinstance(value, dict):
        value = {key: _described(member) for key, member in value.items()}
    elif isinstance(value, list):
        value = [_described(item) for item in value]
    return (value, node.line, node.column, node.style, node.placed)


def _check_agreement(text: str) -> bool:
    """Whether the libyaml reading took ``text``; if it did, it must equal ruamel.yaml's."""
    fast = libyaml_nodes(text)
    if fast is None:
        return False
    reference = _reference(text)
    if isinstance(reference, ConfigError) and isinstance(reference.__cause__, NotImplementedError):
        return True  # ruamel.yaml's round trip gives up on a comment; the YAML is valid
    assert not isinstance(reference, ConfigError), f"{text!r}\nlibyaml: {fast}\n{reference}"
    assert _described(fast) == _described(reference), f"{text!r}\nlibyaml: {fast}\n{reference}"
    return True


# --- generated documents ------------------------------------------------------------------

PIECES = [*"abc XYZ 019 :#-'.,/?&=é中😀[]{}", "  ", " #", ": ", "\n", "\n\n", "\n   ", "\r\n"]
ESCAPES = [
    *("\\x41", "\\u00e9", "\\U0001F600", "\\N", "\\_", "\\L", "\\P", "\\e", "\\/", "\\ "),
    *("\\0", "\\a", "\\t", "\\n", "\\r", "\\v", "\\\\", '\\"', "\\\n  ", "\\q"),
]


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 14)))


def _scalar(rng: random.Random, indent: int) -> str:
    """Plain, single- or double-quoted text, possibly over several lines, with escapes."""
    continuation = "\n" + " " * (indent + rng.randint(0, 4))
    kind = rng.random()
    if kind < 0.35:
        return _text(rng).replace("\n", continuation)
    if kind < 0.65:
        return "'" + _text(rng).replace("'", "''").replace("\n", continuation) + "'"
    parts = [
        rng.choice(ESCAPES)
        if rng.random() < 0.4
        else _text(rng).replace('"', "").replace("\\", "").replace("\n", continuation)
        for _ in range(rng.randint(0, 6))
    ]
    return '"' + "".join(parts) + '"'


def _feeds_file(rng: random.Random) -> str:
    """A feeds file as people write them: mappings and bare URLs, comments, blank lines,
    values on the next line, several indentations."""
    out = ["# my feeds\n"] if rng.random() < 0.2 else []
    out += ["---\n"] if rng.random() < 0.2 else []
    out.append(rng.choice(["feeds:\n", "feeds:   \n", "feeds: # x\n"]))
    dash = rng.choice([0, 2, 4])
    for _ in range(rng.randint(0, 6)):
        if rng.random() < 0.2:
            out.append(" " * dash + "- " + _scalar(rng, dash + 2) + "\n")
            continue
        gap = rng.choice([" ", "   ", "\n" + " " * (dash + 2)])
        out.append(" " * dash + "-" + gap + "url: " + _scalar(rng, dash + 2) + "\n")
        for key in rng.sample(["title", "interval", "note"], rng.randint(0, 3)):
            before = rng.choice([" ", "  ", "\n" + " " * (dash + 4)])
            comment = rng.choice(["", "", " # c"])
            out.append(f"{' ' * (dash + 2)}{key}:{before}{_scalar(rng, dash + 4)}{comment}\n")
        out += ["\n"] if rng.random() < 0.1 else []
        out += [" " * rng.randint(0, 6) + "# comment\n"] if rng.random() < 0.1 else []
    out += ["...\n"] if rng.random() < 0.1 else []
    return "".join(out)


ODD_WORDS = [
    *("yes", "no", "on", "true", "False", "NULL", "~", "12", "0o17", "0x1F", "1_0", "+1", "-1"),
    *("1.5", ".inf", "1e3", "2024-01-01", "<<", "=", "https://a.b/c?d=e#f", "a: b", "a #b"),
    *("-", "- x", "", ":x", "x:", "@x", "%x", "'q'", '"q"', "tab\there", "\\n", "é"),
]
ODD_CHARACTERS = [*"abcXYZ019 :#-'\"\t\\{}[],&*!|>?%@`~.+=<é中😀/", "\xa0", "\r", "\n"]
ODD_CHARACTERS += ["\x85", "\u2028", "\ufeff", "\x07"]


def _odd_scalar(rng: random.Random) -> str:
    value = (
        rng.choice(ODD_WORDS)
        if rng.random() < 0.4
        else "".join(rng.choice(ODD_CHARACTERS) for _ in range(rng.randint(0, 8)))
    )
    style = rng.random()
    if style < 0.5:
        return value
    if style < 0.7:
        return "'" + value.replace("'", "''") + "'"
    if style < 0.9:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return "|\n      " + value


def _odd_feeds_file(rng: random.Random) -> str:
    """Everything libyaml and ruamel.yaml might read differently: directives, tags, anchors,
    aliases, flow style, odd keys, tabs, NEL, BOMs, typed scalars, broken syntax."""
    lines = []
    if rng.random() < 0.1:
        lines.append(rng.choice(["%YAML 1.1", "%YAML 1.2", "---", "--- !x", "%TAG ! tag:x,2000:"]))
    lines.append(rng.choice(["feeds:", "feeds: &a", "feeds: !!seq", "'feeds':", "feeds :"]))
    indent = rng.choice(["  ", "", "    ", "\t"])
    for _ in range(rng.randint(0, 5)):
        kind = rng.random()
        if kind < 0.3:
            lines.append(f"{indent}- {_odd_scalar(rng)}")
        elif kind < 0.85:
            lines.append(f"{indent}- url: {_odd_scalar(rng)}")
            for _ in range(rng.randint(0, 3)):
                key = rng.choice(["title", "interval", "url", "'title'", "1", "true", "? a", "<<"])
                lines.append(f"{indent}  {key}: {_odd_scalar(rng)}")
        elif kind < 0.9:
            lines.append(f"{indent}- {{url: {_odd_scalar(rng)}, title: {_odd_scalar(rng)}}}")
        elif kind < 0.95:
            lines.append(f"{indent}- [{_odd_scalar(rng)}, {_odd_scalar(rng)}]")
        else:
            odd = [f"{indent}- *a", f"{indent}- &b x", f"{indent}-", f"{indent}- - x", "..."]
            lines.append(rng.choice([*odd, f"{indent}- !!str 1", "---", "x: y", "  bad"]))
    if rng.random() < 0.1:
        lines.append(rng.choice(["...", "---\nfoo: 1", "other: 1", "feeds: []"]))
    newline = rng.choice(["\n"] * 8 + ["\r\n", "\r"])
    return newline.join(lines) + (newline if rng.random() < 0.8 else "")


@pytest.mark.parametrize("seed", range(4))
def test_libyaml_reads_usual_feeds_files_as_ruamel_yaml_does(seed: int) -> None:
    rng = random.Random(seed)
    taken = sum(_check_agreement(_feeds_file(rng)) for _ in range(300))
    assert taken > 60  # the usual file goes the fast way (the rest: syntax errors, numbers...)


@pytest.mark.parametrize("seed", range(4))
def test_libyaml_reads_odd_files_as_ruamel_yaml_does_or_leaves_them(seed: int) -> None:
    rng = random.Random(seed)
    texts = [_odd_feeds_file(rng) for _ in range(500)]
    taken = sum(_check_agreement(text) for text in texts if text.strip())
    assert taken > 30


TAGGED = [
    *("!!bool maybe", "!!int 0x", "!!set {a, b}", "!!binary aGk=", "!!omap [a: 1]", "!foo x"),
    *("!!pairs [a: 1, a: 2]", "!!timestamp 2001-12-14", "!!float x", "? [a]", "{? [a]: b}"),
    *("? - {a: b}", "&x y", "*x", "*nowhere", "!!python/name:os.system", "[1, {a: b}]"),
]
MUTATIONS = [*":-#'\"\n \t[]{}&*!|>%@`,?\\\r\x85\u2028\ufeff\x00\x7f", "url: ", "  - ", "feeds:"]


def _mutated(rng: random.Random) -> str:
    """A feeds file with a few characters inserted or deleted."""
    text = list(_feeds_file(rng))
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(text) + 1)
        if rng.random() < 0.3 and text:
            del text[min(at, len(text) - 1)]
        else:
            text.insert(at, rng.choice(MUTATIONS))
    return "".join(text)


def _tagged(rng: random.Random) -> str:
    """A feeds file with a tagged or complex value where a feed, a URL, a title or a key goes."""
    value = rng.choice(TAGGED)
    return rng.choice(
        [
            f"feeds:\n  - {value}\n",
            f"feeds:\n  - url: {value}\n",
            f"feeds:\n  - url: https://a.example/\n    title: {value}\n",
            f"feeds: {value}\n",
            f"feeds:\n  - url: https://a.example/\n    {value}: 1\n",
        ]
    )


@pytest.mark.parametrize("seed", range(3))
def test_any_document_loads_or_is_a_config_error(tmp_path: Path, seed: int) -> None:
    """Never a traceback from the YAML libraries, whatever the file holds."""
    rng = random.Random(seed)
    path = tmp_path / "feeds.yaml"
    for _ in range(300):
        text = rng.choice([_feeds_file, _odd_feeds_file, _mutated, _tagged])(rng)
        path.write_text(text, encoding="utf-8")
        with contextlib.suppress(ConfigError):
            load_feeds(path)


# --- what goes which way ------------------------------------------------------------------

USUAL = """\
# my feeds
feeds:
  - url: https://example.com/feed.xml
    title: "Example: a blog"
    interval: 30m
  - https://example.org/rss   # bare
  -
    url: 'https://example.net/atom.xml'
    title: yes
    interval:
"""


def test_a_usual_feeds_file_is_read_by_libyaml_with_yaml_1_2_types() -> None:
    assert _check_agreement(USUAL)
    nodes = libyaml_nodes(USUAL)
    assert nodes is not None
    entries = nodes.value["feeds"].value  # type: ignore[index]
    assert entries[2].value["title"] == Node("yes", 9, 5)  # YAML 1.2: text, not True
    assert entries[2].value["interval"] == Node(None, 10, 5)
    assert entries[1] == Node("https://example.org/rss", 6, 5)
    assert entries[0].value["title"].style == '"'
    assert entries[2].value["url"].style == "'"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("feeds:\n  - url: a\tb\n", id="tab"),
        pytest.param("feeds:\n  - url: a\x85b\n", id="NEL"),
        pytest.param("feeds:\n  - 'a\ufeffb'\n", id="byte order mark inside"),
        pytest.param("feeds:\n  - url: x\n    title: |\n      t\n", id="block scalar"),
        pytest.param("feeds:\n  - &a https://a.b/\n  - *a\n", id="anchor and alias"),
        pytest.param("feeds:\n  - !!str https://a.b/\n", id="tag"),
        pytest.param("%YAML 1.1\n---\nfeeds:\n  - https://a.b/\n", id="directive"),
        pytest.param("feeds:\n  - url: x\n    url: y\n", id="repeated key"),
        pytest.param("feeds:\n  - url: x\n    interval: 30\n", id="number"),
        pytest.param("feeds:\n  - url: x\n    title: 2024-01-01\n", id="date"),
        pytest.param("feeds:\n  - {<<: {url: x}}\n", id="merge key"),
        pytest.param("feeds:\n  - {1: x}\n", id="number key"),
        pytest.param("feeds:\n  - {true: x}\n", id="bool key"),
        pytest.param("feeds:\n  - {? [a]: x}\n", id="complex key"),
        pytest.param("feeds: []\n---\nfeeds: []\n", id="two documents"),
        pytest.param("feeds: " + "[" * 40 + "]" * 40 + "\n", id="deep"),
        pytest.param("feeds:\n  - url: [x\n", id="syntax error"),
    ],
)
def test_anything_unusual_is_left_to_ruamel_yaml(text: str) -> None:
    assert libyaml_nodes(text) is None


def test_a_big_usual_file_never_touches_ruamel_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("ruamel.yaml was used")

    monkeypatch.setattr(feeds_file_yaml, "YAML", refuse)
    path = tmp_path / "feeds.yaml"
    path.write_text(
        "feeds:\n"
        + "".join(
            f"  - url: https://site{n}.example/feed\n    title: Site {n}\n" for n in range(2000)
        )
    )
    specs = load_feeds(path)
    assert len(specs) == 2000
    assert specs[7] == FeedSpec(url="https://site7.example/feed", title="Site 7")


def test_plain_scalars_are_typed_as_ruamel_yaml_types_them_whatever_their_first_character() -> None:
    """The shortcut for first characters no YAML 1.2 type starts with agrees with the
    resolver, for every character of the basic plane."""
    resolver = VersionedResolver()
    for code in range(0x10000):
        if 0xD800 <= code <= 0xDFFF:
            continue
        for value in (chr(code), chr(code) + "1", chr(code) + "rue"):
            tag = str(resolver.resolve(ScalarNode, value, (True, False)))
            if tag == "tag:yaml.org,2002:str":
                assert feeds_file_yaml._plain(value) == value
            elif tag not in ("tag:yaml.org,2002:null", "tag:yaml.org,2002:bool"):
                with pytest.raises(feeds_file_yaml._LeftToRuamel):
                    feeds_file_yaml._plain(value)


def test_without_libyaml_every_file_is_read_by_ruamel_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(feeds_file_yaml, "_LIBYAML_LOADER", None)  # PyYAML built without it
    assert libyaml_nodes(USUAL) is None
    path = tmp_path / "feeds.yaml"
    path.write_text(USUAL)
    assert [spec.url for spec in load_feeds(path)][1] == "https://example.org/rss"


def test_characters_yaml_refuses_are_the_ones_ruamel_yaml_refuses() -> None:
    assert feeds_file_yaml.NOT_PRINTABLE.pattern == Reader.NON_PRINTABLE.pattern


# --- ruamel.yaml's comment limit ----------------------------------------------------------


def test_a_comment_ruamel_yaml_cannot_place_is_read_by_libyaml(tmp_path: Path) -> None:
    path = tmp_path / "feeds.yaml"
    path.write_text(COMMENT_RUAMEL_CANNOT_PLACE)
    assert load_feeds(path) == [FeedSpec(url="https://example.com/feed.xml")]


def test_a_comment_ruamel_yaml_cannot_place_is_a_config_error_not_a_crash() -> None:
    text = COMMENT_RUAMEL_CANNOT_PLACE + "# a tab\there sends the file to ruamel.yaml\n"
    with pytest.raises(ConfigError) as caught:
        parse_yaml(text, "feeds.yaml")
    message = str(caught.value)
    assert "a comment the YAML reader cannot place (overlap in comment)" in message
    assert COMMENT_FIX in message
    assert "CommentToken" not in message
