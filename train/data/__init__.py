"""The trainer's data side: shard sets -> shuffled, blended, resumable samples.

Everything here is numpy over memory-mapped shards; torch appears only in `collate`.
"""

from train.data.bert_dataset import (
    BertDataset,
    MaskingConfig,
    build_bert_datasets,
    continuation_ids_from_vocab,
)
from train.data.blend import BlendedDataset, blending_indices
from train.data.gpt_dataset import GPTDataset, build_gpt_datasets
from train.data.sampler import PretrainingSampler, collate
from train.data.spec import (
    Dataset,
    DataSource,
    check_tokenizers,
    parse_data_spec,
    resolve_tokenizer,
    split_documents,
    tokenizer_info_from_file,
)

__all__ = [
    "BertDataset",
    "BlendedDataset",
    "DataSource",
    "Dataset",
    "GPTDataset",
    "MaskingConfig",
    "PretrainingSampler",
    "blending_indices",
    "build_bert_datasets",
    "build_gpt_datasets",
    "check_tokenizers",
    "collate",
    "continuation_ids_from_vocab",
    "parse_data_spec",
    "resolve_tokenizer",
    "split_documents",
    "tokenizer_info_from_file",
]
