"""Hyperparameter search: ``attnkit tune`` / :func:`attnkit.tune`, built on Optuna.

:mod:`~attnkit.tuning.space` reads and checks search spaces, :mod:`~attnkit.tuning.study` runs the
study (trials, pruning, storage, workers), :mod:`~attnkit.tuning.results` writes the best config,
the table of trials, the plots and the study report.
"""

from attnkit.tuning.results import (
    param_importances,
    plot_history,
    plot_importances,
    plot_intermediate,
    trial_rows,
    write_results,
)
from attnkit.tuning.space import SearchSpace, load_space
from attnkit.tuning.study import PruningCallback, TrialFailed, tune
from attnkit.tuning.trials import counts_toward_budget

__all__ = [
    "PruningCallback",
    "SearchSpace",
    "TrialFailed",
    "counts_toward_budget",
    "load_space",
    "param_importances",
    "plot_history",
    "plot_importances",
    "plot_intermediate",
    "trial_rows",
    "tune",
    "write_results",
]
