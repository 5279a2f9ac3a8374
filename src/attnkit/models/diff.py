"""What tuning changed inside a decoder: two :class:`LanguageModel` of one architecture (a base and its sft,
preference or LoRA run, or any two checkpoints of one shape) read on the same token ids.

* ``layer_kl [L + 1]``: per layer of the logit lens (:func:`attnkit.models.lens.logit_lens`), the mean over
  positions of KL(tuned ‖ base) between the two models' next-token distributions read there (the last row: the
  models' own outputs).
* ``pattern_change [L, H]``: per head, the mean over query positions of the total-variation distance between the
  two models' attention patterns (0: the same, 1: disjoint).
* ``attribution_change [L, H]``: per head, the mean absolute change of its direct logit attribution
  (:func:`attnkit.models.lens.logit_attribution`) to each position's next token.
* ``weight_updates``: per module whose weights differ, the Frobenius norm of the update and its ratio to the base
  weights' norm (for a merged LoRA run, each adapted module's ``(alpha / r) · B A``).

Sequences of different lengths are read one at a time (no padding to account for); every mean weighs each
sequence's positions alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnkit.models.lens import logit_attribution, logit_lens
from attnkit.models.lm import LanguageModel
from attnkit.nn import DecoderBlock
from attnkit.nn.hooks import run_with_cache

__all__ = ["ModelDiff", "model_diff", "weight_updates"]


@dataclass
class ModelDiff:
    layer_kl: Tensor
    layers: list[str]
    pattern_change: Tensor
    attribution_change: Tensor | None
    weight_updates: dict[str, tuple[float, float]]
    positions: int

    def top_heads(self, k: int = 5, by: str = "pattern") -> list[tuple[int, int, float]]:
        """The ``k`` heads that changed most, ``(layer, head, score)``, by ``"pattern"`` or ``"attribution"``."""
        values = {"pattern": self.pattern_change, "attribution": self.attribution_change}.get(by)
        if values is None:
            raise ValueError(f"by must be 'pattern' or 'attribution' (the latter for pre-norm models), got {by!r}")
        best = values.flatten().topk(min(k, values.numel()))
        heads = values.shape[1]
        return [(int(i) // heads, int(i) % heads, float(v)) for v, i in zip(best.values, best.indices)]


def _decoder(model: nn.Module, name: str) -> LanguageModel:
    if not isinstance(model, LanguageModel):
        raise TypeError(f"diff reads decoder-only LanguageModels; the {name} model is a {type(model).__name__}")
    return model


def _check_pair(base: nn.Module, tuned: nn.Module) -> tuple[LanguageModel, LanguageModel]:
    lm_a, lm_b = _decoder(base, "base"), _decoder(tuned, "tuned")
    a, b = lm_a.state_dict(), lm_b.state_dict()
    if a.keys() != b.keys():
        only = sorted(set(a) ^ set(b))[:4]
        raise ValueError(
            f"the two models are not of one architecture: their weights differ in names (e.g. {only}); diff compares "
            "a model with its own tuned version (merge a LoRA run's adapters first) or two models of one shape"
        )
    shapes = [k for k in a if a[k].shape != b[k].shape]
    if shapes:
        k = shapes[0]
        raise ValueError(
            f"the two models are not of one architecture: {k} is {list(a[k].shape)} in the base and "
            f"{list(b[k].shape)} in the tuned model ({len(shapes)} weights differ in shape)"
        )
    return lm_a, lm_b


def weight_updates(base: nn.Module, tuned: nn.Module) -> dict[str, tuple[float, float]]:
    """``{module name: (‖W_tuned − W_base‖_F, that / ‖W_base‖_F)}`` of every weight that differs, largest first
    (biases and norms included: ``name`` is the weight's, e.g. ``decoder.layers.0.self_attn.in_proj.weight``)."""
    a, b = base.state_dict(), tuned.state_dict()
    out = {}
    for key, value in a.items():
        if not value.is_floating_point() or key not in b:
            continue
        delta = (b[key].detach().float() - value.detach().float()).norm().item()
        if delta > 0:
            out[key] = (delta, delta / max(value.detach().float().norm().item(), 1e-12))
    return dict(sorted(out.items(), key=lambda kv: -kv[1][0]))


def _kl(tuned_logits: Tensor, base_logits: Tensor) -> Tensor:
    """KL(tuned ‖ base) of lens logits ``[L + 1, T, V]``, summed over the positions: ``[L + 1]``."""
    p_log = tuned_logits.float().log_softmax(-1)
    q_log = base_logits.float().log_softmax(-1)
    return (p_log.exp() * (p_log - q_log)).sum(dim=(1, 2))


def model_diff(base: nn.Module, tuned: nn.Module, sequences: Sequence[Tensor]) -> ModelDiff:
    """Compare ``base`` and ``tuned`` on each of ``sequences`` (token ids ``[T]`` or ``[1, T]``, ``T >= 2``)."""
    with torch.no_grad():
        return _model_diff(*_check_pair(base, tuned), sequences)


def _model_diff(lm_a: LanguageModel, lm_b: LanguageModel, sequences: Sequence[Tensor]) -> ModelDiff:
    if not sequences:
        raise ValueError("diff needs at least one sequence of token ids (a prompt)")
    n = len(lm_a.decoder.layers)
    pattern_names = [f"blocks.{i}.attn.hook_pattern" for i in range(n)]
    pre_norm = all(isinstance(block, DecoderBlock) and block.norm_first for block in lm_a.decoder.layers)
    kl_sum: Tensor | None = None
    pattern_sum: Tensor | None = None
    attribution_sum: Tensor | None = None
    positions = rows = 0
    layers: list[str] = []
    for raw in sequences:
        ids = raw.reshape(1, -1).long().to(next(lm_a.parameters()).device)
        length = ids.shape[1]
        if length < 2:
            raise ValueError("each sequence must have at least 2 tokens (a next token to read at one position)")
        lens_a, lens_b = logit_lens(lm_a, ids), logit_lens(lm_b, ids)
        layers = lens_a.names
        kl = _kl(lens_b.logits[:, 0], lens_a.logits[:, 0])  # [L + 1]
        kl_sum = kl if kl_sum is None else kl_sum + kl
        pa = run_with_cache(lm_a, ids, names=pattern_names)
        pb = run_with_cache(lm_b, ids, names=pattern_names)
        tv = torch.stack([0.5 * (pa[k][0].float() - pb[k][0].float()).abs().sum(dim=(1, 2)) for k in pattern_names])
        pattern_sum = tv if pattern_sum is None else pattern_sum + tv  # [L, H], summed over query rows
        if pre_norm:
            target = torch.cat([ids[:, 1:], ids[:, -1:]], dim=1)  # each position's next token (the last: unread)
            da = logit_attribution(lm_a, ids, target).heads[0, :-1]
            db = logit_attribution(lm_b, ids, target).heads[0, :-1]
            change = (db - da).abs().sum(0)  # [L, H]
            attribution_sum = change if attribution_sum is None else attribution_sum + change
        positions += length
        rows += length - 1
    assert kl_sum is not None and pattern_sum is not None
    return ModelDiff(
        layer_kl=kl_sum / positions,
        layers=layers,
        pattern_change=pattern_sum / positions,
        attribution_change=None if attribution_sum is None else attribution_sum / rows,
        weight_updates=weight_updates(lm_a, lm_b),
        positions=positions,
    )
