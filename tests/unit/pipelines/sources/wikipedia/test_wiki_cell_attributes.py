"""Header cells' attributes, in the forms MediaWiki accepts, never reach the text: Albedo's real
table of sample albedos (English dump sample) with its `!` cells rewritten."""

from __future__ import annotations

import re

import pytest

from pipelines.sources.wikipedia import wikimarkup as wm
from tests.helpers.wikipedia_dumps import dump_articles


@pytest.fixture(scope="module")
def albedo_table() -> str:
    articles = dump_articles("enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
    (table,) = [t for t in re.findall(r"\{\|.*?\n\|\}", articles["Albedo"], re.S)]
    assert "! Surface\n! Typical<br>albedo" in table
    return table


@pytest.mark.parametrize(
    "header",
    [
        '! scope="col" | Surface\n! style="width:8em" data-sort-type=number | Typical<br>albedo',
        "! scope=col|Surface !! data-sort-type=number|Typical<br>albedo",
        "!data-sort-type='text' rowspan=1| Surface\n! colspan = 1 | Typical<br>albedo",
    ],
)
def test_header_cell_attributes_are_gone(albedo_table, header):
    expected = wm.wikitext_to_text(albedo_table)
    assert expected.startswith("Sample albedos\nSurface | Typical albedo")
    text = wm.wikitext_to_text(albedo_table.replace("! Surface\n! Typical<br>albedo", header))
    assert text == expected
    assert "=" not in text
