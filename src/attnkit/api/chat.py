"""A conversation with a model: what ``attnkit chat`` runs, usable from Python.

>>> session = ChatSession(load_model("runs/lm/..."), system="Answer briefly.", max_new_tokens=64)
>>> session.send("What is attention?")
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attnkit.api.models import load_model
from attnkit.interop import Pretrained
from attnkit.models.generation import SamplingParams, check_max_tokens
from attnkit.text.generate import sampling_params

__all__ = ["ChatSession", "Reply"]


@dataclass(frozen=True)
class Reply:
    """One answer of :meth:`ChatSession.send`: its ``text`` and how many earlier messages were dropped
    (``dropped``) so that the conversation fits the model's context."""

    text: str
    dropped: int = 0


class ChatSession:
    """A conversation with ``model``: the history of its turns, an optional ``system`` message, and the
    sampling options of every reply: one :class:`~attnkit.models.generation.SamplingParams` (``params``),
    and/or its fields as keywords over it (``max_new_tokens`` is ``max_tokens``, 256 by default; e.g.
    ``temperature``, ``top_p``, ``presence_penalty``, ``stop``, ``seed``), as ``attnkit chat`` takes them.
    A reply ends at the model's end of turn, a ``stop`` string or ``max_tokens`` (>= 1).

    When the conversation and room for the reply (``reserve`` tokens, default ``min(max_tokens,
    context / 4)``) outgrow the context, the oldest turns are dropped (the system message is kept) and
    the :class:`Reply` says how many messages went. The options are checked first (a
    :class:`~attnkit.models.generation.SamplingError`, a ``ValueError`` naming the field). A seeded session
    draws every reply from one generator (seeded once; :meth:`reset` seeds it again).
    """

    def __init__(
        self,
        model: Pretrained | str | Path,
        system: str | None = None,
        params: SamplingParams | None = None,
        *,
        reserve: int | None = None,
        history: list[dict[str, str]] | None = None,
        **options: Any,
    ) -> None:
        self.params = sampling_params(params, options, max_tokens=256)
        check_max_tokens(self.params.max_tokens, minimum=1, optional=False)  # a reply has at least one token
        self.system = system
        self.reserve = reserve
        self.history: list[dict[str, str]] = list(history or [])
        self.model = load_model(model) if isinstance(model, str | Path) else model
        self.model.encode_chat([{"role": "user", "content": "hi"}])  # not a chat model: fail before the first turn
        self._generator = self._new_generator()

    @property
    def max_new_tokens(self) -> int:
        """The most tokens of a reply (``params.max_tokens``)."""
        assert self.params.max_tokens is not None
        return self.params.max_tokens

    def _new_generator(self) -> torch.Generator | None:
        if self.params.seed is None:
            return None
        device = next(self.model.model.parameters()).device
        return torch.Generator(device=device).manual_seed(self.params.seed)

    def reset(self) -> None:
        """Forget the conversation (the system message stays; a seeded session starts its seed again)."""
        self.history.clear()
        self._generator = self._new_generator()

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
        answer = self.model.chat(
            self._with_system(history), self.max_new_tokens, on_text=on_text, params=self.params,
            generator=self._generator,
        )  # fmt: skip
        self.history[:] = [*history, {"role": "assistant", "content": answer}]
        return Reply(answer, dropped)

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
