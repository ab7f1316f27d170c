"""The real Wikipedia dump samples of ../shared/corpora/wikipedia read by simple means, for the
wikitext and language tests: raw wikitext by title, plain Greek paragraphs, and the Greek
namespaces' wikimarkup config."""

from __future__ import annotations

import bz2
import html
import re

from pipelines.sources.wikipedia import wikimarkup as wm
from tests.conftest import CORPORA

WIKIPEDIA = CORPORA / "wikipedia"
GREEK = wm.config_for_namespaces(file_names=("Αρχείο", "Μέσο"), category_names=("Κατηγορία",))
_REDIRECT = re.compile(r"\s*#(?:REDIRECT|ΑΝΑΚΑΤΕΥΘΥΝΣΗ)", re.IGNORECASE)


def dump_articles(name: str) -> dict[str, str]:
    """Raw wikitext by title of the ns-0 non-redirect pages of a real dump sample."""
    xml = bz2.open(WIKIPEDIA / name).read().decode("utf-8")
    pages = re.findall(r"<title>(.*?)</title>\s*<ns>0</ns>.*?<text[^>]*>(.*?)</text>", xml, re.S)
    texts = {html.unescape(title): html.unescape(text) for title, text in pages}
    return {title: text for title, text in texts.items() if not _REDIRECT.match(text)}


def greek_wiki_paragraphs(count: int = 8) -> list[str]:
    """Plain paragraphs of Greek Wikipedia articles, by simple means: the first few MB of the
    elwiki dump head, <text> of main-namespace pages, templates/links/markup stripped, only
    long prose lines kept."""
    with bz2.open(WIKIPEDIA / "elwiki-pages-articles-head933.xml.bz2", "rt") as f:
        xml = f.read(4_000_000)
    paragraphs = []
    for page in re.findall(r"<page>(.*?)</page>", xml, re.S):
        if "<ns>0</ns>" not in page or "<redirect" in page:
            continue
        body = re.search(r"<text[^>]*>(.*?)</text>", page, re.S)
        if not body:
            continue
        wiki = html.unescape(body.group(1))
        wiki = re.sub(r"<ref[^>]*/>|<ref.*?</ref>|<[^>]+>", "", wiki, flags=re.S)
        for _ in range(3):  # nested templates, innermost first
            wiki = re.sub(r"\{\{[^{}]*\}\}", "", wiki)
        wiki = re.sub(r"\[\[(?:[^|\]]*\|)?([^\]]*)\]\]", r"\1", wiki)
        wiki = wiki.replace("'''", "").replace("''", "")
        for line in wiki.split("\n"):
            line = line.strip()
            if len(line) > 300 and not line.startswith(("{", "|", "!", "*", "#", "=", "[")):
                paragraphs.append(line)
                if len(paragraphs) == count:
                    return paragraphs
    return paragraphs
