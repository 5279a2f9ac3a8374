"""The reverse task: predict a random sequence of symbols in reverse order."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit.data.collate import BatchedTensorDataset, chunks, identity_collate
from attnkit.data.readers.lines import numbered_inputs
from attnkit.data.reverse.config import ReverseDataConfig
from attnkit.models import PredictorArchitecture, PredictorConfig, TransformerPredictor
from attnkit.tasks.base import AttentionExample, ModelSpec, Task, TaskConfig, attention_weights
from attnkit.tasks.registry import register_task

if TYPE_CHECKING:
    from attnkit.data.base import TestDataModule
    from attnkit.data.reverse.module import ReverseDataModule
    from attnkit.training.module import TaskModule

__all__ = ["ReverseConfig", "ReverseTask"]


class ReverseConfig(TaskConfig):
    # The tutorial's model: width 32, one head, one layer, no dropout.
    defaults: ClassVar[dict[str, Any]] = {
        "model": {"d_model": 32, "num_heads": 1, "num_layers": 1, "dim_feedforward": 64, "dropout": 0.0},
        "optim": {"lr": 5e-4, "warmup": 50, "gradient_clip_val": 5.0},
        "trainer": {"max_epochs": 10, "batch_size": 128},
    }
    model: PredictorArchitecture = PredictorArchitecture()
    data: ReverseDataConfig = ReverseDataConfig()


@register_task
class ReverseTask(Task[ReverseConfig]):
    name = "reverse"
    summary = "reverse random sequences of symbols (per-element prediction, built-in data)"
    config_cls = ReverseConfig

    def module_class(self) -> type[TaskModule]:
        from attnkit.tasks.reverse.module import ReverseModule

        return ReverseModule

    def build_datamodule(self, cfg: ReverseConfig, artifacts: dict[str, Any] | None = None) -> ReverseDataModule:
        from attnkit.data.reverse.module import ReverseDataModule

        return ReverseDataModule(cfg.data, batch_size=cfg.trainer.batch_size, num_workers=cfg.trainer.num_workers)

    def model_spec(self, cfg: ReverseConfig, datamodule: Any) -> ModelSpec:
        n = cfg.data.num_categories
        model = PredictorConfig(**cfg.model.model_dump(), input_dim=n, num_outputs=n)
        return ModelSpec("predictor", model.model_dump(), num_classes=n)

    def predict(self, module: TaskModule, inputs: list[str]) -> list[str]:
        n = _num_categories(module)
        seq_len = module.hparams["config"]["data"]["seq_len"]
        out = []
        for text in inputs:
            symbols = _parse_symbols(text, n)
            if len(symbols) != seq_len:
                raise ValueError(
                    f"reverse: this model was trained on sequences of {seq_len} symbols, got {len(symbols)}"
                )
            with torch.no_grad():
                pred = module(torch.tensor([symbols])).argmax(-1)[0]
            out.append(" ".join(str(int(s)) for s in pred))
        return out

    def build_eval_datamodule(
        self, cfg: Any, artifacts: dict[str, Any], path: str | Path, *, batch_size: int, standardized: bool = False
    ) -> TestDataModule:
        """A text file of sequences, one per line (symbols separated by spaces, as for :meth:`predict`);
        each sequence's label is the sequence reversed."""
        from attnkit.data.base import TestDataModule

        _, inputs = _read_sequences(path, cfg.data.num_categories, cfg.data.seq_len)
        return TestDataModule(BatchedTensorDataset(inputs, inputs.flip(-1)), batch_size, identity_collate)

    def predict_file(
        self, module: TaskModule, path: str | Path, *, batch_size: int = 64, standardized: bool = False
    ) -> Iterator[dict[str, Any]]:
        """Per line: ``{"line", "input", "prediction", "probability"}``, the probability being the mean
        over positions of the predicted symbol's probability."""
        cfg = module.hparams["config"]["data"]
        lines, inputs = _read_sequences(path, cfg["num_categories"], cfg["seq_len"])
        for chunk, x in zip(chunks(lines, batch_size), inputs.split(batch_size)):
            with torch.no_grad():
                probs = module(x.to(module.device)).softmax(-1)
            best, pred = probs.max(-1)
            for (number, text), p, symbols in zip(chunk, best.mean(-1).tolist(), pred.tolist()):
                yield {"line": number, "input": text, "prediction": " ".join(map(str, symbols)), "probability": p}

    def attention_examples(
        self, module: TaskModule, texts: list[str] | None = None, indices: list[int] | None = None
    ) -> list[AttentionExample]:
        """Self-attention over the input symbols; ``texts`` as for :meth:`predict` (at most ``seq_len`` symbols)."""
        cfg = ReverseConfig.model_validate(module.hparams["config"])
        n = _num_categories(module)
        inputs: list[tuple[str, Tensor]] = []
        for text in texts or []:
            symbols = _parse_symbols(text, n)
            if len(symbols) > cfg.data.seq_len:
                raise ValueError(
                    f"reverse: the input has {len(symbols)} symbols, longer than the {cfg.data.seq_len} this model "
                    "was trained on; shorten it"
                )
            inputs.append((f"input {text!r}", torch.tensor(symbols)))
        if indices:
            datamodule = self.build_datamodule(cfg)
            datamodule.setup("validate")
            val = datamodule.splits["val"]
            for index in indices:
                if not 0 <= index < len(val):
                    raise ValueError(f"reverse: validation example {index} out of range (there are {len(val)})")
                inputs.append((f"validation example {index}", val[index][0]))
        out = []
        for name, ids in inputs:
            x = F.one_hot(ids.unsqueeze(0).to(module.device), n).float()
            maps = attention_weights(module.model, x)
            with torch.no_grad():
                pred = module.model(x).argmax(-1)[0]
            labels = [str(int(s)) for s in ids]
            title = f"reverse, {name}: predicted {' '.join(str(int(p)) for p in pred)}"
            out.append(AttentionExample([m[0].cpu() for m in maps], labels, labels, title))
        return out


def _num_categories(module: TaskModule) -> int:
    """The number of symbols of the module's model: its one-hot input size (the task's model_spec sets it)."""
    model = module.model
    assert isinstance(model, TransformerPredictor) and model.config.input_dim is not None
    return model.config.input_dim


def _parse_symbols(text: str, n: int) -> list[int]:
    try:
        symbols = [int(tok) for tok in text.replace(",", " ").split()]
    except ValueError:
        raise ValueError(f"reverse: input {text!r} must be integers separated by spaces, e.g. '3 1 4 1 5'") from None
    if not symbols or min(symbols) < 0 or max(symbols) >= n:
        raise ValueError(f"reverse: symbols must be integers in [0, {n}), got {text!r}")
    return symbols


def _read_sequences(path: str | Path, n: int, seq_len: int) -> tuple[list[tuple[int, str]], Tensor]:
    """The non-blank lines of ``path`` and their symbols ``[N, seq_len]`` (one sequence per line)."""
    lines = numbered_inputs(path)
    rows = []
    for number, text in lines:
        try:
            symbols = _parse_symbols(text, n)
        except ValueError as err:
            raise ValueError(f"{path}:{number}: {err}") from None
        if len(symbols) != seq_len:
            raise ValueError(
                f"{path}:{number}: this model was trained on sequences of {seq_len} symbols, got {len(symbols)}"
            )
        rows.append(symbols)
    return lines, torch.tensor(rows)
