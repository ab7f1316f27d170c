"""URL-list filtering on the real WebText Reddit URL dump of December 2005 (plain list and the
gzip JSON lines it was derived from)."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import pytest

from pipelines.sources.web.urls import (
    dedup_key,
    filter_urls,
    is_blacklisted,
    main,
    normalize_url,
    read_url_lines,
    registered_domain_label,
    url_from_line,
    write_filtered_urls,
)
from tests.helpers.sources_urls import GZ, TXT


def test_normalize_url() -> None:
    assert normalize_url(" HTTP://WWW.Example.COM:80/a/b?x=1&amp;y=2#frag \n") == (
        "http://www.example.com/a/b?x=1&y=2")
    assert normalize_url("https://example.com:443") == "https://example.com/"
    assert normalize_url("https://example.com:8443/p?") == "https://example.com:8443/p"
    assert normalize_url("http://user@Example.com/") == "http://user@example.com/"
    assert normalize_url("not a url &amp; more") == "not a url & more"
    assert normalize_url("http://x.com/?a=1&amp;amp;b=2") == "http://x.com/?a=1&b=2"
    assert normalize_url("http://[::1") == "http://[::1"  # unparsable: returned, not raised


def test_dedup_key_ignores_scheme_and_www() -> None:
    assert dedup_key(normalize_url("https://www.example.com/a")) == dedup_key(
        normalize_url("http://example.com/a"))
    assert dedup_key("http://example.com/a") != dedup_key("http://example.com/b")


@pytest.mark.parametrize("host,label", [
    ("maps.google.co.uk", "google"), ("youtu.be", "youtu"), ("en.wikipedia.org", "wikipedia"),
    ("i.imgur.com", "imgur"), ("www.amazon.co.jp", "amazon"), ("bbc.co.uk", "bbc"),
    ("192.168.0.1", ""), ("localhost", "localhost"), ("news.ycombinator.com:8080", "ycombinator"),
])
def test_registered_domain_label(host: str, label: str) -> None:
    assert registered_domain_label(host) == label


@pytest.mark.parametrize("url,reason", [
    ("http://x", "too_short"),
    ("http://a.b", "malformed"),
    ("http://example.com/" + "a" * 2100, "too_long"),
    ("ftp://example.com/file", "malformed"),
    ("http://exa mple.com/", "malformed"),
    ("http://-bad-.com/", "malformed"),
    ("https://www.reddit.com/r/python", "blacklisted_domain"),
    ("https://m.youtube.com/watch?v=x", "blacklisted_domain"),
    ("https://twitter.com/someone/status/1", "blacklisted_domain"),
    ("https://www.facebook.com/page", "blacklisted_domain"),
    ("https://www.google.co.uk/search?q=x", "blacklisted_domain"),
    ("https://www.ebay.com/itm/1", "blacklisted_domain"),
    ("https://en.wikipedia.org/wiki/Web", "blacklisted_domain"),
    ("http://example.com/photo.JPG", "blacklisted_extension"),
    ("http://example.com/paper.pdf?download=1", "blacklisted_extension"),
    ("http://example.com/archive.tar.gz", "blacklisted_extension"),
    ("http://example.com/setup.exe", "blacklisted_extension"),
    ("http://example.com/song.mp3", "blacklisted_extension"),
    ("http://example.com/a.pdf.html", None),
    ("http://blog.example.com/2005/12/post.html", None),
    ("http://192.168.1.1:8080/page", None),
    ("http://vid.example.com/story", None),  # only the registered domain label counts
])
def test_is_blacklisted(url: str, reason: str | None) -> None:
    assert is_blacklisted(url) == reason


def test_url_from_line() -> None:
    assert url_from_line('{"u":"http://x.org/","r":"reddit.com","k":3}') == "http://x.org/"
    assert url_from_line('{"url": "http://y.org/"}') == "http://y.org/"
    assert url_from_line("  http://z.org/\n") == "http://z.org/"
    assert url_from_line('{"u": 7}') is None
    assert url_from_line('{"u": "http://cut') is None


def test_real_list_plain_and_json_gz_give_the_same_kept_set() -> None:
    kept_txt, rejected_txt = filter_urls(read_url_lines(str(TXT)))
    kept_gz, rejected_gz = filter_urls(read_url_lines(str(GZ)))
    assert kept_txt == kept_gz
    assert rejected_txt == rejected_gz
    total = sum(1 for line in TXT.read_text(encoding="utf-8").splitlines() if line.strip())
    assert total == 2179
    assert len(kept_txt) + sum(rejected_txt.values()) == total
    assert rejected_txt == Counter({"blacklisted_domain": 53, "blacklisted_extension": 36})
    assert all(is_blacklisted(url) is None for url in kept_txt)
    assert len({dedup_key(url) for url in kept_txt}) == len(kept_txt)


def test_html_entities_are_unescaped() -> None:
    raw = TXT.read_text(encoding="utf-8")
    assert sum("&amp;" in line for line in raw.splitlines()) == 137
    kept, _ = filter_urls(read_url_lines(str(TXT)))
    assert not any("&amp;" in url for url in kept)
    assert "http://abcnews.go.com/Health/wireStory?id=1371184&CMP=OTC-RSSFeeds0312" in kept


def test_blacklisted_examples_from_the_real_list() -> None:
    _, rejected = filter_urls(["http://en.wikipedia.org/wiki/WP:UA",
                               "http://graphics8.nytimes.com/images/2005/12/18/x.gif"])
    assert rejected == Counter({"blacklisted_domain": 1, "blacklisted_extension": 1})


def test_duplicates_across_both_files_and_spellings() -> None:
    lines = list(read_url_lines(str(TXT))) + list(read_url_lines(str(GZ)))
    kept, rejected = filter_urls(lines + ["HTTP://0INSTALL.NET/#top", "", "   ", "{broken"])
    assert len(kept) == 2090
    assert rejected["duplicate"] == 2090 + 1  # every kept URL again, and the re-spelled one
    assert rejected["bad_json"] == 1
    assert rejected["blacklisted_domain"] == 2 * 53


def test_cli_glob_over_several_files(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(TXT.read_bytes())
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(TXT.read_bytes()))
    kept, rejected = write_filtered_urls(str(tmp_path / "*.txt*"), str(tmp_path / "out.txt"))
    assert kept == 2090 and rejected["duplicate"] == 2090


def test_cli_writes_the_filtered_list(tmp_path: Path, capsys) -> None:
    output = tmp_path / "kept.txt"
    assert main(["--input", str(GZ), "--output", str(output)]) == 0
    printed = capsys.readouterr().out
    assert "kept: 2090" in printed
    assert "blacklisted_domain: 53" in printed and "blacklisted_extension: 36" in printed
    kept, _ = filter_urls(read_url_lines(str(TXT)))
    assert output.read_text(encoding="utf-8").splitlines() == kept


def test_cli_refuses_a_list_cut_short_in_one_line(tmp_path: Path, capsys) -> None:
    cut = tmp_path / "cut.json.gz"
    data = GZ.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    output = tmp_path / "kept.txt"
    assert main(["--input", str(cut), "--output", str(output)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"urls: error: {cut}: truncated_input: gzip data ends")
    assert not output.exists() and sorted(tmp_path.iterdir()) == [cut]
