"""Attention maps: one example's weights as a grid of layers (rows) × heads (columns).

Every map is ``[Tq, Tk]`` (rows are queries, columns keys) and all share one colour scale and
one colour bar. :func:`plot_run_attention` draws a trained run's maps for an input or a
validation example through its task's :meth:`~attnkit.tasks.base.Task.attention_examples`.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from matplotlib.colors import Normalize
from torch import Tensor

from attnkit.viz.figure import Figure
from attnkit.viz.runs import loaded_run

if TYPE_CHECKING:
    from attnkit.training.task import AttentionExample

__all__ = [
    "attention_examples",
    "plot_attention",
    "plot_attention_example",
    "plot_run_attention",
    "plot_set_probabilities",
]


def _layer_maps(maps: Sequence[Tensor | np.ndarray] | Tensor | np.ndarray) -> list[np.ndarray]:
    """Per layer ``[H, Tq, Tk]`` float arrays from a list of ``[H, Tq, Tk]`` (or ``[1, H, Tq, Tk]``,
    or ``[Tq, Tk]``) maps, or one ``[L, H, Tq, Tk]`` array."""
    if isinstance(maps, (Tensor, np.ndarray)):
        if maps.ndim != 4:
            raise ValueError(f"attention maps as one array must be [layers, heads, Tq, Tk], got shape {maps.shape}")
        maps = list(maps)
    if len(maps) == 0:
        raise ValueError("no attention maps to plot (the model returned no attention layer)")
    out: list[np.ndarray] = []
    for i, m in enumerate(maps):
        a = m.detach().float().cpu().numpy() if isinstance(m, Tensor) else np.asarray(m, dtype=np.float32)
        if a.ndim == 4 and a.shape[0] == 1:
            a = a[0]
        elif a.ndim == 2:
            a = a[None]
        if a.ndim != 3:
            raise ValueError(
                f"layer {i}: expected attention weights [heads, Tq, Tk] for one example, got shape {tuple(a.shape)} "
                "(pick one example of a batch first)"
            )
        if out and a.shape[1:] != out[0].shape[1:]:
            raise ValueError(f"layer {i} has maps of shape {a.shape[1:]}, layer 0 of {out[0].shape[1:]}")
        out.append(a)
    return out


def _ticks(labels: Sequence[str] | None, size: int, max_ticks: int) -> tuple[list[int], list[str]]:
    if labels is None:
        labels = [str(i) for i in range(size)]
    if len(labels) != size:
        raise ValueError(f"{len(labels)} tick labels for {size} positions")
    step = max(1, math.ceil(size / max_ticks))
    positions = list(range(0, size, step))
    return positions, [str(labels[p]) for p in positions]


def plot_attention(
    maps: Sequence[Tensor | np.ndarray] | Tensor | np.ndarray,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    title: str | None = None,
    query_axis: str = "query",
    key_axis: str = "key",
    max_ticks: int = 40,
    cmap: str = "viridis",
) -> Figure:
    """A grid of attention maps, layers as rows and heads as columns, with a shared colour bar.

    Args:
        maps: per layer the weights of one example ``[H, Tq, Tk]`` (a list), or ``[L, H, Tq, Tk]``.
        query_labels, key_labels: names of the ``Tq`` query / ``Tk`` key positions (the input
            tokens; default: position numbers). At most ``max_ticks`` are written per axis.
        title: the figure's title.
        query_axis, key_axis: names of the axes ("query"/"key"; e.g. "target"/"source").

    Image ``(layer l, head h)`` shows ``maps[l][h]`` as it is (row ``i``: query ``i``); all share
    the colour scale ``0 .. max weight``.
    """
    layers = _layer_maps(maps)
    num_layers = len(layers)
    num_heads = max(a.shape[0] for a in layers)
    q_len, k_len = layers[0].shape[1:]
    q_pos, q_text = _ticks(query_labels, q_len, max_ticks)
    k_pos, k_text = _ticks(key_labels, k_len, max_ticks)
    fontsize = 8 if max(q_len, k_len) <= 20 else 6
    # A fixed layout (sizes in inches), not a constrained one: several times faster to draw.
    char = fontsize * 0.62 / 72
    cell = min(4.0, max(2.0, 0.16 * max(q_len, k_len) + 1.0))
    gap_w, gap_h = 0.25, 0.4
    left = 0.45 + char * max(len(t) for t in q_text)
    bottom = 0.45 + char * max(len(t) for t in k_text)
    right = 1.1
    width = max(4.5, left + num_heads * cell + (num_heads - 1) * gap_w + right)
    title = textwrap.fill(title, width=int(width * 11)) if title else None
    top = 0.35 + (0.2 * (title.count("\n") + 1) + 0.1 if title else 0.0)
    height = bottom + num_layers * cell + (num_layers - 1) * gap_h + top
    fig = Figure(figsize=(width, height))
    axes = fig.subplots(
        num_layers,
        num_heads,
        squeeze=False,
        gridspec_kw={
            "left": left / width,
            "right": 1 - right / width,
            "bottom": bottom / height,
            "top": 1 - top / height,
            "wspace": gap_w / cell,
            "hspace": gap_h / cell,
        },
    )
    vmax = max(float(a.max()) for a in layers)
    norm = Normalize(vmin=0.0, vmax=vmax if vmax > 0 else 1.0)
    image = None
    for row, a in enumerate(layers):
        for col in range(num_heads):
            ax = axes[row, col]
            if col >= a.shape[0]:
                ax.set_visible(False)
                continue
            image = ax.imshow(a[col], cmap=cmap, norm=norm, interpolation="nearest", aspect="auto")
            ax.set_label(f"layer {row + 1} head {col + 1}")
            ax.set_title(f"layer {row + 1}, head {col + 1}", fontsize=9)
            lowest = row == num_layers - 1 or col >= layers[row + 1].shape[0]
            ax.set_xticks(k_pos, k_text if lowest else [], rotation=90, fontsize=fontsize)
            ax.set_yticks(q_pos, q_text if col == 0 else [], fontsize=fontsize)
            if lowest:
                ax.set_xlabel(key_axis, fontsize=9)
            if col == 0:
                ax.set_ylabel(query_axis, fontsize=9)
    assert image is not None
    cax = fig.add_axes(
        (1 - (right - 0.2) / width, bottom / height, 0.15 / width, 1 - (top + bottom) / height), label="colorbar"
    )
    fig.colorbar(image, cax=cax, label="attention weight")
    if title:
        fig.suptitle(title, fontsize=10, y=1 - 0.08 / height, va="top")
    return fig


def plot_attention_example(example: AttentionExample, **kwargs: Any) -> Figure:
    """:func:`plot_attention` of a task's :class:`~attnkit.tasks.base.AttentionExample`."""
    return plot_attention(
        example.maps,
        example.query_labels,
        example.key_labels,
        title=example.title,
        query_axis=example.query_axis,
        key_axis=example.key_axis,
        **kwargs,
    )


def plot_set_probabilities(
    probabilities: Sequence[float] | Tensor, target: int | None = None, *, title: str | None = None
) -> Figure:
    """Bar chart of the predicted probability of each set element (the true odd one out in red)."""
    probs = np.asarray(torch.as_tensor(probabilities, dtype=torch.float32))
    width = max(3.5, 0.35 * len(probs) + 1.5)
    fig = Figure(figsize=(width, 2.6))
    ax = fig.subplots()
    fig.subplots_adjust(left=0.8 / width, right=1 - 0.15 / width, bottom=0.2, top=0.88)
    colors = ["tab:red" if i == target else "tab:blue" for i in range(len(probs))]
    ax.bar(np.arange(len(probs)), probs, color=colors)
    ax.set_xticks(np.arange(len(probs)))
    ax.set_ylim(0, 1)
    ax.set_xlabel("set element" + (" (red: the true odd one out)" if target is not None else ""))
    ax.set_ylabel("predicted probability")
    if title:
        ax.set_title(title, fontsize=9)
    return fig


def attention_examples(
    run: Any, *, texts: Sequence[str] | None = None, indices: Sequence[int] | None = None
) -> list[AttentionExample]:
    """A run's attention examples: ``run`` is a run folder, a checkpoint file or a loaded run."""
    loaded = loaded_run(run)
    loaded.module.eval()
    return loaded.task.attention_examples(
        loaded.module, list(texts) if texts else None, list(indices) if indices else None
    )


def plot_run_attention(run: Any, *, text: str | None = None, index: int | None = None, **kwargs: Any) -> Figure:
    """The attention maps of a trained run for the input ``text`` (written as for ``attnkit
    predict``) or for validation example ``index`` (default 0)."""
    if text is not None and index is not None:
        raise ValueError("give an input text or a validation index, not both")
    if text is None and index is None:
        index = 0
    if index is not None and index < 0:
        raise ValueError(f"the validation index must be >= 0, got {index}")
    examples = attention_examples(
        run, texts=[text] if text is not None else None, indices=[index] if index is not None else None
    )
    return plot_attention_example(examples[0], **kwargs)
