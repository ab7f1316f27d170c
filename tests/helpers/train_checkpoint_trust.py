"""What the unit and the integration tests of train_checkpoint_trust share."""

from __future__ import annotations

import os


class RunsCode:
    """Unpickles as a call to os.system: touches ``marker`` if anything unpickles it."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))
