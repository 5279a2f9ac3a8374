"""Activation patching and ablation of a decoder-only :class:`LanguageModel`, batched.

Run the model on a *corrupted* input with one activation taken from the *clean* input's run (same length),
and see how much of the clean behaviour comes back: a ``metric`` of the logits (:func:`logit_diff`,
:func:`target_logprob`), normalised so that 0 is the corrupted run and 1 the clean run.

* :func:`patch_residual`: the residual stream entering block ``l`` (``blocks.{l}.hook_resid_pre``) at one
  position, for every layer × position: ``[L, T]``;
* :func:`patch_heads`: one head's output (``blocks.{l}.attn.hook_z``) at every position: ``[L, H]``;
* :func:`ablate_heads`: one head's output replaced by zeros or by its mean (over the batch and positions):
  the metric per ``[L, H]``, beside the unablated one;
* :func:`run_patched`: one run of the corrupted input with chosen positions of one layer patched (the logits).

The sweeps are batched: ``chunk_size`` patched copies of the input are stacked along the batch and run in one
forward pass (each copy's hooks patch its own rows), which gives the same numbers as one pass per cell.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from attnkit.models.lm import LanguageModel
from attnkit.nn.hooks import HookPoint, hooks, run_with_cache

__all__ = [
    "Ablation",
    "Metric",
    "PatchResult",
    "ablate_heads",
    "logit_diff",
    "patch_heads",
    "patch_residual",
    "run_patched",
    "target_logprob",
]

Metric = Callable[[Tensor], Tensor]
"""``metric(logits [N, T, V]) -> [N]``: one number per run (e.g. :func:`logit_diff`)."""


def logit_diff(target: int, against: int, position: int = -1) -> Metric:
    """``logit(target) - logit(against)`` at ``position`` (default: the last)."""

    def metric(logits: Tensor) -> Tensor:
        row = logits[:, position].float()
        return row[:, target] - row[:, against]

    return metric


def target_logprob(target: int, position: int = -1) -> Metric:
    """The log-probability of ``target`` at ``position`` (default: the last)."""

    def metric(logits: Tensor) -> Tensor:
        return logits[:, position].float().log_softmax(-1)[:, target]

    return metric


@dataclass
class PatchResult:
    """``scores``: the normalised metric of each patched run (0 = the corrupted run, 1 = the clean run), ``[L, T]``
    for :func:`patch_residual`, ``[L, H]`` for :func:`patch_heads`; ``raw``: the metric itself, same shape;
    ``clean`` / ``corrupted``: the metric of the unpatched runs (averaged over the batch)."""

    scores: Tensor
    raw: Tensor
    clean: float
    corrupted: float


def _check(model: nn.Module, what: str) -> LanguageModel:
    if not isinstance(model, LanguageModel):
        raise TypeError(
            f"{what} runs a decoder-only LanguageModel (lm runs, imported GPT-2/Llama models), got "
            f"{type(model).__name__}"
        )
    return model


def _ids(ids: Tensor, name: str) -> Tensor:
    ids = torch.as_tensor(ids)
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if ids.dim() != 2 or ids.shape[1] == 0 or ids.dtype in (torch.float16, torch.float32, torch.float64):
        raise ValueError(f"{name} must be token ids [T] or [B, T] (T >= 1), got {tuple(ids.shape)} {ids.dtype}")
    return ids.long()


def _pair(clean: Tensor, corrupted: Tensor) -> tuple[Tensor, Tensor]:
    clean, corrupted = _ids(clean, "clean"), _ids(corrupted, "corrupted")
    if clean.shape[1] != corrupted.shape[1]:
        raise ValueError(
            f"patching needs inputs of equal token length: clean has {clean.shape[1]} tokens, corrupted "
            f"{corrupted.shape[1]}; reword one of them so that both have the same number of tokens"
        )
    if clean.shape[0] != corrupted.shape[0]:
        raise ValueError(f"clean has {clean.shape[0]} sequences, corrupted {corrupted.shape[0]}: give as many of each")
    return clean, corrupted


def _chunk(chunk_size: int) -> int:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an int >= 1 (patched runs per forward pass), got {chunk_size!r}")
    return chunk_size


Patch = Callable[[Tensor, Tensor], Tensor]
"""``patch(x [n, B, ...], cells [n]) -> x``: the activation of ``n`` stacked copies, patched per copy."""


def _stacked_hook(n: int, batch: int, rows: Tensor, index: Tensor, fix: Patch) -> Callable[[Tensor, HookPoint], Tensor]:
    """A hook on ``n`` stacked copies of a ``batch``: the copies ``rows`` go through ``fix`` with their ``index``."""

    def fn(x: Tensor, hook: HookPoint) -> Tensor:
        stacked = x.reshape(n, batch, *x.shape[1:]).clone()
        stacked[rows] = fix(stacked[rows], index[rows])
        return stacked.reshape(x.shape)

    return fn


@torch.no_grad()
def _sweep(
    model: LanguageModel,
    ids: Tensor,
    cells: Sequence[tuple[int, int]],
    point: Callable[[int], str],
    patch: Callable[[int], Patch],
    metric: Metric,
    chunk_size: int,
) -> Tensor:
    """The metric (averaged over the batch) of ``ids [B, T]`` run once per cell ``(layer, index)``: in each run
    the hook point ``point(layer)`` goes through ``patch(layer)`` with that cell's index; ``chunk_size`` runs a pass."""
    batch = ids.shape[0]
    out: list[Tensor] = []
    for start in range(0, len(cells), chunk_size):
        chunk = cells[start : start + chunk_size]
        n = len(chunk)
        layers = torch.tensor([c[0] for c in chunk], device=ids.device)
        index = torch.tensor([c[1] for c in chunk], device=ids.device)

        fns = {
            point(layer): _stacked_hook(n, batch, (layers == layer).nonzero().squeeze(-1), index, patch(layer))
            for layer in sorted({c[0] for c in chunk})
        }
        with hooks(model, fns):
            logits = model(ids.repeat(n, 1))
        out.append(metric(logits).float().reshape(n, batch).mean(-1))
    return torch.cat(out) if out else torch.zeros(0)


def _result(raw: Tensor, clean: float, corrupted: float) -> PatchResult:
    if clean == corrupted:
        raise ValueError(
            f"the clean and the corrupted input give the same metric ({clean:.6g}): nothing to normalise; choose "
            "inputs (or a target) where the answer differs"
        )
    return PatchResult((raw - corrupted) / (clean - corrupted), raw, clean, corrupted)


def _metric_of(model: LanguageModel, ids: Tensor, metric: Metric) -> float:
    with torch.no_grad():
        return float(metric(model(ids)).float().mean())


@torch.no_grad()
def run_patched(
    model: nn.Module, clean: Tensor, corrupted: Tensor, layer: int, positions: Sequence[int] | None = None
) -> Tensor:
    """The logits of ``corrupted`` run with the residual stream entering block ``layer`` taken from ``clean``'s run
    at ``positions`` (default: every position; ``[]``: none): every position gives the clean run's logits, none
    the corrupted run's."""
    lm = _check(model, "activation patching")
    clean, corrupted = _pair(clean, corrupted)
    name = f"blocks.{layer}.hook_resid_pre"
    source = run_with_cache(lm, clean, names=[name])[name]
    where = list(range(clean.shape[1])) if positions is None else list(positions)

    def fn(x: Tensor, hook: HookPoint) -> Tensor:
        x = x.clone()
        x[:, where] = source[:, where]
        return x

    with hooks(lm, {name: fn}):
        return lm(corrupted)


def patch_residual(
    model: nn.Module,
    clean: Tensor,
    corrupted: Tensor,
    metric: Metric,
    *,
    layers: Sequence[int] | None = None,
    positions: Sequence[int] | None = None,
    chunk_size: int = 32,
) -> PatchResult:
    """Patch the residual stream entering each block (``hook_resid_pre``) at each position, one cell a run:
    ``scores [len(layers), len(positions)]`` (default: every layer and position)."""
    lm = _check(model, "activation patching")
    clean, corrupted = _pair(clean, corrupted)
    n_layers, length = len(lm.decoder.layers), clean.shape[1]
    layers = list(range(n_layers)) if layers is None else list(layers)
    positions = list(range(length)) if positions is None else list(positions)
    for what, values, bound in (("layer", layers, n_layers), ("position", positions, length)):
        bad = [v for v in values if not -bound <= v < bound]
        if bad:
            raise ValueError(f"{what}s {bad} out of range: the model has {n_layers} layers, the input {length} tokens")
    names = [f"blocks.{layer}.hook_resid_pre" for layer in sorted(set(layers))]
    cache = run_with_cache(lm, clean, names=names)

    def patch(layer: int) -> Patch:
        source = cache[f"blocks.{layer}.hook_resid_pre"]  # [B, T, D]

        def fix(x: Tensor, pos: Tensor) -> Tensor:  # x [n, B, T, D]
            rows = torch.arange(x.shape[0], device=x.device)
            x[rows, :, pos] = source[:, pos].transpose(0, 1)
            return x

        return fix

    cells = [(layer % n_layers, pos % length) for layer in layers for pos in positions]
    raw = _sweep(
        lm, corrupted, cells, lambda layer: f"blocks.{layer}.hook_resid_pre", patch, metric, _chunk(chunk_size)
    )
    clean_m, corrupted_m = _metric_of(lm, clean, metric), _metric_of(lm, corrupted, metric)
    return _result(raw.view(len(layers), len(positions)), clean_m, corrupted_m)


def _head_cells(lm: LanguageModel) -> tuple[list[tuple[int, int]], int, int]:
    n_layers = len(lm.decoder.layers)
    n_heads = lm.config.num_heads
    return [(layer, head) for layer in range(n_layers) for head in range(n_heads)], n_layers, n_heads


def patch_heads(
    model: nn.Module, clean: Tensor, corrupted: Tensor, metric: Metric, *, chunk_size: int = 32
) -> PatchResult:
    """Patch each head's output (``blocks.{l}.attn.hook_z``, every position) from the clean run into the corrupted
    run, one head a run: ``scores [L, H]``."""
    lm = _check(model, "activation patching")
    clean, corrupted = _pair(clean, corrupted)
    cells, n_layers, n_heads = _head_cells(lm)
    cache = run_with_cache(lm, clean, names="blocks.*.attn.hook_z")

    def patch(layer: int) -> Patch:
        source = cache[f"blocks.{layer}.attn.hook_z"]  # [B, T, H, d]

        def fix(x: Tensor, head: Tensor) -> Tensor:  # x [n, B, T, H, d]
            rows = torch.arange(x.shape[0], device=x.device)
            x[rows, :, :, head] = source[:, :, head].permute(2, 0, 1, 3)
            return x

        return fix

    raw = _sweep(lm, corrupted, cells, lambda layer: f"blocks.{layer}.attn.hook_z", patch, metric, _chunk(chunk_size))
    clean_m, corrupted_m = _metric_of(lm, clean, metric), _metric_of(lm, corrupted, metric)
    return _result(raw.view(n_layers, n_heads), clean_m, corrupted_m)


@dataclass
class Ablation:
    """``raw [L, H]``: the metric with each head ablated; ``base``: the metric of the unablated run (both averaged
    over the batch); ``effect``: ``raw - base``."""

    raw: Tensor
    base: float

    @property
    def effect(self) -> Tensor:
        return self.raw - self.base


def ablate_heads(
    model: nn.Module, ids: Tensor, metric: Metric, *, how: Literal["zero", "mean"] = "zero", chunk_size: int = 32
) -> Ablation:
    """Ablate each head's output (``hook_z``, every position), one head a run: replaced by zeros (``"zero"``) or by
    its mean over the batch and positions of ``ids`` (``"mean"``)."""
    lm = _check(model, "head ablation")
    if how not in ("zero", "mean"):
        raise ValueError(f"how must be 'zero' or 'mean', got {how!r}")
    ids = _ids(ids, "ids")
    cells, n_layers, n_heads = _head_cells(lm)
    cache = run_with_cache(lm, ids, names="blocks.*.attn.hook_z")

    def patch(layer: int) -> Patch:
        mean = cache[f"blocks.{layer}.attn.hook_z"].mean(dim=(0, 1))  # [H, d]

        def fix(x: Tensor, head: Tensor) -> Tensor:  # x [n, B, T, H, d]
            rows = torch.arange(x.shape[0], device=x.device)
            x[rows, :, :, head] = 0.0 if how == "zero" else mean[head].view(len(head), 1, 1, -1).to(x.dtype)
            return x

        return fix

    raw = _sweep(lm, ids, cells, lambda layer: f"blocks.{layer}.attn.hook_z", patch, metric, _chunk(chunk_size))
    return Ablation(raw.view(n_layers, n_heads), _metric_of(lm, ids, metric))
