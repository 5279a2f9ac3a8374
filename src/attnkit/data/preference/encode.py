"""Prompts and completions as token ids, as TRL's ``DPOTrainer`` / ``KTOTrainer`` encode them.

A conversation (``prompt`` and completion as messages) is rendered with the model's chat template twice: the
prompt alone with the generation prompt, and the prompt followed by the completion. Plain text is the prompt, and
the prompt followed by the completion and EOS (added when the completion does not end with it). The completion
is what the second encoding has after its longest common beginning with the first: every one of its tokens counts
(the end-of-turn text the template writes after a reply included), no prompt token does.

Batches are ``(inputs [N, T], targets [N, T])``: each sequence's ids but the last, and the next id at each
position, ``IGNORE_INDEX`` except at completion tokens (right-padded with ``pad_id``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnkit.data.lm.blocks import IGNORE_INDEX
from attnkit.data.preference.read import Turns
from attnkit.text.chat import ChatTemplate, encode_chat
from attnkit.text.tokenizers import Tokenizer

__all__ = ["Encoded", "collate_sequences", "common_prefix", "encode_prompt", "encode_with_completion", "fit"]


@dataclass(frozen=True)
class Encoded:
    """One sequence: its ``ids`` and how many of the first belong to the prompt (the rest is the completion)."""

    ids: list[int]
    prompt_len: int

    @property
    def completion(self) -> int:
        return len(self.ids) - self.prompt_len


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the longest common beginning of ``a`` and ``b``."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _text_ids(tokenizer: Tokenizer, text: str) -> list[int]:
    if tokenizer.spec.pretrained:
        return tokenizer.encode(text)
    return tokenizer.encode(text, add_bos=tokenizer.bos_id is not None)


def encode_prompt(tokenizer: Tokenizer, template: ChatTemplate | None, prompt: Turns) -> list[int]:
    """The ids of ``prompt`` alone (messages: with the template's generation prompt)."""
    if isinstance(prompt, str):
        return _text_ids(tokenizer, prompt)
    return encode_chat(tokenizer, template, prompt, add_generation_prompt=True)


def encode_with_completion(
    tokenizer: Tokenizer, template: ChatTemplate | None, prompt: Turns, completion: Turns
) -> list[int]:
    """The ids of ``prompt`` followed by ``completion`` (text: and EOS; messages: rendered together)."""
    if isinstance(prompt, str) and isinstance(completion, str):
        ids = _text_ids(tokenizer, prompt + completion)
        eos = tokenizer.eos_id
        if eos is None:
            raise ValueError("the tokenizer has no EOS token: plain-text completions end with it; give messages")
        return ids if ids[-1:] == [eos] else [*ids, eos]
    if isinstance(prompt, str) or isinstance(completion, str):
        raise ValueError("prompt and completion must both be text or both be lists of messages")
    return encode_chat(tokenizer, template, [*prompt, *completion], add_generation_prompt=False)


def fit(ids: list[int], prompt_len: int, max_len: int) -> tuple[Encoded | None, bool]:
    """``(sequence or None, cut)``: ``ids`` cut to ``max_len`` (``cut``: whether they were); ``None`` when no
    completion token is left (the prompt alone fills ``max_len``: TRL's ``keep_start`` drops such examples)."""
    cut = len(ids) > max_len
    ids = ids[:max_len]
    if prompt_len >= len(ids):
        return None, cut
    return Encoded(ids, prompt_len), cut


def collate_sequences(sequences: Sequence[Encoded], pad_id: int) -> tuple[Tensor, Tensor]:
    """``(inputs [N, T], targets [N, T])`` of ``sequences`` (see the module docstring)."""
    width = max(len(s.ids) for s in sequences) - 1
    inputs = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    targets = torch.full((len(sequences), width), IGNORE_INDEX, dtype=torch.long)
    for row, s in enumerate(sequences):
        ids = torch.tensor(s.ids, dtype=torch.long)
        inputs[row, : len(s.ids) - 1] = ids[:-1]
        targets[row, s.prompt_len - 1 : len(s.ids) - 1] = ids[s.prompt_len :]
    return inputs, targets
