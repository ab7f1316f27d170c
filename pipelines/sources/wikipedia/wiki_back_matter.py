"""The closing sections of a Wikipedia article decided by structure, in any language: a
trailing section whose body is mostly references, links, citations, categories or navigation
templates is back matter, whatever its title.

`wikimarkup.convert_wikitext` calls `trailing_back_matter` on an article's wikitext once its
templates are gone (a `{{Reflist}}`, a navbox or a `{{cite web|...}}` has left an empty line
or an empty list item) and its links are still there, and `wiki_blocks.format_blocks` cuts the
sections it names, with those that `wiki_sections.CLOSING_SECTIONS` names by title.

The rule, section by section from the article's last top-level section back, stopping at the
first that is not back matter (so a section in the middle is never cut by this rule; one that
a closing-section title names counts as back matter, and the walk goes on past it):

- each line of the section's body (its subsections' lines included, their headings not, nor
  lines that name a group of items: a `;` term, a bold line) is apparatus
  when nothing but punctuation is left of it once links into a namespace (`[[Category:...]]`,
  `[[fr:...]]`) are gone; when it holds a URL, an external link, an ISBN or a DOI; when it is
  a list item that opens on a dash, a comma or a stop, or on the gap a template left (the
  gloss of a link template or the note of a citation template now gone, "* – a database of
  ...", "*  Reprinted in ..."); or when it is a list item that opens with its one link, with at most
  _LINK_ITEM_WORDS words after it and no year anywhere ("* [[Related topic]]", "* [[Other]] –
  a gloss"; a day's "* [[1927]] – [[Name]], poet" or a year's "* [[18 January]] – [[Name]],
  poet" is a list of events, and "* Celebration of [[May Day]]" a sentence, not links); or
  when it is a list item that cites: an author's name and a comma first, then a year or an
  italic or quoted title ("* Flynt, Wayne. ''Alabama in the Twentieth Century'' (2004)",
  "* [[Ovid]], ''[[Metamorphoses]]'' XI");
- the section is back matter when the words of the lines that are not apparatus are at most
  _CONTENT_SHARE of all its words (a list of links under one sentence of prose), or when it
  has no words at all.

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
# A list item whose first thing was a template, now gone ("* {{cite book|...}} Reprinted in
# ...": "*  Reprinted in ..."): a citation with its note.
_OPENED_ON_TEMPLATE = re.compile(r"[*#:]+[ \t]{2,}\S")
_CONTENT_SHARE = 0.5


def _visible(line: str) -> str:
    """A line's text as the reader sees it: links by their labels."""
    line = _LINK.sub(lambda m: m.group(2) if m.group(2) is not None else m.group(1), line)
    return _EXTERNAL_LINK.sub(r"\1", line)


def _cites(item: str) -> bool:
    """A list item that cites a work: its author and a comma first, then a year, an italic or
    quoted title ("Flynt, Wayne. ''Alabama in the Twentieth Century'' (2004)", "[[Ovid]],
    ''[[Metamorphoses]]'' XI, 217–265")."""
    if not _AUTHOR.match(_visible(item)):
        return False
    return bool(_YEAR.search(item)) or "''" in item or '"' in item or "«" in item


def _line_words(line: str) -> tuple[int, bool]:
    """(words a reader sees in `line`, whether the line is apparatus); no words for a line
    that only names a group of items (";Britain and Ireland", a bold "For young readers")."""
    line = _NAMESPACE_LINK.sub("", line).strip()
    words = len(_WORD.findall(_visible(line).replace("'", " ")))
    if not _WORD.search(line) or _CITATION.search(line):
        return words, True
    if line[0] == ";" or (line.startswith("'''") and line.endswith("'''")):
        return 0, True
    item = line.lstrip("*#:; ")
    if line[0] in "*#:" and (item[:1] in _GLOSS_START or _OPENED_ON_TEMPLATE.match(line)):
        return words, True  # "* – a database of ...": the gloss of a link template now gone
    if line[0] in "*#:;" and _cites(item):
        return words, True
    if line[0] in "*#:;" and item.startswith("[[") and len(_LINK.findall(item)) == 1:
        outside = _LINK.sub(" ", item)
        if len(_WORD.findall(outside)) <= _LINK_ITEM_WORDS and not _YEAR.search(_visible(item)):
            return words, True
    return words, False


def _is_back_matter(body: list[str]) -> bool:
    total = content = 0
    for line in body:
        if not line.strip() or _heading(line):
            continue
        words, apparatus = _line_words(line)
        total += words
        content += 0 if apparatus else words
    return content <= _CONTENT_SHARE * total


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
    for start, raw_title in reversed(sections):
        title = _title(raw_title)
        if title.rstrip(":").strip() not in known and not _is_back_matter(lines[start + 1 : end]):
            break
        found.add(title)
        end = start
    return frozenset(found)
