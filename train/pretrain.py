"""Pretrain GPT or BERT on shard sets: ``python train/pretrain.py --data shards/ [flags]``.

One process by default; under ``torchrun --nproc_per_node N train/pretrain.py ...`` every rank
runs this and joins the process group from torchrun's environment. Flags: ``--help``.
SIGINT (Ctrl-C), SIGTERM or SIGHUP finish the current step, save a checkpoint and exit 130 /
143 / 129; before the first step they stop the run at once, with one line (common/signals.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script from anywhere: the repository root is the import root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.signals import exit_on_stop_signals  # noqa: E402

exit_on_stop_signals("train/pretrain.py")  # before torch's imports: they take seconds

from train.config import parse_args  # noqa: E402
from train.loop import main  # noqa: E402
from train.runtime import launched_by_torchrun, leave_finished_rank  # noqa: E402

if __name__ == "__main__":
    # 0, or 130 / 143 / 129 for a run that SIGINT / SIGTERM / SIGHUP stopped after saving
    status = main(parse_args(), argv=sys.argv)["exit_status"]
    if launched_by_torchrun():
        leave_finished_rank(status)
    sys.exit(status)
