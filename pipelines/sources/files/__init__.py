"""Generic record files: JSON lines (jsonl) and Parquet (parquet)."""
