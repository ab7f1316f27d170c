"""What every side of the monorepo shares below the shard format: opening files we did not write
(`safe_io`), the one rule for which output folders a command may write (`output_dir`),
command-line options declared once as config fields (`option_fields`), and the parser every
command builds, whose error is one line (`cli`).

Imports nothing first-party; `dataset_format`, `pipelines`, `train` and `tools` build on it.
"""
