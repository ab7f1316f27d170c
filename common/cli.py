"""The command-line parser every tool of the project builds: argparse's, with an error that is
the error. argparse prints the whole usage (40-160 lines for the trainer and preprocess) before
its one line, which pushes the line that matters off the screen; here a bad command line prints

    python train/pretrain.py: error: argument --lr: invalid float value: 'x'
    run 'python train/pretrain.py --help' for usage

and exits 2, as argparse does. `OneLineErrors` goes in front of another parser class (Beam's
own, which PipelineOptions classes need); `ArgumentParser` is argparse's with it. Sub-command
parsers are made of their parent's class, so `add_subparsers` needs nothing more.

A flag of another trainer or preprocessor (`--train-iters`, Megatron-LM's) is refused with a
pointer to ours (`common.foreign_flags`), before argparse would complain of something else
(a required flag that the foreign one meant to give); any other unknown flag names the closest
of ours. No flag is taken by a prefix of its name (`allow_abbrev=False`): `--max-step` is not
`--max-steps`.
"""

from __future__ import annotations

import argparse
import difflib
import sys

from common.foreign_flags import foreign_flag_hint

_UNRECOGNIZED = "unrecognized arguments: "


def known_flags(parser: argparse.ArgumentParser) -> set[str]:
    """The flags `parser` and its sub-commands' parsers take."""
    flags = set(parser._option_string_actions)  # argparse keeps them only here
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags |= known_flags(sub)
    return flags


def unknown_flag_line(flag: str, known: set[str]) -> str:
    """How to name a flag the command does not take: the pointer to ours where it is another
    tool's, else the closest flag of ours."""
    hint = foreign_flag_hint(flag, known)
    if hint:
        return hint
    flags = sorted(f for f in known if f.startswith("--"))
    # an abbreviation first (argparse took the one flag it starts, where it was allowed)
    close = [f for f in flags if f.startswith(flag)] or difflib.get_close_matches(flag, flags, 1)
    return f"{flag} (did you mean {close[0]}?)" if close else flag


class OneLineErrors:
    """An argparse parser mixin: `error` prints the error and a hint, not the usage; another
    tool's flag gets a pointer to ours."""

    prog: str

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        known = known_flags(self)
        for arg in args:
            if arg == "--":
                break
            flag = arg.split("=", 1)[0]
            if arg.startswith("--") and flag not in known:
                hint = foreign_flag_hint(flag, known)
                if hint:
                    self.error(hint)
                if any(k.startswith(flag) for k in known):  # an abbreviation: not a missing flag
                    self.error(f"{_UNRECOGNIZED}{unknown_flag_line(flag, known)}")
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        if message.startswith(_UNRECOGNIZED) and "(did you mean" not in message:
            known = known_flags(self)
            words = message[len(_UNRECOGNIZED):].split()
            flags = [word.split("=", 1)[0] for word in words if word.startswith("--")]
            named = [unknown_flag_line(flag, known) for flag in flags]
            if named:
                message = f"unrecognized arguments: {', '.join(named)}"
        self.exit(2, f"{self.prog}: error: {message}\nrun '{self.prog} --help' for usage\n")


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's formatter that ends a flag's help with its default, where it has one: a
    default of None (decided later: from the model, the device, the source) is left unsaid,
    as the help says what decides it."""

    def _get_help_string(self, action):
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


class ArgumentParser(OneLineErrors, argparse.ArgumentParser):
    """argparse.ArgumentParser with one-line errors (`OneLineErrors`), taking no flag by a
    prefix of its name."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
