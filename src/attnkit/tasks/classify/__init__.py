"""Text classification (the sentiment tutorial's setup): IMDB, any CSV/TSV/JSONL file, or a built-in corpus
(its LightningModule: :mod:`attnkit.tasks.classify.module`)."""

from attnkit.tasks.classify.task import ClassifyConfig, ClassifyModelConfig, ClassifyTask

__all__ = ["ClassifyConfig", "ClassifyModelConfig", "ClassifyTask"]
