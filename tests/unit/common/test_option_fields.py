"""common.option_fields: a declared field yields its flag, default, type, choices and
check. The three commands' own parsers are tested in test_train_config, test_pipeline_units and
test_dedup_config; here the rules themselves, on a small config and argparse."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from common.option_fields import (
    NON_NEGATIVE,
    POSITIVE,
    add_options,
    at_least,
    check_options,
    declared,
    from_namespace,
    option,
    within,
)

LOOKUPS: list[str] = []


def _modes() -> tuple[str, ...]:
    LOOKUPS.append("modes")
    return ("fast", "exact")


@dataclasses.dataclass(frozen=True)
class Run:
    data: list[str] = option(nargs="+", metavar="PATH", help="input files")
    steps: int = option(100, check=POSITIVE, help="optimizer steps (%(default)s)")
    seq_len: int | None = option(None, check=POSITIVE, group="model")
    rate: float = option(0.5, check=within(0, 1, high_open=True))
    share: float = option(0.15, check=within(0, 1, low_open=True, high_open=True))
    mode: str = option("fast", choices=_modes)
    verify: bool = option(True, help="skip the check")
    resume: bool = option(False)
    rounds: int = option(3, flag="--cc-rounds", check=at_least(1))
    cased: bool | None = option(
        None,
        choices=("auto", "yes", "no"),
        convert={"auto": None, "yes": True, "no": False}.__getitem__,
        flag_default="auto",
    )
    batch_bytes: int = option(1 << 20, check=NON_NEGATIVE, cli=False)
    notes: str = ""  # not an option: no flag, no check

    def __post_init__(self) -> None:
        check_options(self)


def parser(**kwargs) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_options(p, Run, group="run", **kwargs)
    return p


def parse(argv: list[str]) -> Run:
    return from_namespace(Run, parser().parse_args(argv))


def test_flags_types_and_defaults_come_from_the_fields():
    run = parse(["--data", "a.txt", "b.txt", "--steps", "7", "--seq-len", "64", "--rate", "0.25"])
    assert run == Run(data=["a.txt", "b.txt"], steps=7, seq_len=64, rate=0.25)
    assert isinstance(run.steps, int) and isinstance(run.rate, float)
    assert parse(["--data", "x"]) == Run(data=["x"])  # every default is the field's
    with pytest.raises(SystemExit):
        parse(["--data", "x", "--steps", "seven"])  # int | None -> int, refused by argparse


def test_switches_and_explicit_flags():
    run = parse(["--data", "x", "--no-verify", "--resume", "--cc-rounds", "5"])
    assert (run.verify, run.resume, run.rounds) == (False, True, 5)
    namespace = parser().parse_args(["--data", "x"])
    assert namespace.verify is True and namespace.cc_rounds == 3  # dest from the flag
    with pytest.raises(SystemExit):
        parse(["--data", "x", "--rounds", "5"])  # the field's name is no flag when one is given


def test_a_field_without_a_default_is_required(capsys):
    with pytest.raises(SystemExit):
        parse(["--steps", "3"])
    assert "the following arguments are required: --data" in capsys.readouterr().err
    # a shared parser (Beam's) does not enforce it; building the config names what is missing
    namespace = parser(enforce_required=False).parse_args(["--steps", "3"])
    with pytest.raises(ValueError, match=r"^missing required option\(s\): --data$"):
        from_namespace(Run, namespace)


def test_choices_restrict_the_flag_and_the_field(capsys):
    assert parse(["--data", "x", "--mode", "exact"]).mode == "exact"
    with pytest.raises(SystemExit):
        parse(["--data", "x", "--mode", "slow"])
    assert "invalid choice: 'slow'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="^--mode must be one of fast, exact, got 'slow'$"):
        Run(data=["x"], mode="slow")  # a config made in code is held to them too
    assert "modes" in LOOKUPS  # the function giving them ran


def test_a_converted_option_takes_the_flags_values():
    assert parse(["--data", "x"]).cased is None  # flag default "auto"
    assert parse(["--data", "x", "--cased", "no"]).cased is False
    assert parse(["--data", "x", "--cased", "yes"]).cased is True
    assert Run(data=["x"], cased=True).cased is True  # the field holds the converted value


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"steps": 0}, "--steps must be positive, got 0"),
        ({"seq_len": -1}, "--seq-len must be positive, got -1"),
        ({"rate": 1.0}, r"--rate must be in \[0, 1\), got 1.0"),
        ({"rate": float("nan")}, r"--rate must be in \[0, 1\), got nan"),
        ({"share": 0.0}, r"--share must be in \(0, 1\), got 0.0"),
        ({"steps": float("nan")}, "--steps must be positive, got nan"),
        ({"rounds": 0}, "--cc-rounds must be >= 1, got 0"),  # errors name the flag
        ({"batch_bytes": -1}, "^batch_bytes must be >= 0, got -1$"),  # or a flagless field
    ],
)
def test_checks_give_one_line_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Run(data=["x"], **kwargs)


def test_none_means_decided_later_and_passes_every_check():
    assert Run(data=["x"], seq_len=None).seq_len is None


def test_help_groups_and_what_has_no_flag():
    text = parser().format_help()
    assert "optimizer steps (100)" in text  # %(default)s in a help text
    assert "model:" in text.split("run:")[1]  # its own group, after add_options' one
    assert "--batch-bytes" not in text and "--notes" not in text
    assert [d.name for d in declared(Run)][-1] == "batch_bytes"  # notes is not declared


def test_two_classes_share_a_group_by_title():
    @dataclasses.dataclass
    class Extra:
        level: int = option(2)

    p = parser()
    add_options(p, Extra, group="run")
    titles = [g.title for g in p._action_groups]
    assert titles.count("run") == 1
    assert p.parse_args(["--data", "x", "--level", "4"]).level == 4
