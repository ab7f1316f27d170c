"""The command-line parser every tool of the project builds: argparse's, with an error that is
the error. argparse prints the whole usage (40-160 lines for the trainer and preprocess) before
its one line, which pushes the line that matters off the screen; here a bad command line prints

    python train/pretrain.py: error: argument --lr: invalid float value: 'x'
    run 'python train/pretrain.py --help' for usage

and exits 2, as argparse does. `OneLineErrors` goes in front of another parser class (Beam's
own, which PipelineOptions classes need); `ArgumentParser` is argparse's with it. Sub-command
parsers are made of their parent's class, so `add_subparsers` needs nothing more.
"""

from __future__ import annotations

import argparse


class OneLineErrors:
    """An argparse parser mixin: `error` prints the error and a hint, not the usage."""

    prog: str

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\nrun '{self.prog} --help' for usage\n")


class ArgumentParser(OneLineErrors, argparse.ArgumentParser):
    """argparse.ArgumentParser with one-line errors (`OneLineErrors`)."""
