"""The one check of sampling options that every entry point shares: ``attnkit generate`` and ``attnkit chat``
(through :func:`attnkit.api.generate` and :class:`attnkit.api.ChatSession`), ``attnkit serve`` (its request
schema and :meth:`attnkit.serve.Engine.check`), ``attnkit explore`` and the sampling code itself
(:func:`~attnkit.models.generation.sample_next_token`, :meth:`attnkit.models.LanguageModel.generate`).

Each wrong value is a :class:`SamplingError` (a ``ValueError``) whose ``field`` names the option and whose
message says what was wrong: the server answers 400 with ``param`` set to it, the command line prints
``error: ...`` before it writes anything.

The rules:

- ``temperature``: ``0`` (greedy) or a finite number ``>= MIN_TEMPERATURE`` (0.01). Sampling divides the
  logits by the temperature (in float32); a temperature of 1e-39 turns a logit of 1 into 1e39, past float32's
  (and bfloat16's) largest value 3.4e38: ``inf``, then ``inf - inf = nan`` in the softmax, and the draw fails.
  With the floor a logit is multiplied by at most 100, so no model's logits can overflow (float32 or bfloat16
  would need logits above 3.4e36; even float16, largest value 65504, holds any logit up to 655). Nothing is
  lost: at 0.01 a logit ahead by 0.2 is already e^20 (5e8) times as likely, i.e. greedy in practice.
  Temperatures too large for float32 are harmless (the logits become 0: a uniform draw), but must be finite.
- ``seed``: an integer in ``[0, 2**64)`` (what a ``torch.Generator`` takes); ``None``: unseeded.
- ``top_k``: ``None`` (off) or an int ``>= 1``; ``top_p``: ``None`` or a number in ``(0, 1]``;
  ``min_p``: ``None`` or a number in ``[0, 1]``; ``repetition_penalty``: a finite number ``> 0`` (1: none).
- ``max_tokens``: an int in ``[minimum, MAX_TOKENS]`` (2**20: a sane bound on the buffers a request allocates).

Numbers are ``int`` or ``float``, never ``bool`` or text; every float must be finite.
"""

from __future__ import annotations

import math

__all__ = [
    "MAX_TOKENS",
    "MIN_TEMPERATURE",
    "SEED_END",
    "SamplingError",
    "check_max_tokens",
    "check_min_p",
    "check_repetition_penalty",
    "check_sampling",
    "check_seed",
    "check_temperature",
    "check_top_k",
    "check_top_p",
]

MIN_TEMPERATURE = 1e-2  # the smallest temperature but 0: logits / temperature cannot overflow (module docstring)
SEED_END = 2**64  # seeds are in [0, SEED_END): a torch.Generator's seed is an unsigned 64-bit integer
MAX_TOKENS = 2**20  # the most new tokens one call may ask for


class SamplingError(ValueError):
    """A sampling option that is wrong: ``field`` is its name (e.g. ``"seed"``), the message says why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _finite(value: object) -> float | None:
    """``value`` as a float if it is a finite int or float (never a bool), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int past float's range
        return None
    return number if math.isfinite(number) else None


def check_temperature(value: object, *, maximum: float | None = None, field: str = "temperature") -> None:
    """``0`` (greedy) or a finite number in ``[MIN_TEMPERATURE, maximum]`` (``maximum`` None: no bound)."""
    number = _finite(value)
    if number is None or not (number == 0.0 or number >= MIN_TEMPERATURE) or (maximum is not None and number > maximum):
        bound = f" and <= {maximum:g}" if maximum is not None else ""
        raise SamplingError(
            field,
            f"{field} must be a number >= 0 (0 = greedy; otherwise finite, >= {MIN_TEMPERATURE:g}{bound}, so that "
            f"logits / {field} cannot overflow), got {value!r}",
        )


def check_seed(value: object, *, optional: bool = True, field: str = "seed") -> None:
    """An integer in ``[0, 2**64)`` (or ``None`` when ``optional``)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < SEED_END:
        none = " (or None: unseeded)" if optional else ""
        raise SamplingError(field, f"{field} must be an integer in [0, 2**64){none}, got {value!r}")


def check_top_k(value: object, *, field: str = "top_k") -> None:
    """``None`` (off) or an int ``>= 1``."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise SamplingError(field, f"{field} must be None or an int >= 1, got {value!r}")


def check_top_p(value: object, *, field: str = "top_p") -> None:
    """``None`` (off) or a number in ``(0, 1]``."""
    number = _finite(value)
    if value is not None and (number is None or not 0.0 < number <= 1.0):
        raise SamplingError(field, f"{field} must be None or a number in (0, 1], got {value!r}")


def check_min_p(value: object, *, field: str = "min_p") -> None:
    """``None`` (off) or a number in ``[0, 1]``."""
    number = _finite(value)
    if value is not None and (number is None or not 0.0 <= number <= 1.0):
        raise SamplingError(field, f"{field} must be None or a number in [0, 1], got {value!r}")


def check_repetition_penalty(value: object, *, field: str = "repetition_penalty") -> None:
    """A finite number ``> 0`` (1: no penalty)."""
    number = _finite(value)
    if number is None or not number > 0.0:
        raise SamplingError(field, f"{field} must be a number > 0 (1 = none) and finite, got {value!r}")


def check_max_tokens(value: object, *, minimum: int = 0, optional: bool = True, field: str = "max_tokens") -> None:
    """An int in ``[minimum, MAX_TOKENS]`` (or ``None`` when ``optional``: the caller's default)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_TOKENS:
        raise SamplingError(field, f"{field} must be an int in [{minimum}, {MAX_TOKENS}], got {value!r}")


def check_sampling(
    temperature: object = 1.0,
    top_k: object = None,
    top_p: object = None,
    min_p: object = None,
    repetition_penalty: object = 1.0,
    *,
    seed: object = None,
    max_tokens: object = None,
    max_tokens_field: str = "max_tokens",
    min_tokens: int = 0,
    max_temperature: float | None = None,
) -> None:
    """Raise a :class:`SamplingError` naming the first option that is wrong (rules: the module's docstring).

    ``seed`` and ``max_tokens`` are checked when given (``max_tokens`` in ``[min_tokens, MAX_TOKENS]``, named
    ``max_tokens_field`` in the message); ``max_temperature``: an entry point's upper bound (the server:
    OpenAI's 2)."""
    check_temperature(temperature, maximum=max_temperature)
    check_top_k(top_k)
    check_top_p(top_p)
    check_min_p(min_p)
    check_repetition_penalty(repetition_penalty)
    check_seed(seed)
    check_max_tokens(max_tokens, minimum=min_tokens, field=max_tokens_field)
