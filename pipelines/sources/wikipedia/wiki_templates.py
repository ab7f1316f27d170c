"""The prose templates of wikitext: the few templates whose output is text a reader sees
(`{{lang|fr|mot}}`, `{{convert|5|km|mi}}`, `{{nowrap|...}}`, list layouts such as
`{{columns-list|...}}`), rendered from their arguments; every other template (citations,
infoboxes, navigation, maintenance tags) renders as nothing. `wikimarkup` finds the templates
and calls these.
"""

from __future__ import annotations

import re

# Templates whose output is prose, rendered from their arguments instead of dropped (the rest
# are citations, infoboxes, navigation and maintenance tags, and are dropped):
# name -> how to render the positional arguments.
_FIRST_ARGUMENT = frozenset(
    "nowrap nobr small smaller big larger nihongo abbr math mvar flag quote blockquote cquote "
    "quotation lang-rtl".split()
)
_LAST_ARGUMENT = frozenset("lang transl transliteration sic".split())
_SYMBOLS = {
    "nbsp": " ",
    "ndash": "\u2013",
    "mdash": "\u2014",
    "snd": " \u2013 ",
    "spnd": " \u2013 ",
}
# Templates that lay out a list: their items stay, one line each, as the list would without
# them. _LIST_BLOCK wraps list lines written as wikitext (`{{columns-list|colwidth=20em|\n* a\n
# * b}}`): the arguments holding such lines are kept, a column count is not. _LIST_ITEMS takes
# each item as an argument (`{{ubl|a|b}}`).
_LIST_BLOCK = frozenset({"columns-list", "col-list", "plainlist", "plain list", "flatlist"})
_LIST_ITEMS = frozenset(
    {"unbulleted list", "ubl", "bulleted list", "bulleted", "hlist", "collapsible list"}
)
_LIST_LINE = re.compile(r"^[*#]", re.MULTILINE)
_RANGE_WORDS = frozenset({"to", "-", "\u2013", "and", "or", "by", "x", "\u00d7", "+/-"})
_NAMED_ARGUMENT = re.compile(r"\s*[\w -]{1,30}=")


def split_arguments(content: str) -> list[str]:
    """Split a template's arguments at `|`, except inside `[[...]]` links."""
    if "[[" not in content:
        return content.split("|")
    arguments = []
    depth = 0
    start = 0
    for token in re.finditer(r"\[\[|\]\]|\|", content):
        value = token.group()
        if value == "[[":
            depth += 1
        elif value == "]]":
            depth = max(0, depth - 1)
        elif depth == 0:
            arguments.append(content[start : token.start()])
            start = token.end()
    arguments.append(content[start:])
    return arguments


def render_template(name: str, arguments: list[str]) -> str:
    """The text a prose template shows ("" for every other template): `{{lang|fr|mot}}` ->
    "mot", `{{convert|5|km|mi}}` -> "5 km", `{{nowrap|a b}}` -> "a b", `{{as of|2010}}` ->
    "As of 2010"."""
    name = " ".join(name.replace("_", " ").split()).casefold()
    if name in _SYMBOLS:
        return _SYMBOLS[name]
    positional = [a.strip() for a in arguments if not _NAMED_ARGUMENT.match(a)]
    named = dict(
        (key.strip(), value.strip())
        for key, _, value in (a.partition("=") for a in arguments if _NAMED_ARGUMENT.match(a))
    )
    if name in _FIRST_ARGUMENT or name.startswith("lang-"):
        return positional[0] if positional else named.get("text", "")
    if name in _LAST_ARGUMENT:
        # {{lang|fr|mot}}: the text follows a language code; {{sic|word}} has only the text.
        enough = 1 if name == "sic" else 2
        return positional[-1] if len(positional) >= enough else ""
    if name in ("convert", "cvt") and len(positional) >= 2:
        words = [positional[0]]
        i = 1
        while i + 1 < len(positional) and positional[i] in _RANGE_WORDS:
            words += positional[i : i + 2]
            i += 2
        if i < len(positional):
            words.append(positional[i])
        return " ".join(words)
    if name == "as of" and positional:
        return "As of " + positional[0]
    if name in _LIST_BLOCK or name in _LIST_ITEMS:
        items = [
            argument if name in _LIST_BLOCK else "* " + argument
            for argument in positional
            if (_LIST_LINE.search(argument) if name in _LIST_BLOCK else argument)
        ]
        return "\n" + "\n".join(items) + "\n" if items else ""
    return ""


# A template with no braces inside and none next to it: most templates, handled by one regex
# pass before the general scan (which then sees only nested ones and tables).
SIMPLE_TEMPLATE = re.compile(r"\{\{(?<!\{\{\{)([^{}]*)\}\}(?!\})")
_RENDERED_NAMES = frozenset(
    _FIRST_ARGUMENT
    | _LAST_ARGUMENT
    | _SYMBOLS.keys()
    | _LIST_BLOCK
    | _LIST_ITEMS
    | {"convert", "cvt", "as of"}
)


def is_rendered(name: str) -> bool:
    name = " ".join(name.replace("_", " ").split()).casefold()
    return name in _RENDERED_NAMES or name.startswith("lang-")


def is_list_template(name: str) -> bool:
    name = " ".join(name.replace("_", " ").split()).casefold()
    return name in _LIST_BLOCK or name in _LIST_ITEMS


def simple_template(match: re.Match[str]) -> str:
    name, pipe, arguments = match.group(1).partition("|")
    if ":" in name or not is_rendered(name):
        return ""
    return render_template(name, split_arguments(arguments) if pipe else [])
