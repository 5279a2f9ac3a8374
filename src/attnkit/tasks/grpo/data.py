"""The grpo task's data: prompts for RL in TRL's columns, one JSON object a line (``.jsonl``) or Parquet / Arrow rows.

Each line has a ``prompt`` (text, or a conversation: a list of ``{"role", "content"}`` messages, rendered with the
model's chat template and its generation prompt) and any other columns the rewards read (``answer``...). A batch
is a list of :class:`PromptRow` (the prompt's ids are encoded once, at setup); the module generates the
completions."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader, Dataset

from attnkit.data.base import SplitDataModule
from attnkit.data.preference.encode import encode_prompt
from attnkit.data.readers.chats import ROLES
from attnkit.data.readers.columnar_tasks import read_objects
from attnkit.data.sft.artifacts import chat_artifacts
from attnkit.data.splits import SPLITS, read_split_sources
from attnkit.tasks.grpo.config import GRPODataConfig
from attnkit.text.chat import ChatTemplate
from attnkit.text.tokenizers import Tokenizer

__all__ = ["GRPODataConfig", "PromptDataModule", "PromptRow", "read_prompts"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PromptRow:
    """One prompt: as given (text or messages), its other columns, its ids once encoded, where it was read."""

    prompt: str | list[dict[str, str]]
    columns: dict[str, Any]
    where: str = ""
    group: str | None = None
    ids: list[int] = field(default_factory=list)


def _prompt(obj: dict[str, Any], where: str) -> str | list[dict[str, str]]:
    if "prompt" not in obj:
        raise ValueError(f"{where}: missing 'prompt' (keys: {sorted(obj)})")
    value = obj["prompt"]
    if isinstance(value, str):
        return value
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}: 'prompt' must be a string or a non-empty list of messages")
    out = []
    for i, message in enumerate(value):
        if (
            not isinstance(message, dict)
            or message.get("role") not in ROLES
            or not isinstance(message.get("content"), str)
        ):
            raise ValueError(
                f"{where}: prompt[{i}] must be an object with a 'role' ({', '.join(ROLES)}) and a string 'content'"
            )
        out.append({"role": message["role"], "content": message["content"]})
    return out


def read_prompts(path: str | Path, *, group_key: str | None = None) -> list[PromptRow]:
    """Every prompt of ``path``: a ``.jsonl`` file or Parquet / Arrow data (a malformed line or row: a ``ValueError``
    naming ``file:line`` or ``file:row N``)."""
    out = []
    for obj, where in read_objects(path, "grpo prompts"):
        group = None
        if group_key is not None:
            if group_key not in obj:
                raise ValueError(f"{where}: data.group_column={group_key!r} is missing on this line")
            group = str(obj[group_key])
        columns = {k: v for k, v in obj.items() if k != "prompt"}
        out.append(PromptRow(_prompt(obj, where), columns, where, group))
    if not out:
        raise ValueError(f"{path}: no prompts (the file is empty)")
    return out


class _Rows(Dataset):
    def __init__(self, rows: list[PromptRow]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> PromptRow:
        return self.rows[index]


def _as_list(rows: list[PromptRow]) -> list[PromptRow]:
    return list(rows)


class PromptDataModule(SplitDataModule):
    """Train/val/test prompts of ``cfg``, encoded with ``tokenizer`` and ``template``; prompts longer than
    ``max_prompt_len`` keep their last tokens (counted and logged in :attr:`counts`)."""

    def __init__(
        self,
        cfg: GRPODataConfig,
        tokenizer: Tokenizer,
        template: ChatTemplate | None,
        *,
        context: int,
        max_prompt_len: int,
        batch_size: int = 4,
        num_workers: int = 0,
        generation_config: dict[str, Any] | None = None,
        required: tuple[str, ...] = (),
    ) -> None:
        super().__init__()
        if not cfg.source:
            raise ValueError(
                "data.source is required: a .jsonl file or Parquet/Arrow data of prompts and the columns rewards read"
            )
        if max_prompt_len < 1:
            raise ValueError(f"no room for prompts: the context ({context}) minus grpo.max_completion_length leaves "
                             f"{max_prompt_len} tokens; lower grpo.max_completion_length")  # fmt: skip
        self.cfg, self.tokenizer, self.template, self.context = cfg, tokenizer, template, context
        self.max_prompt_len, self.batch_size, self.num_workers = max_prompt_len, batch_size, num_workers
        self.generation_config, self.required = dict(generation_config or {}), required
        self.records: dict[str, list[PromptRow]] = {}
        self.datasets: dict[str, _Rows] = {}
        self.counts: dict[str, dict[str, int]] = {}

    def artifacts(self) -> dict[str, Any]:
        return {**chat_artifacts(self.tokenizer, self.template, self.generation_config), "context": self.context}

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def _read(self) -> dict[str, list[PromptRow]]:
        return read_split_sources(self.cfg, lambda path: read_prompts(path, group_key=self.cfg.group_column))

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        self.records = self._read()
        for split in SPLITS:
            rows, cut = [], 0
            for record in self.records[split]:
                missing = [name for name in self.required if name not in record.columns]
                if missing:
                    raise ValueError(f"{record.where}: no {missing[0]!r} column, which the rewards read")
                try:
                    ids = encode_prompt(self.tokenizer, self.template, record.prompt)
                except ValueError as err:
                    raise ValueError(f"{record.where}: {err}") from None
                cut += len(ids) > self.max_prompt_len
                rows.append(PromptRow(record.prompt, record.columns, record.where, record.group,
                                      ids[-self.max_prompt_len :]))  # fmt: skip
            self.counts[split] = {"records": len(rows), "cut": cut}
            if cut:
                logger.warning("grpo %s: %d of %d prompts were cut to their last %d tokens (data.max_prompt_len)",
                               split, cut, len(rows), self.max_prompt_len)  # fmt: skip
            if not rows and split == "train":
                raise ValueError(f"data.source={self.cfg.source}: no training prompt")
            self.datasets[split] = _Rows(rows)

    def prompts(self, split: str, n: int = 3) -> list[tuple[Any, Any]]:
        """Up to ``n`` prompts of ``split`` with their ``answer`` column (empty when there is none)."""
        return [(r.prompt, str(r.columns.get("answer", ""))) for r in self.records.get(split, [])[:n]]

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        if split not in self.datasets:
            raise RuntimeError(f"PromptDataModule: call setup() before {split}_dataloader()")
        return self._seeded_loader(self.datasets[split], shuffle, self.cfg.seed, _as_list, split)
