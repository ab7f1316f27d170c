"""The closing sections of Wikipedia articles, per language: the one table every part of the
Wikipedia source reads.

A closing section ("References", "External links", "See also", "Notes", "Further reading", ...)
holds citations and link lists, not prose. `wikimarkup.format_blocks` cuts such sections at
an article's top heading level (a heading below is matched casefolded, a trailing colon
ignored). The table covers the 20 largest Wikipedias by article count (2024) once the
bot-written ceb, war, arz and ce are left out: en, de, fr, sv, nl, ru, es, it, pl, ja, zh, uk,
vi, ar, pt, fa, ca, id, sr, ko; and he, cs, tr, hu, fi, no, el besides. A heading that is a
bibliography in one language and prose in another ("Literatura": Polish references, a Spanish
culture section, a level down) is safe because deeper sections are never cut.
"""

from __future__ import annotations

CLOSING_SECTIONS: dict[str, tuple[str, ...]] = {
    "en": (
        "References", "External links", "See also", "Further reading", "Notes", "Footnotes",
        "Bibliography", "Sources", "Citations", "Notes and references", "References and notes",
        "Works cited", "Other websites", "Explanatory notes", "General references",
        "References and further reading", "Notes and further reading",
        "Sources and further reading",
    ),
    "de": (
        "Einzelnachweise", "Weblinks", "Siehe auch", "Literatur", "Anmerkungen", "Quellen",
        "Fußnoten", "Belege", "Literatur und Weblinks",
    ),
    "fr": (
        "Références", "Liens externes", "Voir aussi", "Notes et références", "Notes",
        "Bibliographie", "Articles connexes", "Sources", "Lien externe",
    ),
    "es": (
        "Referencias", "Enlaces externos", "Véase también", "Bibliografía", "Notas", "Fuentes",
        "Notas y referencias",
    ),
    "ja": ("脚注", "参考文献", "関連項目", "外部リンク", "出典", "注釈", "参考資料"),
    "ru": ("Примечания", "Ссылки", "См. также", "Литература", "Источники", "Сноски"),
    "it": (
        "Note", "Collegamenti esterni", "Voci correlate", "Bibliografia", "Altri progetti",
        "Fonti",
    ),
    "zh": (
        "参考文献", "參考文獻", "外部链接", "外部連結", "参见", "參見", "参考资料", "參考資料",
        "注释", "註釋", "延伸阅读", "延伸閱讀", "相关条目", "相關條目", "参考", "參考",
    ),
    "pt": (
        "Referências", "Ligações externas", "Ver também", "Bibliografia", "Notas", "Fontes",
        "Leitura adicional", "Notas e referências",
    ),
    "pl": ("Przypisy", "Linki zewnętrzne", "Zobacz też", "Bibliografia", "Uwagi"),
    "nl": (
        "Referenties", "Externe links", "Zie ook", "Bronnen", "Noten", "Literatuur",
        "Bronvermelding", "Externe link",
    ),
    "sv": ("Referenser", "Externa länkar", "Se även", "Källor", "Noter", "Vidare läsning"),
    "uk": ("Примітки", "Посилання", "Див. також", "Джерела", "Література"),
    "ar": (
        "مراجع", "المراجع", "وصلات خارجية", "انظر أيضا", "انظر أيضًا", "مصادر", "المصادر",
        "الهوامش", "هوامش",
    ),
    "fa": ("منابع", "پیوند به بیرون", "جستارهای وابسته", "پانویس", "یادداشت‌ها", "پانویس‌ها"),
    "vi": ("Tham khảo", "Liên kết ngoài", "Xem thêm", "Chú thích", "Đọc thêm"),
    "ko": ("각주", "외부 링크", "같이 보기", "참고 문헌", "참고문헌", "출처"),
    "id": (
        "Referensi", "Pranala luar", "Lihat pula", "Lihat juga", "Catatan", "Bacaan lanjutan",
        "Daftar pustaka",
    ),
    "he": ("הערות שוליים", "קישורים חיצוניים", "ראו גם", "לקריאה נוספת", "מקורות"),
    "cs": ("Reference", "Externí odkazy", "Související články", "Literatura", "Poznámky"),
    "tr": ("Kaynakça", "Dış bağlantılar", "Ayrıca bakınız", "Notlar", "Kaynaklar"),
    "hu": ("Jegyzetek", "További információk", "Kapcsolódó szócikkek", "Források", "Irodalom"),
    "fi": ("Lähteet", "Aiheesta muualla", "Katso myös", "Viitteet", "Kirjallisuutta"),
    "ca": ("Referències", "Enllaços externs", "Vegeu també", "Bibliografia", "Notes"),
    "no": ("Referanser", "Eksterne lenker", "Se også", "Litteratur", "Kilder"),
    "sr": ("Референце", "Спољашње везе", "Види још", "Литература", "Напомене"),
    "el": (
        "Παραπομπές", "Εξωτερικοί σύνδεσμοι", "Δείτε επίσης", "Βιβλιογραφία", "Σημειώσεις",
        "Πηγές", "Δείτε ακόμη", "Βλέπε επίσης", "Βλέπε και", "Διαβάστε επίσης",
        "Προτεινόμενη βιβλιογραφία", "Επιπλέον βιβλιογραφία", "Υποσημειώσεις",
    ),
}  # fmt: skip


def closing_section_names() -> frozenset[str]:
    """Every closing-section heading of every language, casefolded: one set serves all wikis,
    since a dump names its language nowhere reliable (siteinfo has no language code)."""
    return frozenset(name.casefold() for names in CLOSING_SECTIONS.values() for name in names)
