"""How one request is decoded: :class:`SamplingParams`, the one parameters type of every way of generating text.

``attnkit generate`` and ``chat`` (through :func:`attnkit.api.generate` and :class:`attnkit.api.ChatSession`),
``attnkit serve`` (its request schema converts each request to one), ``explore`` and ``lmeval`` all decode with a
:class:`SamplingParams`; :class:`~attnkit.models.generation.processors.Sampler` turns a batch of them (one per
row, each its own) into next tokens. Its fields are declared here once, each with its rule and its meaning
(:data:`FIELDS`); an entry point that exposes a field derives its flag or schema entry from that declaration.

A ``SamplingParams`` is checked when it is made: a wrong value is a
:class:`~attnkit.models.generation.options.SamplingError` (a ``ValueError``) whose ``field`` names it, so the
server answers 400 with ``param`` set to it and the command line prints ``error: ...`` before it writes
anything. The rules of the numeric options are :mod:`attnkit.models.generation.options`'s.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from attnkit.models.generation.options import (
    SamplingError,
    check_max_tokens,
    check_min_p,
    check_repetition_penalty,
    check_seed,
    check_temperature,
    check_top_k,
    check_top_p,
)

__all__ = [
    "FIELDS",
    "MAX_LOGIT_BIAS",
    "MAX_LOGPROBS",
    "MAX_N",
    "MAX_PENALTY",
    "MAX_STOPS",
    "MAX_STOP_LENGTH",
    "SamplingParams",
    "field_doc",
]

MAX_PENALTY = 2.0  # presence and frequency penalties are in [-2, 2], as OpenAI's
MAX_LOGIT_BIAS = 100.0  # a logit bias is in [-100, 100], as OpenAI's
MAX_LOGPROBS = 20  # most alternatives per token, as OpenAI's top_logprobs
MAX_N = 128  # most choices of one request (an entry point may allow fewer, e.g. the server's --max-batch)
MAX_STOPS = 64  # most stop strings (the server allows OpenAI's 4; lm-eval tasks may give more)
MAX_STOP_LENGTH = 1024  # characters of one stop string


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _check_penalty(value: object, name: str) -> None:
    number = _number(value)
    if number is None or not -MAX_PENALTY <= number <= MAX_PENALTY:
        raise SamplingError(
            name, f"{name} must be a number in [-{MAX_PENALTY:g}, {MAX_PENALTY:g}] (0 = none), got {value!r}"
        )


def _check_n(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_N:
        raise SamplingError("n", f"n must be an int in [1, {MAX_N}], got {value!r}")


def _check_logprobs(value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LOGPROBS:
        raise SamplingError(
            "logprobs",
            f"logprobs must be None (none) or an int in [0, {MAX_LOGPROBS}] (the chosen token's log-probability "
            f"and that many most likely alternatives), got {value!r}",
        )


def _check_stop(value: object) -> None:
    if isinstance(value, str) or not isinstance(value, tuple):
        raise SamplingError("stop", f"stop must be a tuple of non-empty strings, got {value!r}")
    if len(value) > MAX_STOPS:
        raise SamplingError("stop", f"at most {MAX_STOPS} stop strings, got {len(value)}")
    for s in value:
        if not isinstance(s, str) or not s or len(s) > MAX_STOP_LENGTH:
            raise SamplingError(
                "stop",
                f"each stop string must be a non-empty string of at most {MAX_STOP_LENGTH} characters, got {s!r}",
            )


def _check_token_id(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SamplingError(name, f"{name} must hold token ids (ints >= 0), got {value!r}")


def _check_stop_ids(value: object) -> None:
    if not isinstance(value, tuple):
        raise SamplingError("stop_ids", f"stop_ids must be a tuple of token ids, got {value!r}")
    for token in value:
        _check_token_id(token, "stop_ids")


def _check_logit_bias(value: object) -> None:
    if not isinstance(value, tuple):
        raise SamplingError("logit_bias", f"logit_bias must be (token id, bias) pairs, got {value!r}")
    seen: set[int] = set()
    for pair in value:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise SamplingError("logit_bias", f"logit_bias must be (token id, bias) pairs, got {pair!r}")
        token, bias = pair
        _check_token_id(token, "logit_bias")
        number = _number(bias)
        if number is None or not -MAX_LOGIT_BIAS <= number <= MAX_LOGIT_BIAS:
            raise SamplingError(
                "logit_bias", f"logit_bias of token {token} must be a number in [-100, 100], got {bias!r}"
            )
        if token in seen:
            raise SamplingError("logit_bias", f"logit_bias gives token {token} twice")
        seen.add(token)


# Each field's check (the SamplingError names it). A field without one is a plain flag.
_CHECKS: dict[str, Any] = {
    "max_tokens": lambda v: check_max_tokens(v, minimum=0),
    "temperature": check_temperature,
    "top_k": check_top_k,
    "top_p": check_top_p,
    "min_p": check_min_p,
    "typical_p": lambda v: check_top_p(v, field="typical_p"),
    "repetition_penalty": check_repetition_penalty,
    "presence_penalty": lambda v: _check_penalty(v, "presence_penalty"),
    "frequency_penalty": lambda v: _check_penalty(v, "frequency_penalty"),
    "logit_bias": _check_logit_bias,
    "seed": check_seed,
    "stop": _check_stop,
    "stop_ids": _check_stop_ids,
    "n": _check_n,
    "logprobs": _check_logprobs,
}


def _field(default: Any, doc: str) -> Any:
    """A field of :class:`SamplingParams`: its default and its one-line description, declared once."""
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class SamplingParams:
    """How one request (or one call of :meth:`attnkit.models.LanguageModel.generate`) is decoded.

    Made with keywords; checked at once (a :class:`SamplingError` names the wrong field). Lists given for
    ``stop``, ``stop_ids`` or ``logit_bias`` (a mapping, token id -> bias) are stored as tuples, so a
    ``SamplingParams`` is hashable and never changes. Each field's meaning: :func:`field_doc`.

    Log-probabilities (``logprobs``) are the model's own (the log-softmax of its logits, before any option
    changes them), as OpenAI and vLLM report them.
    """

    max_tokens: int | None = _field(16, "most new tokens per choice (None: what the context holds; 0: none)")
    temperature: float = _field(1.0, "0 is greedy; otherwise the logits are divided by it (>= 0.01) before the draw")
    top_k: int | None = _field(None, "draw from the top_k most likely tokens only (None: all)")
    top_p: float | None = _field(
        None, "nucleus: the fewest most likely tokens whose probability reaches it (None: all)"
    )
    min_p: float | None = _field(None, "drop tokens less likely than min_p times the most likely one (None: none)")
    typical_p: float | None = _field(
        None, "locally typical sampling: the tokens nearest the entropy whose probability reaches it (None, 1: all)"
    )
    repetition_penalty: float = _field(1.0, "transformers' penalty on tokens already in the row, prompt included")
    presence_penalty: float = _field(0.0, "OpenAI's: subtracted from every generated token's logit, in [-2, 2]")
    frequency_penalty: float = _field(0.0, "OpenAI's: subtracted once per time a token was generated, in [-2, 2]")
    logit_bias: tuple[tuple[int, float], ...] = _field((), "(token id, bias) pairs added to the logits, in [-100, 100]")
    seed: int | None = _field(None, "seeds the request's own generator: the same text alone or batched")
    stop: tuple[str, ...] = _field((), "strings that end a choice; its text is cut before the first one")
    stop_ids: tuple[int, ...] = _field((), "token ids that end a choice, besides the model's EOS")
    n: int = _field(1, "independent choices of the same prompt (one batch row each)")
    logprobs: int | None = _field(None, "each new token's log-probability and that many alternatives' (None: none)")

    def __post_init__(self) -> None:
        # Lists and mappings become tuples (frozen: object.__setattr__), then every field is checked.
        for name in ("stop", "stop_ids"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
            elif isinstance(value, str) and name == "stop":
                object.__setattr__(self, name, (value,))
        bias = self.logit_bias
        if isinstance(bias, Mapping):
            object.__setattr__(self, "logit_bias", tuple((k, v) for k, v in bias.items()))
        elif isinstance(bias, list):
            object.__setattr__(self, "logit_bias", tuple(tuple(p) if isinstance(p, list) else p for p in bias))
        for name, check in _CHECKS.items():
            check(getattr(self, name))

    def replace(self, **changes: Any) -> SamplingParams:
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)

    @property
    def greedy(self) -> bool:
        """Temperature 0: the most likely token after the logit processors (penalties, bias), no draw."""
        return self.temperature == 0

    def bias_map(self) -> dict[int, float]:
        """``logit_bias`` as a dict."""
        return {int(k): float(v) for k, v in self.logit_bias}

    def check_vocab(self, vocab_size: int) -> None:
        """Raise a :class:`SamplingError` if a token id of ``logit_bias`` or ``stop_ids`` is past ``vocab_size``."""
        for name, ids in (("logit_bias", (k for k, _ in self.logit_bias)), ("stop_ids", self.stop_ids)):
            bad = [i for i in ids if i >= vocab_size]
            if bad:
                raise SamplingError(name, f"{name}: token id {bad[0]} is past the vocabulary ({vocab_size} tokens)")


FIELDS: dict[str, dataclasses.Field[Any]] = {f.name: f for f in dataclasses.fields(SamplingParams)}
"""The fields of :class:`SamplingParams` by name (their defaults; their docs are in the class)."""


def field_doc(name: str) -> str:
    """The one-line description of field ``name`` (declared once, in the field's metadata)."""
    return str(FIELDS[name].metadata["doc"])
