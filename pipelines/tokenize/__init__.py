"""The tokenize stage (a tokenizer's files are read into a `TextTokenizer` by
`dataset_format.tokenizer`, shared with train/): the
reference every worker loads it from (`tokenizer_ref`), batched encoding of documents
(`encode`), its Beam transform (`transforms`), and `python -m pipelines.tokenize.train_tokenizer`.

Importing this package imports none of them: the tokenizers library loads only where it is used.
"""
