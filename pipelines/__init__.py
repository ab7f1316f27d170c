"""Beam pipelines: raw corpora -> cleaned, deduplicated, tokenized shard sets."""

import logging

# Beam warns through the root logger while it is being imported ("apitools not found": a GCP
# client we do not use). A handler put there before any module of this package imports Beam
# keeps Python from adding its default one, which would print that line in every command's
# output (preprocess, dedup, train_tokenizer, the URL filter); each command's main() installs
# the handler it logs through.
logging.getLogger().addHandler(logging.NullHandler())
