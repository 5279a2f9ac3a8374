"""Preference losses on sequence log-probabilities, as TRL 1.x computes them (``DPOTrainer``, ``KTOTrainer``).

Each takes the summed log-probabilities of the completions' tokens under the policy and the reference
(:func:`sequence_logps`) and returns ``(loss, metrics)``, the metrics under TRL's names (``rewards/chosen``,
``rewards/rejected``, ``rewards/accuracies``, ``rewards/margins``, ``logps/chosen``, ``logps/rejected``; kto adds
``kl``), each a batch mean (detached). A reward is ``beta`` times a completion's log-ratio to the reference.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.data.lm.blocks import IGNORE_INDEX

__all__ = ["DPO_LOSSES", "completion_logps", "dpo_loss", "kto_loss", "sequence_logps"]

DPO_LOSSES = ("sigmoid", "ipo", "robust")


def completion_logps(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """``(logps [N], tokens [N])``: per row of ``logits [N, T, V]``, the summed log-probability of its counted
    ``targets [N, T]`` (``IGNORE_INDEX``: not counted, exactly no gradient there) and how many were counted."""
    counted = targets != IGNORE_INDEX
    picked = logits.float().log_softmax(-1).gather(-1, targets.masked_fill(~counted, 0).unsqueeze(-1)).squeeze(-1)
    return torch.where(counted, picked, torch.zeros_like(picked)).sum(-1), counted.sum(-1)


def sequence_logps(model: nn.Module, inputs: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """``(logps [N], tokens [N])`` of the language model ``model`` on a batch ``(inputs, targets)`` (see
    :func:`completion_logps`): the head runs on the counted positions only (``only=``), so no ``[N, T, V]``
    logits are made, only those of the completions' tokens."""
    counted = targets != IGNORE_INDEX
    logits = model(inputs, only=counted)  # [M, V], the counted positions in row-major order
    picked = logits.float().log_softmax(-1).gather(-1, targets[counted].unsqueeze(-1)).squeeze(-1)
    rows = counted.nonzero()[:, 0]
    logps = torch.zeros(inputs.shape[0], dtype=picked.dtype, device=picked.device).index_add(0, rows, picked)
    return logps, counted.sum(-1)


def dpo_loss(
    chosen: Tensor,
    rejected: Tensor,
    ref_chosen: Tensor,
    ref_rejected: Tensor,
    *,
    beta: float,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
    chosen_tokens: Tensor | None = None,
    rejected_tokens: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The mean DPO loss of ``B`` pairs (each argument ``[B]``) and its metrics.

    ``loss_type``: ``"sigmoid"`` (DPO: ``-log σ(β Δ)``, ``Δ`` the chosen log-ratio minus the rejected one; with
    ``label_smoothing`` ε, conservative DPO: ``-(1 - ε) log σ(β Δ) - ε log σ(-β Δ)``), ``"robust"`` (robust DPO,
    TRL's ``"robust"``: ``(-(1 - ε) log σ(β Δ) + ε log σ(-β Δ)) / (1 - 2ε)``) or ``"ipo"`` (IPO:
    ``(Δ' - 1 / (2β))²``, ``Δ'`` with each log-ratio divided by its completion's ``*_tokens``, as TRL)."""
    if loss_type not in DPO_LOSSES:
        raise ValueError(f"loss.loss_type={loss_type!r} is not a DPO loss; choose one of {', '.join(DPO_LOSSES)}")
    chosen_ratio, rejected_ratio = chosen - ref_chosen, rejected - ref_rejected
    delta = chosen_ratio - rejected_ratio
    if loss_type == "sigmoid":
        losses = -(1 - label_smoothing) * F.logsigmoid(beta * delta) - label_smoothing * F.logsigmoid(-beta * delta)
    elif loss_type == "robust":
        losses = (
            -(1 - label_smoothing) * F.logsigmoid(beta * delta) + label_smoothing * F.logsigmoid(-beta * delta)
        ) / (1 - 2 * label_smoothing)
    else:
        if chosen_tokens is None or rejected_tokens is None:
            raise ValueError("the ipo loss needs the completions' token counts (chosen_tokens, rejected_tokens)")
        average = chosen_ratio / chosen_tokens.clamp(min=1) - rejected_ratio / rejected_tokens.clamp(min=1)
        losses = (average - 1 / (2 * beta)) ** 2
    chosen_rewards, rejected_rewards = beta * chosen_ratio.detach(), beta * rejected_ratio.detach()
    metrics = {
        "rewards/chosen": chosen_rewards.mean(),
        "rewards/rejected": rejected_rewards.mean(),
        "rewards/accuracies": (chosen_rewards > rejected_rewards).float().mean(),
        "rewards/margins": (chosen_rewards - rejected_rewards).mean(),
        "logps/chosen": chosen.detach().mean(),
        "logps/rejected": rejected.detach().mean(),
    }
    return losses.mean(), metrics


def kto_loss(
    logps: Tensor,
    ref_logps: Tensor,
    labels: Tensor,
    kl: Tensor,
    *,
    beta: float,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The KTO loss of ``B`` unpaired completions (``logps``, ``ref_logps`` ``[B]``; ``labels [B]`` bool, True:
    desirable) given the KL estimate ``kl`` (a scalar: the mean log-ratio of mismatched completions, clamped at
    0, no gradient): ``1 - σ(β (r - kl))`` for a desirable completion of log-ratio ``r``, ``1 - σ(β (kl - r))``
    for an undesirable one, weighted by ``desirable_weight`` / ``undesirable_weight``, averaged over the batch.
    Metrics as TRL's (``rewards/chosen``: the mean over the desirable completions, NaN when there are none...),
    and ``kl``."""
    labels = labels.bool()
    ratio = logps - ref_logps
    chosen_losses = 1 - torch.sigmoid(beta * (ratio[labels] - kl))
    rejected_losses = 1 - torch.sigmoid(beta * (kl - ratio[~labels]))
    losses = torch.cat((desirable_weight * chosen_losses, undesirable_weight * rejected_losses))
    rewards = beta * ratio.detach()
    nan = torch.full((), float("nan"), device=logps.device)
    chosen_reward = rewards[labels].mean() if labels.any() else nan
    rejected_reward = rewards[~labels].mean() if (~labels).any() else nan
    metrics = {
        "rewards/chosen": chosen_reward,
        "rewards/rejected": rejected_reward,
        "rewards/margins": chosen_reward - rejected_reward,
        "logps/chosen": logps.detach()[labels].mean() if labels.any() else nan,
        "logps/rejected": logps.detach()[~labels].mean() if (~labels).any() else nan,
        "kl": kl.detach().reshape(()),
    }
    return losses.nanmean(), metrics
