"""Model definitions (GPT, BERT), named presets and Hugging Face conversion.

Plain ``nn.Module``s with no knowledge of distribution or data formats; parallelism (DDP,
FSDP2, tensor parallel) is applied from outside. ``train.models.hf`` needs ``transformers``
only when its HF-building functions are called and is not imported here.
"""

from train.models.bert import Bert, BertConfig, BertOutput
from train.models.gpt import GPT, GPTConfig, masked_cross_entropy
from train.models.presets import (
    PRESETS,
    Preset,
    build_model,
    count_params,
    get_preset,
    pad_vocab_size,
)

__all__ = [
    "GPT",
    "PRESETS",
    "Bert",
    "BertConfig",
    "BertOutput",
    "GPTConfig",
    "Preset",
    "build_model",
    "count_params",
    "get_preset",
    "masked_cross_entropy",
    "pad_vocab_size",
]
