"""Editing the feeds file for ``add``/``remove``: the entry is the only change, in the file's own
style; every result is checked by the loader; odd layouts are refused and left untouched."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedcollector.config import load_feeds
from feedcollector.errors import ConfigError
from feedcollector.feeds_edit import (
    AlreadySubscribed,
    add_feed,
    find_feed,
    remove_feed,
    replace_checked,
)
from feedcollector.feeds_file import Node
from feedcollector.feeds_file_yaml import parse_yaml
from feedcollector.feeds_yaml import NewEntry, UnsafeEdit, _scalar, yaml_append, yaml_remove
from feedcollector.models import FeedSpec

from .samples import COMMENT_RUAMEL_CANNOT_PLACE

COMMENTED = """\
# My subscriptions: keep this header
feeds:
  # --- tech ---
  - url: https://a.example/feed   # the best one
    title: A
  - url: "https://b.example/rss"
    interval: 1h

  # --- news (disabled for now) ---
  # - url: https://c.example/
"""


def test_append_keeps_everything_and_follows_the_last_entry_style() -> None:
    text, line = yaml_append(
        COMMENTED, NewEntry("https://d.example/atom.xml", title="D: news", interval="2h")
    )
    assert text == COMMENTED.replace(
        "    interval: 1h\n",
        '    interval: 1h\n  - url: "https://d.example/atom.xml"\n    interval: 2h\n'
        '    title: "D: news"\n',
    )
    assert line == 8
    assert text.splitlines()[line - 1] == '  - url: "https://d.example/atom.xml"'


@pytest.mark.parametrize(
    ("before", "entry", "after"),
    [
        (  # bare URLs at column 0 stay bare
            "feeds:\n- https://x.example/a\n- https://x.example/b\n",
            NewEntry("https://x.example/c"),
            "feeds:\n- https://x.example/a\n- https://x.example/b\n- https://x.example/c\n",
        ),
        (  # ... unless the entry needs keys
            "feeds:\n- https://x.example/a\n",
            NewEntry("https://x.example/c", title="C"),
            "feeds:\n- https://x.example/a\n- url: https://x.example/c\n  title: C\n",
        ),
        (  # single quotes are the file's style
            "feeds:\n    - url: 'https://x.example/a'\n",
            NewEntry("https://x.example/it's", title="It's"),
            "feeds:\n    - url: 'https://x.example/a'\n    - url: 'https://x.example/it''s'\n"
            "      title: 'It''s'\n",
        ),
        (  # keys aligned further right than "- "
            "feeds:\n  -   url: https://x.example/a\n      title: x\n",
            NewEntry("https://x.example/c", title="T"),
            "feeds:\n  -   url: https://x.example/a\n      title: x\n"
            "  -   url: https://x.example/c\n      title: T\n",
        ),
        (  # a dash alone on its line
            "feeds:\n  -\n      url: https://x.example/a\n",
            NewEntry("https://x.example/c", interval="15m"),
            "feeds:\n  -\n      url: https://x.example/a\n"
            "  - url: https://x.example/c\n    interval: 15m\n",
        ),
        (  # an empty flow list becomes a block list, its comment kept
            "feeds: []  # nothing yet\n",
            NewEntry("https://x.example/c"),
            "feeds:  # nothing yet\n  - url: https://x.example/c\n",
        ),
        (  # "feeds:" with nothing, followed by comments
            "feeds:\n# add feeds below\n",
            NewEntry("https://x.example/c"),
            "feeds:\n  - url: https://x.example/c\n# add feeds below\n",
        ),
        ("", NewEntry("https://x.example/c"), "feeds:\n  - url: https://x.example/c\n"),
        (  # a title that YAML would misread is quoted
            "feeds:\n  - url: https://x.example/a\n",
            NewEntry("https://x.example/c", title="#1: yes"),
            'feeds:\n  - url: https://x.example/a\n  - url: https://x.example/c\n    title: "#1: yes"\n',
        ),
    ],
)
def test_append_in_many_styles(before: str, entry: NewEntry, after: str) -> None:
    assert yaml_append(before, entry)[0] == after


def test_remove_takes_exactly_the_entry_lines() -> None:
    text, line = yaml_remove(COMMENTED, "HTTPS://A.example/feed")
    assert line == 4
    assert text == COMMENTED.replace(
        "  - url: https://a.example/feed   # the best one\n    title: A\n", ""
    )
    last, _ = yaml_remove(COMMENTED, "https://b.example/rss")
    assert "b.example" not in last
    assert "# --- news (disabled for now) ---\n  # - url: https://c.example/\n" in last, (
        "comments after the last entry stay"
    )
    alone = "feeds:\n  -\n    url: https://x.example/a\n  - https://x.example/b\n"
    assert yaml_remove(alone, "https://x.example/a")[0] == "feeds:\n  - https://x.example/b\n"


@settings(max_examples=300, deadline=None)
@given(value=st.text(), quote=st.sampled_from(["", "'", '"']))
def test_any_text_is_written_so_that_the_loader_reads_it_back(value: str, quote: str) -> None:
    """Titles come from users and OPML files: line ends of any kind (NEL, LS), controls, a
    byte order mark, quotes, leading blanks. Each is written in the file's quoting when YAML
    can hold it so, else double-quoted with escapes."""
    loaded = parse_yaml(f"k: {_scalar(value, quote)}\n", "feeds.yaml")
    assert loaded.value == {"k": Node(value, 1, 1)}


@pytest.mark.parametrize("title", ["a\x85b", "a\u2028b", "a\x7fb", "a\x9fb", "a\ufeffb", "a\nb"])
def test_a_title_yaml_cannot_hold_as_written_is_escaped(tmp_path: Path, title: str) -> None:
    feeds = write(tmp_path / "feeds.yaml", "feeds:\n  - url: 'https://a.example/feed'\n")
    add_feed(feeds, NewEntry("https://b.example/feed", title=title))
    assert load_feeds(feeds)[1].title == title
    remove_feed(feeds, "https://a.example/feed")  # and the file stays editable
    assert [spec.title for spec in load_feeds(feeds)] == [title]


@pytest.mark.parametrize(
    "text",
    [
        "feeds: [https://x.example/a, https://x.example/b]\n",
        "{feeds: [https://x.example/a]}\n",
        "feeds: https://x.example/a\n",
        "feeds: !x\n  - https://x.example/a\n  - https://x.example/b\n",
        "feeds:\r  - https://x.example/a\n  - https://x.example/b\n",
        "feeds:\n  - https://x.example/a\n  -\u2028\n    url: https://x.example/b\n",
        "feeds:\n  - https://x.example/a\n  - url: x\x85  https://x.example/b\n",
    ],
)
def test_layouts_that_are_not_edited(text: str) -> None:
    with pytest.raises(UnsafeEdit):
        yaml_append(text, NewEntry("https://x.example/c"))
    with pytest.raises(UnsafeEdit):
        yaml_remove(text, "https://x.example/a")


def test_entries_go_before_a_document_end_marker() -> None:
    text = "feeds:\n  - https://a.example/\n  # last\n...\n# after the document\n"
    added, line = yaml_append(text, NewEntry("https://b.example/"))
    assert (added, line) == (text.replace("  # last", "  - https://b.example/\n  # last"), 3)
    assert yaml_remove(added, "https://b.example/")[0] == text


def test_a_merged_entry_is_followed_in_the_default_style() -> None:
    text = "feeds:\n  - <<: {url: https://a.example/}\n"
    new, line = yaml_append(text, NewEntry("https://b.example/"))
    assert (new, line) == (text + "  - url: https://b.example/\n", 3)


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


def test_add_feed_checks_writes_atomically_and_keeps_mode(tmp_path: Path) -> None:
    feeds = write(tmp_path / "feeds.yaml", COMMENTED)
    os.chmod(feeds, 0o640)
    result = add_feed(feeds, NewEntry("https://d.example/feed", title=" D ", interval="90m"))
    assert result.spec == FeedSpec("https://d.example/feed", timedelta(minutes=90), "D")
    assert load_feeds(feeds)[-1] == result.spec
    assert oct(feeds.stat().st_mode & 0o777) == oct(0o640)
    assert [p.name for p in tmp_path.iterdir()] == ["feeds.yaml"], "no temporary file left"
    with pytest.raises(AlreadySubscribed) as present:
        add_feed(feeds, NewEntry("https://D.EXAMPLE/feed"))
    assert present.value.spec.url == "https://d.example/feed"
    with pytest.raises(ValueError, match="half of a UTF-16 pair"):
        add_feed(feeds, NewEntry("https://e.example/feed", title="caf\udce9"))
    assert load_feeds(feeds)[-1] == result.spec


def test_add_feed_tells_accounts_apart_by_the_case_of_their_credentials(tmp_path: Path) -> None:
    """A user name or password in other case is another account (the server compares them as
    sent): added, not reported as the feed already there; the host in other case is that feed."""
    feeds = write(tmp_path / "feeds.yaml", "feeds:\n  - https://Ann:Secret@example.com/feed\n")
    add_feed(feeds, NewEntry("https://ann:secret@example.com/feed"))
    assert [spec.url for spec in load_feeds(feeds)] == [
        "https://Ann:Secret@example.com/feed",
        "https://ann:secret@example.com/feed",
    ]
    with pytest.raises(AlreadySubscribed) as present:
        add_feed(feeds, NewEntry("HTTPS://Ann:Secret@EXAMPLE.COM/feed"))
    assert present.value.spec.url == "https://Ann:Secret@example.com/feed"


@pytest.mark.parametrize("before", ["", "\n", "# Feeds I follow\n\n", "  # indented\n"])
def test_add_feed_fills_a_file_that_holds_nothing_yet(tmp_path: Path, before: str) -> None:
    """``touch feeds.yaml`` or a header comment: the loader refuses such a file (no feeds
    key), an edit fills it; refused, the user was told to write the feeds by hand."""
    feeds = write(tmp_path / "feeds.yaml", before)
    add_feed(feeds, NewEntry("https://a.example/feed"))
    assert load_feeds(feeds) == [FeedSpec("https://a.example/feed")]
    assert feeds.read_text().startswith(before.rstrip("\n"))


def test_add_feed_keeps_crlf_and_bom(tmp_path: Path) -> None:
    original = "\ufefffeeds:\r\n  - url: https://a.example/feed\r\n"
    feeds = tmp_path / "feeds.yaml"
    feeds.write_bytes(original.encode("utf-8"))
    add_feed(feeds, NewEntry("https://b.example/feed"))
    assert feeds.read_bytes() == (original + "  - url: https://b.example/feed\r\n").encode()


def test_a_file_with_cr_alone_is_edited_keeping_its_line_endings(tmp_path: Path) -> None:
    feeds = write(
        tmp_path / "feeds.yaml", "feeds:\r  - https://a.example/\r  - https://b.example/\r"
    )
    remove_feed(feeds, "https://b.example/")
    assert feeds.read_bytes() == b"feeds:\r  - https://a.example/\r"
    add_feed(feeds, NewEntry("https://c.example/"))
    assert feeds.read_bytes() == b"feeds:\r  - https://a.example/\r  - https://c.example/\r"


def test_add_feed_creates_a_missing_file(tmp_path: Path) -> None:
    """With the mode any new file gets (a temporary file's 0600 left it unreadable to a
    service running as another user)."""
    feeds = tmp_path / "feeds.yaml"
    old_umask = os.umask(0o022)
    try:
        add_feed(feeds, NewEntry("https://b.example/feed"))
    finally:
        os.umask(old_umask)
    assert load_feeds(feeds) == [FeedSpec("https://b.example/feed")]
    assert feeds.stat().st_mode & 0o777 == 0o644
    assert [path.name for path in tmp_path.iterdir()] == ["feeds.yaml"], "no temporary file left"


def test_add_feed_through_a_symlink_edits_the_target(tmp_path: Path) -> None:
    real = write(tmp_path / "real.yaml", "feeds:\n  - url: https://a.example/feed\n")
    link = tmp_path / "feeds.yaml"
    link.symlink_to(real)
    add_feed(link, NewEntry("https://b.example/feed"))
    assert link.is_symlink()
    assert len(load_feeds(real)) == 2


def test_an_unsafe_file_is_refused_with_the_entry_to_write_by_hand(tmp_path: Path) -> None:
    text = "feeds: !x\n  - https://a.example/feed\n"
    feeds = write(tmp_path / "feeds.yaml", text)
    with pytest.raises(ConfigError, match=r"cannot be edited safely.*\n  - url: https://b\.ex"):
        add_feed(feeds, NewEntry("https://b.example/feed"))
    assert feeds.read_text() == text


@pytest.mark.parametrize(
    "title",
    [
        "    title: |\n      Line one\n      # not a comment\n",
        "    title: >-\n      Line one\n      # not a comment\n\n",
        "    title: |+\n      Line one\n      # not a comment\n\n\n",
        '    title: &t "Line one\n      # not a comment"\n',
    ],
)
def test_a_last_title_whose_lines_look_like_comments_is_kept_whole(
    tmp_path: Path, title: str
) -> None:
    """Its ``# ...`` lines are text, not trailing comments: the new entry was written before
    them, splitting the title, and the edit was refused without the entry to write by hand.
    ``remove`` left them behind as comments."""
    text = f"feeds:\n  - url: https://a.example/feed\n{title}  # a real comment\n"
    feeds = write(tmp_path / "feeds.yaml", text)
    [before] = load_feeds(feeds)
    assert before.title is not None
    assert "# not a comment" in before.title
    result = add_feed(feeds, NewEntry("https://b.example/feed"))
    new_entry = "  - url: https://b.example/feed\n"
    edited = feeds.read_text()
    at = edited.index(new_entry)
    assert edited[:at] + edited[at + len(new_entry) :] == text
    assert edited.index("# not a comment") < at < edited.index("  # a real comment")
    assert result.line == edited[:at].count("\n") + 1
    assert load_feeds(feeds) == [before, FeedSpec("https://b.example/feed")]
    remove_feed(feeds, "https://a.example/feed")
    assert feeds.read_text() == "feeds:\n" + edited[at:], "the title's lines go with it"


def test_removing_an_entry_whose_anchor_others_repeat_says_what_to_do(tmp_path: Path) -> None:
    """The edited file would not load (an alias without its anchor), and the message was the
    loader's advice to fix the YAML syntax of a file the user had not written."""
    text = (
        "feeds:\n  - url: https://a.example/feed\n    interval: &slow 2h\n"
        "  - url: https://b.example/feed\n    interval: *slow\n"
    )
    feeds = write(tmp_path / "feeds.yaml", text)
    with pytest.raises(ConfigError) as refused:
        remove_feed(feeds, "https://a.example/feed")
    message = str(refused.value)
    assert "its entry defines &slow, which other entries repeat by an alias" in message
    assert "Edit it by hand: write the values that *slow repeats" in message
    assert "then delete the entry of https://a.example/feed (from line 2)." in message
    assert "syntax" not in message
    assert feeds.read_text() == text
    remove_feed(feeds, "https://b.example/feed")
    assert feeds.read_text() == text.split("  - url: https://b")[0]


def test_an_edit_that_changes_other_entries_gives_the_entry_to_write_by_hand(
    tmp_path: Path,
) -> None:
    original = b"feeds:\n  - https://a.example/\n"
    feeds = write(tmp_path / "feeds.yaml", original.decode())
    with pytest.raises(ConfigError) as refused:
        replace_checked(
            feeds,
            "feeds:\n  - https://z.example/\n",
            original,
            action="add",
            expect=[FeedSpec("https://a.example/"), FeedSpec("https://b.example/")],
            by_hand="add\n  - https://b.example/",
        )
    assert "(the edit would change other entries)" in str(refused.value)
    assert str(refused.value).endswith("Edit it by hand: add\n  - https://b.example/")
    assert feeds.read_bytes() == original


def test_a_file_whose_comment_stops_ruamel_yaml_is_edited_as_the_loader_reads_it(
    tmp_path: Path,
) -> None:
    feeds = write(tmp_path / "feeds.yaml", COMMENT_RUAMEL_CANNOT_PLACE)
    add_feed(feeds, NewEntry("https://b.example/feed"))
    assert feeds.read_text() == COMMENT_RUAMEL_CANNOT_PLACE.replace(
        "feed.xml\n", "feed.xml\n  - url: https://b.example/feed\n"
    )
    remove_feed(feeds, "https://example.com/feed.xml")
    assert feeds.read_text() == "feeds:\n  - url: https://b.example/feed\n\n"


def test_remove_feed_refuses_an_edit_that_would_change_other_entries(tmp_path: Path) -> None:
    text = (
        "feeds:\n  - &base\n    url: https://a.example/feed\n    interval: 1h\n"
        "  - <<: *base\n    url: https://b.example/feed\n"
    )
    feeds = write(tmp_path / "feeds.yaml", text)
    assert len(load_feeds(feeds)) == 2
    with pytest.raises(ConfigError, match="left unchanged"):
        remove_feed(feeds, "https://a.example/feed")
    assert feeds.read_text() == text


def test_remove_feed_of_an_unknown_url(tmp_path: Path) -> None:
    feeds = write(tmp_path / "feeds.yaml", COMMENTED)
    with pytest.raises(ConfigError, match="is not in the feeds file"):
        remove_feed(feeds, "https://zzz.example/")
    assert feeds.read_text() == COMMENTED


def test_a_file_changed_meanwhile_is_not_overwritten(tmp_path: Path) -> None:
    feeds = write(tmp_path / "feeds.yaml", "feeds:\n  - url: https://a.example/feed\n")
    stale = feeds.read_bytes()
    write(feeds, "feeds:\n  - url: https://other.example/feed\n")
    with pytest.raises(ConfigError, match="changed while it was being edited"):
        replace_checked(feeds, "feeds:\n  - url: https://b.example/feed\n", stale, action="add")
    assert "other.example" in feeds.read_text()


def test_an_edit_that_would_not_load_names_the_real_file(tmp_path: Path) -> None:
    original = b"feeds:\n  - https://a.example/\n"
    feeds = tmp_path / "feeds.yaml"
    feeds.write_bytes(original)
    with pytest.raises(ConfigError) as refused:
        replace_checked(feeds, "feeds:\n  - 12\n", original, action="add", display=feeds)
    assert f"{feeds} (as edited) line 2" in str(refused.value)
    assert ".add-" not in str(refused.value), "not the temporary file, gone by now"
    assert feeds.read_bytes() == original
    assert [p.name for p in tmp_path.iterdir()] == ["feeds.yaml"]


def test_json_keeps_key_order_and_indentation(tmp_path: Path) -> None:
    document = {"feeds": [{"title": "A", "url": "https://a.example/feed"}]}
    for indent in (4, "\t"):
        feeds = write(tmp_path / "feeds.json", json.dumps(document, indent=indent) + "\n")
        add_feed(feeds, NewEntry("https://b.example/feed", interval="2h"))
        expected = {
            "feeds": [*document["feeds"], {"url": "https://b.example/feed", "interval": "2h"}]
        }
        assert feeds.read_text() == json.dumps(expected, indent=indent) + "\n"
        remove_feed(feeds, "https://a.example/feed")
        assert json.loads(feeds.read_text()) == {"feeds": expected["feeds"][1:]}
    bare = write(tmp_path / "bare.json", '{"feeds": ["https://a.example/feed"]}')
    add_feed(bare, NewEntry("https://b.example/feed"))
    assert bare.read_text() == '{"feeds": ["https://a.example/feed", "https://b.example/feed"]}'


def test_find_feed_compares_like_the_loader() -> None:
    specs = [FeedSpec("https://a.example/Feed")]
    assert find_feed(specs, "HTTPS://A.EXAMPLE/Feed") == specs[0]
    assert find_feed(specs, "https://a.example/feed") is None, "paths are case-sensitive"


def test_a_flow_list_is_refused_with_what_to_write_in_it(tmp_path: Path) -> None:
    """``remove`` said "Edit it by hand: delete its entry by hand", naming neither the entry
    nor where; ``add`` gave a block entry ("  - url: ...") that a [flow, list] cannot take."""
    text = "feeds: [https://a.example/feed,\n  https://b.example/feed]\n"
    feeds = write(tmp_path / "feeds.yaml", text)
    with pytest.raises(ConfigError) as removing:
        remove_feed(feeds, "https://B.example/feed")
    assert str(removing.value).endswith(
        "Edit it by hand: delete https://b.example/feed (line 2) from the [list], with the "
        'comma that separates it. Or write the list one entry per line ("  - URL" under '
        '"feeds:"), which add and remove edit themselves.'
    )
    with pytest.raises(ConfigError) as adding:
        add_feed(feeds, NewEntry("https://c.example/feed", title="C, [x]"))
    assert (
        'Edit it by hand: add {"url": "https://c.example/feed", "title": "C, [x]"} to the '
        '[list] of "feeds:", after a comma.'
    ) in str(adding.value)
    assert feeds.read_text() == text
    by_hand = text.replace("]\n", ', {"url": "https://c.example/feed", "title": "C, [x]"}]\n')
    feeds.write_text(by_hand)
    assert load_feeds(feeds)[-1] == FeedSpec("https://c.example/feed", title="C, [x]")
