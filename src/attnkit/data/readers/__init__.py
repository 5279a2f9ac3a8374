"""Readers of real data formats: text corpora, csv/tsv/jsonl tables, aclImdb folders, sentence-pair files, CIFAR-100."""
