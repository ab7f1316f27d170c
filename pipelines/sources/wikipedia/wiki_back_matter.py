"""The closing sections of a Wikipedia article decided by structure, in any language: a
trailing section whose body is mostly references, links, citations, categories or navigation
templates is back matter, whatever its title.

`wikimarkup.convert_wikitext` calls `trailing_back_matter` on an article's wikitext once its
templates are gone (a `{{Reflist}}`, a navbox or a `{{cite web|...}}` has left an empty line
or an empty list item) and its links are still there, and `wiki_blocks.format_blocks` cuts the
sections it names, with those that `wiki_sections.CLOSING_SECTIONS` names by title.

The rule, section by section from the article's last top-level section back, stopping at the
first that is not back matter (so a section in the middle is never cut by this rule; one that
a closing-section title names counts as back matter, and the walk goes on past it). Each line
of a section's body (its subsections' lines included, their headings not, nor lines that name
a group of items: a `;` term, a bold line) is one of:

- apparatus: nothing but punctuation is left of it once links into a namespace
  (`[[Category:...]]`, `[[fr:...]]`) are gone; it holds a URL, an external link, an ISBN or a
  DOI; or it is a list item that cites: an author's name and a comma first, then an italic or
  quoted title, or a year and a publication's separators ("* Flynt, Wayne. ''Alabama in the
  Twentieth Century'' (2004)", "* Левицкий А. Э., Очерки. — М.: Наука, 1987");
- navigation: a list item that is its one link and nothing more than punctuation, a bracketed
  gloss or a short dash-led gloss with no number ("* [[Related topic]]", "* [[Other]] – a
  gloss");
- a note: a list item that opens on a dash, a comma or a stop, or on the gap a template left,
  with at most _SENTENCE_WORDS words or a title in it ("* – a database of ...", "*  Reprinted
  in ''X''"): apparatus beside apparatus or when one or two of them are all the section
  holds, content in a list of them (a day's holidays after the flags templates wrote);
- content: a list item that opens on a work's italic title and names its year, with no link
  out, whatever edition's ISBN it gives (a list of the subject's works: "* ''[[On Vision and
  Colors]]'' (...), 1816 ISBN ..."); anything else not above: prose, a sentence, a date with
  its event, a name with its description after a comma or a bracket ("* [[Mercator]]
  (Gerardus Mercator), cartographer", "* [[Hokkaido]], Japan (1980)").

A section is back matter when the words of its content are at most _CONTENT_SHARE of all its
words (a list of links under one sentence of prose), or when it has no words at all; a list
with no prose whose bare links outnumber its content items is navigation, its glossed links
too (a "See also": "* [[Antinatalism]], a position advocated by ..." among bare links); and, when
it holds navigation, only while the navigation of the sections found so far has fewer words
than the content before them: links an article is mostly made of (a list article, a century's
events, a disambiguation page's places) are its content.

The section that holds the page's `<references/>` (`reference_list_sections`, found before
elements are gone) is back matter like one a closing-section title names, whatever note stands
beside the footnotes.

Inside a section, a line that names a closing section (`:''See also:`, a hatnote) over a list
of bare links and nothing else is dropped with its links (`drop_see_also_lists`).

A category line counts for nothing either way: it follows the last section whatever that is.
"""

from __future__ import annotations

import re

# A link into a namespace or another language: `[[Category:X]]`, `[[Κατηγορία:Χ]]`, `[[fr:Y]]`.
_NAMESPACE_LINK = re.compile(r"\[\[\s*[^\[\]|:\s][^\[\]|:]*:[^\[\]]*\]\]")
_LINK = re.compile(r"\[\[([^\[\]|]*)(?:\|([^\[\]]*))?\]\]")
_EXTERNAL_LINK = re.compile(r"\[(?:https?:)?//[^\s\]]+\s*([^\]]*)\]")
_CITATION = re.compile(r"https?://|www\.|\bISBN\b|\bdoi\b|\[//", re.IGNORECASE)
# A citation opens on its author's surname and a comma: "Flynt, Wayne.", "Шевчук В.,".
_AUTHOR = re.compile(r"[^\W\d_][\w'’.-]*(?: [^\W\d_][\w'’.-]*){0,2},\s")
_YEAR = re.compile(r"\b(?:1[0-9]|20)\d\d\b")
_WORD = re.compile(r"\w+")
_LINK_ITEM_WORDS = 8
_GLOSS_START = frozenset("–—-,.;:")
# What opens a link's gloss in a list of links ("[[Other]] – a gloss"); after a comma stands a
# name's description ("[[Ada, Serbia]], town and municipality").
_LINK_GLOSS_START = frozenset("–—-:")
# A section of notes and nothing else is a list (of a day's holidays whose flags templates
# wrote) from this many items on; one or two are what a citation template left.
_NOTE_LIST_ITEMS = 3
# A list item whose first thing was a template, now gone ("* {{cite book|...}} Reprinted in
# ...": "*  Reprinted in ..."): a citation with its note.
_OPENED_ON_TEMPLATE = re.compile(r"[*#:]+[ \t]{2,}\S")
_CONTENT_SHARE = 0.5
# A list item of more words than this after a template's gap is a sentence (an event whose
# date a template wrote), not a citation's note.
_SENTENCE_WORDS = 12
_NUMBER = re.compile(r"\d")
_BRACKETED = re.compile(r"\([^()]*\)[.;,]?")
# What separates a citation's parts after its author: "Title. — М.: Наука", "(1991). Title".
_PUBLICATION_SEPARATOR = re.compile(r"(?:[^\W\d_]{2,}|\))[.:]\s|\s[—–]\s")
_CONTENT, _APPARATUS, _NAVIGATION, _NOTE = "content", "apparatus", "navigation", "note"
# A link out: what makes an item a pointer elsewhere rather than an entry of a list of works.
_LINK_OUT = re.compile(r"https?://|www\.|\[//", re.IGNORECASE)


def _visible(line: str) -> str:
    """A line's text as the reader sees it: links by their labels."""
    line = _LINK.sub(lambda m: m.group(2) if m.group(2) is not None else m.group(1), line)
    return _EXTERNAL_LINK.sub(r"\1", line)


def _cites(item: str) -> bool:
    """A list item that cites a work: its author and a comma first, then an italic or quoted
    title, or a year with a publication's separators ("Flynt, Wayne. ''Alabama in the Twentieth
    Century'' (2004)", "[[Ovid]], ''[[Metamorphoses]]'' XI, 217–265", "Левицкий А. Э.,
    Тверитинова Г. В. Очерки. — М.: Наука, 1987"). A name with a description and a year
    ("[[Hokkaido]], Japan (1980)") has no such separator: it is not a citation."""
    if not _AUTHOR.match(_visible(item)):
        return False
    if "''" in item or '"' in item or "«" in item:
        return True
    return bool(_YEAR.search(item)) and bool(_PUBLICATION_SEPARATOR.search(_visible(item)))


def _is_work_entry(line: str) -> bool:
    """A list item that opens on a work's italic title and names its year, with no link out: an
    entry of a list of the subject's works ("* ''[[On Vision and Colors]]'' (''Ueber das Sehn
    und die Farben''), 1816 ISBN 978-0-85496-988-3"), content whatever edition's ISBN it gives.
    A citation opens on its author; a link out is a pointer elsewhere."""
    if line[:1] not in "*#":
        return False
    item = line.lstrip("*#: ")
    if not item.startswith("''") or _LINK_OUT.search(item):
        return False
    return bool(_YEAR.search(item))


def _is_bare_link(item: str) -> bool:
    """A list item that is its one link and nothing else but punctuation, a bracketed gloss
    or a dash-led gloss of a few words with no number in it ("[[Related topic]]", "[[Ampacity]]
    (current-carrying capacity)", "[[Other]] – a gloss"): a navigation entry. A name with a
    description after a comma or a bracket ("[[Mercator]] (Gerardus Mercator), cartographer")
    is a list's content."""
    if not item.startswith("[[") or len(_LINK.findall(item)) != 1:
        return False
    outside = _LINK.sub(" ", item).strip()
    if not _WORD.search(outside):
        return True
    if len(_WORD.findall(outside)) > _LINK_ITEM_WORDS or _NUMBER.search(outside):
        return False
    return outside[0] in _LINK_GLOSS_START or bool(_BRACKETED.fullmatch(outside))


def _line_words(line: str) -> tuple[int, str]:
    """(words a reader sees in `line`, its kind: _CONTENT, _APPARATUS, _NAVIGATION or _NOTE);
    no words for a line that only names a group of items (";Britain and Ireland", a bold "For
    young readers"). Navigation (a bare link) is cut only where the article has more content
    than navigation; a note (a few words where a template stood: a citation's note, a link
    template's gloss, or a flag's country's holiday) is apparatus only beside citations or
    links out (see `_section_words`)."""
    line = _NAMESPACE_LINK.sub("", line).strip()
    words = len(_WORD.findall(_visible(line).replace("'", " ")))
    if _is_work_entry(line):
        return words, _CONTENT
    if not _WORD.search(line) or _CITATION.search(line):
        return words, _APPARATUS
    if line[0] == ";" or (line.startswith("'''") and line.endswith("'''")):
        return 0, _APPARATUS
    if line[0] not in "*#:":
        return words, _CONTENT
    item = line.lstrip("*#:; ")
    if _cites(item):
        return words, _APPARATUS
    if item[:1] in _GLOSS_START or _OPENED_ON_TEMPLATE.match(line):
        # "* – a database of ...": the gloss of a link template now gone; a sentence that
        # names no work (no italic or quoted title: "Reprinted in ''The Undecidable''") is an
        # item of a list of events whose date a template wrote.
        sentence = words > _SENTENCE_WORDS and "''" not in item and '"' not in item
        return words, _CONTENT if sentence else _NOTE
    if _is_bare_link(item):
        return words, _NAVIGATION
    return words, _CONTENT


def _section_words(body: list[str]) -> tuple[int, int, int]:
    """(all words, content words, navigation words) of a section's body. Notes count as
    apparatus where the section holds apparatus (an external link's gloss) or is one or two of
    them (what a citation template left), as content in a list of them (a day's holidays whose
    flags templates wrote)."""
    total = content = navigation = notes = note_items = 0
    has_apparatus = has_prose = False
    items = {_CONTENT: 0, _NAVIGATION: 0}
    for line in body:
        if not line.strip() or _heading(line):
            continue
        words, kind = _line_words(line)
        total += words
        content += words if kind == _CONTENT else 0
        navigation += words if kind == _NAVIGATION else 0
        notes += words if kind == _NOTE else 0
        note_items += kind == _NOTE
        has_apparatus = has_apparatus or (kind == _APPARATUS and words > 0)
        has_prose = has_prose or (kind == _CONTENT and line.lstrip()[:1] not in "*#:;")
        items[kind] = items.get(kind, 0) + 1
    if not has_apparatus and note_items >= _NOTE_LIST_ITEMS:
        content += notes
    if not has_prose and items[_NAVIGATION] > items[_CONTENT]:
        # Links with a gloss among more bare links ("* [[Antinatalism]], a position ..." in a
        # "See also"): a list of links, the glossed ones too.
        navigation, content = navigation + content, 0
    return total, content, navigation


def _content_words(line: str) -> int:
    """The words of `line` when it is content (prose or a list's content), else 0."""
    if not line.strip() or _heading(line):
        return 0
    words, kind = _line_words(line)
    return words if kind == _CONTENT else 0


def _title(raw: str) -> str:
    """A heading's title as format_blocks sees it, casefolded: links by their labels, no
    emphasis quotes."""
    return " ".join(_visible(raw).replace("'''", "").replace("''", "").split()).casefold()


def _heading(line: str) -> tuple[int, str] | None:
    """(level, title) of a heading line `== Title ==`, or None. Not a regex: a heading of a
    million spaces must cost one pass."""
    line = line.strip()
    if len(line) < 3 or line[0] != "=" or line[-1] != "=":
        return None
    lead = len(line) - len(line.lstrip("="))
    trail = len(line) - len(line.rstrip("="))
    title = line.strip("=").strip()
    return (min(lead, trail), title) if title else None


def drop_see_also_lists(wikitext: str, known: frozenset[str]) -> str:
    """`wikitext` without the lists of bare links that a line naming a closing section opens
    inside a section (`:''Δείτε επίσης:` over "* [[Γεγονότα Ιανουαρίου 2007]]", ...: a "See
    also" hatnote), label and links; a label over anything else is left as it is."""
    lines = wikitext.split("\n")
    kept, i = [], 0
    while i < len(lines):
        end = i + 1
        if lines[i].startswith((":", ";", "'")) and _names(lines[i], known):
            while end < len(lines) and lines[end].startswith(("*", "#")):
                if not _is_bare_link(lines[end].lstrip("*#: ")):
                    break
                end += 1
        if end > i + 1 and not (end < len(lines) and lines[end].startswith(("*", "#"))):
            i = end  # a label over bare links and nothing else of its list: dropped
            continue
        kept.append(lines[i])
        i += 1
    return "\n".join(kept)


def _names(label: str, known: frozenset[str]) -> bool:
    """Whether a label line (`:''See also:`, `;See also`) is a closing section's title."""
    return _title(label.lstrip(":; ")).rstrip(":").strip() in known


_REFERENCE_LIST = re.compile(r"<references\b", re.IGNORECASE)


def reference_list_sections(wikitext: str) -> frozenset[str]:
    """The casefolded titles of the top-level sections of `wikitext` (before its elements are
    gone) that hold the page's list of footnotes, MediaWiki's `<references/>` tag: the
    references section in every language, whatever note beside it says where the text comes
    from ("This article comes from the CIA World Factbook 2003.")."""
    if not _REFERENCE_LIST.search(wikitext):
        return frozenset()
    lines = wikitext.split("\n")
    headings = {i: h for i, line in enumerate(lines) if line[:1] == "=" and (h := _heading(line))}
    top = min((level for level, _ in headings.values()), default=0)
    found, title = set(), None
    for i, line in enumerate(lines):
        if i in headings and headings[i][0] == top:
            title = _title(headings[i][1])
        elif title is not None and _REFERENCE_LIST.search(line):
            found.add(title)
    return frozenset(found)


def trailing_back_matter(wikitext: str, known: frozenset[str] = frozenset()) -> frozenset[str]:
    """The casefolded titles of the trailing top-level sections of `wikitext` that are back
    matter by structure (see the module docstring). A section whose casefolded title is in
    `known` (a closing-section title) is back matter whatever its body (a bibliography of
    plain citations), and the walk back goes on past it."""
    lines = wikitext.split("\n")
    headings = []  # (line index, level, title)
    for i, line in enumerate(lines):
        heading = _heading(line) if line.startswith("=") else None
        if heading:
            headings.append((i, *heading))
    if not headings:
        return frozenset()
    top = min(level for _, level, _ in headings)
    sections = [(i, title) for i, level, title in headings if level == top]
    found: set[str] = set()
    end = len(lines)
    navigation = 0  # navigation words of the sections found so far
    for start, raw_title in reversed(sections):
        title = _title(raw_title)
        if title.rstrip(":").strip() not in known:
            total, content, section_navigation = _section_words(lines[start + 1 : end])
            navigation += section_navigation
            # Links the article is mostly made of (a list article, a century's events, a
            # list of names) are its content, not navigation.
            if content > _CONTENT_SHARE * total:
                break
            if navigation and navigation > sum(map(_content_words, lines[:start])):
                break
        found.add(title)
        end = start
    return frozenset(found)
