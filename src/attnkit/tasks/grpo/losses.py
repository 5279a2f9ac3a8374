"""GRPO's advantages and loss on per-token log-probabilities, as TRL 1.x's ``GRPOTrainer`` computes them.

Per completion token ``t`` of completion ``i`` (``mask``: the completion's tokens, up to its end token):
``ratio = exp(logp - old_logp)``, the clipped term ``-min(ratio A_i, clip(ratio, 1 - ε_low, 1 + ε_high) A_i)``,
plus ``β`` times the KL estimate ``exp(ref - logp) - (ref - logp) - 1`` when ``beta > 0`` (times ``ratio`` with
``use_bias_correction_kl``, TRL's default: the unbiased reverse-KL gradient of DeepSeek-V3.2). The loss then is

* ``grpo``: each completion's mean over its tokens, then the mean over completions;
* ``dr_grpo``: the sum over every token / (completions × ``max_completion_length``) (Dr. GRPO);
* ``dapo``: the sum over every token / the number of tokens (token-level mean, DAPO).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnkit.data.lm.blocks import IGNORE_INDEX

__all__ = ["LOSS_TYPES", "group_advantages", "grpo_loss", "token_logps"]

LOSS_TYPES = ("grpo", "dr_grpo", "dapo")


def token_logps(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    """``[N, T]``: the log-probability of each counted target (``IGNORE_INDEX``: 0 there, exactly no gradient) of the
    language model ``model`` on ``(inputs, targets)``; the head runs on the counted positions only."""
    counted = targets != IGNORE_INDEX
    logits = model(inputs, only=counted)  # [M, V], the counted positions in row-major order
    picked = logits.float().log_softmax(-1).gather(-1, targets[counted].unsqueeze(-1)).squeeze(-1)
    out = torch.zeros(targets.shape, dtype=picked.dtype, device=picked.device)
    return out.masked_scatter(counted, picked)


def group_advantages(rewards: Tensor, group_size: int, *, scale: bool = True) -> tuple[Tensor, Tensor]:
    """``(advantages [N], std [N])`` of ``rewards [N]`` (``N / group_size`` groups of consecutive completions): each
    reward minus its group's mean, divided by the group's standard deviation + 1e-4 when ``scale`` (TRL's
    ``scale_rewards="group"``; Dr. GRPO: ``False``). NaN rewards (not scored) are left out of the means and get
    advantage 0; ``std`` is each completion's group standard deviation (unbiased)."""
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not make groups of {group_size}")
    grouped = rewards.view(-1, group_size)
    mean = grouped.nanmean(1, keepdim=True)
    count = (~grouped.isnan()).sum(1, keepdim=True)
    var = ((grouped - mean) ** 2).nansum(1, keepdim=True) / (count - 1).clamp(min=1)
    std = torch.where(count > 1, var.sqrt(), torch.full_like(var, float("nan")))
    advantages = grouped - mean
    if scale:
        advantages = advantages / (std + 1e-4)
    advantages = advantages.nan_to_num(0.0, posinf=0.0, neginf=0.0)
    return advantages.flatten(), std.expand_as(grouped).flatten()


def grpo_loss(
    logps: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    old_logps: Tensor | None = None,
    ref_logps: Tensor | None = None,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    beta: float = 0.0,
    loss_type: str = "grpo",
    max_completion_length: int | None = None,
    use_bias_correction_kl: bool = True,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The GRPO loss (see the module docstring) of per-token ``logps [N, T]`` (with gradient), ``advantages [N]``,
    ``mask [N, T]`` (bool, True at completion tokens); ``old_logps`` (default: ``logps`` detached, one pass per
    generation) and ``ref_logps`` (needed when ``beta > 0``) ``[N, T]``. ``epsilon_high`` defaults to
    ``epsilon``. Metrics (TRL's names): ``kl`` (with ``beta > 0``), ``clip_ratio/low_mean``,
    ``clip_ratio/high_mean``, ``clip_ratio/region_mean`` (shares of completion tokens)."""
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"grpo.loss_type={loss_type!r} is not known; choose one of {', '.join(LOSS_TYPES)}")
    if beta and ref_logps is None:
        raise ValueError("grpo_loss: beta > 0 needs the reference's log-probabilities (ref_logps)")
    if loss_type == "dr_grpo" and not max_completion_length:
        raise ValueError("grpo_loss: loss_type='dr_grpo' needs max_completion_length")
    high = epsilon if epsilon_high is None else epsilon_high
    m = mask.to(logps.dtype)
    old = logps.detach() if old_logps is None else old_logps
    adv = advantages.unsqueeze(1).to(logps.dtype)
    ratio = torch.exp(logps - old)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + high)
    per_token = -torch.min(ratio * adv, clipped * adv)
    metrics: dict[str, Tensor] = {}
    tokens = m.sum().clamp(min=1.0)
    if beta:
        assert ref_logps is not None
        kl = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
        if use_bias_correction_kl:
            kl = kl * ratio
        per_token = per_token + beta * kl
        metrics["kl"] = ((kl * m).sum() / tokens).detach()
    if loss_type == "grpo":
        loss = ((per_token * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
    elif loss_type == "dr_grpo":
        assert max_completion_length is not None
        loss = (per_token * m).sum() / (per_token.shape[0] * max_completion_length)
    else:
        loss = (per_token * m).sum() / tokens
    with torch.no_grad():
        low = (ratio < 1 - epsilon) & (adv < 0)
        high_clipped = (ratio > 1 + high) & (adv > 0)
        metrics["clip_ratio/low_mean"] = (low.to(m.dtype) * m).sum() / tokens
        metrics["clip_ratio/high_mean"] = (high_clipped.to(m.dtype) * m).sum() / tokens
        metrics["clip_ratio/region_mean"] = ((low | high_clipped).to(m.dtype) * m).sum() / tokens
    return loss, metrics
