"""Datasets and data modules; real file formats, tested on small generated files (tokenizers: :mod:`attnkit.text`).

One package per task (``anomaly``, ``classify``, ``lm``, ``reverse``, ``translate``): its ``config``
module describes the task's ``data`` section without importing Lightning; its ``module`` holds the
Lightning data module. Readers are in ``readers``, padding and collating in ``collate``.
"""

from attnkit.data.anomaly.config import AnomalyDataConfig
from attnkit.data.classify.config import ClassifyDataConfig
from attnkit.data.classify.splits import load_splits, load_table
from attnkit.data.generators.reverse import reverse_sequences
from attnkit.data.generators.reviews import generate_synthetic_corpus
from attnkit.data.lm.config import LMDataConfig
from attnkit.data.readers.imdb import load_imdb
from attnkit.data.readers.tables import read_table
from attnkit.data.reverse.config import ReverseDataConfig
from attnkit.data.splits import TextSplits, stratified_split
from attnkit.data.translate.config import PairsDataConfig

__all__ = [
    "AnomalyDataConfig",
    "ClassifyDataConfig",
    "LMDataConfig",
    "PairsDataConfig",
    "ReverseDataConfig",
    "TextSplits",
    "generate_synthetic_corpus",
    "load_imdb",
    "load_splits",
    "load_table",
    "read_table",
    "reverse_sequences",
    "stratified_split",
]
