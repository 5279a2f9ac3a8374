"""Text classification (the sentiment tutorial's setup): IMDB, any CSV/TSV/JSONL file, or a built-in corpus."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from pydantic import Field

from attnkit.data.classify.config import ClassifyDataConfig
from attnkit.data.collate import chunks
from attnkit.data.readers.arrow_rows import Column, read_rows
from attnkit.data.readers.columnar import is_columnar, open_columnar
from attnkit.data.readers.lines import numbered_inputs
from attnkit.data.readers.tables import SUPPORTED_TABLE_SUFFIXES, read_column
from attnkit.errors import ConfigError
from attnkit.interop import load_encoder, pretrained_encoder_config, pretrained_tokenizer
from attnkit.models import BertClassifier, BertClassifierConfig, ClassifierArchitecture, ClassifierConfig
from attnkit.models.lora import LoraFineTuning, load_base_state_dict
from attnkit.tasks.base import AttentionExample, ModelSpec, Task, TaskConfig, attention_weights
from attnkit.tasks.registry import register_task

if TYPE_CHECKING:
    from attnkit.data.classify.module import TextClassificationDataModule
    from attnkit.training.module import TaskModule

__all__ = ["ClassifyConfig", "ClassifyTask"]


class ClassifyModelConfig(ClassifierArchitecture, LoraFineTuning):
    """The classifier's architecture (its longest input is ``data.max_len``), and where it may start from."""

    init: str | None = Field(
        None,
        description="start from a pretrained BERT-family encoder: a Hugging Face folder or an `attnkit import` "
        "folder. Its tokenizer and architecture replace data.vocab_size/min_freq and the model keys above "
        "(dropout and pooling still apply); a new classification head is trained on top",
    )


class ClassifyConfig(TaskConfig):
    defaults: ClassVar[dict[str, Any]] = {
        "model": {"d_model": 64, "dim_feedforward": 128},
        "optim": {"optimizer": "adamw", "lr": 1e-3, "weight_decay": 0.01, "warmup": 100, "gradient_clip_val": 1.0},
        "trainer": {"max_epochs": 5, "batch_size": 32},
    }
    model: ClassifyModelConfig = ClassifyModelConfig()
    data: ClassifyDataConfig = ClassifyDataConfig()


@register_task
class ClassifyTask(Task[ClassifyConfig]):
    name = "classify"
    summary = "text classification: IMDB folders, CSV/TSV/JSONL files, or a built-in generated corpus"
    config_cls = ClassifyConfig

    def module_class(self) -> type[TaskModule]:
        from attnkit.tasks.classify.module import ClassifyModule

        return ClassifyModule

    def build_datamodule(
        self, cfg: ClassifyConfig, artifacts: dict[str, Any] | None = None
    ) -> TextClassificationDataModule:
        from attnkit.data.classify.module import TextClassificationDataModule

        t = cfg.trainer
        if artifacts:
            return TextClassificationDataModule.from_artifacts(cfg.data, artifacts, t.batch_size, t.num_workers)
        tokenizer = pretrained_tokenizer(cfg.model.init) if cfg.model.init else None
        return TextClassificationDataModule(cfg.data, t.batch_size, t.num_workers, tokenizer=tokenizer)

    def model_spec(self, cfg: ClassifyConfig, datamodule: Any) -> ModelSpec:
        if cfg.model.init:
            return self._pretrained_spec(cfg, datamodule)
        model = ClassifierConfig(
            **cfg.model.model_dump(exclude={"init", "lora"}),
            vocab_size=datamodule.vocab_size,
            num_classes=datamodule.num_classes,
            max_len=datamodule.max_len,
            pad_id=datamodule.pad_id,
        )
        return ModelSpec("classifier", model.model_dump(), num_classes=datamodule.num_classes)

    def _pretrained_spec(self, cfg: ClassifyConfig, datamodule: Any) -> ModelSpec:
        """The pretrained encoder's architecture with a new head (``model.init``)."""
        assert cfg.model.init is not None  # model_spec comes here only with model.init
        encoder = pretrained_encoder_config(cfg.model.init)
        if datamodule.max_len > encoder.max_len:
            raise ConfigError(
                f"data.max_len={datamodule.max_len} is longer than the pretrained encoder's {encoder.max_len} "
                f"positions ({cfg.model.init}); set data.max_len={encoder.max_len} or less"
            )
        if datamodule.vocab_size > encoder.vocab_size:
            raise ConfigError(
                f"the tokenizer of {cfg.model.init} has {datamodule.vocab_size} tokens but its encoder only "
                f"{encoder.vocab_size}"
            )
        model = BertClassifierConfig(
            **encoder.model_dump(exclude={"dropout"}),
            dropout=cfg.model.dropout,
            num_classes=datamodule.num_classes,
            pooling=cfg.model.pooling,
        )
        return ModelSpec("bert_classifier", model.model_dump(), num_classes=datamodule.num_classes)

    def init_weights(self, module: TaskModule, cfg: ClassifyConfig) -> None:
        """With ``model.init``, the encoder starts from the pretrained weights (the head stays new)."""
        if cfg.model.init:
            encoder = load_encoder(cfg.model.init).state_dict()
            assert isinstance(module.model, BertClassifier)  # model_spec: a pretrained encoder with a new head
            load_base_state_dict(module.model.bert, encoder, source=f"model.init={cfg.model.init}")

    def predict(self, module: TaskModule, inputs: list[str]) -> list[str]:
        cfg = ClassifyConfig.model_validate(module.hparams["config"])
        dm = self.build_datamodule(cfg, module.hparams["artifacts"])
        ids, mask = dm.encode_texts(inputs)
        with torch.no_grad():
            probs = module.model(ids, mask).softmax(-1)
        names = module.hparams["artifacts"]["label_names"]
        best = probs.argmax(-1)
        return [f"{names[int(i)]}\t{float(p[i]):.3f}" for i, p in zip(best, probs)]

    def build_eval_datamodule(
        self, cfg: Any, artifacts: dict[str, Any], path: str | Path, *, batch_size: int, standardized: bool = False
    ) -> TextClassificationDataModule:
        """A .csv/.tsv/.jsonl file with the run's ``data.text_column`` and ``data.label_column``."""
        from attnkit.data.classify.module import TextClassificationDataModule

        return TextClassificationDataModule.for_test_file(cfg.data, artifacts, path, batch_size)

    def predict_file(
        self, module: TaskModule, path: str | Path, *, batch_size: int = 64, standardized: bool = False
    ) -> Iterator[dict[str, Any]]:
        """Per text: ``{"line" or "row", "label", "probability"}``. A .csv/.tsv/.jsonl file, or a Parquet/Arrow
        source (a file, a folder of shards, a glob), gives its ``data.text_column`` (``"row"``: the data row, from 1,
        across the source's files in order); any other file one text per line."""
        cfg = ClassifyConfig.model_validate(module.hparams["config"])
        dm = self.build_datamodule(cfg, module.hparams["artifacts"])
        if Path(str(path)).suffix.lower() in SUPPORTED_TABLE_SUFFIXES:
            key, inputs = "row", list(enumerate(read_column(path, cfg.data.text_column), start=1))
        elif is_columnar(path):
            column = Column(cfg.data.text_column, "text", "data.text_column")
            values, _ = read_rows(open_columnar(path, role="--file").files, [column], where=f"--file {path}")
            key, inputs = "row", list(enumerate(values[column.name], start=1))
        else:
            key, inputs = "line", numbered_inputs(path)
        names = dm.label_names
        for chunk in chunks(inputs, batch_size):
            ids, mask = dm.encode_texts([text for _, text in chunk])
            with torch.no_grad():
                probs = module.model(ids.to(module.device), mask.to(module.device)).softmax(-1)
            best, label = probs.max(-1)
            for (number, _), p, k in zip(chunk, best.tolist(), label.tolist()):
                yield {key: number, "label": names[k], "probability": p}

    def attention_examples(
        self, module: TaskModule, texts: list[str] | None = None, indices: list[int] | None = None
    ) -> list[AttentionExample]:
        """Self-attention between the tokens of a text (words out of the vocabulary show as ``<unk>``)."""
        cfg = ClassifyConfig.model_validate(module.hparams["config"])
        dm = self.build_datamodule(cfg, module.hparams["artifacts"])
        names = dm.label_names
        inputs: list[tuple[str, str, int | None]] = []
        for text in texts or []:
            count = len(dm.tokenizer.encode(text))
            if count > dm.max_len:
                raise ValueError(
                    f"classify: the input has {count} tokens but this model reads at most max_len={dm.max_len}; "
                    "shorten it"
                )
            inputs.append(("input", text, None))
        if indices:
            dm.setup("validate")
            assert dm.splits is not None
            val_texts, val_labels = dm.splits.val_texts, dm.splits.val_labels
            for index in indices:
                if not 0 <= index < len(val_texts):
                    raise ValueError(f"classify: validation example {index} out of range (there are {len(val_texts)})")
                inputs.append((f"validation example {index}", val_texts[index], val_labels[index]))
        out = []
        for name, text, label in inputs:
            ids, mask = dm.encode_texts([text])
            ids, mask = ids.to(module.device), mask.to(module.device)
            maps = attention_weights(module.model, ids, mask)
            with torch.no_grad():
                probs = module.model(ids, mask).softmax(-1)[0]
            tok = dm.tokenizer
            words = [tok.id_to_token(int(i)) for i in ids[0]]
            if getattr(module.model, "cls", None) is not None:  # a learned [CLS] vector was prepended
                words = ["[CLS]", *words]
            best = int(probs.argmax())
            title = f"classify, {name}: {names[best]} (p={float(probs[best]):.2f})"
            if label is not None:
                title += f", true {names[label]}"
            out.append(AttentionExample([m[0].cpu() for m in maps], words, words, title, "token", "token"))
        return out
