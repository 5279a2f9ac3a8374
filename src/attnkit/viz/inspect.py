"""Figures of ``attnkit inspect``: the logit lens, logit attribution, patching and head scores.

:func:`inspect_figure` draws what one of :mod:`attnkit.api.inspecting`'s functions returned (a ``dict``, the
command's JSON), as a :class:`~attnkit.viz.figure.Figure` (no pyplot). Not imported by ``attnkit.viz``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from attnkit.viz.figure import Figure

__all__ = ["inspect_figure", "plot_attribution", "plot_head_scores", "plot_lens", "plot_over_training", "plot_patching"]

_MAX_LABELLED = 24  # cells per axis up to which each cell gets its text


def _heat(ax: Any, values: Any, title: str, xlabels: Sequence[str], ylabels: Sequence[str], **kw: Any) -> Any:
    data = np.asarray(values, dtype=float)
    image = ax.imshow(data, aspect="auto", interpolation="nearest", **kw)
    ax.set_title(title, fontsize=10)
    for setter, labels, n in ((ax.set_xticks, xlabels, data.shape[1]), (ax.set_yticks, ylabels, data.shape[0])):
        step = max(1, n // _MAX_LABELLED)
        setter(range(0, n, step), [labels[i] for i in range(0, n, step)], fontsize=7)
    ax.tick_params(axis="x", labelrotation=90)
    ax.figure.colorbar(image, ax=ax, shrink=0.8)
    return image


def _shown(token: str) -> str:
    return token.replace("Ġ", "·").replace("\n", "\\n")[:10]


def plot_lens(result: dict[str, Any]) -> Figure:
    """The top token's probability per layer (rows) and position (columns), each cell labelled with the token."""
    top = result["top"]
    probs = [[cell[0]["prob"] for cell in row] for row in top]
    layers, length = len(top), len(top[0])
    fig = Figure(figsize=(max(6.0, 0.7 * length + 2), max(3.0, 0.35 * layers + 1.5)), layout="constrained")
    ax = fig.subplots()
    ylabels = [f"resid_pre {i}" for i in range(layers - 1)] + ["output"]
    _heat(ax, probs, "logit lens: top token and its probability", [_shown(t) for t in result["tokens"]], ylabels,
          vmin=0.0, vmax=1.0, cmap="viridis")  # fmt: skip
    if length <= _MAX_LABELLED and layers <= 2 * _MAX_LABELLED:
        for r, row in enumerate(top):
            for c, cell in enumerate(row):
                colour = "black" if cell[0]["prob"] > 0.6 else "white"
                ax.text(c, r, _shown(cell[0]["token"]), ha="center", va="center", fontsize=6, color=colour)
    ax.set_xlabel("input position (token)")
    return fig


def _diverging(values: Any) -> dict[str, Any]:
    bound = float(np.nanmax(np.abs(np.asarray(values, dtype=float)))) or 1.0
    return {"cmap": "RdBu_r", "vmin": -bound, "vmax": bound}


def plot_attribution(result: dict[str, Any]) -> Figure:
    """Each head's direct contribution (layers × heads) and each MLP's, to the target's logit (difference)."""
    heads = result["heads"]
    fig = Figure(figsize=(9.0, max(3.0, 0.35 * len(heads) + 1.5)), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[3, 1])
    what = result["target"] if result.get("against") is None else f"{result['target']} - {result['against']}"
    _heat(left, heads, f"heads -> logit({_shown(what)})", [str(h) for h in range(len(heads[0]))],
          [str(i) for i in range(len(heads))], **_diverging(heads))  # fmt: skip
    left.set_xlabel("head")
    left.set_ylabel("layer")
    mlps = np.asarray(result["mlps"], dtype=float)
    right.barh(range(len(mlps)), mlps, color=["tab:red" if v > 0 else "tab:blue" for v in mlps])
    right.invert_yaxis()
    right.set_title(f"MLPs (total {result['total']:.3g})", fontsize=10)
    right.set_yticks(range(len(mlps)))
    return fig


def plot_patching(result: dict[str, Any]) -> Figure:
    """The patching (or ablation) scores: layers × positions, or layers × heads."""
    scores = result["scores"]
    by = result["by"]
    if by == "position":
        xlabels = [f"{_shown(a)}/{_shown(b)}" if a != b else _shown(a)
                   for a, b in zip(result["clean_tokens"], result["corrupted_tokens"])]  # fmt: skip
    else:
        xlabels = [str(h) for h in range(len(scores[0]))]
    titles = {"position": "residual stream patched", "head": "head output patched"}
    title = (
        f"{titles[by]} (1 = clean, 0 = corrupted)" if by in titles else f"head {by}: change of the {result['metric']}"
    )
    width = max(6.0, 0.5 * len(xlabels) + 2)
    fig = Figure(figsize=(width, max(3.0, 0.35 * len(scores) + 1.5)), layout="constrained")
    ax = fig.subplots()
    _heat(ax, scores, title, xlabels, [str(i) for i in range(len(scores))], **_diverging(scores))
    ax.set_xlabel("position" if by == "position" else "head")
    ax.set_ylabel("layer")
    return fig


def plot_head_scores(result: dict[str, Any]) -> Figure:
    """Previous-token, duplicate-token and induction scores side by side (layers × heads, 0 to 1)."""
    kinds = ("previous_token", "duplicate_token", "induction")
    layers, heads = len(result["induction"]), len(result["induction"][0])
    fig = Figure(figsize=(12.0, max(3.0, 0.35 * layers + 1.5)), layout="constrained")
    for ax, kind in zip(fig.subplots(1, 3), kinds):
        _heat(ax, result[kind], kind.replace("_", "-"), [str(h) for h in range(heads)],
              [str(i) for i in range(layers)], vmin=0.0, vmax=1.0, cmap="viridis")  # fmt: skip
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
    return fig


def plot_diff(result: dict[str, Any]) -> Figure:
    """What tuning changed: the logit lenses' KL divergence per layer, and each head's pattern change (and, for
    pre-norm models, its attribution change), layers × heads."""
    panels = [("pattern_change", "attention pattern change (TV distance)")]
    if result.get("attribution_change") is not None:
        panels.append(("attribution_change", "direct attribution change"))
    layers, heads = len(result["pattern_change"]), len(result["pattern_change"][0])
    fig = Figure(figsize=(4.0 + 4.5 * len(panels), max(3.0, 0.35 * layers + 1.5)), layout="constrained")
    axes = fig.subplots(1, 1 + len(panels))
    kl = np.asarray(result["layer_kl"], dtype=float)
    axes[0].barh(range(len(kl)), kl, color="tab:purple")
    axes[0].invert_yaxis()
    axes[0].set_yticks(range(len(kl)), [str(i) for i in range(len(kl) - 1)] + ["out"])
    axes[0].set_title("KL(tuned || base) of the logit lens", fontsize=10)
    axes[0].set_ylabel("layer")
    for ax, (key, title) in zip(axes[1:], panels):
        _heat(ax, result[key], title, [str(h) for h in range(heads)], [str(i) for i in range(layers)],
              vmin=0.0, cmap="viridis")  # fmt: skip
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
    return fig


def plot_over_training(result: dict[str, Any]) -> Figure:
    """The training timeline: the best head's previous-token, duplicate-token and induction score, and the
    training loss, against the optimiser steps of the run's weight snapshots."""
    steps = result["steps"]
    fig = Figure(figsize=(10.0, 3.8), layout="constrained")
    left, right = fig.subplots(1, 2)
    for kind, colour in (("previous_token", "tab:blue"), ("duplicate_token", "tab:orange"), ("induction", "tab:red")):
        left.plot(steps, [row[f"max_{kind}"] for row in result["snapshots"]], "o-", color=colour,
                  label=kind.replace("_", "-"), markersize=3)  # fmt: skip
    left.set_ylim(0.0, 1.0)
    left.set_title("the best head's score", fontsize=10)
    left.set_xlabel("optimiser step")
    left.legend(fontsize=8)
    known = [(s, v) for s, v in zip(steps, result["loss"]) if v is not None]
    right.plot([s for s, _ in known], [v for _, v in known], "o-", color="tab:gray", markersize=3)
    right.set_title("training loss", fontsize=10)
    right.set_xlabel("optimiser step")
    return fig


_DRAW = {
    "lens": plot_lens,
    "attribution": plot_attribution,
    "patch": plot_patching,
    "heads": plot_head_scores,
    "diff": plot_diff,
    "over-training": plot_over_training,
}


def inspect_figure(result: dict[str, Any]) -> Figure:
    """The figure of an ``attnkit inspect`` result (its ``command`` picks the drawing)."""
    command = result.get("command")
    if command not in _DRAW:
        raise ValueError(f"not an attnkit inspect result: 'command' is {command!r}, expected one of {list(_DRAW)}")
    return _DRAW[command](result)
