"""The tests of tests/unit/pipelines/sources/web/test_sources_webtext.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.helpers.sources_webtext import WARC_DIR, WEB, wget_style_crawl


@pytest.mark.slow
def test_crawl_passes_the_default_failure_rate_and_counts_skips_by_kind(tmp_path: Path,
                                                                         capsys) -> None:
    from pipelines.preprocess import main

    crawl = tmp_path / "crawl"
    crawl.mkdir()
    wget_style_crawl(crawl / "wget.warc.gz")
    for name in ("example.warc.gz", "whirlwind.warc.gz", "example-iana.org-chunked.warc"):
        shutil.copy(WARC_DIR / name, crawl / name)
    code = main(["--source=webtext", f"--input={crawl}/*", f"--output={tmp_path / 'out'}",
                 f"--tokenizer={WEB.parent / 'vocab' / 'gpt2'}", "--no-dedup", "--language=any",
                 "--progress-interval=0", "--direct_running_mode=in_memory",
                 "--direct_num_workers=1"])
    report = capsys.readouterr().out
    assert code == 0, report
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["failed_total"] == 0 and stats["read"] == 4, stats  # the 4 pages
    skipped = dict(re.findall(r"webtext_skipped_(\w+)=(\d+)", report))
    # wget crawl: 8 requests, robots.txt, CSS, JS, image, font, 301, 404, revisit, MANIFEST
    # (metadata) and 3 log/argument resource records; the real WARCs add their warcinfo (4),
    # request (4), revisit (1) and metadata (1) records
    assert skipped == {"warcinfo": "5", "request": "12", "robots_txt": "1", "style": "1",
                       "script": "1", "image": "1", "font": "1", "redirect": "1",
                       "http_error": "1", "revisit": "2", "metadata": "2",
                       "crawler_record": "3"}, report
