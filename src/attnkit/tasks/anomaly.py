"""Set anomaly detection: find the one item of a set that belongs to another class."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit.data.sets import AnomalyDataConfig, SetAnomalyDataModule
from attnkit.models import PredictorConfig
from attnkit.models.config import EncoderConfig
from attnkit.tasks.base import AttentionExample, ModelSpec, Task, TaskConfig, attention_weights
from attnkit.training.config import OptimConfig, TrainerConfig
from attnkit.training.module import ClassifierModule, TaskModule

__all__ = ["AnomalyConfig", "AnomalyModule", "AnomalyTask"]


class AnomalyModelConfig(EncoderConfig):
    """No positional encoding: the model is permutation-equivariant over the set."""

    d_model: int = 128
    num_heads: int = 4
    num_layers: int = 2
    dim_feedforward: int = 256
    dropout: float = 0.1
    input_dropout: float = 0.1


class AnomalyConfig(TaskConfig):
    model: AnomalyModelConfig = AnomalyModelConfig()
    data: AnomalyDataConfig = AnomalyDataConfig(train_sets=4000)
    optim: OptimConfig = OptimConfig(lr=5e-4, warmup=100, gradient_clip_val=5.0)
    trainer: TrainerConfig = TrainerConfig(max_epochs=15, batch_size=64)


class AnomalyModule(ClassifierModule):
    """A score per set element; softmax over the set's positions picks the odd one out."""

    def forward(self, x: Tensor) -> Tensor:  # type: ignore[override]
        return self.model(x).squeeze(-1)  # [B, N]

    def step(self, batch: Any) -> tuple[Tensor, Tensor, Tensor]:
        x, target = batch
        logits = self(x)
        return F.cross_entropy(logits, target), logits, target


class AnomalyTask(Task[AnomalyConfig]):
    name = "anomaly"
    summary = "set anomaly detection: which item is of another class (digits built in; .npz/.pt; CIFAR-100)"
    config_cls = AnomalyConfig
    module_cls = AnomalyModule

    def build_datamodule(self, cfg: AnomalyConfig, artifacts: dict[str, Any] | None = None) -> SetAnomalyDataModule:
        return SetAnomalyDataModule(cfg.data, batch_size=cfg.trainer.batch_size, num_workers=cfg.trainer.num_workers)

    def model_spec(self, cfg: AnomalyConfig, datamodule: Any) -> ModelSpec:
        model = PredictorConfig(
            **cfg.model.model_dump(), input_dim=datamodule.feature_dim, num_outputs=1, positional="none"
        )
        return ModelSpec("predictor", model.model_dump(), num_classes=datamodule.set_size)

    def predict(self, module: TaskModule, inputs: list[str]) -> list[str]:
        """Each input: an index into the test sets, or a .npz/.pt file holding ``sets [S, N, D]``
        (already standardised like the training features)."""
        cfg = AnomalyConfig.model_validate(module.hparams["config"])
        out: list[str] = []
        test_sets = None
        for item in inputs:
            if item.strip().isdigit():
                if test_sets is None:
                    dm = self.build_datamodule(cfg)
                    dm.setup("test")
                    test_sets = dm.test_dataset
                index = int(item)
                if index >= len(test_sets):
                    raise ValueError(f"anomaly: test set index {index} out of range (there are {len(test_sets)})")
                x, target = test_sets[index]
                probs = self._probs(module, x.unsqueeze(0))[0]
                guess = f"odd one out at {int(probs.argmax())} (p={float(probs.max()):.3f})"
                out.append(f"set {index}: {guess}, true {int(target)}")
            else:
                sets = _load_sets(Path(item))
                for i, probs in enumerate(self._probs(module, sets)):
                    out.append(f"{item}[{i}]: odd one out at {int(probs.argmax())} (p={float(probs.max()):.3f})")
        return out

    def attention_examples(
        self, module: TaskModule, texts: list[str] | None = None, indices: list[int] | None = None
    ) -> list[AttentionExample]:
        """Self-attention between the items of a set, with the predicted probability of each item.

        ``texts`` as for :meth:`predict`: a test-set index, or a .npz/.pt file holding
        ``sets [S, N, D]`` (one example per set); ``indices``: validation sets. The true odd item
        is marked ``*``.
        """
        sets: list[tuple[str, Tensor, int | None]] = []
        dm = None
        for item in texts or []:
            if item.strip().isdigit():
                dm = dm or self._setup_datamodule(module)
                sets.append(self._known_set(dm.test_dataset, "test", int(item)))
            else:
                for i, x in enumerate(_load_sets(Path(item))):
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


def _load_sets(path: Path) -> Tensor:
    if not path.is_file():
        raise FileNotFoundError(f"anomaly: {path} is neither a test-set index nor a file")
    if path.suffix == ".npz":
        import numpy as np

        with np.load(path) as data:
            if "sets" not in data:
                raise ValueError(f"{path}: expected an array 'sets' [S, N, D], found {sorted(data.files)}")
            sets = torch.from_numpy(data["sets"])
    else:
        data = torch.load(path, map_location="cpu", weights_only=True)
        sets = data["sets"] if isinstance(data, dict) and "sets" in data else data
    if not isinstance(sets, Tensor) or sets.dim() != 3:
        raise ValueError(
            f"{path}: 'sets' must be [num_sets, set_size, features], got {getattr(sets, 'shape', type(sets))}"
        )
    return sets
