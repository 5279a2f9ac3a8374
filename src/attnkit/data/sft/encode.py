"""Conversations as training examples: rendered with the model's chat template, tokenized, and the tokens the
loss counts marked (the assistant's replies, each with its end-of-turn token), then cut, padded or packed.

The text is :meth:`ChatTemplate.render` of the whole conversation (the renderer ``attnkit chat`` uses; the
ids are those of :func:`attnkit.text.chat.encode_chat` with ``add_generation_prompt=False``). An assistant
reply starts where the template's generation prompt for it ends (the conversation before it rendered with
``add_generation_prompt=True``) and ends after its content and the template's end-of-turn text
(:meth:`ChatTemplate.end_of_turn`: ``<|im_end|>``, ``<|eot_id|>``...). A token counts when its characters
overlap a reply. A template without an end-of-turn *token* (attnkit's default, plain text) gets the
tokenizer's EOS after a final reply, so that the model learns to stop.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnkit.data.lm.blocks import IGNORE_INDEX
from attnkit.text.chat import ChatTemplate
from attnkit.text.tokenizers import Tokenizer

__all__ = ["Example", "assistant_spans", "collate_examples", "encode_conversation", "make_example", "pack_examples"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Example:
    """One conversation as a training example: ``inputs`` (its ids but the last) and ``targets`` (the next
    id at each position, ``IGNORE_INDEX`` where the loss does not count it)."""

    inputs: list[int]
    targets: list[int]

    def __len__(self) -> int:
        return len(self.inputs)

    @property
    def trained(self) -> int:
        """How many targets the loss counts."""
        return sum(t != IGNORE_INDEX for t in self.targets)


def assistant_spans(template: ChatTemplate, messages: Sequence[dict[str, str]], text: str) -> list[tuple[int, int]]:
    """``(start, end)`` character spans of ``text`` (``messages`` rendered by ``template`` without a generation
    prompt) that hold the assistant's replies and their end-of-turn text."""
    end_of_turn = template.end_of_turn() or ""
    spans: list[tuple[int, int]] = []
    cursor = 0
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prefix = template.render(list(messages[:i]), add_generation_prompt=True) if i else ""
        body = message["content"].strip()
        if text.startswith(prefix) and len(prefix) >= cursor:
            start = len(prefix)
            found = text.find(body, start)
        else:  # a template that rewrites earlier turns: the reply's text after the previous one
            found = text.find(body, cursor)
            start = found
        if found < 0:
            raise ValueError(
                f"the chat template ({template.origin}) does not write assistant message {i} as given; the sft task "
                "needs templates that keep the replies' text"
            )
        end = found + len(body)
        rest = text[end:]
        skip = len(rest) - len(rest.lstrip())
        if end_of_turn and rest.startswith(end_of_turn):
            end += len(end_of_turn)
        elif end_of_turn and rest[skip:].startswith(end_of_turn):
            end += skip + len(end_of_turn)
        spans.append((start, end))
        cursor = end
    return spans


def encode_conversation(
    tokenizer: Tokenizer,
    template: ChatTemplate | None,
    messages: Sequence[dict[str, str]],
    *,
    train_on_prompt: bool = False,
) -> tuple[list[int], list[bool]]:
    """``(ids, counted)``: the conversation's token ids (those of :func:`~attnkit.text.chat.encode_chat` without a
    generation prompt, plus EOS after a final reply when the template has no end-of-turn token) and, per id,
    whether the loss predicts it (assistant tokens; every token with ``train_on_prompt``)."""
    template = ChatTemplate.default() if template is None else template
    text = template.render(list(messages), add_generation_prompt=False)
    spans = assistant_spans(template, messages, text)
    encoding = tokenizer.backend.encode(text, add_special_tokens=False)
    ids = list(encoding.ids)
    counted = [any(a < e and s < b for s, e in spans) or (a == b and any(s <= a < e for s, e in spans))
               for a, b in encoding.offsets]  # fmt: skip
    if not tokenizer.spec.pretrained and tokenizer.bos_id is not None:  # as encode_chat: [bos] + text
        ids, counted = [tokenizer.bos_id, *ids], [False, *counted]
    end_of_turn = template.end_of_turn()
    turn_token = tokenizer.token_to_id(end_of_turn) if end_of_turn else None
    eos = tokenizer.eos_id
    if messages[-1]["role"] == "assistant" and eos is not None and ids[-1:] != [eos] and turn_token is None:
        ids, counted = [*ids, eos], [*counted, True]
    if train_on_prompt:
        counted = [True] * len(ids)
    return ids, counted


def make_example(ids: Sequence[int], counted: Sequence[bool], max_len: int | None = None) -> tuple[Example, bool]:
    """``(example, cut)``: the ids cut to ``max_len`` tokens (``cut``: whether they were), shifted into inputs
    and targets."""
    cut = max_len is not None and len(ids) > max_len
    if cut:
        ids, counted = ids[:max_len], counted[:max_len]
    targets = [t if c else IGNORE_INDEX for t, c in zip(ids[1:], counted[1:])]
    return Example(list(ids[:-1]), targets), cut


def pack_examples(lengths: Sequence[int], row_len: int) -> list[list[int]]:
    """Example indices grouped into rows of at most ``row_len`` positions: first fit, longest first (rows in
    the order they were opened; each row's examples longest first). Deterministic."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    rows: list[list[int]] = []
    free: list[int] = []
    for i in order:
        if lengths[i] > row_len:
            raise ValueError(f"example {i} has {lengths[i]} positions, more than a row's {row_len}")
        slot = next((r for r, room in enumerate(free) if room >= lengths[i]), None)
        if slot is None:
            rows.append([i])
            free.append(row_len - lengths[i])
        else:
            rows[slot].append(i)
            free[slot] -= lengths[i]
    return rows


def collate_examples(rows: Sequence[Sequence[Example]], pad_id: int) -> tuple[Tensor, Tensor, Tensor | None]:
    """A batch ``(inputs [B, T], targets [B, T], document_ids [B, T] or None)``: each row's examples side by
    side (``document_ids`` numbers them within the row, padding gets the next number; ``None`` when every row
    holds one example), rows right-padded to the longest (``pad_id`` inputs, ``IGNORE_INDEX`` targets)."""
    width = max(sum(len(e) for e in row) for row in rows)
    inputs = torch.full((len(rows), width), pad_id, dtype=torch.long)
    targets = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    packed = any(len(row) > 1 for row in rows)
    documents = torch.zeros((len(rows), width), dtype=torch.long) if packed else None
    for r, row in enumerate(rows):
        start = 0
        for k, example in enumerate(row):
            end = start + len(example)
            inputs[r, start:end] = torch.tensor(example.inputs)
            targets[r, start:end] = torch.tensor(example.targets)
            if documents is not None:
                documents[r, start:end] = k
            start = end
        if documents is not None:
            documents[r, start:] = len(row)
    return inputs, targets, documents
