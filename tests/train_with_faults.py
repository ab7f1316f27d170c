"""train/pretrain.py with faults injected (tests/train_faults.py), for torchrun tests:

torchrun ... tests/train_with_faults.py [--grad-fault SPEC] [--kill-at-step N
    --kill-marker PATH [--kill-rank R]] [--signal-at-step N [--signal-name SIGTERM]
    [--signal-rank R]] -- TRAINER FLAGS...

Also runs in one process (python tests/train_with_faults.py ...). Exits as train/pretrain.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.train_faults import FaultHooks  # noqa: E402
from train.config import parse_args  # noqa: E402
from train.loop import main  # noqa: E402
from train.runtime import launched_by_torchrun, leave_finished_rank  # noqa: E402

if __name__ == "__main__":
    split = sys.argv.index("--")
    parser = argparse.ArgumentParser()
    parser.add_argument("--grad-fault")
    parser.add_argument("--kill-at-step", type=int)
    parser.add_argument("--kill-marker")
    parser.add_argument("--kill-rank", type=int, default=1)
    parser.add_argument("--signal-at-step", type=int)
    parser.add_argument("--signal-name", default="SIGINT")
    parser.add_argument("--signal-rank", type=int)
    faults = parser.parse_args(sys.argv[1:split])
    argv = ["train/pretrain.py", *sys.argv[split + 1 :]]
    status = main(parse_args(argv[1:]), FaultHooks(**vars(faults)), argv)["exit_status"]
    if launched_by_torchrun():
        leave_finished_rank(status)  # as train/pretrain.py does
    sys.exit(status)
