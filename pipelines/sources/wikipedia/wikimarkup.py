"""Wikitext markup -> plain prose, as pure functions.

`wikitext_to_text` turns the wikitext of one article into paragraphs of plain text, the way
WikiExtractor does (templates dropped, links reduced to their visible text), with a few choices
of its own:

- Templates `{{...}}` are dropped whole, nested to any depth; an opening `{{` that is never
  closed stays as text, as MediaWiki shows it. A few templates that write prose inline are
  rendered instead of dropped (`{{lang|fr|mot}}` -> "mot", `{{convert|5|km}}` -> "5 km",
  `{{nowrap|...}}`; see `wiki_templates.render_template`), so sentences keep their words,
  and so do the templates that lay out a list (`{{columns-list|...}}`, `{{plainlist|...}}`,
  `{{ubl|a|b}}`): their items stay, a line each. Tables `{| ... |}` keep their text, a line per row
  (`wiki_blocks.render_table`).
- `<ref>`, `<gallery>`, `<math>` (no placeholder: a formula's TeX is not prose, and a fake token
  like "formula_7" teaches the model nothing), `<syntaxhighlight>`/`<source>` code, HTML
  `<table>`s and a few other non-prose extension tags are dropped with their content; every
  other HTML tag is stripped and its content kept. `<nowiki>`/`<pre>` content is kept verbatim
  (markup uninterpreted), two apostrophes in `<nowiki>` (a typewriter quote) written as `"`.
- Links: `[[target|label]]` -> label, `[[target]]` -> target; links into the File/Image/Media
  and Category namespaces (canonical English names plus the wiki's own names from siteinfo),
  links to a media file by any namespace name (`[[画像:x.jpg|thumb|...]]`: a localized alias
  siteinfo does not list) and interlanguage links `[[fr:...]]` vanish; `[[:Category:X]]` (a
  visible link) stays. External links `[http://x label]` -> label, `[http://x]` -> nothing.
- Lines into paragraphs (`wiki_blocks.format_blocks`): headings become a paragraph of their
  own; headings with no text under them are dropped, and so are the closing sections at the
  article's top heading level: the trailing sections whose body is mostly references, links,
  citations, categories or navigation templates, in any language
  (`wiki_back_matter.trailing_back_matter`), and those the titles of
  `wiki_sections.CLOSING_SECTIONS` name ("References", "See also", ...). List items and table
  rows become one line each; other lines of a paragraph are joined with spaces, as a browser
  shows them; paragraphs are separated by one blank line. Rows of a table whose markup could
  not be paired are dropped, but a line starting with `|` that continues a paragraph is kept:
  markup that cannot be parsed never takes prose with it.
- HTML entities are decoded last (`&nbsp;` becomes a plain space).

Every step is a single left-to-right scan or a regex whose matches cannot overlap, so the cost
is linear in the input: a 50 MB page or ten thousand nested templates take seconds, not hours.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from pipelines.sources.wikipedia import wiki_back_matter, wiki_blocks
from pipelines.sources.wikipedia.wiki_blocks import DROPPED_SECTIONS
from pipelines.sources.wikipedia.wiki_templates import (
    SIMPLE_TEMPLATE,
    is_list_template,
    is_rendered,
    render_template,
    simple_template,
    split_arguments,
)

# Names under which every wiki accepts its File/Media and Category namespaces, besides the
# localized names siteinfo lists: MediaWiki's canonical names and its standard "Image" alias.
# Localized aliases (Greek "Εικόνα", Japanese "画像", German "Bild") are not listed anywhere in a
# dump; a link to a media file is recognised by the file's extension instead (_MEDIA_FILE).
_CANONICAL_HIDDEN_PREFIXES = ("file", "image", "media", "category")


@dataclasses.dataclass(frozen=True)
class MarkupConfig:
    """What one wiki calls the namespaces whose links are not prose, and which sections to drop.

    `hidden_link_prefixes` holds casefolded namespace names ("file", "αρχείο", "category",
    ...): a link `[[Name:...]]` into one of them is an image or a category tag, not text.
    """

    hidden_link_prefixes: frozenset[str] = frozenset(_CANONICAL_HIDDEN_PREFIXES)
    dropped_sections: frozenset[str] = DROPPED_SECTIONS


DEFAULT_CONFIG = MarkupConfig()


def normalize_namespace_name(name: str) -> str:
    """The form namespace prefixes are compared in: casefolded, `_` as space, spaces collapsed."""
    return " ".join(name.replace("_", " ").split()).casefold()


def config_for_namespaces(file_names: Iterable[str], category_names: Iterable[str]) -> MarkupConfig:
    """A MarkupConfig that also knows a wiki's own names for File/Media (ns 6, -2) and Category
    (ns 14), as siteinfo lists them (e.g. elwiki: "Αρχείο", "Μέσο", "Κατηγορία")."""
    local = {normalize_namespace_name(n) for n in (*file_names, *category_names) if n.strip()}
    return dataclasses.replace(
        DEFAULT_CONFIG, hidden_link_prefixes=DEFAULT_CONFIG.hidden_link_prefixes | local
    )


# --- comments, extension tags ------------------------------------------------------------------


def strip_comments(text: str) -> str:
    """Remove `<!-- ... -->`; an unclosed comment runs to the end of the text, as in MediaWiki."""
    if "<!--" not in text:
        return text
    pieces = []
    pos = 0
    while True:
        start = text.find("<!--", pos)
        if start < 0:
            pieces.append(text[pos:])
            break
        pieces.append(text[pos:start])
        end = text.find("-->", start + 4)
        if end < 0:
            break
        pos = end + 3
    return "".join(pieces)


# Elements dropped with their content: citations, media, formulas, code, layout tables and
# tags whose content is never shown as article text.
DROPPED_ELEMENTS = (
    "ref", "references", "gallery", "math", "chem", "ce", "score", "timeline", "imagemap",
    "graph", "mapframe", "maplink", "templatedata", "templatestyles", "syntaxhighlight",
    "source", "includeonly", "table", "hiero", "inputbox", "categorytree", "indicator",
)  # fmt: skip
# Elements whose content is shown literally, markup uninterpreted.
_VERBATIM_ELEMENTS = ("nowiki", "pre")

_DROPPED_OPEN = re.compile(
    r"<(" + "|".join(DROPPED_ELEMENTS) + r")(?=[\s/>])[^<>]*?(/?)>", re.IGNORECASE
)
_VERBATIM_OPEN = re.compile(
    r"<(" + "|".join(_VERBATIM_ELEMENTS) + r")(?=[\s/>])[^<>]*?(/?)>", re.IGNORECASE
)
_CLOSE_TAG = {
    name: re.compile(r"</" + name + r"\s*>", re.IGNORECASE)
    for name in DROPPED_ELEMENTS + _VERBATIM_ELEMENTS
}
_MARKUP_CHAR = re.compile(r"[^\w\s&]")
# `<nowiki>''</nowiki>βίος`: a typewriter quotation mark MediaWiki shows, written as one.
_TYPEWRITER_QUOTE = re.compile(r"(?<!')''(?!')")


def _escape_markup(text: str) -> str:
    # Numeric character references survive every later step and are decoded at the very end.
    return _MARKUP_CHAR.sub(lambda m: f"&#{ord(m.group())};", text)


def _replace_elements(text: str, opener: re.Pattern[str], keep_content: bool) -> str:
    pieces = []
    pos = 0
    # A tag name whose close tag was not found after some offset has none after any later
    # offset either: remembering that keeps many unclosed tags from making this quadratic.
    no_close_after: dict[str, int] = {}
    for match in opener.finditer(text):
        if match.start() < pos:
            continue  # inside an element already handled
        name = match.group(1).lower()
        pieces.append(text[pos : match.start()])
        if match.group(2):  # self-closing: <ref name="x" />
            pos = match.end()
            continue
        close = None
        if no_close_after.get(name, len(text) + 1) > match.end():
            close = _CLOSE_TAG[name].search(text, match.end())
            if close is None:
                no_close_after[name] = match.end()
        if close is None:  # unclosed: drop the tag alone, as MediaWiki does not pair it
            pos = match.end()
            continue
        if keep_content:
            content = text[match.end() : close.start()]
            quote = name == "nowiki"
            pieces.append(_escape_markup(_TYPEWRITER_QUOTE.sub('"', content) if quote else content))
        pos = close.end()
    pieces.append(text[pos:])
    return "".join(pieces)


def strip_elements(text: str) -> str:
    """Drop DROPPED_ELEMENTS with their content; keep `<nowiki>`/`<pre>` content verbatim."""
    if "<" not in text:
        return text
    text = _replace_elements(text, _VERBATIM_OPEN, keep_content=True)
    return _replace_elements(text, _DROPPED_OPEN, keep_content=False)


# --- templates and tables -----------------------------------------------------------------------

# Brace runs and table delimiters. `{|` and `|}` open and close a table only at the start of a
# line (after indentation), which `_at_line_start` checks: a `^` in the pattern would keep the
# regex engine from skipping ahead to the next brace. `|}}` is a template's last parameter
# separator and its close, not a table end.
_BRACE_TOKEN = re.compile(r"\{\{+|\}\}+|\{\||\|\}(?!\})")


def _at_line_start(text: str, position: int) -> bool:
    # Walks back over indentation only, which never passes the previous token: linear overall.
    position -= 1
    while position >= 0 and text[position] in " \t:":
        position -= 1
    return position < 0 or text[position] == "\n"


_TEMPLATE_HEAD = re.compile(r"\{\{\s*([^{}|\n<:]{1,40}?)\s*(\||\}\})")
# A table holding tables nested this deep (layout tables in layout tables) is dropped whole:
# each level copies the rendered text of the levels inside it, so the bound keeps the cost
# linear.
_MAX_TABLE_NESTING = 3
# Templates longer than this are never rendered (prose templates are short), which bounds the
# copying of nested content.
_MAX_RENDERED_TEMPLATE = 2000


def strip_templates_and_tables(text: str) -> str:
    """Remove every balanced `{{...}}` (templates, `{{{parameters}}}`, parser functions), nested
    to any depth; the few prose templates `wiki_templates.render_template` knows are replaced
    by their text instead, and each `{| ... |}` table by its rows (`wiki_blocks.render_table`;
    a table that holds tables nested `_MAX_TABLE_NESTING` deep is dropped whole).

    One regex pass takes the templates with no braces inside; then a single scan pairs each
    remaining close with its opener on a stack (a depth counter that remembers where each level
    opened). An opener that is never closed is left as literal text, as MediaWiki renders it.
    """
    if "{{" in text:
        text = SIMPLE_TEMPLATE.sub(simple_template, text)
    if "{" not in text:
        return text
    # Open constructs: [kind, start, width]; kind "t" template (width = braces still open, 2 or
    # 3), kind "T" table.
    stack: list[list] = []
    template_count = 0
    # Spans to replace, (start, end, replacement, table nesting depth), outermost only and in
    # text order: an inner span closes before its outer one, which then takes it off the list.
    spans: list[tuple[int, int, str, int]] = []

    def with_inner(start: int, end: int, inner_start: int) -> str:
        """text[start:end] with the spans inside it replaced."""
        pieces = []
        pos = start
        for inner in spans[inner_start:]:
            pieces.append(text[pos : inner[0]])
            pieces.append(inner[2])
            pos = inner[1]
        pieces.append(text[pos:end])
        return "".join(pieces)

    def record(start: int, end: int, is_template: bool) -> None:
        inner_start = len(spans)
        while inner_start and spans[inner_start - 1][0] >= start:
            inner_start -= 1
        replacement = ""
        depth = max((inner[3] for inner in spans[inner_start:]), default=0)
        if not is_template:
            depth += 1
            if depth <= _MAX_TABLE_NESTING:
                replacement = "\n" + wiki_blocks.render_table(with_inner(start, end, inner_start))
                replacement += "\n"
        head = _TEMPLATE_HEAD.match(text, start) if is_template else None
        if head and not is_rendered(head.group(1)):
            head = None
        is_list = head and is_list_template(head.group(1))
        if is_list and head.group(2) == "|":
            # Counted with tables: a list template copies what it holds, as a table does.
            depth += 1
            if depth <= _MAX_TABLE_NESTING:
                arguments = with_inner(head.end(), end - 2, inner_start)
                replacement = render_template(head.group(1), split_arguments(arguments))
        elif head and head.group(2) == "|" and end - start <= _MAX_RENDERED_TEMPLATE:
            arguments = with_inner(head.end(), end - 2, inner_start)
            replacement = render_template(head.group(1), split_arguments(arguments))
        elif head:
            replacement = render_template(head.group(1), [])
        del spans[inner_start:]
        spans.append((start, end, replacement, depth if replacement else 0))

    for token in _BRACE_TOKEN.finditer(text):
        value = token.group()
        if value == "{|":
            if _at_line_start(text, token.start()):
                stack.append(["T", token.start(), 0])
        elif value == "|}":
            if stack and stack[-1][0] == "T" and _at_line_start(text, token.start()):
                record(stack.pop()[1], token.end(), is_template=False)
        elif value[0] == "{":
            run = len(value)
            start = token.start()
            if run == 3:
                stack.append(["t", start, 3])
                template_count += 1
            else:
                # A run of 2k (+1) braces opens k templates nested in one another.
                if run % 2:
                    start += 1
                for i in range(run // 2):
                    stack.append(["t", start + 2 * i, 2])
                    template_count += 1
        else:
            remaining = len(value)
            position = token.start()
            while remaining >= 2 and template_count:
                while stack[-1][0] == "T":  # a table left open inside a template
                    stack.pop()
                entry = stack[-1]
                used = min(entry[2], remaining)
                entry[2] -= used
                remaining -= used
                position += used
                if entry[2] < 2:
                    stack.pop()
                    template_count -= 1
                    record(entry[1], position, is_template=True)
    if not spans:
        return text
    pieces = []
    pos = 0
    for start, end, replacement, _ in spans:
        pieces.append(text[pos:start])
        pieces.append(replacement)
        pos = end
    pieces.append(text[pos:])
    return "".join(pieces)


# --- links -------------------------------------------------------------------------------------

_LINK_TOKEN = re.compile(r"\[\[|\]\]")
# Interlanguage link prefixes: lowercase language codes ("fr", "zh-min-nan", "simple").
_INTERLANGUAGE = re.compile(r"[a-z]{2,3}(?:-[a-z]{2,8})*|simple")
# Links nested deeper than this (never legitimate: only image captions hold links) stay text,
# which bounds the copying of rendered labels into their parents.
_MAX_LINK_DEPTH = 8
_PARENTHETICAL = re.compile(r"\s*\([^()]*\)$")
# The file types MediaWiki embeds: `[[<any namespace name>:Name.jpg|...]]` is an image or media
# link whatever the wiki calls its File namespace or that namespace's aliases.
_MEDIA_FILE = re.compile(
    r"\.(?:jpe?g|png|gif|svg|tiff?|webp|bmp|xcf|ogg|ogv|oga|opus|webm|mp3|mp4|wav|flac|midi?|"
    r"pdf|djvu|stl)\s*$",
    re.IGNORECASE,
)


def render_link(inner: str, config: MarkupConfig = DEFAULT_CONFIG) -> str:
    """The visible text of one internal link, given what is between `[[` and `]]`."""
    target, pipe, label = inner.partition("|")
    target = target.strip()
    if "\n" in target:  # not a link in MediaWiki either: brackets that happen to pair up
        return "[[" + inner + "]]"
    visible_colon = target.startswith(":")
    if visible_colon:
        target = target[1:].lstrip()
    prefix, colon, rest = target.partition(":")
    if colon and not visible_colon:
        if normalize_namespace_name(prefix) in config.hidden_link_prefixes:
            return ""
        if _MEDIA_FILE.search(rest):
            return ""
        if _INTERLANGUAGE.fullmatch(prefix.strip()):
            return ""
    if pipe:
        if label.strip():
            return label
        # The "pipe trick": [[Help:Foo (bar)|]] shows "Foo".
        shown = rest.strip() if colon else target
        return _PARENTHETICAL.sub("", shown)
    return target


# A link with no brackets inside: the bulk of all links, replaced by one regex pass.
_SIMPLE_LINK = re.compile(r"\[\[([^\[\]]*)\]\]")


def replace_links(text: str, config: MarkupConfig = DEFAULT_CONFIG) -> str:
    """Replace every balanced `[[...]]` by its visible text (inner links first); unbalanced
    brackets stay as text."""
    if "[[" not in text:
        return text
    text = _SIMPLE_LINK.sub(lambda m: render_link(m.group(1), config), text)
    if "[[" not in text or "]]" not in text:
        return text
    # Pass 1: pair brackets with a stack of open positions.
    opens: list[int] = []
    pairs: list[tuple[int, int]] = []
    for token in _LINK_TOKEN.finditer(text):
        if token.group() == "[[":
            opens.append(token.start())
        elif opens:
            start = opens.pop()
            if len(opens) < _MAX_LINK_DEPTH:
                pairs.append((start, token.end()))
    if not pairs:
        return text
    # Pass 2: walk opens and closes in text order; each frame collects the rendered pieces of
    # one link's content, and hands its rendering to the frame around it when it closes.
    events = sorted([(s, 1, e) for s, e in pairs] + [(e, 0, s) for s, e in pairs])
    frames: list[list[str]] = [[]]
    pos = 0
    for at, is_open, _ in events:
        if is_open:
            frames[-1].append(text[pos:at])
            frames.append([])
            pos = at + 2
        else:
            frames[-1].append(text[pos : at - 2])
            inner = "".join(frames.pop())
            frames[-1].append(render_link(inner, config))
            pos = at
    frames[-1].append(text[pos:])
    return "".join(frames[0])


# Scheme-prefixed URL, then optionally one space and a label; the label cannot hold brackets,
# so no two match attempts scan the same characters.
_EXTERNAL_LINK = re.compile(
    r"\[(?:https?://|ftp://|ftps://|sftp://|irc://|ircs://|gopher://|git://|svn://|//|"
    r"mailto:|news:|tel:|urn:)[^\s\[\]<>\"]*(?:[ \t]([^\[\]\n]*))?\]",
    re.IGNORECASE,
)


def replace_external_links(text: str) -> str:
    """`[http://x label]` -> label; `[http://x]` (shown as a footnote number) -> nothing."""
    if "[" not in text:
        return text
    return _EXTERNAL_LINK.sub(lambda m: (m.group(1) or "").strip(), text)


# --- inline markup ------------------------------------------------------------------------------

# Leftmost of 5, 3, 2 quotes: a run of 4 leaves one apostrophe before a bold, as MediaWiki
# shows it.
_EMPHASIS = re.compile(r"'''''|'''|''")


def strip_emphasis(text: str) -> str:
    """Remove `''italic''`, `'''bold'''` and `'''''both'''''` quote runs."""
    if "''" not in text:
        return text
    return _EMPHASIS.sub("", text)


_HTML_TAG = re.compile(r"</?([A-Za-z][A-Za-z0-9]*)(?:\s[^<>]*)?/?>")
# The HTML tags MediaWiki accepts in wikitext, and extension tags whose content is shown; any
# other `<word ...>` is literal text there ("x<y and z>w"), so it is kept.
_KNOWN_TAGS = frozenset(
    "abbr b bdi bdo big blockquote br caption center cite code data dd del dfn div dl dt em "
    "font h1 h2 h3 h4 h5 h6 hr i ins kbd li link mark meta ol p q rb rp rt rtc ruby s samp "
    "section small span strike strong sub sup td th time tr tt u ul var wbr img "
    "poem onlyinclude noinclude nowiki ref references includeonly langconvert charinsert "
    "thead tbody tfoot col colgroup".split()
)


def _html_tag(match: re.Match[str]) -> str:
    name = match.group(1).lower()
    if name not in _KNOWN_TAGS:
        return match.group()
    return "\n" if name == "br" else ""


def strip_html_tags(text: str) -> str:
    """Remove HTML tags, keeping their content; `<br>` becomes a line break."""
    if "<" not in text:
        return text
    return _HTML_TAG.sub(_html_tag, text)


_MAGIC_WORD = re.compile(r"__([^\W_]+)__")


def strip_magic_words(text: str) -> str:
    """Remove behaviour switches such as `__TOC__`, `__NOTOC__` (any script, upper case)."""
    if "__" not in text:
        return text
    return _MAGIC_WORD.sub(lambda m: "" if m.group(1).isupper() else m.group(), text)


def convert_wikitext(wikitext: str, config: MarkupConfig = DEFAULT_CONFIG) -> wiki_blocks.Blocks:
    """The plain-text prose of one article's wikitext (see the module docstring), with the
    headings of the closing sections it cut."""
    text = wikitext.replace("\r\n", "\n")
    if wiki_blocks.ROW_MARK in text:
        text = text.replace(wiki_blocks.ROW_MARK, "")
    text = strip_comments(text)
    closing = config.dropped_sections | wiki_back_matter.reference_list_sections(text)
    text = strip_templates_and_tables(strip_elements(text))
    text = wiki_back_matter.drop_see_also_lists(text, config.dropped_sections)
    back_matter = wiki_back_matter.trailing_back_matter(text, closing)
    text = replace_links(text, config)
    text = replace_external_links(text)
    text = strip_emphasis(text)
    text = strip_html_tags(text)
    text = strip_magic_words(text)
    return wiki_blocks.format_blocks(text, config.dropped_sections | back_matter)


def wikitext_to_text(wikitext: str, config: MarkupConfig = DEFAULT_CONFIG) -> str:
    """The plain-text prose of one article's wikitext (see the module docstring)."""
    return convert_wikitext(wikitext, config).text
