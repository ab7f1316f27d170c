"""The block layer of wikitext -> text: table markup into row lines, and markup-free lines into
paragraphs, with headings and closing sections decided.

`wikimarkup.wikitext_to_text` calls `render_table` for each `{| ... |}` it finds and
`format_blocks` last, once every inline construct (links, templates, tags) is gone.

- A table that reads as text keeps it: its caption and each row become one line, the row's
  non-empty cells joined by " | " (as trafilatura writes HTML tables as text), header cells
  included; every cell's attributes (all before the cell's first single `|` outside a link,
  as MediaWiki reads them, malformed ones included; those on the line below an empty cell;
  those of a cell right after a line of prose, whose table's `{|` a template held), cells
  that are attribute syntax only, and row separators go. An article that is only a table (a
  list of rivers) keeps its content instead of coming out empty. A table fewer than 40% of
  whose cells hold a letter (results, statistics, data rows of numbers, dates and dashes) is
  not prose and is dropped whole, as WikiExtractor drops every table.
- List items (`*`, `#`, `:`, `;`) and table rows become one line each; other lines of a
  paragraph are joined with spaces, as a browser shows them; paragraphs are separated by one
  blank line, as WikiExtractor writes lists.
- Headings become a paragraph of their own; headings with no text under them are dropped, and
  so are the closing sections ("References", "External links", ... in the languages of
  `wiki_sections.CLOSING_SECTIONS`) at the article's top heading level, counted.
"""

from __future__ import annotations

import dataclasses
import html
import re

from pipelines.sources.wikipedia import wiki_sections

# Closing-section headings of every language in the table, compared casefolded.
DROPPED_SECTIONS: frozenset[str] = wiki_sections.closing_section_names()

# Starts a line that render_table wrote: a table row, kept as a line of its own. A private-use
# character, which no wiki writes and str.strip() keeps (wikimarkup removes it from the input
# first), so no line of the article can pass for a row.
ROW_MARK = "\ue000"
ROW_SEPARATOR = " | "

# A cell that is attribute syntax only (`colspan="2"` before a `||` that should have been one
# `|`): no text of the table's.
_ATTRIBUTES_ONLY = re.compile(
    r"""(?:\s*[\w:-]+\s*=\s*(?:"[^"\n]*"?|'[^'\n]*'?|[^\s|"']+))+\s*[|"';]*\s*"""
)
# A cell's attributes before its single `|` (`data-sort-value="1"|`, `style=color:red |`,
# `scope=row|`): MediaWiki reads quoted and unquoted values, and any `data-*` name.
_LEADING_ATTRIBUTES = re.compile(
    r"""\s*(?:[\w:-]+\s*=\s*(?:"[^"\n]*"|'[^'\n]*'|[^\s|"']+)\s*)+\|(?!\|)"""
)
_BREAK = re.compile(r"<br\s*/?\s*>", re.IGNORECASE)
_LETTER = re.compile(r"[^\W\d_]")
# A table is kept as text when at least this share of its cells hold a letter; one whose cells
# are mostly numbers, dates, scores or dashes (results, statistics, data rows) is dropped.
_TEXT_CELL_SHARE = 0.4


def _split_outside_links(line: str, separators: tuple[str, ...]) -> list[str]:
    """`line` split at each of `separators` that stands outside `[[...]]` (a link's `|`)."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(line):
        if line.startswith("[[", i):
            depth, i = depth + 1, i + 2
        elif line.startswith("]]", i) and depth:
            depth, i = depth - 1, i + 2
        elif depth == 0 and line.startswith(separators, i):
            width = next(len(sep) for sep in separators if line.startswith(sep, i))
            parts.append(line[start:i])
            start = i = i + width
        else:
            i += 1
    parts.append(line[start:])
    return parts


def _cell_text(cell: str) -> str:
    """A cell's text: what follows the first single `|` outside a link when there is one
    (before it stand the cell's attributes, `style="..." |`, which MediaWiki never shows,
    however malformed), nothing for a cell that is attribute syntax only."""
    parts = _split_outside_links(cell, ("|",))
    if len(parts) > 1:
        cell = "|".join(parts[1:])
    if _ATTRIBUTES_ONLY.fullmatch(cell):
        return ""
    return " ".join(_BREAK.sub(" ", cell).split()).strip("|").strip()


def _reads_as_text(rows: list[list[str]]) -> bool:
    cells = [cell for row in rows for cell in row]
    with_letters = sum(bool(_LETTER.search(cell)) for cell in cells)
    return with_letters >= _TEXT_CELL_SHARE * len(cells)


def render_table(markup: str) -> str:
    """The text of one `{| ... |}` table (nested tables already rendered): a line per row and
    caption, each starting with ROW_MARK; "" for a table with no text, or one that does not
    read as text (fewer than _TEXT_CELL_SHARE of its cells hold a letter)."""
    rows: list[list[str]] = []
    nested: dict[int, str] = {}  # row index -> a nested table's row, kept as it came
    row: list[str] = []

    def flush() -> None:
        cells = [cell for cell in row if cell]
        if cells:
            rows.append(cells)
        row.clear()

    for line in markup.split("\n"):
        stripped = line.strip()
        if stripped.startswith(ROW_MARK):  # a row of a nested table: a row of its own
            flush()
            nested[len(rows)] = stripped
            rows.append(stripped[1:].split(ROW_SEPARATOR))
        elif stripped.startswith(("{|", "|}", "|-")):
            flush()
        elif stripped.startswith("|+"):
            flush()
            row.append(_cell_text(stripped[2:]))
            flush()
        elif stripped[:1] in ("|", "!"):
            row.extend(_cell_text(cell) for cell in _split_outside_links(stripped[1:], ("||", "!!")))
        elif stripped:  # a cell's content going on over lines
            if row and row[-1]:
                row[-1] = f"{row[-1]} {' '.join(_BREAK.sub(' ', stripped).split())}".strip()
            elif row:  # an empty cell's first line: `|` then `data-sort-value="1"|市` below
                row[-1] = _cell_text(stripped)
            else:
                row.append(_cell_text(stripped))
    flush()
    if not rows or not _reads_as_text(rows):
        return ""
    return "\n".join(
        nested.get(i, ROW_MARK + ROW_SEPARATOR.join(cells)) for i, cells in enumerate(rows)
    )


_HEADING, _PARAGRAPH, _LIST = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class Blocks:
    """Paragraphs separated by blank lines, and the closing sections cut from them (their
    headings, in article order)."""

    text: str
    removed_sections: tuple[str, ...] = ()


def _plain(line: str) -> str:
    """A line with HTML entities decoded and whitespace runs (`&nbsp;` included) made one space.

    Decoding comes after all markup is gone, so an encoded `&lt;ref&gt;` stays text; str.split
    is the fast way to fold whitespace (a regex over every space costs more than all else).
    """
    if "&" in line:
        line = html.unescape(line)
    return " ".join(line.split())


def _continues_paragraph(line: str) -> bool:
    """Whether a line starting with `|` or `!`, right after a paragraph line, is more of that
    paragraph rather than a table row."""
    return line[0] == "|" and not line.startswith(("|-", "|+", "|}")) and "||" not in line


def _without_closing_sections(
    blocks: list[tuple[int, int, str]], dropped_sections: frozenset[str]
) -> tuple[list[tuple[int, int, str]], list[str]]:
    """The blocks less each section, with its subsections, under a named heading at the
    article's top heading level, where "References" and "See also" stand, wherever it stands;
    and the headings of the sections cut. A named heading deeper down is kept: "=== Literatura
    ===" under "== Cultura ==" is a Spanish culture section, though "Literatura" is a
    bibliography in Polish."""
    top = min((level for kind, level, _ in blocks if kind == _HEADING), default=0)
    kept, removed = [], []
    dropping = False
    for block in blocks:
        block_kind, level, block_text = block
        if block_kind == _HEADING and level == top:
            dropping = block_text.rstrip(":").strip().casefold() in dropped_sections
            if dropping:
                removed.append(block_text)
        if not dropping:
            kept.append(block)
    return kept, removed


def format_blocks(text: str, dropped_sections: frozenset[str] = DROPPED_SECTIONS) -> Blocks:
    """Lines of (markup-free) wikitext -> paragraphs separated by blank lines.

    A heading line `== H ==` becomes the paragraph "H"; list items (`*`, `#`, `:`, `;`) and
    table rows (lines render_table wrote) one line each; other consecutive lines are joined by
    spaces. Top-level sections named in `dropped_sections` and headings with no text under them
    are removed. Leftover table markup (lines starting with `|` or `!` of a table that was never
    closed) is dropped, except a `|` line right after a paragraph line outside an unclosed `{|`
    that has no cell or row markup (`||`, `|-`, `|}`): that is the paragraph going on (the `|`
    of a `[[Target\n|label]]` left as text), kept. HTML entities are decoded here, after all
    markup is gone, so an encoded `&lt;ref&gt;` stays text.
    """
    blocks: list[tuple[int, int, str]] = []  # (kind, heading level, text)
    lines: list[str] = []
    kind = _PARAGRAPH
    in_table = False  # inside a `{|` never closed (strip_templates_and_tables left it)
    continues_prose = False  # the previous line was a paragraph line

    def flush() -> None:
        if lines:
            blocks.append((kind, 0, (" " if kind == _PARAGRAPH else "\n").join(lines)))
            lines.clear()

    for raw in text.split("\n"):
        line = raw.strip()
        after_prose, continues_prose = continues_prose, False
        if not line:
            flush()
            continue
        first = line[0]
        if first == "=" and len(line) > 2 and line[-1] == "=":
            lead = len(line) - len(line.lstrip("="))
            trail = len(line) - len(line.rstrip("="))
            level = min(lead, trail, 6)
            title = _plain(line[level:-level].strip("= \t"))
            flush()
            if title:
                blocks.append((_HEADING, level, title))
            continue
        if line.startswith("{|"):
            in_table = True
            continue
        if first in "|!":
            if in_table or not after_prose or not _continues_paragraph(line):
                in_table = in_table and not line.startswith("|}")
                continue  # table debris
            line = line[1:]
            attributes = _LEADING_ATTRIBUTES.match(line)
            if attributes:  # a cell of a table whose `{|` a template held: its text only
                line = line[attributes.end() :]
        if line.startswith("----"):
            continue  # horizontal rule
        is_item = first in "*#:;" or first == ROW_MARK
        if first == ROW_MARK:
            line = line[1:]
        elif is_item:
            line = line.lstrip("*#:;")
        line = _plain(line)
        if not line:
            continue
        new_kind = _LIST if is_item else _PARAGRAPH
        if new_kind != kind:
            flush()
            kind = new_kind
        lines.append(line)
        continues_prose = new_kind == _PARAGRAPH
    flush()
    kept, removed = _without_closing_sections(blocks, dropped_sections)

    # Drop headings with no text under them, walking backwards: has_text[level] says whether
    # text follows before the next heading of that level or higher.
    has_text = [False] * 8
    out: list[str] = []
    for block_kind, level, block_text in reversed(kept):
        if block_kind == _HEADING:
            if has_text[level]:
                out.append(block_text)
            for deeper in range(level, 8):
                has_text[deeper] = False
        else:
            out.append(block_text)
            has_text = [True] * 8
    out.reverse()
    return Blocks("\n\n".join(out), tuple(removed))
