"""Readers of real data formats: text corpora, csv/tsv/jsonl tables, aclImdb folders, sentence-pair files, CIFAR-100,
and Parquet / Arrow files and ``datasets`` folders (``columnar``, ``arrow_rows``, ``columnar_tasks``)."""
