"""What --help says: no "(default: None)" where a default is decided later, each help line said
once, every command of tools/convert listed, and one name for the tokenizer flag."""

from __future__ import annotations


def test_no_help_line_ends_with_a_default_of_none():
    from train.config import build_parser

    text = build_parser().format_help()
    assert "(default: None)" not in text
    assert "(default: 8)" in text  # --global-batch: a default that is one is still shown
    flat = " ".join(text.split())
    assert "tokens per sample (default: the model's context length) --mask-prob" in flat


def test_the_input_flags_help_names_its_files_once():
    from pipelines.dedup.__main__ import build_parser as dedup_parser
    from pipelines.tokenize.train_tokenizer import build_parser

    for parser, what in ((build_parser(), "input files"), (dedup_parser(), "Parquet document files")):
        flat = " ".join(parser.format_help().split())
        assert f"{what}: one or more paths" in flat
        assert flat.count("input files:") == (1 if what == "input files" else 0)


def test_convert_names_the_tokenizer_flag_as_the_other_tools_do():
    from dataset_format.interop import _parser

    args = _parser().parse_args(["import-nanogpt", "a.bin", "out", "--tokenizer", "t.json"])
    assert args.tokenizer_file == "t.json"
    old = _parser().parse_args(["import-nanogpt", "a.bin", "out", "--tokenizer-file", "t.json"])
    assert old.tokenizer_file == "t.json"  # the name it had still works
    sub_help = _parser()._subparsers._group_actions[0].choices["import-nanogpt"].format_help()
    assert "--tokenizer FILE" in sub_help and "--tokenizer-file" not in sub_help
