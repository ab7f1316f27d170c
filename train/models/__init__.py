"""Model families, each declared by its spec (``spec.py``) and listed in ``registry.py``,
named presets and Hugging Face conversion.

Plain ``nn.Module``s with no knowledge of distribution or data formats; parallelism (DDP,
FSDP2, tensor parallel) is applied from outside by each family's plan. The HF conversions
need ``transformers`` only when their HF-building functions are called.
"""

from train.models.bert import Bert, BertConfig, BertOutput
from train.models.gpt import GPT, GPTConfig
from train.models.layers import masked_cross_entropy
from train.models.presets import (
    PRESETS,
    build_model,
    count_params,
    get_preset,
    pad_vocab_size,
)
from train.models.registry import FAMILIES, get_spec, spec_of_model
from train.models.spec import ModelSpec, Preset

__all__ = [
    "FAMILIES",
    "GPT",
    "PRESETS",
    "Bert",
    "BertConfig",
    "BertOutput",
    "GPTConfig",
    "ModelSpec",
    "Preset",
    "build_model",
    "count_params",
    "get_preset",
    "get_spec",
    "masked_cross_entropy",
    "pad_vocab_size",
    "spec_of_model",
]
