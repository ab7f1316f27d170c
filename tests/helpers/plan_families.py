"""What the unit and the integration tests of plan_families share."""

from __future__ import annotations

import torch

from train.models.registry import spec_of_config


def built(config):
    """The model of ``config``, its parameters on the meta device (no memory)."""
    with torch.device("meta"):
        return spec_of_config(config).build(config)
