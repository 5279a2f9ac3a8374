"""Looking inside: attention maps, positional encodings, learning-rate schedules, training curves and
the run report. Every ``plot_*`` function returns a :class:`~attnkit.viz.figure.Figure`, a
:class:`matplotlib.figure.Figure` that Jupyter shows inline (no ``%matplotlib inline`` needed;
``fig.savefig("x.png")`` writes it), and touches no pyplot global state."""

from attnkit.viz.attention import (
    attention_examples,
    plot_attention,
    plot_attention_example,
    plot_run_attention,
    plot_set_probabilities,
)
from attnkit.viz.curves import plot_training_curves, read_metrics
from attnkit.viz.explorer.page import explore  # the function: attnkit.viz.explore(model, text)
from attnkit.viz.figure import Figure
from attnkit.viz.positional import plot_positional_encoding
from attnkit.viz.report import ReportSection, figure_data_uri, render_report, write_report
from attnkit.viz.schedule import plot_lr_schedule, plot_run_lr

__all__ = [
    "Figure",
    "ReportSection",
    "attention_examples",
    "explore",
    "figure_data_uri",
    "plot_attention",
    "plot_attention_example",
    "plot_lr_schedule",
    "plot_positional_encoding",
    "plot_run_attention",
    "plot_run_lr",
    "plot_set_probabilities",
    "plot_training_curves",
    "read_metrics",
    "render_report",
    "write_report",
]
