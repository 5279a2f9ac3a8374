"""Language-model blocks: documents packed into one stream and cut into blocks of the model's context;
the tokenizer of a trained run's artifacts.

Batches are ``(inputs [B, L] int64, targets [B, L] int64)``; ``<bos>`` targets and padding are
``IGNORE_INDEX`` (the loss skips them).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from attnkit.nn.losses import IGNORE_INDEX  # targets the loss skips
from attnkit.text.tokenizer_kinds import BOS_ID, EOS_ID, PAD_ID
from attnkit.text.tokenizers import Tokenizer, tokenizer_from_dict

__all__ = ["IGNORE_INDEX", "PackedBlocks", "artifacts_of", "pack_documents", "tokenizer_of"]


def pack_documents(
    docs: list[list[int]], block: int, *, bos_id: int | None = BOS_ID, eos_id: int | None = EOS_ID
) -> tuple[Tensor, Tensor]:
    """Encoded documents -> ``(inputs [N, block], targets [N, block])`` int64 (see the module docstring).

    Each document becomes ``<bos> ids <eos>`` (``bos_id`` / ``eos_id`` ``None``: left out; a pretrained
    tokenizer's are :func:`attnkit.text.framing.document_bounds`); the stream is cut into
    ``N = ceil((len - 1) / block)`` blocks; the last one is padded with ``<pad>`` inputs and
    ``IGNORE_INDEX`` targets, and ``<bos>`` targets are ``IGNORE_INDEX`` too.
    """
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    head, tail = [bos_id] if bos_id is not None else [], [eos_id] if eos_id is not None else []
    stream = torch.tensor([t for ids in docs for t in (*head, *ids, *tail)], dtype=torch.long)
    if stream.numel() < 2:
        return torch.empty(0, block, dtype=torch.long), torch.empty(0, block, dtype=torch.long)
    n = math.ceil((stream.numel() - 1) / block)
    inputs = torch.full((n * block,), PAD_ID, dtype=torch.long)
    targets = torch.full((n * block,), IGNORE_INDEX, dtype=torch.long)
    inputs[: stream.numel() - 1] = stream[:-1]
    targets[: stream.numel() - 1] = stream[1:]
    if bos_id is not None:
        targets[targets == bos_id] = IGNORE_INDEX
    return inputs.view(n, block), targets.view(n, block)


# ====================================================================== blocks read from the token cache
class PackedBlocks(Dataset):
    """Blocks of a split's token stream, read from its memory-mapped cache file.

    Block ``i`` is ``(inputs, targets)`` as :func:`pack_documents` makes them (the stream already
    holds ``<bos> ids <eos>`` per document): only the ``block + 1`` tokens of the block are read. A
    batch is gathered with one indexing of the memory map (``__getitems__``). The memory map is
    opened lazily in each process (DataLoader workers open their own). ``bos_id``: the id that starts
    every document (its targets are ignored); ``None`` when documents have none.
    """

    def __init__(self, path: Path, dtype: np.dtype, block: int, bos_id: int | None = BOS_ID) -> None:
        self.path, self.dtype, self.block, self.bos_id = path, np.dtype(dtype), block, bos_id
        self.size = path.stat().st_size // self.dtype.itemsize
        self._tokens: np.ndarray | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tokens": None}

    @property
    def tokens(self) -> np.ndarray:
        if self._tokens is None:
            self._tokens = np.memmap(self.path, dtype=self.dtype, mode="r") if self.size else np.zeros(0, self.dtype)
        return self._tokens

    def __len__(self) -> int:
        return math.ceil((self.size - 1) / self.block) if self.size >= 2 else 0

    def __getitems__(self, indices: list[int]) -> tuple[Tensor, Tensor]:
        index = np.asarray(indices, dtype=np.int64)
        if index.size and (index.min() < 0 or index.max() >= len(self)):
            raise IndexError(f"block index out of range [0, {len(self)})")
        positions = index[:, None] * self.block + np.arange(self.block + 1)
        valid = positions < self.size
        window = torch.from_numpy(self.tokens[np.minimum(positions, self.size - 1)].astype(np.int64))
        valid_t = torch.from_numpy(valid)
        inputs = window[:, :-1].masked_fill(~valid_t[:, 1:], PAD_ID)
        targets = window[:, 1:].masked_fill(~valid_t[:, 1:], IGNORE_INDEX)
        if self.bos_id is None:
            return inputs, targets
        return inputs, targets.masked_fill(targets == self.bos_id, IGNORE_INDEX)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        inputs, targets = self.__getitems__([index])
        return inputs[0], targets[0]


def artifacts_of(tokenizer: Tokenizer) -> dict[str, Any]:
    """The artifacts a language-model run stores (its tokenizer): what :func:`tokenizer_of` reads back."""
    return {"tokenizer": tokenizer.to_dict(), "tokenizer_kind": tokenizer.kind}


def tokenizer_of(artifacts: dict[str, Any]) -> Tokenizer:
    """The tokenizer stored in a checkpoint's artifacts."""
    if not isinstance(artifacts, dict) or "tokenizer" not in artifacts:
        keys = sorted(artifacts) if isinstance(artifacts, dict) else type(artifacts).__name__
        raise ValueError(f"language-model artifacts must hold 'tokenizer'; found {keys}")
    return tokenizer_from_dict(artifacts["tokenizer"])
