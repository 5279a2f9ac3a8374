"""Tokenizers, datasets and data modules; real file formats, tested on small generated files."""

from attnkit.data.generators.reverse import reverse_sequences
from attnkit.data.sets import (
    AnomalyDataConfig,
    ItemFeatures,
    SetAnomalyDataModule,
    SetAnomalyDataset,
    load_item_features,
)
from attnkit.data.synthetic import BatchedTensorDataset, ReverseDataConfig, ReverseDataModule
from attnkit.data.text import (
    PAD,
    UNK,
    ClassifyDataConfig,
    TextClassificationDataModule,
    TextSplits,
    collate_text_batch,
    generate_synthetic_corpus,
    load_imdb,
    load_splits,
    load_table,
    read_table,
    stratified_split,
)
from attnkit.data.tokenizers import Tokenizer, build_tokenizer, tokenizer_from_dict

__all__ = [
    "PAD",
    "UNK",
    "AnomalyDataConfig",
    "BatchedTensorDataset",
    "ClassifyDataConfig",
    "ItemFeatures",
    "ReverseDataConfig",
    "ReverseDataModule",
    "SetAnomalyDataModule",
    "SetAnomalyDataset",
    "TextClassificationDataModule",
    "TextSplits",
    "Tokenizer",
    "build_tokenizer",
    "collate_text_batch",
    "generate_synthetic_corpus",
    "load_imdb",
    "load_item_features",
    "load_splits",
    "load_table",
    "read_table",
    "reverse_sequences",
    "stratified_split",
    "tokenizer_from_dict",
]
