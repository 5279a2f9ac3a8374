"""What the study and its results agree on about trials: where a study keeps its settings and
which trials count toward its budget."""

from __future__ import annotations

from optuna.trial import FrozenTrial, TrialState

__all__ = ["META_ATTR", "counts_toward_budget"]

META_ATTR = "attnkit"  # study user attribute: task, space, base config and monitor of the study


def counts_toward_budget(trial: FrozenTrial) -> bool:
    """Finished trials that count toward ``n_trials``: completed, pruned by the pruner, failed with a
    reason. Not counted: rejected samples (never trained), trials whose process was killed (re-run),
    interrupted ones and those a worker started over the budget and skipped."""
    attrs = trial.user_attrs
    if trial.state == TrialState.COMPLETE:
        return True
    if trial.state == TrialState.PRUNED:
        return "rejected" not in attrs
    if trial.state == TrialState.FAIL:
        return "fail_reason" in attrs
    return False
