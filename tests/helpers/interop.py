"""What the unit and the integration tests of interop share."""

from __future__ import annotations

import numpy as np


def write_llmc_file(path, tokens, magic=20240520, version=1, dtype="<u2", count=None):
    """llm.c's write_datafile layout: 256 int32 header (magic, version, count), then tokens."""
    header = np.zeros(256, dtype="<i4")
    header[:3] = (magic, version, len(tokens) if count is None else count)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=dtype).tobytes())
