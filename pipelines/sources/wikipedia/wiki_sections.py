"""The closing sections of Wikipedia articles, per language: the one table every part of the
Wikipedia source reads.

A closing section ("References", "External links", "See also", "Notes", "Further reading", ...)
holds citations and link lists, not prose. `wiki_blocks.format_blocks` cuts such sections at an
article's top heading level (a heading below is matched casefolded, a trailing colon ignored).
A heading that is a bibliography in one language and prose in another ("Literatura": Polish
references, a Spanish culture section, a level down) is safe because deeper sections are never
cut. Sections that list a subject's own output ("Works", "Discography", "Filmography") are
content, not apparatus, and are kept.

No maintained list covers the largest Wikipedias (checked 2026-12: Wikimedia's
ContentTranslation keeps one for 5 languages; WikiTailor's for 14, with gaps), so this table
is built here and each language says where its headings come from (`SOURCES`):

- CX: Wikimedia ContentTranslation, `app/src/utils/appendix/appendixTitles.json`
  (github.com/wikimedia/mediawiki-extensions-ContentTranslation, commit 8704893a), the
  appendix titles Wikimedia's own translation tool recognises;
- WT: WikiTailor, `src/main/resources/cat/lump/aq/wikilink/jwpl/languageConstants.properties`
  (github.com/cristinae/WikiTailor, commit 5b375e00), see_also / references / notes /
  bibliography / further_reading / external_links per language;
- dump: headings seen at the top level of real dumps: the shared elwiki head
  (../shared/corpora/wikipedia) and the held-out ukwiki, bgwiki and jawiki articles of issue 19;
- layout: the wiki's own layout convention (its standard appendix headings as articles use
  them), written from knowledge of that wiki and not checked against an offline copy: the
  entries to check first when a dump of that language shows a leak.

`LARGEST_WIKIPEDIAS` is the 30 largest Wikipedias by article count (meta.wikimedia.org "List of
Wikipedias", 2024 figures; ceb, war, arz and ce are mostly bot-written but large all the same):
the test holds the table to covering every one of them.
"""

from __future__ import annotations

LARGEST_WIKIPEDIAS = (
    "en", "ceb", "de", "fr", "sv", "nl", "ru", "es", "it", "arz", "pl", "ja", "zh", "uk", "vi",
    "war", "ar", "pt", "fa", "ca", "id", "sr", "ko", "no", "tr", "ce", "fi", "cs", "hu", "tt",
)  # fmt: skip

CLOSING_SECTIONS: dict[str, tuple[str, ...]] = {
    "en": (
        "References", "External links", "See also", "Further reading", "Notes", "Footnotes",
        "Bibliography", "Sources", "Citations", "Notes and references", "References and notes",
        "Works cited", "Other websites", "Explanatory notes", "General references",
        "References and further reading", "Notes and further reading",
        "Sources and further reading",
    ),
    "ceb": ("Ang mga gi basihan", "Tan-awa usab", "Mga sumpay sa gawas", "Mga pinagi"),
    "de": (
        "Einzelnachweise", "Weblinks", "Siehe auch", "Literatur", "Anmerkungen", "Quellen",
        "Fußnoten", "Belege", "Literatur und Weblinks", "Weiterführende Literatur",
    ),
    "fr": (
        "Références", "Liens externes", "Voir aussi", "Notes et références", "Notes",
        "Bibliographie", "Articles connexes", "Sources", "Lien externe",
        "Lectures complémentaires", "Pour en savoir plus",
    ),
    "sv": ("Referenser", "Externa länkar", "Se även", "Källor", "Noter", "Vidare läsning"),
    "nl": (
        "Referenties", "Externe links", "Zie ook", "Bronnen", "Noten", "Literatuur",
        "Bronvermelding", "Externe link",
    ),
    "ru": (
        "Примечания", "Ссылки", "См. также", "Литература", "Источники", "Сноски",
        "Библиография",
    ),
    "es": (
        "Referencias", "Enlaces externos", "Véase también", "Bibliografía", "Notas", "Fuentes",
        "Notas y referencias", "Otras lecturas", "Lecturas relacionadas", "Citas",
        "Otras lecturas adicionales",
    ),
    "it": (
        "Note", "Collegamenti esterni", "Voci correlate", "Bibliografia", "Altri progetti",
        "Fonti", "Riferimenti", "Letture aggiuntive",
    ),
    "arz": ("مصادر", "المصادر", "لينكات", "لينكات برانيه", "شوف كمان"),
    "pl": ("Przypisy", "Linki zewnętrzne", "Zobacz też", "Bibliografia", "Uwagi"),
    "ja": (
        "脚注", "参考文献", "関連項目", "外部リンク", "出典", "注釈", "参考資料", "関連文献",
        "関連書籍",
    ),
    "zh": (
        "参考文献", "參考文獻", "外部链接", "外部連結", "参见", "參見", "参考资料", "參考資料",
        "注释", "註釋", "延伸阅读", "延伸閱讀", "相关条目", "相關條目", "参考", "參考",
    ),
    "uk": (
        "Примітки", "Посилання", "Див. також", "Джерела", "Література",
        "Джерела та література", "Виноски", "Бібліографія",
    ),
    "vi": ("Tham khảo", "Liên kết ngoài", "Xem thêm", "Chú thích", "Đọc thêm"),
    "war": ("Mga kasarigan", "Kitaa liwat", "Mga sumpay ha gawas"),
    "ar": (
        "مراجع", "المراجع", "وصلات خارجية", "انظر أيضا", "انظر أيضًا", "مصادر", "المصادر",
        "الهوامش", "هوامش", "قراءة إضافية",
    ),
    "pt": (
        "Referências", "Ligações externas", "Ver também", "Bibliografia", "Notas", "Fontes",
        "Leitura adicional", "Notas e referências",
    ),
    "fa": ("منابع", "پیوند به بیرون", "جستارهای وابسته", "پانویس", "یادداشت‌ها", "پانویس‌ها"),
    "ca": (
        "Referències", "Enllaços externs", "Vegeu també", "Bibliografia", "Notes",
        "Bibliografia complementària", "Lectures addicionals",
    ),
    "id": (
        "Referensi", "Pranala luar", "Lihat pula", "Lihat juga", "Catatan", "Bacaan lanjutan",
        "Daftar pustaka",
    ),
    "sr": (
        "Референце", "Спољашње везе", "Види још", "Литература", "Напомене", "Извори",
        "Спољне везе",
    ),
    "ko": ("각주", "외부 링크", "같이 보기", "참고 문헌", "참고문헌", "출처"),
    "no": ("Referanser", "Eksterne lenker", "Se også", "Litteratur", "Kilder", "Noter"),
    "tr": ("Kaynakça", "Dış bağlantılar", "Ayrıca bakınız", "Notlar", "Kaynaklar", "Dipnotlar"),
    "ce": ("Билгалдахарш", "Хьажоргаш", "Литература"),
    "fi": ("Lähteet", "Aiheesta muualla", "Katso myös", "Viitteet", "Kirjallisuutta"),
    "cs": ("Reference", "Externí odkazy", "Související články", "Literatura", "Poznámky"),
    "hu": (
        "Jegyzetek", "További információk", "Kapcsolódó szócikkek", "Források", "Irodalom",
        "Hivatkozások", "Megjegyzések",
    ),
    "tt": ("Искәрмәләр", "Чыганаклар", "Сылтамалар", "Шулай ук карагыз", "Әдәбият"),
    # Besides the 30 largest: wikis next in size, and languages asked for by name.
    "ro": (
        "Note", "Referințe", "Bibliografie", "Legături externe", "Vezi și",
        "Lectură suplimentară", "Lecturi suplimentare",
    ),
    "eu": ("Erreferentziak", "Oharrak", "Bibliografia", "Kanpo loturak", "Ikus, gainera",
           "Ikus gainera", "Kanpo estekak"),
    "he": ("הערות שוליים", "קישורים חיצוניים", "ראו גם", "לקריאה נוספת", "מקורות"),
    "da": ("Referencer", "Eksterne henvisninger", "Se også", "Litteratur", "Kilder", "Noter"),
    "bg": (
        "Източници", "Бележки", "Вижте също", "Външни препратки", "Литература",
        "Допълнителна литература",
    ),
    "el": (
        "Παραπομπές", "Εξωτερικοί σύνδεσμοι", "Δείτε επίσης", "Βιβλιογραφία", "Σημειώσεις",
        "Πηγές", "Δείτε ακόμη", "Βλέπε επίσης", "Βλέπε και", "Διαβάστε επίσης",
        "Προτεινόμενη βιβλιογραφία", "Επιπλέον βιβλιογραφία", "Υποσημειώσεις",
        "Πρόσθετη βιβλιογραφία", "Σημειώσεις και παραπομπές", "Παραπομπές και σημειώσεις",
    ),
}  # fmt: skip

# Where each language's headings come from (see the module docstring). "earlier" marks the
# headings this table held before sources were recorded (2026-11), kept as they were.
SOURCES: dict[str, str] = {
    "en": "CX, WT, earlier", "ceb": "layout", "de": "CX, WT, earlier",
    "fr": "CX, WT, earlier", "sv": "earlier", "nl": "earlier", "ru": "earlier, layout",
    "es": "CX, WT, earlier", "it": "WT, earlier", "arz": "layout", "pl": "earlier",
    "ja": "earlier, dump (関連文献), layout", "zh": "earlier",
    "uk": "earlier, dump (Джерела та література), layout",
    "vi": "earlier", "war": "layout", "ar": "WT, earlier", "pt": "earlier", "fa": "earlier",
    "ca": "WT, earlier", "id": "earlier", "sr": "earlier, layout", "ko": "earlier",
    "no": "earlier, layout", "tr": "earlier, layout", "ce": "layout", "fi": "earlier",
    "cs": "earlier", "hu": "WT, earlier", "tt": "layout", "ro": "WT", "eu": "WT, layout",
    "he": "earlier", "da": "layout", "bg": "dump (Вижте също, Външни препратки), layout",
    "el": "WT, earlier, dump",
}  # fmt: skip


def closing_section_names() -> frozenset[str]:
    """Every closing-section heading of every language, casefolded: one set serves all wikis,
    since a dump names its language nowhere reliable (siteinfo has no language code)."""
    return frozenset(name.casefold() for names in CLOSING_SECTIONS.values() for name in names)
