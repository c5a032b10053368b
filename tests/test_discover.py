"""Feed discovery for ``add``: links announced by HTML pages (pure, on samples), the common
paths, validation through the real fetch and parse stages, and the ``add``/``remove``
commands end to end against a local server."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest

from feedcollector.config import load_feeds
from feedcollector.discover import Discovery, common_feed_urls, discover_feeds
from feedcollector.errors import ConfigError
from feedcollector.feed_links import FeedLink, feed_links
from feedcollector.fetch import FetchLimits, make_http_client

from .feedserver import FeedServer, Route
from .samples import Entry, rss, write_project
from .test_cli import feedcollector

NOW = datetime(2026, 3, 2, 9, 0, 0, tzinfo=UTC)
HTML = {"Content-Type": "text/html; charset=utf-8"}
RSS = {"Content-Type": "application/rss+xml"}


def page(head: str) -> bytes:
    return f"<!doctype html><html><head><title>Site</title>{head}</head><body>hi</body></html>".encode()


def test_feed_links_in_page_order_resolved_against_the_page() -> None:
    html = page(
        '<link rel="stylesheet" href="/style.css">'
        '<link rel="alternate" type="application/rss+xml" title="  Posts\n feed " href="feed.xml">'
        '<link rel="Alternate" type="application/atom+xml; charset=utf-8" href="/atom.xml">'
        '<link rel="alternate" type="application/feed+json" href="https://cdn.example/f.json">'
        '<link rel="alternate" type="text/html" hreflang="de" href="/de/">'
        '<link rel="alternate" type="application/rss+xml" href="feed.xml">'
        '<link rel="alternate" type="application/rss+xml" href="javascript:alert(1)">'
        '<link rel="alternate" type="application/rss+xml" href="">'
    )
    assert feed_links(html, "https://blog.example/posts/") == [
        FeedLink("https://blog.example/posts/feed.xml", "Posts feed", "RSS"),
        FeedLink("https://blog.example/atom.xml", None, "Atom"),
        FeedLink("https://cdn.example/f.json", None, "JSON Feed"),
    ]


def test_feed_links_honour_base_href_and_find_nothing_in_plain_pages() -> None:
    html = page(
        '<base href="https://static.example/blog/">'
        '<link rel="alternate" type="application/rss+xml" href="rss">'
    )
    assert [link.url for link in feed_links(html, "https://www.example/")] == [
        "https://static.example/blog/rss"
    ]
    assert feed_links(page(""), "https://www.example/") == []
    assert feed_links(b"\x00\xff not html at all", "https://www.example/") == []


@pytest.mark.parametrize("bad", ["http://[", "//[x]/", "http://\u2100/", "javascript:x"])
def test_feed_links_skip_addresses_urllib_refuses(bad: str) -> None:
    """Pages are untrusted: an href or base urllib cannot join (an unclosed IPv6 bracket, a
    host NFKC turns into a slash) raised out of ``add`` and out of the parse stage's "not a
    feed" wording; it is skipped, and the page's other feeds are still found."""
    html = page(
        f'<base href="{bad}"><link rel="alternate" type="application/rss+xml" href="{bad}">'
        '<link rel="alternate" type="application/atom+xml" href="/atom.xml">'
    )
    assert [link.url for link in feed_links(html, "https://www.example/blog/")] == [
        "https://www.example/atom.xml"
    ]


def test_common_feed_urls_under_the_folder_then_the_root() -> None:
    urls = common_feed_urls("https://example.org/blog/post.html")
    assert urls[0] == "https://example.org/blog/feed"
    assert "https://example.org/blog/atom.xml" in urls
    assert "https://example.org/feed" in urls
    assert urls.index("https://example.org/feed") > urls.index("https://example.org/blog/index.xml")
    root = common_feed_urls("https://example.org")
    assert root[:3] == [
        "https://example.org/feed",
        "https://example.org/rss",
        "https://example.org/feed.xml",
    ]
    assert len(root) == len(set(root))


def discover(url: str, want: int | None = 1) -> Discovery:
    async def go() -> Discovery:
        async with make_http_client("feedcollector-test/1") as client:
            return await discover_feeds(client, url, FetchLimits(), now=NOW, want=want)

    return asyncio.run(go())


def test_a_feed_url_is_its_own_answer(feed_server: FeedServer) -> None:
    url = feed_server.route("/feed", body=rss([Entry("a", guid="a")], title="Mine"), headers=RSS)
    found = discover(url)
    assert [(f.url, f.title, f.items, f.via) for f in found.feeds] == [(url, "Mine", 1, "given")]
    assert len(feed_server.requests) == 1
    assert feed_server.requests[0].headers["User-Agent"] == "feedcollector-test/1"


def test_a_feed_that_moved_for_good_is_added_where_it_is(feed_server: FeedServer) -> None:
    """Written at its old address, the next cycle asked to fix the feeds file by hand (and
    an old address listed again beside the new one is a second feed)."""
    url = feed_server.route("/feed", body=rss([Entry("a", guid="a")], title="Mine"), headers=RSS)
    feed_server.route("/old", Route(status=301, headers={"Location": "/mid"}))
    feed_server.route("/mid", Route(status=308, headers={"Location": "/feed"}))
    feed_server.route("/away", Route(status=302, headers={"Location": "/feed"}))
    assert [f.url for f in discover(feed_server.url("/old")).feeds] == [url]
    assert [f.url for f in discover(feed_server.url("/away")).feeds] == [
        feed_server.url("/away")
    ], "a temporary redirect keeps the address given"


def test_announced_links_are_validated_in_order(feed_server: FeedServer) -> None:
    feed_server.route("/blog/broken.xml", body=b"<html>not a feed</html>", headers=HTML)
    feed_server.route("/blog/posts.xml", body=rss([Entry("p", guid="p")], title="Posts"))
    feed_server.route("/blog/comments.xml", body=rss([], title="Comments"))
    site = feed_server.route(
        "/blog/",
        body=page(
            '<link rel="alternate" type="application/rss+xml" href="broken.xml">'
            '<link rel="alternate" type="application/rss+xml" href="missing.xml">'
            '<link rel="alternate" type="application/rss+xml" href="posts.xml">'
            '<link rel="alternate" type="application/rss+xml" href="/blog/comments.xml">'
        ),
        headers=HTML,
    )
    first = discover(site)
    assert [f.url for f in first.feeds] == [feed_server.url("/blog/posts.xml")]
    assert [url for url, _ in first.rejected] == [
        feed_server.url("/blog/broken.xml"),
        feed_server.url("/blog/missing.xml"),
    ]
    assert "parse:" in first.rejected[0][1]
    assert "404" in first.rejected[1][1]
    assert not feed_server.hits("/blog/comments.xml"), "stops at the first valid one"
    assert not feed_server.hits("/blog/feed"), "common paths only when no link works"
    every = discover(site, want=None)
    assert [(f.title, f.items) for f in every.feeds] == [("Posts", 1), ("Comments", 0)]
    assert len(every.announced) == 4


def test_common_paths_when_the_page_announces_nothing(feed_server: FeedServer) -> None:
    body = rss([Entry("x", guid="x")], title="Hugo")
    feed_server.route("/index.xml", body=body, headers=RSS)
    feed_server.route("/rss", Route(status=301, headers={"Location": "/index.xml"}))
    site = feed_server.route("/", body=page(""), headers=HTML)
    found = discover(site, want=None)
    assert [(f.url, f.via) for f in found.feeds] == [(feed_server.url("/index.xml"), "path")], (
        "the redirect and its target are one feed, added where it moved for good"
    )
    assert found.rejected == (), "missing common paths are not reported"


def test_nothing_found_and_unreachable(feed_server: FeedServer) -> None:
    site = feed_server.route("/", body=page(""), headers=HTML)
    assert discover(site).feeds == ()
    with pytest.raises(ConfigError, match=r"add: .*/gone cannot be fetched: .*404"):
        discover(feed_server.url("/gone"))


# --- the commands -------------------------------------------------------------------------


FEEDS = """\
# subscriptions
feeds:
  - url: {old}   # keep me

# more to come
"""


def blog_site(feed_server: FeedServer) -> tuple[str, str, str]:
    """A blog page announcing two feeds: (posts, comments, the page)."""
    posts = feed_server.route("/blog/posts.xml", body=rss([Entry("p", guid="p")], title="Posts"))
    comments = feed_server.route("/blog/comments.xml", body=rss([], title="Comments"))
    site = feed_server.route(
        "/blog/",
        body=page(
            '<link rel="alternate" type="application/rss+xml" href="posts.xml">'
            '<link rel="alternate" type="application/rss+xml" href="comments.xml">'
        ),
        headers=HTML,
    )
    return posts, comments, site


def test_add_counts_only_the_announced_feeds_not_subscribed_yet(
    feed_server: FeedServer, tmp_path: Path
) -> None:
    """ "The page announces 1 more" named a feed the file listed already."""
    _, comments, site = blog_site(feed_server)
    config = str(write_project(tmp_path, [comments]))
    added = feedcollector("--config", config, "add", site, cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    assert "added to" in added.stdout
    assert "announces" not in added.stdout


def test_add_from_a_site_and_remove(feed_server: FeedServer, tmp_path: Path) -> None:
    posts, comments, site = blog_site(feed_server)
    old = feed_server.route("/old.xml", body=rss([Entry("o", guid="o")]))
    config = str(write_project(tmp_path, []))
    feeds_file = tmp_path / "feeds.yaml"
    feeds_file.write_text(FEEDS.format(old=old))

    listed = feedcollector("--config", config, "add", "--list", site, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert f'[1] {posts} ("Posts", rss, 1 item)' in listed.stdout
    assert f'[2] {comments} ("Comments", rss, 0 items)' in listed.stdout
    assert feeds_file.read_text() == FEEDS.format(old=old), "--list changes nothing"

    added = feedcollector(
        "--config", config, "add", site, "--interval", "2h", "--title", "Blog: posts", cwd=tmp_path
    )
    assert added.returncode == 0, added.stderr
    assert f"add: {posts}" in added.stdout
    assert "line 4" in added.stdout
    assert "The page announces 1 more" in added.stdout
    assert "next cycle" in added.stdout
    assert feeds_file.read_text() == FEEDS.format(old=old).replace(
        "   # keep me\n",
        f'   # keep me\n  - url: {posts}\n    interval: 2h\n    title: "Blog: posts"\n',
    )
    picked = feedcollector("--config", config, "add", "--pick", "2", site, cwd=tmp_path)
    assert picked.returncode == 0, picked.stderr
    assert [spec.url for spec in load_feeds(feeds_file)] == [old, posts, comments]

    requests = len(feed_server.requests)
    same = posts.replace("http://", "HTTP://")
    again = feedcollector("--config", config, "add", same, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "already in" in again.stdout
    assert "edit its title:" not in again.stdout
    retitled = feedcollector("--config", config, "add", same, "--title", "Posts", cwd=tmp_path)
    assert "already in" in retitled.stdout
    assert "To change its title or interval, edit its title: or interval: line" in (
        retitled.stdout
    ), "--title given to a feed listed already: where it goes"
    assert len(feed_server.requests) == requests, "a subscribed URL is not fetched again"
    via_site = feedcollector("--config", config, "add", site, cwd=tmp_path)
    assert via_site.returncode == 0
    assert f"add: {posts} is already in" in via_site.stdout

    run = feedcollector("--config", config, "run", "--once", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "3 added" in run.stderr, "the next cycle registers the added feeds"
    assert feed_server.hits("/blog/comments.xml")

    removed = feedcollector("--config", config, "remove", comments, cwd=tmp_path)
    assert removed.returncode == 0, removed.stderr
    assert "removed from" in removed.stdout
    assert [spec.url for spec in load_feeds(feeds_file)] == [old, posts]
    assert "# more to come" in feeds_file.read_text()
    typo = feedcollector("--config", config, "remove", comments + "x", cwd=tmp_path)
    assert typo.returncode == 2
    assert "is not in the feeds file" in typo.stderr
    assert "Did you mean" not in typo.stderr, "the host's other feeds are no near spelling"
    kept = feeds_file.read_text()
    near = feedcollector("--config", config, "remove", posts.replace("posts", "post"), cwd=tmp_path)
    assert near.returncode == 2
    assert f"Did you mean {posts}?" in near.stderr, "not the other feeds of its host"
    assert near.stderr.count("error:") == 1
    assert feeds_file.read_text() == kept


def test_add_refusals(feed_server: FeedServer, tmp_path: Path) -> None:
    feed = feed_server.route("/x/data.rss", body=rss([Entry("a", guid="a")]))
    site = feed_server.route("/", body=page(""), headers=HTML)
    config = str(write_project(tmp_path, []))
    feeds_file = tmp_path / "feeds.yaml"
    before = feeds_file.read_text()

    nothing = feedcollector("--config", config, "add", site, cwd=tmp_path)
    assert nothing.returncode == 2
    assert "no feed found" in nothing.stderr
    bad_interval = feedcollector(
        "--config", config, "add", feed, "--interval", "often", cwd=tmp_path
    )
    assert bad_interval.returncode == 2
    assert "--interval" in bad_interval.stderr
    too_short = feedcollector("--config", config, "add", feed, "--interval", "1ms", cwd=tmp_path)
    assert too_short.returncode == 2
    assert "add: --interval must be" in too_short.stderr
    assert "from 1s to 3650d" in too_short.stderr, "the feeds file's range, checked before"
    assert not feed_server.hits("/x/data.rss")
    latin1_title = "caf\udce9"  # the byte 0xE9 in argv: Python keeps it as half a pair
    bad_title = feedcollector(
        "--config", config, "add", feed, "--title", latin1_title, cwd=tmp_path
    )
    assert bad_title.returncode == 2
    assert "add: --title is not UTF-8 text" in bad_title.stderr
    both = feedcollector("--config", config, "add", "--list", "--pick", "1", feed, cwd=tmp_path)
    assert both.returncode == 2
    assert "add: --list only lists the feeds found" in both.stderr
    too_far = feedcollector("--config", config, "add", "--pick", "3", feed, cwd=tmp_path)
    assert too_far.returncode == 2
    assert "only 1 feeds found" in too_far.stderr
    feeds_file.write_text("feeds: [https://a.example/feed]\n")
    unsafe = feedcollector("--config", config, "add", feed, cwd=tmp_path)
    assert unsafe.returncode == 2
    assert "cannot be edited safely" in unsafe.stderr
    assert feeds_file.read_text() == "feeds: [https://a.example/feed]\n"
    feeds_file.write_text(before)
    host_only = feedcollector("--config", config, "add", feed.removeprefix("http://"), cwd=tmp_path)
    assert host_only.returncode == 2, "https:// is assumed, and this server speaks http"
    assert f"add: https://{feed.removeprefix('http://')} cannot be fetched" in host_only.stderr
