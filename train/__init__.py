"""Pretraining of GPT and BERT models on dataset_format token shards with torch.distributed."""
