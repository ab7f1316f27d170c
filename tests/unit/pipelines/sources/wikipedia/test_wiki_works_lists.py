"""A list of the subject's works (italic titles with their years) is content, whatever edition's
ISBN an entry gives; a bibliography of citations (author first) or of editions (ISBN first)
under a title no table holds is still back matter. On the real English dump sample."""

from __future__ import annotations

import pytest

from pipelines.sources.wikipedia import wiki_back_matter
from pipelines.sources.wikipedia import wikimarkup as wm
from tests.helpers.wikipedia_dumps import dump_articles

ENWIKI = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


@pytest.fixture(scope="module")
def enwiki() -> dict[str, str]:
    return dump_articles(ENWIKI)


def test_a_list_of_the_subjects_works_is_kept(enwiki):
    """Schopenhauer's "Selected bibliography": his works by title and year, some with an
    edition's ISBN ("On Vision and Colors ..., 1816 ISBN ..."), trailing the article before its
    See also / References / Further reading / External links."""
    lines = wm.wikitext_to_text(enwiki["Arthur Schopenhauer"]).split("\n")
    assert "Selected bibliography" in lines
    assert (
        "On Vision and Colors (Ueber das Sehn und die Farben), 1816 ISBN 978-0-85496-988-3" in lines
    )
    assert "On the Basis of Morality (Ueber die Grundlage der Moral), 1840" in lines
    for closing in ("See also", "References", "Further reading", "External links"):
        assert closing not in lines


def test_citation_and_edition_lists_stay_back_matter(enwiki):
    """The American Revolutionary War's "Reference literature" (author-first citations) and
    Animal Farm's "Editions" (ISBN-first edition lines) are cut by structure, as before."""
    war = wm.wikitext_to_text(enwiki["American Revolutionary War"])
    assert "Reference literature" not in war.split("\n")
    assert "Conway, Stephen." not in war
    farm = wm.wikitext_to_text(enwiki["Animal Farm"])
    assert "ISBN 0-451-51679-6 (paperback, 1956, Signet Classic)" not in farm.split("\n")


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (
            "* ''[[On Vision and Colors]]'' (''Ueber das Sehn''), 1816 ISBN 978-0-85496-988-3",
            "content",
        ),
        (
            "* Conway, Stephen. ''The War of American Independence''. 1995. ISBN 0-340-62520-1",
            "apparatus",
        ),
        ("* ''[http://coolhaus.de/art/ The Art Of Controversy]'', 1831", "apparatus"),
        ("** Vol. 1 Dover edition 1966, ISBN 978-0-486-21761-1", "apparatus"),
        ("* ''[[Theory of Colors]]'' ISBN 978-0-85496-988-3", "apparatus"),
    ],
)
def test_a_work_entry_names_its_title_first_and_its_year(line, kind):
    """A work entry opens on its italic title and names a year; an author first, a link out, a
    bare edition line or a title with no year is a citation's."""
    assert wiki_back_matter._line_words(line)[1] == kind
