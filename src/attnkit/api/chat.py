"""A conversation with a model: what ``attnkit chat`` runs, usable from Python.

>>> session = ChatSession(load_model("runs/lm/..."), system="Answer briefly.", max_new_tokens=64)
>>> session.send("What is attention?")
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from attnkit.api.models import load_model
from attnkit.interop import Pretrained
from attnkit.models.generation import check_sampling

__all__ = ["ChatSession", "Reply"]


@dataclass(frozen=True)
class Reply:
    """One answer of :meth:`ChatSession.send`: its ``text`` and how many earlier messages were dropped
    (``dropped``) so that the conversation fits the model's context."""

    text: str
    dropped: int = 0


@dataclass
class ChatSession:
    """A conversation with ``model``: the history of its turns, an optional ``system`` message, and the
    generation options of every reply (``max_new_tokens``, ``temperature``, ``top_k``, ``top_p``,
    ``min_p``, ``repetition_penalty``, ``seed`` as ``attnkit generate`` takes them).

    When the conversation and room for the reply (``reserve`` tokens, default ``min(max_new_tokens,
    context / 4)``) outgrow the context, the oldest turns are dropped (the system message is kept) and
    the :class:`Reply` says how many messages went. The options are checked first
    (:func:`attnkit.models.generation.check_sampling`: a ``ValueError`` naming the option).
    """

    model: Pretrained
    system: str | None = None
    max_new_tokens: int = 256
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float = 1.0
    seed: int | None = None
    reserve: int | None = None
    history: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_sampling(
            self.temperature, self.top_k, self.top_p, self.min_p, self.repetition_penalty,
            seed=self.seed, max_tokens=self.max_new_tokens, max_tokens_field="max_new_tokens", min_tokens=1,
        )  # fmt: skip
        if isinstance(self.model, str | Path):
            self.model = load_model(self.model)
        self.model.encode_chat([{"role": "user", "content": "hi"}])  # not a chat model: fail before the first turn
        self._generator = torch.Generator().manual_seed(self.seed) if self.seed is not None else None

    def reset(self) -> None:
        """Forget the conversation (the system message stays; a seeded session starts its seed again)."""
        self.history.clear()
        if self.seed is not None:
            self._generator = torch.Generator().manual_seed(self.seed)

    def messages(self) -> list[dict[str, str]]:
        """The conversation as the chat template receives it: the system message, then the turns."""
        return self._with_system(self.history)

    def _with_system(self, history: list[dict[str, str]]) -> list[dict[str, str]]:
        return [*([{"role": "system", "content": self.system}] if self.system else []), *history]

    def send(self, text: str, on_text: Callable[[str], None] | None = None) -> Reply:
        """Add the user's ``text``, generate the model's answer (streamed to ``on_text`` piece by piece)
        and add it to the history. A message that does not fit the context even alone is a
        :class:`ValueError`, and the history is left as it was."""
        history, dropped = self._fit([*self.history, {"role": "user", "content": text}])
        answer = self.model.chat(self._with_system(history), self.max_new_tokens, on_text=on_text, **self._options())
        self.history[:] = [*history, {"role": "assistant", "content": answer}]
        return Reply(answer, dropped)

    def _options(self) -> dict[str, Any]:
        return dict(
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            min_p=self.min_p,
            repetition_penalty=self.repetition_penalty,
            generator=self._generator,
        )

    def _fit(self, history: list[dict[str, str]]) -> tuple[list[dict[str, str]], int]:
        """``history`` without its oldest turns, so that it leaves room for the reply; and how many went."""
        context = self.model.context
        reserve = self.reserve if self.reserve is not None else max(1, min(self.max_new_tokens, context // 4))
        dropped = 0
        while len(self.model.encode_chat(self._with_system(history))) + reserve > context:
            if len(history) <= 1:
                raise ValueError(
                    f"this message does not fit the model's context of {context} tokens with room for a "
                    f"{reserve}-token reply{' and the system message' if self.system else ''}: write a shorter one"
                )
            turn = 2 if len(history) > 2 and history[1]["role"] == "assistant" else 1
            history = history[turn:]
            dropped += turn
        return history, dropped
