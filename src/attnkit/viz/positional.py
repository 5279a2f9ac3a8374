"""The sinusoidal positional encoding: a heat map over position × hidden dimension and the curves
of the first dimensions (the tutorials' two figures)."""

from __future__ import annotations

import numpy as np

from attnkit.nn import sinusoidal_encoding
from attnkit.viz.figure import Figure

__all__ = ["plot_positional_encoding"]


def plot_positional_encoding(dim: int = 48, length: int = 96, *, num_curves: int = 4, base: float = 10000.0) -> Figure:
    """The encoding ``PE [length, dim]`` of :func:`attnkit.nn.sinusoidal_encoding`.

    Top: the heat map, position on the x axis and hidden dimension on the y axis (the image's
    array is ``PE.T [dim, length]``; axes labelled ``"positional encoding"``). Below: ``PE[:, i]``
    over the positions for the first ``num_curves`` dimensions (axes labelled ``"dimension i"``).
    """
    for name, value in (("dim", dim), ("length", length)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not 0 <= num_curves <= dim:
        raise ValueError(f"num_curves must be in [0, dim={dim}], got {num_curves}")
    pe = sinusoidal_encoding(length, dim, base=base).numpy()
    fig = Figure(figsize=(max(8.0, 2.2 * num_curves), 6.0 if num_curves else 3.8), layout="constrained")
    grid = fig.add_gridspec(2 if num_curves else 1, max(num_curves, 1), height_ratios=[2, 1] if num_curves else None)
    ax = fig.add_subplot(grid[0, :])
    image = ax.imshow(
        pe.T, cmap="RdGy", vmin=-1, vmax=1, aspect="auto", interpolation="nearest", origin="upper",
        extent=(-0.5, length - 0.5, dim - 0.5, -0.5),
    )  # fmt: skip
    ax.set_label("positional encoding")
    ax.set_xlabel("position in sequence")
    ax.set_ylabel("hidden dimension")
    ax.set_title(f"Sinusoidal positional encoding (dim {dim}, length {length})", fontsize=10)
    fig.colorbar(image, ax=ax, shrink=0.9)
    positions = np.arange(length)
    for i in range(num_curves):
        cax = fig.add_subplot(grid[1, i])
        cax.plot(positions, pe[:, i], color=f"C{i}", marker="o", markersize=2, linewidth=1)
        cax.set_label(f"dimension {i}")
        cax.set_title(f"dimension {i}", fontsize=9)
        cax.set_xlabel("position", fontsize=8)
        cax.set_ylim(-1.1, 1.1)
        cax.tick_params(labelsize=7)
    return fig
