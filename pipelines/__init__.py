"""Beam pipelines: raw corpora -> cleaned, deduplicated, tokenized shard sets."""
