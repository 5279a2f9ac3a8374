"""Shared by the dpo / kto tests: a tiny policy and reference (random Llamas of the same shape, different seeds,
saved as Hugging Face folders with a ChatML template) and the same records TRL and attnkit encode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chat_models import build_chat_model

SYSTEM = {"role": "system", "content": "You add numbers."}
SUMS = [(1, 2), (3, 4), (5, 1), (7, 8), (2, 2), (9, 0)]


def conversational_pairs() -> list[dict[str, Any]]:
    return [
        {
            "prompt": [SYSTEM, {"role": "user", "content": f"What is {a} plus {b}?"}],
            "chosen": [{"role": "assistant", "content": f"It is {a + b}."}],
            "rejected": [{"role": "assistant", "content": f"The cat sat on the {'mat' if a % 2 else 'hill'}."}],
        }
        for a, b in SUMS
    ]


def text_pairs() -> list[dict[str, Any]]:
    return [
        {"prompt": f"The {w} owl sat on the", "chosen": " mat.", "rejected": " moon and looked at the river."}
        for w in ("old", "young", "small", "big", "quiet", "cold")
    ]


def feedback(conversational: bool) -> list[dict[str, Any]]:
    pairs = conversational_pairs() if conversational else text_pairs()
    labels = [True, False, False, True, True, False]
    return [
        {"prompt": p["prompt"], "completion": p["chosen"] if label else p["rejected"], "label": label}
        for p, label in zip(pairs, labels)
    ]


def policy_and_reference(folder: Path) -> tuple[Path, Path]:
    return build_chat_model(folder / "policy", seed=0), build_chat_model(folder / "reference", seed=1)
