"""train_tokenizer keeps the documents of a Wikipedia dump in the dump's own language, as
preprocess does (CleanConfig.for_run: the <siteinfo> language where --language is not given)."""

from __future__ import annotations


def test_the_run_language_is_decided_as_preprocess_decides_it():
    from pipelines.clean import CleanConfig
    from pipelines.options import PreprocessConfig
    from pipelines.sources import source_traits

    for source, language in [("wikipedia", None), ("books", None), ("wikipedia", "fr")]:
        config = PreprocessConfig(source, "x", "y", "t", language=language, dedup=False)
        assert config.clean_config() == CleanConfig.for_run(source_traits(source), language)
    assert CleanConfig.for_run(source_traits("wikipedia"), None).language_from_source
    assert not CleanConfig.for_run(source_traits("books"), None).language_from_source
