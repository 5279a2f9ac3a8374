"""Text classification (the sentiment tutorial's setup): IMDB, any CSV/TSV/JSONL file, or a built-in corpus."""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit.data.text import ClassifyDataConfig, TextClassificationDataModule
from attnkit.models import ClassifierConfig
from attnkit.models.config import EncoderConfig
from attnkit.tasks.base import Task, TaskConfig
from attnkit.training.config import OptimConfig, TrainerConfig
from attnkit.training.module import TaskModule

__all__ = ["ClassifyConfig", "ClassifyModule", "ClassifyTask"]


class ClassifyModelConfig(EncoderConfig):
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    dim_feedforward: int = 128
    dropout: float = 0.1
    positional: Literal["learned", "sinusoidal"] = "learned"
    pooling: Literal["mean", "cls"] = "mean"


class ClassifyConfig(TaskConfig):
    model: ClassifyModelConfig = ClassifyModelConfig()
    data: ClassifyDataConfig = ClassifyDataConfig()
    optim: OptimConfig = OptimConfig(optimizer="adamw", lr=1e-3, weight_decay=0.01, warmup=100, gradient_clip_val=1.0)
    trainer: TrainerConfig = TrainerConfig(max_epochs=5, batch_size=32)


class ClassifyModule(TaskModule):
    def step(self, batch: Any) -> tuple[Tensor, Tensor, Tensor]:
        ids, mask, labels = batch
        logits = self.model(ids, mask)
        return F.cross_entropy(logits, labels), logits, labels


class ClassifyTask(Task):
    name = "classify"
    summary = "text classification: IMDB folders, CSV/TSV/JSONL files, or a built-in generated corpus"
    config_cls = ClassifyConfig
    module_cls = ClassifyModule

    def build_datamodule(self, cfg: Any, artifacts: dict[str, Any] | None = None) -> TextClassificationDataModule:
        t = cfg.trainer
        if artifacts:
            return TextClassificationDataModule.from_artifacts(cfg.data, artifacts, t.batch_size, t.num_workers)
        return TextClassificationDataModule(cfg.data, t.batch_size, t.num_workers)

    def model_spec(self, cfg: Any, datamodule: Any) -> tuple[str, dict[str, Any], int]:
        model = ClassifierConfig(
            **cfg.model.model_dump(),
            vocab_size=datamodule.vocab_size,
            num_classes=datamodule.num_classes,
            max_len=datamodule.max_len,
            pad_id=datamodule.pad_id,
        )
        return "classifier", model.model_dump(), datamodule.num_classes

    def predict(self, module: TaskModule, inputs: list[str]) -> list[str]:
        cfg = ClassifyConfig.model_validate(module.hparams["config"])
        dm = self.build_datamodule(cfg, module.hparams["artifacts"])
        ids, mask = dm.encode_texts(inputs)
        with torch.no_grad():
            probs = module.model(ids, mask).softmax(-1)
        names = module.hparams["artifacts"]["label_names"]
        best = probs.argmax(-1)
        return [f"{names[int(i)]}\t{float(p[i]):.3f}" for i, p in zip(best, probs)]
