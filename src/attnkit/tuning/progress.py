"""What a study reports as it goes: one line per finished trial, notes, and a summary at the end.

Everything is logged at INFO to this module's logger, ``attnkit.tuning.progress`` (and only when
:func:`attnkit.tuning.tune` is called with ``verbose=True``); ``attnkit tune`` shows these messages
on the standard output, and a Python program sees them once it configures logging, e.g.
``logging.basicConfig(level=logging.INFO, format="%(message)s")``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from attnkit.tuning.trials import counts_toward_budget

__all__ = ["describe", "fmt", "log", "log_summary"]

log = logging.getLogger(__name__)


def describe(trial: FrozenTrial, monitor: str) -> str:
    """One line for a finished trial: its number, state (complete / pruned / rejected / failed /
    skipped) with the value of ``monitor`` or the reason, its time and its parameters."""
    attrs = trial.user_attrs
    params = " ".join(f"{k}={fmt(v)}" for k, v in trial.params.items())
    wall = f"{attrs['wall_s']:.1f} s  " if "wall_s" in attrs else ""
    if trial.state == TrialState.COMPLETE:
        what = f"complete  {monitor} {trial.value:.4f}  {wall}"
    elif trial.state == TrialState.PRUNED and "rejected" in attrs:
        what = f"rejected  {attrs['rejected']}  "
    elif trial.state == TrialState.PRUNED:
        what = f"pruned    {attrs.get('pruned', '')}  {wall}"
    elif "skipped" in attrs:
        return f"trial {trial.number:>4}  skipped   {attrs['skipped']}"
    else:
        what = f"failed    {attrs.get('fail_reason', attrs.get('interrupted', 'interrupted'))}  {wall}"
    return f"trial {trial.number:>4}  {what}{params}"


def fmt(value: Any) -> str:
    """A parameter value as the progress lines show it (floats to 4 significant digits)."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def log_summary(study: optuna.Study, files: dict[str, Path], monitor: str, wall: float) -> None:
    """Log the end of a ``tune`` call: the counted trials by state, the best trial, the files written."""
    trials = study.get_trials(deepcopy=False)
    states: dict[str, int] = {}
    for t in trials:
        if counts_toward_budget(t):
            label = t.state.name.lower().replace("fail", "failed").replace("complete", "completed")
            states[label] = states.get(label, 0) + 1
    parts = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
    log.info(f"\nstudy {study.study_name}: {sum(states.values())} trials ({parts}); this run took {wall:.1f} s")
    try:
        best = study.best_trial
    except ValueError:
        log.info("  no trial completed yet")
    else:
        params = " ".join(f"{k}={fmt(v)}" for k, v in best.params.items())
        log.info(f"  best    trial {best.number}: {monitor} {best.value:.4f}\n          {params}")
    if "best_config" in files:
        log.info(f"  config  {files['best_config']}")
    log.info(f"  trials  {files['trials_csv']}")
    log.info(f"  report  {files['report']}")
