"""What tuning changed: ``attnkit diff BASE TUNED --prompts FILE`` (:func:`diff_models`).

Both models are loaded as :func:`attnkit.api.inspecting.load_decoder` loads one (runs, attnkit and Hugging Face
folders; a LoRA run with its adapters merged), the prompts are encoded by each model's tokenizer (they must give
the same ids) and compared by :func:`attnkit.models.diff.model_diff`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from attnkit.api.inspecting import ModelSource, load_decoder

__all__ = ["diff_models", "read_prompts"]

MAX_PROMPTS = 10_000


def read_prompts(path: str | Path) -> list[str]:
    """The prompts of ``path``: a text file (one prompt a line, blank lines skipped) or JSON lines (each a string or
    an object with a ``prompt`` or ``text`` field)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no prompts file at {path}: give a text file (one prompt a line) or JSON lines")
    prompts: list[str] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    jsonl = path.suffix in (".jsonl", ".json")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if not jsonl:
            prompts.append(line)
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{number} is not JSON ({err.msg}): one JSON object or string a line") from None
        text = (
            record
            if isinstance(record, str)
            else record.get("prompt", record.get("text"))
            if isinstance(record, dict)
            else None
        )
        if not isinstance(text, str):
            raise ValueError(
                f"{path}:{number} has no prompt: give a string, or an object with a 'prompt' or 'text' string"
            )
        prompts.append(text)
    if not prompts:
        raise ValueError(f"{path} has no prompts (every line is blank)")
    if len(prompts) > MAX_PROMPTS:
        raise ValueError(f"{path} has {len(prompts)} prompts; diff reads at most {MAX_PROMPTS}: give a sample of them")
    return prompts


def _ids(pretrained: Any, text: str) -> list[int]:
    ids = list(pretrained.encode_prompt(text))
    if len(ids) > pretrained.context:
        raise ValueError(f"the prompt {text[:40]!r}… is {len(ids)} tokens; the model's context is {pretrained.context}")
    return ids


def diff_models(
    base: ModelSource, tuned: ModelSource, prompts: list[str] | str | Path, *, top: int = 5
) -> dict[str, Any]:
    """Compare ``base`` and ``tuned`` on ``prompts`` (a list, or a file :func:`read_prompts` reads): per layer the
    KL divergence of the two logit lenses (``layer_kl``), per head the change of its attention pattern
    (``pattern_change [L][H]``) and of its direct logit attribution (``attribution_change``, pre-norm models), the
    ``top`` heads by each, and the weight updates (``weight_updates``: name, norm, norm relative to the base's)."""
    from attnkit.models.diff import model_diff

    texts = read_prompts(prompts) if isinstance(prompts, (str, Path)) else list(prompts)
    if not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError("prompts must be a non-empty list of strings (or a prompts file)")
    if top < 1:
        raise ValueError(f"top must be >= 1, got {top}")
    a, b = load_decoder(base, "diff"), load_decoder(tuned, "diff")
    sequences = []
    for text in texts:
        ids_a, ids_b = _ids(a, text), _ids(b, text)
        if ids_a != ids_b:
            raise ValueError(
                f"the two models' tokenizers encode {text[:40]!r} differently ({len(ids_a)} and {len(ids_b)} tokens): "
                "diff compares models that share a tokenizer"
            )
        if len(ids_a) < 2:
            raise ValueError(f"the prompt {text!r} is {len(ids_a)} token(s); diff needs at least 2: lengthen it")
        sequences.append(torch.tensor(ids_a))
    result = model_diff(a.model, b.model, sequences)
    out: dict[str, Any] = {
        "command": "diff",
        "base": str(a.source),
        "tuned": str(b.source),
        "prompts": len(texts),
        "positions": result.positions,
        "layers": result.layers,
        "layer_kl": result.layer_kl.tolist(),
        "pattern_change": result.pattern_change.tolist(),
        "attribution_change": None if result.attribution_change is None else result.attribution_change.tolist(),
        "top_pattern": [{"layer": i, "head": j, "score": s} for i, j, s in result.top_heads(top, "pattern")],
        "weight_updates": [{"name": k, "norm": n, "relative": r} for k, (n, r) in result.weight_updates.items()],
    }
    if result.attribution_change is not None:
        out["top_attribution"] = [
            {"layer": i, "head": j, "score": s} for i, j, s in result.top_heads(top, "attribution")
        ]
    return out
