"""Hyperparameter search: ``attnkit tune`` / :func:`attnkit.tune`, built on Optuna.

:mod:`~attnkit.tuning.space` reads and checks search spaces; :mod:`~attnkit.tuning.study` opens
the study and starts its workers; :mod:`~attnkit.tuning.loop` is a worker's trial loop (samplers,
pruners, one training run per trial); :mod:`~attnkit.tuning.pruning` reports a training run to the
pruner; :mod:`~attnkit.tuning.storage` opens the database; :mod:`~attnkit.tuning.progress` logs the
progress; :mod:`~attnkit.tuning.results` writes the best config, the table of trials, the plots
and the study report.
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
