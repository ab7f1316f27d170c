from __future__ import annotations

import dataclasses
import pickle
import re

import numpy as np
import pytest

from pipelines.clean import FILTER_NAMES, CleanConfig, clean_document, filters
from pipelines.clean.normalize import normalize_text
from pipelines.document import Document, Reject
from pipelines.sources import source_traits
from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"
WEBTEXT = CORPORA / "web" / "text" / "webtext_train_10"
BOOKS = CORPORA / "books"
WEB = CleanConfig.for_source(source_traits("webtext"))


def _webtext(number: int) -> Document:
    return Document(f"webtext:{number}", "webtext", (WEBTEXT / f"{number}.txt").read_text("utf-8"))


def _prose() -> str:
    """A real news page (webtext 3.txt) that passes every web rule: the base the adversarial
    inputs below are made from, so that each trips exactly the rule it is aimed at."""
    return normalize_text((WEBTEXT / "3.txt").read_text("utf-8"))


def _reason(text: str, config: CleanConfig = WEB) -> str:
    result = clean_document(Document("test:1", "webtext", text), config)
    return result.reason if isinstance(result, Reject) else "kept"


def test_the_base_page_passes_every_web_rule():
    assert _reason(_prose()) == "kept"


@pytest.mark.parametrize("number", [3, 4, 6, 7, 8, 9])
def test_real_web_articles_are_kept(number):
    kept = clean_document(_webtext(number), WEB)
    assert isinstance(kept, Document)
    assert kept.meta["language"] == "en"
    # C4's line rules drop headings and captions without end punctuation, not the article.
    assert 0.8 * len(_webtext(number).text) < len(kept.text) <= len(_webtext(number).text)


def test_cookie_banner_page():
    # 1.txt: two sentences of NFL news, then "ABOUT COOKIES" and a cookie-consent question.
    page = _webtext(1)
    result = clean_document(page, WEB)
    # The heading goes (no end punctuation); 48 words are left, under Gopher's 50.
    assert isinstance(result, Reject) and result.reason == "too_few_words"
    assert result.detail == "48 words < 50"
    # C4's own sentence minimum would count 3 sentences, under its 5.
    c4 = clean_document(page, dataclasses.replace(WEB, min_words=10, c4_min_sentences=5))
    assert c4.reason == "c4_too_few_sentences" and c4.detail == "3 < 5 after removing 1 lines"
    # Without the sentence minimum the page is kept minus the heading; the consent question
    # ("accept cookies") is in none of C4's phrases, but a configured phrase removes it too.
    relaxed = CleanConfig.for_source(source_traits("webtext"), c4_min_sentences=None, min_words=0)
    kept = clean_document(page, relaxed)
    assert "ABOUT COOKIES" not in kept.text and "accept cookies" in kept.text
    phrases = relaxed.c4_boilerplate_phrases + ("accept cookies",)
    stricter = dataclasses.replace(relaxed, c4_boilerplate_phrases=phrases)
    assert clean_document(page, stricter).text == (
        "LeSean McCoy going through warmups with first team offense. To my eye, does not look "
        "close to 100 percent when cutting and exploding."
    )


def test_slideshow_page_with_repeated_captions_at_gophers_and_the_measured_threshold():
    # 2.txt repeats its whole "England Ashes squad" slideshow caption block: its duplicate
    # 5-grams cover 0.179 of it, over Gopher's 0.15 but under the 0.226 of a real Black Friday
    # deals article (aeb-dev) whose product lines repeat; the measured 0.25 keeps both.
    gopher = dataclasses.replace(
        WEB, max_duplicate_ngram_char_fraction=((5, 0.15), (6, 0.14), (7, 0.13))
    )
    result = clean_document(_webtext(2), gopher)
    assert result.reason == "gopher_duplicate_ngrams"
    assert result.detail == "duplicate 5-grams cover 0.179 > 0.15"
    assert isinstance(clean_document(_webtext(2), WEB), Document)


def test_books_are_not_subject_to_web_rules():
    # Moby-Dick has 212k words (over Gopher's 100k) and hard-wrapped lines without end
    # punctuation: the web rules would gut it, the books preset keeps it whole.
    moby = Document("books:2701-0.txt", "books", (BOOKS / "2701-0.txt").read_text("utf-8"))
    assert clean_document(moby, WEB).reason == "too_many_words"
    kept = clean_document(moby, CleanConfig.for_source(source_traits("books")))
    assert isinstance(kept, Document)
    assert kept.text == normalize_text(moby.text)
    assert "Call me Ishmael." in kept.text


def test_web_rules_pass_real_book_prose():
    # The Gopher measures on a 30 kB slice of a real novel stay well inside their limits.
    text = normalize_text((BOOKS / "11-0.txt").read_text("utf-8"))[20_000:50_000]
    no_c4 = CleanConfig.for_source(
        source_traits("webtext"),
        c4_terminal_punctuation=False,
        c4_min_words_per_line=0,
        c4_min_sentences=None,
    )
    assert _reason(text, no_c4) == "kept"


def _lines(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.strip()]


ADVERSARIAL = {
    "too_short": lambda prose: "Too short.",
    "too_few_words": lambda prose: " ".join(prose.split()[:40]),
    "too_many_words": lambda prose: (prose + "\n\n") * 200,
    # A page of one repeated line (a feed of the same teaser).
    "gopher_duplicate_lines": lambda prose: (
        prose + "\n\nRead more stories like this one on our home page today.\n" * 40
    ),
    "gopher_top_ngram": lambda prose: " ".join(
        f"{word} breaking news" if i % 2 else word for i, word in enumerate(prose.split(" "))
    ),
    "gopher_duplicate_ngrams": lambda prose: "\n\n".join(
        f"{paragraph} Sign up for the newsletter and never miss a story from the team."
        for paragraph in prose.split("\n\n")
    ),
    "gopher_mean_word_length": lambda prose: " ".join(
        "".join(prose.split(" ")[i : i + 3]) for i in range(0, len(prose.split(" ")), 3)
    ),
    # Symbol soup: a hashtag on every word.
    "gopher_symbol_ratio": lambda prose: " ".join(f"#{word}" for word in prose.split(" ")),
    "gopher_bullet_lines": lambda prose: "\n".join(f"• {line}" for line in _lines(prose)),
    "gopher_ellipsis_lines": lambda prose: "\n".join(line + ".." for line in _lines(prose)),
    "gopher_alpha_words": lambda prose: " ".join(
        f"{word} {i}" for i, word in enumerate(prose.split(" "))
    ),
    "gopher_stop_words": lambda prose: re.sub(
        r"\b(?:the|be|to|of|and|that|have|with)\b ?", "", prose, flags=re.IGNORECASE
    ),
    "c4_lorem_ipsum": lambda prose: (
        prose
        + "\n\nLorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor."
    ),
    "c4_curly_brace": lambda prose: prose + "\n\nTemplates write {name} where the name goes.",
    "c4_too_few_sentences": lambda prose: (
        "\n".join(line.rstrip('.!?"”') for line in _lines(prose))
        + "\n\nThe only finished sentence is this one."
    ),
    "language": lambda prose: (BOOKS / "Candide-fr.txt").read_text("utf-8")[20_000:30_000],
}


@pytest.mark.parametrize("reason", sorted(ADVERSARIAL))
def test_adversarial_input_rejected_for_its_reason(reason):
    text = ADVERSARIAL[reason](_prose())
    assert _reason(text) == reason


def test_every_rule_is_named_and_exercised():
    exercised = set(ADVERSARIAL) | {"gopher_duplicate_line_chars"}
    paragraph_rules = {"gopher_duplicate_paragraphs", "gopher_duplicate_paragraph_chars"}
    assert exercised | paragraph_rules == set(FILTER_NAMES)
    assert len(FILTER_NAMES) == len(set(FILTER_NAMES))


def test_duplicate_line_chars_rule():
    # Few duplicated lines (under 30% of lines) but long ones (over 20% of characters).
    prose = _prose()
    longest = max(prose.split("\n"), key=len)
    text = prose + "\n\n" + "\n\n".join([longest] * 3)
    lines, chars = filters.duplicate_line_fractions(text)
    assert lines < 0.30 and chars > 0.20
    assert _reason(text) == "gopher_duplicate_line_chars"


def test_duplicate_paragraph_rules():
    config = CleanConfig(
        language="any",
        max_duplicate_paragraph_fraction=0.30,
        max_duplicate_paragraph_char_fraction=0.20,
    )
    paragraphs = _prose().split("\n\n")
    repeated = "\n\n".join(paragraphs + sorted(paragraphs, key=len)[:3] * 4)
    assert _reason(repeated, config) == "gopher_duplicate_paragraphs"
    long_repeat = "\n\n".join(paragraphs + [max(paragraphs, key=len)] * 3)
    assert _reason(long_repeat, config) == "gopher_duplicate_paragraph_chars"
    assert _reason(_prose(), config) == "kept"


def test_light_preset_only_checks_length_and_language():
    light = CleanConfig.for_source(source_traits("wikipedia"))
    assert not light.uses_word_statistics and not light.uses_c4_lines
    for reason in ("gopher_duplicate_lines", "gopher_symbol_ratio", "c4_curly_brace"):
        assert _reason(ADVERSARIAL[reason](_prose()), light) == "kept"
    assert _reason("Too short.", light) == "too_short"


def test_count_words_matches_str_split_on_normalised_text():
    for path in sorted(BOOKS.glob("*.txt")) + sorted(WEBTEXT.glob("*.txt")):
        text = normalize_text(path.read_text("utf-8"))
        assert filters.count_words(text) == len(text.split()), path.name
    assert filters.count_words("") == 0 and filters.count_words("  one\n\ntwo ") == 2


def test_ngram_measures_on_small_cases():
    words = filters.word_table("The cat, the CAT! the cat sat")
    # Normalised words: the cat the cat the cat sat (21 characters).
    assert filters.mean_word_length(words) == 3.0
    hashes = filters.ngram_hashes(words.ids, 5)
    # "the cat" three times: 3 x 6 characters.
    assert filters.top_ngram_char_fraction(hashes[2], words.lengths, 2) == pytest.approx(18 / 21)
    # 4-gram "the cat the cat" occurs twice (positions 0 and 2): covers words 0..5 once.
    assert filters.duplicate_ngram_char_fraction(hashes[4], words.lengths, 4) == pytest.approx(
        18 / 21
    )
    assert filters.duplicate_ngram_char_fraction(hashes[5], words.lengths, 5) == 0.0
    assert words.stop_word_count == 3 and words.alpha_word_count == words.word_count == 7
    assert filters.ngram_hashes(np.array([], dtype=np.int64), 3)[3].size == 0


def test_ngram_hashes_are_stable_values():
    # Fixed arithmetic, no Python hash(): the same in every process.
    hashes = filters.ngram_hashes(np.array([0, 1, 2]), 2)
    assert hashes[2].tolist() == [
        (1 * 0x9E3779B97F4A7C15 + 2) % 2**64,
        (2 * 0x9E3779B97F4A7C15 + 3) % 2**64,
    ]


def test_config_is_picklable_and_validated():
    assert pickle.loads(pickle.dumps(WEB)) == WEB
    assert WEB.language == ("en",)
    with pytest.raises(ValueError, match="language_threshold"):
        CleanConfig(language_threshold=1.5)
    with pytest.raises(ValueError, match="n-gram"):
        CleanConfig(max_top_ngram_char_fraction=((0, 0.1),))


# --- scripts written without spaces -----------------------------------------------------------
# Encyclopedia-style paragraphs written for these tests (facts about Mount Fuji, the Yangtze and
# Bangkok), shaped like real articles in Japanese, Chinese and Thai: sentences with no spaces
# between words (Thai puts a space between phrases and sentences, and has no full stop).
JAPANESE = """富士山は、静岡県と山梨県にまたがる活火山である。標高は3776メートルで、日本の最高峰として知られている。山頂付近には八つの峰があり、古くから信仰の対象とされてきた。

富士山は約十万年前から始まった火山活動によって形成された。現在の山体は、古い火山の上に新しい火山が重なってできたものである。最後の噴火は1707年の宝永大噴火で、江戸の町にも火山灰が降ったと記録されている。

夏の登山シーズンには、毎年二十万人以上の登山者が山頂を目指す。登山道は吉田ルート、須走ルート、御殿場ルート、富士宮ルートの四つが主に利用されている。山小屋では宿泊や食事ができるが、混雑する時期には予約が必要である。

2013年には「富士山－信仰の対象と芸術の源泉」として世界文化遺産に登録された。葛飾北斎や歌川広重の浮世絵にも繰り返し描かれ、日本を象徴する風景として国内外に広く親しまれている。
"""
CHINESE = """长江是中国最长的河流，也是世界第三长河。它发源于青藏高原的唐古拉山脉，向东流经十一个省级行政区，最后在上海注入东海。全长约六千三百公里，流域面积占中国国土面积的五分之一左右。

长江流域自古以来就是中国重要的农业地区。这里气候温暖，雨量充沛，适合种植水稻和茶叶。许多历史名城，如重庆、武汉和南京，都坐落在长江沿岸。

三峡工程是长江上最大的水利工程，于二零零六年建成大坝。它在防洪、发电和航运方面发挥了重要作用，但也引起了关于生态环境和移民问题的讨论。
"""
THAI = """กรุงเทพมหานครเป็นเมืองหลวงและเมืองที่มีประชากรมากที่สุดของประเทศไทย ตั้งอยู่บนที่ราบลุ่มแม่น้ำเจ้าพระยาใกล้กับอ่าวไทย เมืองนี้เป็นศูนย์กลางทางการเมือง เศรษฐกิจ การศึกษา และวัฒนธรรมของประเทศ

กรุงเทพมหานครได้รับการสถาปนาเป็นราชธานีในปี พ.ศ. 2325 โดยพระบาทสมเด็จพระพุทธยอดฟ้าจุฬาโลกมหาราช ในอดีตเมืองนี้มีคลองจำนวนมากจนชาวต่างชาติเรียกว่าเวนิสแห่งตะวันออก

ปัจจุบันกรุงเทพมหานครมีระบบรถไฟฟ้าหลายสาย ทั้งรถไฟฟ้าบีทีเอสและรถไฟฟ้ามหานคร นักท่องเที่ยวจากทั่วโลกเดินทางมาชมวัดพระแก้ว พระบรมมหาราชวัง และตลาดน้ำ ซึ่งเป็นสถานที่ท่องเที่ยวที่มีชื่อเสียง
"""
UNSPACED_ARTICLES = {"ja": JAPANESE, "zh": CHINESE, "th": THAI}


@pytest.mark.parametrize("language", sorted(UNSPACED_ARTICLES))
def test_articles_in_scripts_without_spaces_are_kept(language):
    article = Document(f"test:{language}", "webtext", UNSPACED_ARTICLES[language])
    # A letter is a word: hundreds of words, not the 3-17 whitespace tokens.
    assert filters.count_words(article.text) > 200
    for config in (
        CleanConfig(language=language),
        CleanConfig.for_source(source_traits("webtext"), language=language),
    ):
        kept = clean_document(article, config)
        assert isinstance(kept, Document), (config, kept)
        assert kept.meta["language"] == language
        assert kept.text == normalize_text(article.text)  # C4 kept every line
    # The web rules that do not apply to the script are skipped, and the document says which.
    skipped = kept.meta["rules_skipped"].split(",")
    assert {"gopher_mean_word_length", "gopher_top_ngram", "gopher_duplicate_ngrams"} <= set(
        skipped
    )
    assert ("c4_too_few_sentences" in skipped) == (language == "th")


def test_rules_that_apply_still_reject_unspaced_text():
    web_ja = CleanConfig.for_source(source_traits("webtext"), language="ja")
    assert _reason("富士山は日本の最高峰である。", web_ja) == "too_short"
    # 45 letters: fewer than the web preset's 50 words.
    short = JAPANESE.split("\n\n")[1][:45]
    assert _reason(short + "。" * 5, CleanConfig.for_source(source_traits("webtext"), language="any")) == (
        "too_few_words"
    )
    repeated = "\n".join([JAPANESE.split("\n\n")[0]] * 4)
    assert _reason(repeated, web_ja) == "gopher_duplicate_lines"
    bulleted = "\n".join(f"・{line}" for line in _lines(JAPANESE.replace("。", "。\n")))
    assert _reason(bulleted, web_ja) == "gopher_bullet_lines"


def test_c4_line_rules_know_other_scripts_sentence_ends():
    def kept_lines(text):
        c4 = filters.c4_filter_lines(
            text,
            require_terminal_punctuation=True,
            min_words_per_line=3,
            boilerplate_phrases=(),
            reject_lorem_ipsum=False,
            reject_curly_brace=False,
        )
        return c4.text.split("\n")

    assert kept_lines("富士山は日本の最高峰である。\n富士山") == ["富士山は日本の最高峰である。"]
    assert kept_lines("他说：“我明天去。”\n长江") == ["他说：“我明天去。”"]
    # Thai has no full stop: a line ending in a Thai letter is a sentence end.
    assert kept_lines("กรุงเทพมหานครเป็นเมืองหลวง\n(ภาพ)") == ["กรุงเทพมหานครเป็นเมืองหลวง"]


def test_english_rules_and_thresholds():
    # Gopher's and C4's published thresholds where they keep real articles; the rest measured
    # on real article pages (test_the_web_preset_keeps_the_real_articles_of_the_shared_pages).
    assert (WEB.min_words, WEB.max_words, WEB.mean_word_length) == (50, 100_000, (3.0, 10.0))
    assert WEB.max_top_ngram_char_fraction == ((2, 0.20), (3, 0.18), (4, 0.16))
    duplicate_limits = (0.25, 0.24, 0.23, 0.22, 0.21, 0.20)
    assert WEB.max_duplicate_ngram_char_fraction == tuple(zip(range(5, 11), duplicate_limits))
    assert (WEB.min_alpha_word_fraction, WEB.min_stop_words, WEB.c4_min_sentences) == (0.7, 2, 2)
    assert (WEB.c4_min_words_per_line, WEB.language) == (3, ("en",))
    # English words are whitespace tokens; real English pages skip no rule.
    for number in (3, 4, 6):
        page = normalize_text(_webtext(number).text)
        assert filters.split_words(page) == page.split()
        assert "rules_skipped" not in clean_document(_webtext(number), WEB).meta
    # An English page quoting a few Japanese words is still measured as English.
    quoting = _prose() + "\n\nThe mountain is called 富士山 (Fuji-san) in Japanese."
    assert filters.unspaced_word_fractions(quoting)[0] < 0.05
    assert _reason(ADVERSARIAL["gopher_mean_word_length"](quoting)) == "gopher_mean_word_length"


def test_the_web_preset_keeps_the_real_articles_of_the_shared_pages():
    """The 72 real article pages of ../shared/corpora/web (html/, aeb-dev/), extracted as the
    webtext source does, through the web preset with no language filter: every article
    reaches the shards, a standings table of numbers under its prose too (judged by its
    prose). Gopher's published thresholds dropped 10 of them (a deals article for duplicate
    5-grams 0.226 > 0.15, short news items of 2-4 sentences, a WSJ article for "..." lines,
    sports roundups full of scores for alpha words)."""
    import gzip
    import json

    from pipelines.sources.web import htmltext

    web = CleanConfig.for_source(source_traits("webtext"), language="any")
    dropped, pages = {}, 0
    for folder in ("html", "aeb-dev"):
        root = CORPORA / "web" / folder
        truth = json.loads((root / "ground-truth.subset.json").read_text(encoding="utf-8"))
        for page_id in sorted(truth):
            data = gzip.decompress((root / "html" / f"{page_id}.html.gz").read_bytes())
            text = htmltext.main_text(htmltext.decode_html(data)[0], "trafilatura")
            meta = {"extractor": "trafilatura"}
            result = clean_document(Document(page_id, "webtext", text, meta=meta), web)
            pages += 1
            if isinstance(result, Reject):
                dropped[page_id[:12]] = (result.reason, result.detail)
    assert pages == 72
    assert dropped == {}
