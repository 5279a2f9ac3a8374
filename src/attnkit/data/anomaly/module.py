"""The anomaly task's Lightning data module."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn
from torch.utils.data import DataLoader, default_collate
from torchdata.stateful_dataloader import StatefulDataLoader

from attnkit.data.anomaly.config import AnomalyDataConfig, check_int
from attnkit.data.anomaly.features import ItemFeatures, load_item_features
from attnkit.data.anomaly.sets import EpochShuffleSampler, SetAnomalyDataset, mix_seed
from attnkit.data.base import SplitDataModule, process_shard

__all__ = ["SetAnomalyDataModule"]


class SetAnomalyDataModule(SplitDataModule):
    """Set anomaly data for Lightning: batches ``(x [B, set_size, D] float32, y [B] int64)``.

    Training sets are redrawn every epoch (reproducibly from ``(cfg.seed, epoch)``); validation and
    test sets are fixed. The loaders are stateful, as every task's (:class:`SplitDataModule`): a run resumed
    mid-epoch continues with the sets it would have seen. ``backbone`` is passed to :func:`load_item_features`
    (CIFAR-100 only).
    """

    def __init__(
        self,
        cfg: AnomalyDataConfig,
        batch_size: int = 64,
        num_workers: int = 0,
        backbone: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(cfg, AnomalyDataConfig):
            raise TypeError(f"cfg must be an AnomalyDataConfig, got {type(cfg).__name__}")
        check_int("batch_size", batch_size, 1)
        check_int("num_workers", num_workers, 0)
        self.cfg = cfg
        self.batch_size = int(batch_size)
        self.num_workers = int(num_workers)
        self.backbone = backbone
        self.features: ItemFeatures | None = None
        self.train_dataset: SetAnomalyDataset | None = None
        self.val_dataset: SetAnomalyDataset | None = None
        self.test_dataset: SetAnomalyDataset | None = None
        self._train_sampler: EpochShuffleSampler | None = None

    def prepare_data(self) -> None:
        """For a CIFAR-100 folder, extract and cache the features once (rank 0 in distributed runs)."""
        if self.cfg.source != "digits" and Path(self.cfg.source).expanduser().is_dir() and self.features is None:
            self.features = load_item_features(self.cfg, backbone=self.backbone)

    def setup(self, stage: str | None = None) -> None:
        """Load the item features (once) and build the train/val/test set datasets."""
        if self.features is None:
            self.features = load_item_features(self.cfg, backbone=self.backbone)
        if self.train_dataset is not None:
            return
        f, cfg = self.features, self.cfg
        train_sets = cfg.train_sets if cfg.train_sets is not None else max(1, len(f.train_y) // cfg.set_size)
        self.train_dataset = SetAnomalyDataset(
            f.train_x, f.train_y, cfg.set_size, train_sets, seed=mix_seed(cfg.seed, 1), fixed=False
        )
        self.val_dataset = SetAnomalyDataset(
            f.val_x, f.val_y, cfg.set_size, cfg.val_sets, seed=mix_seed(cfg.seed, 2), fixed=True
        )
        self.test_dataset = SetAnomalyDataset(
            f.test_x, f.test_y, cfg.set_size, cfg.test_sets, seed=mix_seed(cfg.seed, 3), fixed=True
        )

    def _require_setup(self) -> ItemFeatures:
        if self.features is None or self.train_dataset is None:
            raise RuntimeError("SetAnomalyDataModule: call setup() first")
        return self.features

    @property
    def feature_dim(self) -> int:
        """Size ``D`` of an item's feature vector."""
        return self._require_setup().feature_dim

    @property
    def set_size(self) -> int:
        """Items per set (= number of output positions)."""
        return self.cfg.set_size

    @property
    def num_classes(self) -> int:
        """Number of item classes in the data (not the model's output size, which is ``set_size``)."""
        return self._require_setup().num_classes

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        """Training: the sets of :class:`EpochShuffleSampler` (each epoch's own); validation and test: the sets
        in order (in a multi-process run each process gets its :class:`~attnkit.data.base.EvalBatches`)."""
        self._require_setup()
        dataset = {"train": self.train_dataset, "val": self.val_dataset, "test": self.test_dataset}[split]
        assert dataset is not None
        if not shuffle:
            return self._seeded_loader(dataset, False, None, default_collate, split)
        trainer = self.trainer
        world, rank = process_shard(self)
        sampler = EpochShuffleSampler(dataset, mix_seed(self.cfg.seed, 4), num_replicas=world, rank=rank)
        sampler.set_epoch(int(trainer.current_epoch) if trainer is not None else 0)
        self._train_sampler = sampler
        return StatefulDataLoader(dataset, batch_size=self.batch_size, sampler=sampler, num_workers=self.num_workers)

    def artifacts(self) -> dict[str, Any]:
        """JSON-serialisable description of the data to save with a run (incl. the standardisation)."""
        f = self._require_setup()
        return {
            "task": "set_anomaly",
            "source": self.cfg.source,
            "feature_dim": f.feature_dim,
            "set_size": self.cfg.set_size,
            "num_classes": f.num_classes,
            "class_names": f.class_names,
            "num_items": {"train": len(f.train_y), "val": len(f.val_y), "test": len(f.test_y)},
            "num_sets": {
                "train": len(self.train_dataset or ()),
                "val": self.cfg.val_sets,
                "test": self.cfg.test_sets,
            },
            "standardize": self.cfg.standardize,
            "mean": f.mean.tolist() if f.mean is not None else None,
            "std": f.std.tolist() if f.std is not None else None,
            "info": {k: v for k, v in f.info.items() if isinstance(v, (str, int, float, bool, list, type(None)))},
            "config": self.cfg.model_dump(),
        }
