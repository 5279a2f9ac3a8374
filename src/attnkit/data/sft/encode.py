"""Conversations as training examples: rendered with the model's chat template, tokenized, and the tokens the
loss counts marked (the assistant's replies, each with its end-of-turn token), then cut, padded or packed.

The text is :meth:`ChatTemplate.render` of the whole conversation (the renderer ``attnkit chat`` uses; the
ids are those of :func:`attnkit.text.chat.encode_chat` with ``add_generation_prompt=False``). The replies in it
are found by construction, from other renderings of the same conversation, never by searching the text
(:func:`assistant_spans`): a reply is where the text changes when its content is replaced by a placeholder; its
span starts where its prompt (the conversation before it with the template's generation prompt) ends and ends
after its content and the template's end-of-turn text (:meth:`ChatTemplate.end_of_turn`: ``<|im_end|>``,
``<|eot_id|>``...). A template that drops, changes, repeats or reorders replies is refused with an error that
names it. A token counts when its characters overlap a reply. A template without an end-of-turn *token*
(attnkit's default, plain text) gets the tokenizer's EOS after a final reply, so that the model learns to stop.
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


def _forms(content: str) -> tuple[str, ...]:
    """How a template may write a reply and still write it as given: verbatim, or with the whitespace around it
    trimmed (``| trim``, ``.strip()``)."""
    return content, content.strip(), content.lstrip(), content.rstrip()


def _placeholder(content: str) -> str:
    """A reply of mixed-case text that a template writing replies as given writes unchanged, whose first and
    last characters differ from those of every form of ``content`` (so that where a rendering with it differs
    from the real one is exactly the reply)."""
    forms = _forms(content)  # they start with at most one non-space character (the first after the spaces)
    left = next(c for c in "⟦⟨" if not any(f.startswith(c) for f in forms))
    right = next(c for c in "⟧⟩" if not any(f.endswith(c) for f in forms))
    return f"{left}AttnKit reply placeholder{right}"


def _common_start(text: str, other: str) -> int:
    """The length of the longest common beginning of ``text`` and ``other`` (by halving: string comparisons)."""
    same, most = 0, min(len(text), len(other))
    while same < most:
        half = (same + most + 1) // 2
        if text[same:half] == other[same:half]:
            same = half
        else:
            most = half - 1
    return same


def _difference(text: str, other: str) -> tuple[int, int, int]:
    """``(start, end, other_end)``: ``text[start:end]`` and ``other[start:other_end]`` are where the two differ,
    between their longest common beginning and their longest common ending (which do not overlap)."""
    start = _common_start(text, other)
    same_end = _common_start(text[start:][::-1], other[start:][::-1])
    return start, len(text) - same_end, len(other) - same_end


def _refusal(template: ChatTemplate, i: int, problem: str) -> ValueError:
    return ValueError(
        f"cannot tell which tokens of assistant message {i} to train on with the chat template ({template.origin}): "
        f"{problem}. The sft task trains on each reply as the template writes it, found by rendering the "
        "conversation with a placeholder in place of a message, so the template must write each message once and "
        "as given (surrounding whitespace aside), and end the prompt of a reply (the conversation before it with "
        "the generation prompt) as the conversation goes on to that reply. Fix: give the model folder a "
        "chat_template.jinja that does (it is also what attnkit chat and serve use), or split the conversation into "
        "conversations that each end with one reply the template keeps"
    )


def _content_at(
    template: ChatTemplate, messages: Sequence[dict[str, str]], j: int, text: str, prompt: bool, reply: int
) -> tuple[int, int]:
    """Where ``text`` (``messages`` rendered, with a generation prompt when ``prompt``) holds message ``j``'s
    content: what changes when that content is replaced by a placeholder, checked to be the placeholder alone
    in that rendering and the content (or the content trimmed) in ``text``. Errors are about assistant message
    ``reply``."""
    content = messages[j]["content"]
    mark = _placeholder(content)
    marked = [*messages[:j], {**messages[j], "content": mark}, *messages[j + 1 :]]
    other = template.render(marked, add_generation_prompt=prompt)
    start, end, other_end = _difference(text, other)
    name = "it" if j == reply else f"message {j} ({messages[j]['role']})"
    if other[start:other_end] != mark:
        times = other.count(mark)
        what = f"writes {name} {times} times" if times > 1 else "writes it with other text"
        what = f"does not write {name} (or changes its text)" if not times else what
        raise _refusal(
            template, reply, f"rendered with the placeholder {mark!r} in place of its content, the template {what} "
            f"(the rendering differs from the real one in {other[start:other_end]!r:.160})"
        )  # fmt: skip
    if text[start:end] not in _forms(content):
        raise _refusal(
            template, reply, f"the template writes {name} as {text[start:end]!r:.120}, not as its content "
            f"{content!r:.120}"
        )  # fmt: skip
    return start, end


def assistant_spans(template: ChatTemplate, messages: Sequence[dict[str, str]], text: str) -> list[tuple[int, int]]:
    """``(start, end)`` character spans of ``text`` (``messages`` rendered by ``template`` without a generation
    prompt) that hold the assistant's replies and their end-of-turn text, found by construction (never by
    searching ``text`` for a reply):

    - a reply is where ``text`` differs from the conversation rendered with a placeholder in place of its
      content (checked: the placeholder written once and unchanged, the content as given or trimmed);
    - its span starts where its prompt (``messages[:i]`` rendered with the generation prompt) ends: where that
      rendering ends when it is how ``text`` begins before the reply (what follows it up to the reply is the
      reply's too: Mistral's space after ``[/INST]``); else (Mistral v0.3 writes the system message in the last
      user turn only) the text the prompt ends with after the previous message's content
      (``<|im_end|>\\n<|im_start|>assistant\\n``, ``[/INST]``) must follow that content in ``text``, and the span
      starts after it;
    - it ends after the template's :meth:`~ChatTemplate.end_of_turn` text when that follows the reply (after
      whitespace, if any).

    The previous message's content is found as a reply's is. A template that makes this
    impossible (it drops, changes, repeats or reorders messages, or its generation prompt is not what the
    conversation writes before a reply) is a ``ValueError`` that names it."""
    end_of_turn = template.end_of_turn()
    spans: list[tuple[int, int]] = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        start, end = _content_at(template, messages, i, text, False, i)
        lead = start
        if i:
            before = template.render(list(messages[:i]), add_generation_prompt=True)
            if text[:start].startswith(before):  # the prompt is how the text begins: the reply's part follows it
                lead = len(before)
            else:  # the prompt begins otherwise (Mistral): after message i - 1, the prompt's end must follow
                tail = before[_content_at(template, messages[:i], i - 1, before, True, i)[1] :]
                after = _content_at(template, messages, i - 1, text, False, i)[1]
                if not text[after:start].startswith(tail):
                    raise _refusal(
                        template, i, f"its prompt ends with {tail!r:.120} after message {i - 1}, but the "
                        f"conversation writes {text[after:start]!r:.120} between message {i - 1} and it"
                    )  # fmt: skip
                lead = after + len(tail)
        rest = text[end:]
        for gap in (0, len(rest) - len(rest.lstrip())):
            if end_of_turn is not None and rest[gap:].startswith(end_of_turn):
                end += gap + len(end_of_turn)
                break
        spans.append((lead, end))
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
