"""Evaluate a checkpoint: ``python train/evaluate.py --checkpoint RUN --task wikitext103 --data FILE``.

One process, or under ``torchrun`` (data-parallel, results reduced). Flags: ``--help``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script from anywhere: the repository root is the import root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.signals import exit_on_stop_signals  # noqa: E402

exit_on_stop_signals("train/evaluate.py")  # before torch's imports: they take seconds

from train.eval.run import main  # noqa: E402

if __name__ == "__main__":
    main()
