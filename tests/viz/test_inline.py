"""Every Figure attnkit returns shows inline in Jupyter: IPython's display formatter finds a PNG on it,
without ``%matplotlib inline`` and without pyplot (attnkit builds its figures without pyplot state, so
the inline backend never registers its PNG printer for them)."""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from pathlib import Path

import matplotlib
import nbformat
import numpy as np
import optuna
import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell
from matplotlib.figure import Figure
from nbclient import NotebookClient
from PIL import Image

import attnkit.tuning
import attnkit.viz
from attnkit.tasks.base import AttentionExample

# The public plot functions: the plot_* that attnkit.viz and attnkit.tuning export.
PLOT_FUNCTIONS: dict[str, Callable[..., Figure]] = {
    name: getattr(package, name)
    for package in (attnkit.viz, attnkit.tuning)
    for name in package.__all__
    if name.startswith("plot_")
}


def _study() -> optuna.Study:
    """A small in-memory study: 4 completed trials (with per-epoch values) and a pruned one."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("lr", 1e-4, 1e-2, log=True)
        for epoch in range(3):
            trial.report(x * (epoch + 1), epoch)
        if trial.number == 4:
            raise optuna.TrialPruned()
        return x * 3

    study.optimize(objective, n_trials=5)
    return study


def _example() -> AttentionExample:
    maps = [torch.rand(2, 4, 5).softmax(-1)]
    return AttentionExample(maps=maps, query_labels=list("abcd"), key_labels=list("vwxyz"), title="an example")


# How to call each public plot function; `run` is a trained run folder (the session's reverse run) for
# those in NEEDS_RUN, None for the others.
NEEDS_RUN = {"plot_run_attention", "plot_training_curves", "plot_run_lr"}
BUILDERS: dict[str, Callable[[Path | None], Figure]] = {
    "plot_attention": lambda run: plot("plot_attention")([torch.rand(3, 4, 4).softmax(-1)], title="maps"),
    "plot_attention_example": lambda run: plot("plot_attention_example")(_example()),
    "plot_run_attention": lambda run: plot("plot_run_attention")(run, index=0),
    "plot_set_probabilities": lambda run: plot("plot_set_probabilities")([0.1, 0.7, 0.2], target=1),
    "plot_training_curves": lambda run: plot("plot_training_curves")(run),
    "plot_positional_encoding": lambda run: plot("plot_positional_encoding")(16, 20, num_curves=2),
    "plot_lr_schedule": lambda run: plot("plot_lr_schedule")(5, 50, lr=1e-3),
    "plot_run_lr": lambda run: plot("plot_run_lr")(run),
    "plot_history": lambda run: plot("plot_history")(_study(), "val/acc"),
    "plot_intermediate": lambda run: plot("plot_intermediate")(_study(), "val/acc"),
    "plot_importances": lambda run: plot("plot_importances")({"lr": 0.7, "dropout": 0.3}),
}


def plot(name: str) -> Callable[..., Figure]:
    return PLOT_FUNCTIONS[name]


def test_every_public_plot_function_is_checked():
    assert set(BUILDERS) == set(PLOT_FUNCTIONS), "add the new plot function to BUILDERS"


def _png_size(fig: Figure) -> tuple[float, float]:
    """The size in pixels of the figure's tight bounding box at its own dpi (what Jupyter shows)."""
    box = fig.get_tightbbox().padded(matplotlib.rcParams["savefig.pad_inches"])
    return box.width * fig.dpi, box.height * fig.dpi


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_ipython_formats_the_figure_as_png(name: str, request: pytest.FixtureRequest):
    fig = BUILDERS[name](request.getfixturevalue("reverse_run") if name in NEEDS_RUN else None)
    assert isinstance(fig, Figure)
    data, _ = InteractiveShell.instance().display_formatter.format(fig)
    assert "image/png" in data, f"{name}: IPython found no PNG, only {sorted(data)}"
    image = Image.open(io.BytesIO(data["image/png"]))
    assert image.format == "PNG"
    width, height = _png_size(fig)
    assert image.size[0] == pytest.approx(width, abs=1.5) and image.size[1] == pytest.approx(height, abs=1.5)
    # about the figure's own size (the tight box trims the margins), and not a blank canvas
    full_width, full_height = fig.get_size_inches() * fig.dpi
    assert 0.6 * full_width <= image.size[0] <= 1.1 * full_width + 20
    assert 0.6 * full_height <= image.size[1] <= 1.1 * full_height + 20
    pixels = np.asarray(image.convert("L"))
    assert pixels.min() < 128 and (pixels < 250).mean() > 0.01, f"{name}: the PNG is (nearly) blank"
    fig.savefig(io.BytesIO(), format="svg")  # the figure still saves as before


def test_a_notebook_cell_ending_in_an_attnkit_figure_shows_a_png(tmp_path: Path):
    """As Jupyter runs it (nbclient on an IPython kernel, the inline backend not activated)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("from attnkit.viz import plot_lr_schedule\nplot_lr_schedule(5, 50)")]
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    (result,) = [out for out in nb.cells[0].outputs if out.output_type == "execute_result"]
    assert "image/png" in result["data"], f"the cell showed only {sorted(result['data'])}"
    assert result["data"]["text/plain"].startswith("<Figure size 600x320")
    assert Image.open(io.BytesIO(base64.b64decode(result["data"]["image/png"]))).format == "PNG"
    assert not list(tmp_path.iterdir())  # nothing written next to the notebook
