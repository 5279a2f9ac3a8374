"""Set anomaly detection: find the one item of a set that belongs to another class."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from pydantic import model_validator
from torch import Tensor

from attnkit.data.anomaly.config import AnomalyDataConfig
from attnkit.data.anomaly.features import read_test_sets, standardize_like_run
from attnkit.data.collate import BatchedTensorDataset, identity_collate
from attnkit.data.readers.arrays import read_sets
from attnkit.models import PredictorArchitecture, PredictorConfig
from attnkit.tasks.base import AttentionExample, ModelSpec, Task, TaskConfig, attention_weights
from attnkit.tasks.registry import register_task

if TYPE_CHECKING:
    from attnkit.data.anomaly.module import SetAnomalyDataModule
    from attnkit.data.base import TestDataModule
    from attnkit.training.module import TaskModule

__all__ = ["AnomalyConfig", "AnomalyTask"]


class AnomalyConfig(TaskConfig):
    defaults: ClassVar[dict[str, Any]] = {
        # No positional encoding: the model is permutation-equivariant over the set.
        "model": {"dim_feedforward": 256, "input_dropout": 0.1, "positional": "none"},
        "data": {"train_sets": 4000},
        "optim": {"lr": 5e-4, "warmup": 100, "gradient_clip_val": 5.0},
        "trainer": {"max_epochs": 15, "batch_size": 64},
    }
    model: PredictorArchitecture = PredictorArchitecture()
    data: AnomalyDataConfig = AnomalyDataConfig()

    @model_validator(mode="after")
    def _check_set_model(self) -> AnomalyConfig:
        if self.model.positional != "none":
            raise ValueError(
                f"model.positional={self.model.positional!r}: the anomaly model reads a set, whose items have no "
                "order; it takes no positional encoding (remove the key or set it to none)"
            )
        return self


@register_task
class AnomalyTask(Task[AnomalyConfig]):
    name = "anomaly"
    summary = "set anomaly detection: which item is of another class (digits built in; .npz/.pt; CIFAR-100)"
    config_cls = AnomalyConfig
    feature_inputs = True

    def module_class(self) -> type[TaskModule]:
        from attnkit.tasks.anomaly.module import AnomalyModule

        return AnomalyModule

    def build_datamodule(self, cfg: AnomalyConfig, artifacts: dict[str, Any] | None = None) -> SetAnomalyDataModule:
        from attnkit.data.anomaly.module import SetAnomalyDataModule

        return SetAnomalyDataModule(cfg.data, batch_size=cfg.trainer.batch_size, num_workers=cfg.trainer.num_workers)

    def model_spec(self, cfg: AnomalyConfig, datamodule: Any) -> ModelSpec:
        model = PredictorConfig(**cfg.model.model_dump(), input_dim=datamodule.feature_dim, num_outputs=1)
        return ModelSpec("predictor", model.model_dump(), num_classes=datamodule.set_size)

    def predict(self, module: TaskModule, inputs: list[str], *, standardized: bool = False) -> list[str]:
        """Each input: an index into the test sets, or a .npz/.pt file holding ``sets [S, N, D]`` of
        raw features, standardised here as the run's training features were (``standardized=True``:
        the file's features already are)."""
        cfg = AnomalyConfig.model_validate(module.hparams["config"])
        out: list[str] = []
        test_sets = None
        for item in inputs:
            if item.strip().isdigit():
                if test_sets is None:
                    dm = self.build_datamodule(cfg)
                    dm.setup("test")
                    test_sets = dm.test_dataset
                    assert test_sets is not None  # setup("test") builds it
                index = int(item)
                if index >= len(test_sets):
                    raise ValueError(f"anomaly: test set index {index} out of range (there are {len(test_sets)})")
                x, target = test_sets[index]
                probs = self._probs(module, x.unsqueeze(0))[0]
                guess = f"odd one out at {int(probs.argmax())} (p={float(probs.max()):.3f})"
                out.append(f"set {index}: {guess}, true {int(target)}")
            else:
                sets = self._input_sets(module, item, standardized)[0]
                for i, probs in enumerate(self._probs(module, sets)):
                    out.append(f"{item}[{i}]: odd one out at {int(probs.argmax())} (p={float(probs.max()):.3f})")
        return out

    def build_eval_datamodule(
        self, cfg: Any, artifacts: dict[str, Any], path: str | Path, *, batch_size: int, standardized: bool = False
    ) -> TestDataModule:
        """A .npz/.pt file of ``features [N, D]`` + ``labels [N]`` (``data.test_sets`` fixed sets are
        drawn from the items, as a run's test split is) or of ``sets [S, N, D]`` + ``targets [S]``;
        raw features are standardised with the run's training mean/std unless ``standardized``."""
        from attnkit.data.base import TestDataModule

        sets, targets = read_test_sets(
            path, set_size=cfg.data.set_size, num_sets=cfg.data.test_sets, seed=cfg.data.seed
        )
        sets = standardize_like_run(sets, artifacts, standardized=standardized, where=str(path))
        return TestDataModule(BatchedTensorDataset(sets, targets), batch_size, identity_collate)

    def predict_file(
        self, module: TaskModule, path: str | Path, *, batch_size: int = 64, standardized: bool = False
    ) -> Iterator[dict[str, Any]]:
        """Per set of the file (``sets [S, N, D]``, raw features unless ``standardized``):
        ``{"set", "odd_position", "probability"}`` (+ ``"target"`` when the file has ``targets``)."""
        sets, targets = self._input_sets(module, path, standardized)
        for start, x in zip(range(0, len(sets), batch_size), sets.split(batch_size)):
            best, position = self._probs(module, x).max(-1)
            for i, (p, k) in enumerate(zip(best.tolist(), position.tolist()), start=start):
                record: dict[str, Any] = {"set": i, "odd_position": k, "probability": p}
                if targets is not None:
                    record["target"] = int(targets[i])
                yield record

    @staticmethod
    def _input_sets(module: TaskModule, path: str | Path, standardized: bool) -> tuple[Tensor, Tensor | None]:
        sets, targets = read_sets(path)
        return standardize_like_run(
            sets, module.hparams["artifacts"], standardized=standardized, where=str(path)
        ), targets

    def attention_examples(
        self, module: TaskModule, texts: list[str] | None = None, indices: list[int] | None = None
    ) -> list[AttentionExample]:
        """Self-attention between the items of a set, with the predicted probability of each item.

        ``texts`` as for :meth:`predict`: a test-set index, or a .npz/.pt file holding
        ``sets [S, N, D]`` of raw features (one example per set; standardised as the run's training
        features were); ``indices``: validation sets. The true odd item is marked ``*``.
        """
        sets: list[tuple[str, Tensor, int | None]] = []
        dm = None
        for item in texts or []:
            if item.strip().isdigit():
                dm = dm or self._setup_datamodule(module)
                sets.append(self._known_set(dm.test_dataset, "test", int(item)))
            else:
                for i, x in enumerate(self._input_sets(module, item, standardized=False)[0]):
                    sets.append((f"{item}[{i}]", x, None))
        for index in indices or []:
            dm = dm or self._setup_datamodule(module)
            sets.append(self._known_set(dm.val_dataset, "validation", index))
        out = []
        for name, x, target in sets:
            x = x.unsqueeze(0).float().to(module.device)
            maps = attention_weights(module.model, x)
            probs = self._probs(module, x)[0].cpu()
            labels = [f"{i}*" if i == target else str(i) for i in range(x.shape[1])]
            title = f"anomaly, {name}: odd one out at {int(probs.argmax())} (p={float(probs.max()):.2f})"
            if target is not None:
                title += f", true {target}"
            out.append(
                AttentionExample(
                    [m[0].cpu() for m in maps],
                    labels,
                    labels,
                    title,
                    query_axis="set element",
                    key_axis="set element",
                    probabilities=probs.tolist(),
                    target=target,
                )
            )
        return out

    def _setup_datamodule(self, module: TaskModule) -> SetAnomalyDataModule:
        dm = self.build_datamodule(AnomalyConfig.model_validate(module.hparams["config"]))
        dm.setup("validate")
        return dm

    @staticmethod
    def _known_set(dataset: Any, split: str, index: int) -> tuple[str, Tensor, int | None]:
        if not 0 <= index < len(dataset):
            raise ValueError(f"anomaly: {split} set {index} out of range (there are {len(dataset)})")
        x, target = dataset[index]
        return f"{split} set {index}", x, int(target)

    @staticmethod
    def _probs(module: TaskModule, x: Tensor) -> Tensor:
        with torch.no_grad():
            return module(x.float()).softmax(-1)
