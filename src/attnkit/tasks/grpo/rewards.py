"""GRPO's rewards: the built-in ones and user functions, by name.

A reward function is called once per batch of completions as
``function(prompts=[...], completions=[...], **columns)``: the prompts (text, or lists of messages), the
completions' texts, and every other column of the rows (``answer=[...]``...), each a list with one item per
completion. It returns one float per completion (``None``: not scored, NaN). TRL's ``GRPOTrainer`` calls its
reward functions the same way.

Built in:

* ``answer_match``: 1.0 when the completion's final answer (:func:`extract_answer`) equals the row's answer
  column (``grpo.answer_column``, default ``answer``), else 0.0;
* ``format``: 1.0 when the regular expression ``grpo.format_pattern`` matches somewhere in the completion
  (``re.search`` with ``re.DOTALL``: anchor it with ``^`` / ``$`` to match the whole), else 0.0.

Anything else is ``package.module:function``, imported when the run starts.
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["BUILT_IN", "RewardFunction", "answer_match", "extract_answer", "format_reward", "load_reward",
           "normalize_answer", "score"]  # fmt: skip

RewardFunction = Callable[..., Sequence[float | None]]

BUILT_IN = ("answer_match", "format")

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_MARKER = re.compile(r"####|answer\s*:", re.IGNORECASE)


def normalize_answer(text: str) -> str:
    """An answer as compared: stripped of spaces, a final period and ``$``; a number without its thousands
    commas and without trailing zeros after its point (``"1,000.50"`` -> ``"1000.5"``, ``"7.0"`` -> ``"7"``)."""
    text = text.strip().rstrip(".").strip().replace("$", "")
    number = text.replace(",", "")
    if re.fullmatch(r"-?(\d+(\.\d*)?|\.\d+)", number):
        if "." in number:
            number = number.rstrip("0").rstrip(".") or "0"
        return "0" if number in ("-0", "") else number
    return text


def extract_answer(completion: str) -> str | None:
    """The final answer of ``completion``: the text after its last ``####`` or ``answer:`` (any case; up to the
    end of that line), else its last number; ``None`` when there is neither. Normalised
    (:func:`normalize_answer`)."""
    markers = list(_MARKER.finditer(completion))
    if markers:
        after = completion[markers[-1].end() :].strip()
        line = after.splitlines()[0] if after else ""
        return normalize_answer(line) if line.strip() else None
    numbers = _NUMBER.findall(completion)
    return normalize_answer(numbers[-1]) if numbers else None


def answer_match(prompts: Sequence[Any], completions: Sequence[str], answer: Sequence[Any], **_: Any) -> list[float]:
    """1.0 per completion whose extracted final answer equals its row's ``answer`` (both normalised), else 0.0."""
    out = []
    for completion, wanted in zip(completions, answer, strict=True):
        got = extract_answer(completion)
        out.append(float(got is not None and got == normalize_answer(str(wanted))))
    return out


def format_reward(pattern: str) -> RewardFunction:
    """The reward 1.0 per completion in which ``pattern`` is found (``re.search``, ``re.DOTALL``), else 0.0."""
    try:
        compiled = re.compile(pattern, re.DOTALL)
    except re.error as err:
        raise ValueError(f"grpo.format_pattern={pattern!r} is not a regular expression: {err}") from None

    def format(prompts: Sequence[Any], completions: Sequence[str], **_: Any) -> list[float]:
        return [float(compiled.search(c) is not None) for c in completions]

    return format


def load_reward(spec: str) -> RewardFunction:
    """The reward function ``spec`` names: ``package.module:function`` (imported), checked to be callable."""
    module_name, sep, name = spec.partition(":")
    if not sep or not module_name or not name:
        raise ValueError(
            f"reward {spec!r} is neither a built-in reward ({', '.join(BUILT_IN)}) nor package.module:function"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(
            f"reward {spec!r}: cannot import module {module_name!r} ({err}); is it on PYTHONPATH?"
        ) from None
    function = getattr(module, name, None)
    if function is None:
        raise ValueError(f"reward {spec!r}: module {module_name!r} has no {name!r}")
    if not callable(function):
        raise ValueError(f"reward {spec!r}: {module_name}.{name} is a {type(function).__name__}, not a function")
    return function


def score(
    name: str, function: RewardFunction, prompts: list[Any], completions: list[str], columns: dict[str, list[Any]]
) -> list[float]:
    """``function``'s rewards of the completions, checked: one float (or ``None``: NaN) per completion."""
    values = function(prompts=prompts, completions=completions, **columns)
    try:
        out = [math.nan if v is None else float(v) for v in values]
    except (TypeError, ValueError):
        raise ValueError(f"reward {name!r} must return a list of floats (or None), got {values!r:.80}") from None
    if len(out) != len(completions):
        raise ValueError(f"reward {name!r} returned {len(out)} values for {len(completions)} completions")
    return out
