"""An input of another format than the source's (pipelines/sources/formats.py) is one line on the
launcher naming the file and the sources that read it, before anything is written; a file that
breaks off is logged once (where it is counted), not once by the reader and again by the stage."""

from __future__ import annotations

import pytest

from pipelines.sources import source_traits
from pipelines.sources.formats import _head, check_input_format, sources_reading
from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"
BOOK = CORPORA / "books" / "pg1080.txt"
SIMPLEWIKI = CORPORA / "wikipedia" / "simplewiki-sample.xml.bz2"
PAGE = sorted((CORPORA / "web" / "html" / "html").glob("*.html.gz"))[0]


@pytest.mark.parametrize(
    ("source", "given", "what", "readers"),
    [
        ("books", SIMPLEWIKI, "plain-text books", "--source wikipedia reads it"),
        ("jsonl", BOOK, "JSON lines", "--source books or --source webtext reads it"),
        ("parquet", PAGE, "Parquet", "--source webtext reads it"),
        ("books", PAGE, "plain-text books", "--source webtext reads it"),
    ],
)
def test_each_format_refuses_another_and_names_its_reader(source, given, what, readers):
    with pytest.raises(ValueError) as refused:
        check_input_format(source, [str(given)])
    message = str(refused.value)
    assert message.startswith(f"{given} is not {what}, which --source {source} reads (it starts ")
    assert message.endswith(readers)


def test_the_shared_corpora_match_their_own_sources_format():
    for dump in sorted((CORPORA / "wikipedia").glob("*wiki*")):
        assert sources_reading(_head(str(dump)))[-1] == "wikipedia", dump  # webtext: any text
    for book in sorted((CORPORA / "books").glob("*.txt")):
        assert sources_reading(_head(str(book))) == ["books", "webtext"], book
    assert sources_reading(_head(str(PAGE))) == ["webtext"]
    # the multistream index beside a dump is matched by the dump's pattern: not refused
    assert source_traits("wikipedia").input_format.matches(b"602:10:AccessibleComputing\n")
    # a web crawl holds junk among its pages: its reader counts it, the launcher refuses nothing
    check_input_format("webtext", [str(CORPORA / "vocab" / "gpt2" / "gpt2.tiktoken"), str(BOOK)])
