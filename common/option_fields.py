"""Settings declared once: a dataclass field carries its command-line flag's help, choices and
check, and the flag, its default, its type and the validation are generated from the field.

    @dataclass
    class Config:
        steps: int = option(100, check=POSITIVE, help="optimizer steps")
        mode: str = option("fast", choices=("fast", "exact"))

    add_options(parser, Config, group="run")     # --steps (int, default 100), --mode {fast,exact}
    config = from_namespace(Config, parser.parse_args(argv))   # Config(steps=..., mode=...)
    check_options(config)                         # in __post_init__: ValueError, one line

The rules, so that a field says only what differs from them:
- flag: ``--`` and the field's name with dashes; a bool field is a switch: ``--name`` sets True
  where the default is False, ``--no-name`` sets False where it is True.
- type: the field's annotation without None (``int | None`` -> int, ``list[str]`` -> str per
  item); str needs none (argparse's values are strings).
- default: the field's; a field without one is a required option (argparse enforces it on a
  command's own parser; `from_namespace` reports the missing ones on a shared one, e.g. Beam's).
- dest: argparse's, from the flag; a ``--no-`` switch stores into its field's name.
- check and choices hold for the field's value however the config was made (flags, code, a
  checkpoint's dict), so they are tested in __post_init__, not by the parser; choices also
  go to argparse, for --help and its error. An option with `convert` (flag value -> field
  value) has choices of the flag's values, which argparse alone checks.
- None passes every check: it means "decided later" (a default resolved from the device, the
  model or the source).

It lives in common/ because pipelines and train both declare their options with it and may not
import each other (README, "The data's path").
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

_KEY = "shardsmith.option"
_UNSET = object()  # flag_default not given (None is a default)


@dataclasses.dataclass(frozen=True)
class Check:
    """A rule on one value: `holds(value)`, else the error "<flag> <rule>, got <value>".
    Rules compare so that NaN fails them."""

    holds: Callable[[Any], bool]
    rule: str


POSITIVE = Check(lambda v: v > 0, "must be positive")
NON_NEGATIVE = Check(lambda v: v >= 0, "must be >= 0")


def at_least(low) -> Check:
    return Check(lambda v: v >= low, f"must be >= {low}")


def within(low, high, *, low_open: bool = False, high_open: bool = False) -> Check:
    """low <= v <= high, either end open: "must be in (0, 1]"."""

    def holds(v) -> bool:
        above = v > low if low_open else v >= low
        below = v < high if high_open else v <= high
        return above and below

    brackets = ("(" if low_open else "[", ")" if high_open else "]")
    return Check(holds, f"must be in {brackets[0]}{low}, {high}{brackets[1]}")


@dataclasses.dataclass(frozen=True)
class Option:
    """What a field says about its flag beyond the rules (module docstring)."""

    help: str | None = None
    flag: str | None = None
    dest: str | None = None
    # a sequence, or a function giving one when a parser is built or a value checked (a
    # registry filled on import, which the declaring module must not import first)
    choices: Sequence | Callable[[], Sequence] | None = None
    check: Check | None = None
    metavar: str | None = None
    type: Callable[[str], Any] | None = None
    nargs: str | None = None
    action: str | None = None  # "append"; a bool field's switch needs none
    convert: Callable[[Any], Any] | None = None  # parsed flag -> field value; ValueError: refused
    flag_default: Any = _UNSET  # where the field's default is no flag value
    group: str | None = None  # the argument group, where it is not add_options' group
    cli: bool = True  # False: a checked setting without a flag


def option(default: Any = dataclasses.MISSING, *, default_factory=dataclasses.MISSING, **kwargs):
    """A dataclass field declaring its option: `default` as for `dataclasses.field`, the rest
    `Option`'s fields."""
    return dataclasses.field(
        default=default, default_factory=default_factory, metadata={_KEY: Option(**kwargs)}
    )


@dataclasses.dataclass(frozen=True)
class Declared:
    """One declared field, with what its flag derives from it."""

    field: dataclasses.Field
    option: Option
    hint: Any  # the field's annotation, evaluated

    @property
    def name(self) -> str:
        return self.field.name

    @property
    def switch(self) -> bool:
        return self.hint is bool

    @property
    def required(self) -> bool:
        return (
            self.field.default is dataclasses.MISSING
            and self.field.default_factory is dataclasses.MISSING
        )

    @property
    def flag(self) -> str:
        if self.option.flag:
            return self.option.flag
        dashed = self.name.replace("_", "-")
        return f"--no-{dashed}" if self.switch and self.field.default else f"--{dashed}"

    @property
    def dest(self) -> str:
        if self.option.dest:
            return self.option.dest
        if self.switch and self.field.default:
            return self.name
        return self.flag[2:].replace("-", "_")

    @property
    def label(self) -> str:
        """How errors name the setting: its flag, or the field of a setting without one."""
        return self.flag if self.option.cli else self.name

    def choices(self) -> tuple | None:
        choices = self.option.choices
        return tuple(choices() if callable(choices) else choices) if choices else None

    def value_type(self) -> Callable[[str], Any] | None:
        if self.option.type is not None:
            return self.option.type
        hint = self.hint
        if isinstance(hint, types.UnionType):
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        if typing.get_origin(hint) in (list, tuple):
            hint = typing.get_args(hint)[0]
        return hint if hint in (int, float) else None

    def argument(self, enforce_required: bool) -> dict:
        """add_argument's keywords for this field's flag."""
        kwargs: dict[str, Any] = {"help": self.option.help}
        if self.switch:
            kwargs["action"] = "store_false" if self.field.default else "store_true"
            if self.field.default:
                kwargs["dest"] = self.dest
            return kwargs
        if self.option.dest:
            kwargs["dest"] = self.option.dest
        given = {
            "type": self.value_type(),
            "choices": self.choices(),
            "metavar": self.option.metavar,
            "nargs": self.option.nargs,
            "action": self.option.action,
        }
        kwargs.update({k: v for k, v in given.items() if v is not None})
        if self.required:
            if enforce_required:
                kwargs["required"] = True
        elif self.option.flag_default is not _UNSET:
            kwargs["default"] = self.option.flag_default
        elif self.field.default_factory is not dataclasses.MISSING:
            kwargs["default"] = self.field.default_factory()
        else:
            kwargs["default"] = self.field.default
        return kwargs

    def error(self, value) -> str | None:
        """The one-line error for this field's value, or None when it holds."""
        if value is None:
            return None
        choices = None if self.option.convert else self.choices()
        if choices is not None and value not in choices:
            listed = ", ".join(map(str, choices))
            return f"{self.label} must be one of {listed}, got {value!r}"
        check = self.option.check
        if check is not None and not check.holds(value):
            return f"{self.label} {check.rule}, got {value!r}"
        return None


@functools.cache
def declared(cls) -> tuple[Declared, ...]:
    """The fields of dataclass `cls` declared with `option`, in field order (once a class: a
    config checks itself on every construction)."""
    hints = typing.get_type_hints(cls)
    return tuple(
        Declared(f, f.metadata[_KEY], hints[f.name])
        for f in dataclasses.fields(cls)
        if _KEY in f.metadata
    )


def add_options(
    parser: argparse.ArgumentParser,
    cls,
    *,
    group: str | None = None,
    enforce_required: bool = True,
) -> None:
    """Add a flag per declared field of `cls` to `parser`, in field order, each into the
    argument group of its option's title, else of `group`, else the parser's own list (a group
    of that title the parser already has takes them: two classes may share one).
    enforce_required=False where the parser is shared by commands (Beam's): `from_namespace`
    then reports what is missing."""
    for item in declared(cls):
        if item.option.cli:
            title = item.option.group or group
            container = _group(parser, title) if title else parser
            container.add_argument(item.flag, **item.argument(enforce_required))


def _group(parser: argparse.ArgumentParser, title: str):
    # argparse keeps its groups only in this attribute; it has no lookup by title
    for existing in parser._action_groups:
        if existing.title == title:
            return existing
    return parser.add_argument_group(title)


def from_namespace(cls, namespace, **given):
    """`cls` from the flags `add_options` added, parsed into `namespace` (an argparse Namespace
    or a Beam options view); `given`: the fields set otherwise. ValueError naming every
    required flag that is missing."""
    values, missing = {}, []
    for item in declared(cls):
        if not item.option.cli or item.name in given:
            continue
        value = getattr(namespace, item.dest)
        if item.required and not value:
            missing.append(item.flag)
        elif item.option.convert is not None:
            values[item.name] = item.option.convert(value)
        else:
            values[item.name] = value
    if missing:
        raise ValueError(f"missing required option(s): {', '.join(missing)}")
    return cls(**values, **given)


def check_options(config) -> None:
    """ValueError with the first declared field of `config` whose value breaks its choices or
    its check (one line, naming the flag)."""
    for item in declared(type(config)):
        message = item.error(getattr(config, item.name))
        if message:
            raise ValueError(message)
