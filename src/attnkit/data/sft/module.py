"""Instruction-tuning data: conversations (:mod:`attnkit.data.readers.chats`) rendered with the model's chat
template and encoded once (:mod:`attnkit.data.sft.encode`), in batches of similar lengths or packed rows.

Batches are ``(inputs [B, T], targets [B, T], document_ids [B, T] or None)``: targets are ``IGNORE_INDEX``
except at the tokens the loss counts; ``document_ids`` number the conversations of a packed row (``None``
when every row holds one conversation). Nothing is downloaded; conversations are encoded in memory.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import numpy as np
from torch.utils.data import DataLoader, Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from attnkit.data.base import SplitDataModule, process_shard
from attnkit.data.readers.arrow_rows import RowFilter
from attnkit.data.readers.chats import Chat, read_chats
from attnkit.data.readers.columnar_tasks import Part, read_chat_rows, split_parts
from attnkit.data.samplers import LengthGroupedBatches
from attnkit.data.sft.artifacts import chat_artifacts
from attnkit.data.sft.config import SFTDataConfig
from attnkit.data.sft.encode import Example, collate_examples, encode_conversation, make_example, pack_examples
from attnkit.data.splits import SPLITS, fraction_split, group_split
from attnkit.text.chat import ChatTemplate
from attnkit.text.tokenizers import Tokenizer

__all__ = ["Rows", "SFTDataModule"]

logger = logging.getLogger(__name__)


class Rows(Dataset):
    """A split's rows, each a list of :class:`Example` (one, or several when packed)."""

    def __init__(self, rows: list[list[Example]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> list[Example]:
        return self.rows[index]

    def lengths(self) -> list[int]:
        return [sum(len(e) for e in row) for row in self.rows]


class SFTDataModule(SplitDataModule):
    """Train/val/test conversations of ``cfg`` (:class:`SFTDataConfig`) encoded with ``tokenizer`` and
    ``template`` (``None``: attnkit's default template) for a model of context ``context``.

    ``setup()`` reads the files, splits ``source`` (whole groups with ``data.group_column``), renders and
    encodes every conversation, cuts those longer than ``data.max_len`` (default: the context) and drops
    those left without any assistant token, and logs the counts (also in :attr:`counts`). ``prompts(split)``:
    a split's conversations up to their last reply, and that reply (what the run report answers).
    """

    def __init__(
        self,
        cfg: SFTDataConfig,
        tokenizer: Tokenizer,
        template: ChatTemplate | None,
        *,
        context: int,
        pad_id: int,
        batch_size: int = 8,
        num_workers: int = 0,
        generation_config: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if not cfg.source:
            raise ValueError("data.source is required: a .jsonl file of conversations (messages, prompt/completion "
                             "or instruction/input/output lines)")  # fmt: skip
        max_len = cfg.max_len or context
        if max_len > context:
            raise ValueError(f"data.max_len={cfg.max_len} is longer than the model's context ({context}); set it to "
                             f"{context} or less")  # fmt: skip
        self.cfg, self.tokenizer, self.template, self.context = cfg, tokenizer, template, context
        self.max_len, self.pad_id, self.batch_size, self.num_workers = max_len, pad_id, batch_size, num_workers
        self.generation_config = dict(generation_config or {})
        self.chats: dict[str, list[Chat]] = {}
        self.datasets: dict[str, Rows] = {}
        self.counts: dict[str, dict[str, int]] = {}

    def artifacts(self) -> dict[str, Any]:
        """The tokenizer, chat template and generation config stored in the run's checkpoints."""
        return {**chat_artifacts(self.tokenizer, self.template, self.generation_config), "context": self.context}

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def _read(self) -> dict[str, list[Chat]]:
        c = self.cfg
        main, given = split_parts(c.source, c.val_source, c.test_source)

        def read(part: Part) -> list[Chat]:
            if isinstance(part, list):
                return read_chat_rows(part, c.messages_column, c.group_column, RowFilter.of(c))
            return read_chats(part, group_key=c.group_column)

        chats = read(main)
        fractions = [0.0 if "val" in given else c.val_fraction, 0.0 if "test" in given else c.test_fraction]
        if c.group_column is not None:
            parts = group_split([ch.group for ch in chats], fractions, c.seed, where=f"data.source={c.source}")
            split_of = np.zeros(len(chats), dtype=np.int8)
            for p, indices in enumerate(parts):
                split_of[indices] = p
        else:
            split_of = fraction_split(len(chats), fractions[0], fractions[1], c.seed, minimum=1)
        out = {s: [ch for ch, p in zip(chats, split_of) if p == i] for i, s in enumerate(SPLITS)}
        for split, part in given.items():
            out[split] = read(part)
        return out

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        self.chats = self._read()
        for split in SPLITS:
            examples, cut, dropped = [], 0, 0
            for chat in self.chats[split]:
                try:
                    ids, counted = encode_conversation(
                        self.tokenizer, self.template, chat.messages, train_on_prompt=self.cfg.train_on_prompt
                    )
                except ValueError as err:
                    raise ValueError(f"{chat.where}: {err}") from None
                example, was_cut = make_example(ids, counted, self.max_len)
                cut += was_cut
                if example.trained == 0:
                    dropped += 1
                    continue
                examples.append(example)
            self.counts[split] = {"conversations": len(self.chats[split]), "cut": cut, "dropped": dropped}
            if cut or dropped:
                logger.warning(
                    "sft %s: %d of %d conversations were cut at data.max_len=%d tokens; %d of them lost every "
                    "assistant token and were dropped", split, cut, len(self.chats[split]), self.max_len, dropped,
                )  # fmt: skip
            if not examples and split == "train":
                raise ValueError(f"data.source={self.cfg.source}: no training conversation is left to learn from")
            if self.cfg.packing:
                rows = [[examples[i] for i in row] for row in pack_examples([len(e) for e in examples], self.max_len)]
            else:
                rows = [[e] for e in examples]
            self.datasets[split] = Rows(rows)

    def prompts(self, split: str = "val", n: int = 3) -> list[tuple[list[dict[str, str]], str]]:
        """Up to ``n`` conversations of ``split``: the messages before the last assistant reply, and that reply."""
        out = []
        for chat in self.chats.get(split, [])[:n]:
            last = max(i for i, m in enumerate(chat.messages) if m["role"] == "assistant")
            if last > 0:
                out.append((chat.messages[:last], chat.messages[last]["content"]))
        return out

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        if split not in self.datasets:
            raise RuntimeError(f"SFTDataModule: call setup() before {split}_dataloader()")
        dataset = self.datasets[split]
        collate = functools.partial(collate_examples, pad_id=self.pad_id)
        if shuffle and self.cfg.group_by_length and not self.cfg.packing:
            world, rank = process_shard(self)
            batches = LengthGroupedBatches(dataset.lengths(), self.batch_size, self.cfg.seed, world, rank)
            return StatefulDataLoader(dataset, batch_sampler=batches, num_workers=self.num_workers, collate_fn=collate)
        return self._seeded_loader(dataset, shuffle, self.cfg.seed, collate, split)
