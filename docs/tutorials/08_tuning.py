# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 8. Hyperparameter tuning
#
# A Transformer trains well or not at all depending on a handful of numbers: the learning rate, the
# warm-up, the width, the number of heads. In this notebook you run a small Optuna study on the
# reverse task with `attnkit.tune`, read its trials, its optimisation history and its parameter
# importances, see the pruner stop hopeless trials early, and retrain the best configuration with
# `attnkit.train`.

# %% [markdown]
# ## Setup
#
# Every trial is a real training run, so the study writes run folders, checkpoints and a database.
# All of it goes into a temporary folder. The logging settings only keep the printed output short.

# %%
import logging
import tempfile
import time
import warnings
from pathlib import Path

import yaml

# Quiet output: tqdm (imported by Optuna) warns that Jupyter lacks ipywidgets; Lightning prints banners.
warnings.filterwarnings("ignore", message=r".*(IProgress not found|does not have many workers|GPU available).*")
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)

import attnkit  # noqa: E402  (imported after the filter above: importing Optuna triggers the tqdm warning)
from attnkit.tuning import (  # noqa: E402
    counts_toward_budget,
    load_space,
    param_importances,
    plot_history,
    plot_importances,
    trial_rows,
)

workdir = Path(tempfile.mkdtemp(prefix="attnkit-tutorial-"))

# %% [markdown]
# ## The search space
#
# A *search space* says which config keys the study may change and which values it may try. Its keys
# are the training config's own dotted keys (`attnkit train reverse --print-config` lists them all);
# each maps to a range or to a list of choices:
#
# - `{low, high, log: true}`: a float drawn on a log scale, right for a learning rate, where 1e-4
#   and 1e-3 are as far apart as 1e-3 and 1e-2;
# - `{low, high, step}` with int bounds: an integer on a grid;
# - a list: one of these values (a categorical choice).
#
# On the command line the space is a YAML file (`examples/reverse_space.yaml` in the repository
# searches eight keys); from Python a dict of the same form works too. Ours has four keys:

# %%
space = {
    "optim.lr": {"low": 1.0e-4, "high": 1.0e-2, "log": True},
    "optim.warmup": {"low": 0, "high": 100, "step": 50},
    "model.d_model": [16, 32, 48],
    "model.num_heads": [1, 2, 3],
}
print(yaml.safe_dump(space, sort_keys=False, default_flow_style=None), end="")

# %% [markdown]
# `load_space` reads such a dict (or a YAML file) the way `tune` does, and says how it understood
# each key:

# %%
for param in load_space(space).params:
    print(f"{param.key:17} {param.describe()}")

# %% [markdown]
# Not every combination is a valid model: the attention heads split the width, so `num_heads` must
# divide `d_model`, and 3 heads do not divide 16 or 32. The keys are sampled independently; a
# combination the config refuses is **rejected before training**: recorded as a pruned trial with the
# reason, not trained, and not counted toward the number of trials.
#
# ## The budget of one trial
#
# Every trial trains the reverse task from scratch, so the size of one trial decides the cost of the
# study. Here a trial is deliberately tiny: 2,000 training sequences instead of 50,000, 2 epochs,
# batches of 32. These keys make the *base config* that every trial starts from; `tune` takes them as
# `attnkit.train` does. `trainer.report: False` skips the HTML report that `attnkit.train` writes
# after training, which only costs time here.

# %%
base = {
    "data.train_size": 2000,
    "data.val_size": 500,
    "data.test_size": 500,
    "trainer.max_epochs": 2,
    "trainer.batch_size": 32,
    "trainer.report": False,
}

# %% [markdown]
# ## Sampler and pruner
#
# The **sampler** proposes the values of each new trial:
#
# - `sampler="random"` draws every key independently from its range. Simple, and a strong baseline.
# - `sampler="tpe"` (the default) is Optuna's Tree-structured Parzen Estimator. After a few random
#   start-up trials it splits the finished trials into a good and a bad group, models where each
#   group's values lie, and proposes values that are likely under the good model and unlikely under
#   the bad one. With 8 trials the first 3 are random.
# - `sampler="gp"` fits a Gaussian process to the results instead (see [Tuning](../tuning.md)).
#
# `tune` also accepts Optuna sampler and pruner objects, e.g. `sampler=optuna.samplers.RandomSampler(seed=0)`.
#
# The **pruner** decides after every epoch whether a trial is worth finishing. The median pruner (the
# default) stops a trial whose validation accuracy after an epoch is below the median of the
# completed trials after the same epoch; it starts once 3 trials have completed, and never stops a
# trial on its last epoch. A pruned trial here costs one epoch instead of two.
#
# `seed` seeds the sampler, so the same call proposes the same trials; every trial also trains with
# the config's own seed, so the same parameters train the same model. `n_trials` counts the trials
# that trained (completed or pruned), not the rejected samples.

# %%
start = time.perf_counter()
study = attnkit.tune(
    "reverse",
    space=space,
    n_trials=8,
    sampler="tpe",
    pruner="median",
    seed=0,
    study_name="reverse-tiny",
    output_dir=str(workdir),
    **base,
)
counted = sum(counts_toward_budget(trial) for trial in study.trials)
print(f"{len(study.trials)} trials, {counted} of them counted, in {time.perf_counter() - start:.0f} s")

# %% [markdown]
# ## The trials
#
# `tune` returns the `optuna.Study` itself, so all of Optuna works on it (`study.best_trial`,
# `study.best_params`, `study.trials`). `attnkit.tuning.results.trial_rows` turns its trials into
# plain rows and tells a rejected sample from a pruned trial. The `epoch 1` column is the value each
# trial reported after its first epoch, which is what the pruner judges; `val/acc` is the result of
# a trial that completed both epochs.

# %%
rows = trial_rows(study)
after_epoch_1 = {trial.number: trial.intermediate_values.get(0) for trial in study.trials}
print("trial  state     epoch 1  val/acc        lr  warmup  d_model  heads")
for row in rows:
    first = after_epoch_1[row["number"]]
    cells = ["" if first is None else f"{first:.4f}", "" if row["value"] is None else f"{row['value']:.4f}"]
    print(
        f"{row['number']:>5}  {row['state']:9} {cells[0]:>7}  {cells[1]:>7}  {row['optim.lr']:>8.5f}  "
        f"{row['optim.warmup']:>6}  {row['model.d_model']:>7}  {row['model.num_heads']:>5}"
    )
for row in rows:
    if row["state"] == "rejected":
        print(f"trial {row['number']} rejected: {row['note'].split(';')[0]}")

best = study.best_trial
params = ", ".join(
    f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}" for key, value in best.params.items()
)
print(f"\nbest: trial {best.number}, val/acc {best.value:.4f}; {params}")

# %%
# The statements below about this (seeded) study, checked.
states = [row["state"] for row in rows]
completed = sorted((row for row in rows if row["state"] == "complete"), key=lambda row: row["optim.lr"])
top_two = sorted(completed, key=lambda row: row["value"])[-2:]
others = [v for n, v in after_epoch_1.items() if v is not None and n not in {row["number"] for row in top_two}]
assert counted == 8 and states.count("rejected") == 2 and states.count("pruned") == 2
startup = sorted(row["value"] for row in completed if row["number"] < 3)
assert len(startup) == 3 and startup[-1] < 0.4 and startup[1] < 0.13
assert all(row["last_reported"] < 0.12 for row in rows if row["state"] == "pruned")
assert best.number >= 3 and best.value > 0.9 and best.number >= len(study.trials) - 3
assert [row["value"] for row in completed] == sorted(row["value"] for row in completed)
assert best.params["optim.lr"] > 0.008
assert min(after_epoch_1[row["number"]] for row in top_two) > max(others) + 0.1

# %% [markdown]
# What happened in this study:
#
# - The 3 random start-up trials (0–2) all stayed below 40 % validation accuracy, two of them near
#   chance (10 %: ten symbols). A run that has not learned to attend to the mirrored position
#   cannot do better than guessing.
# - The best trial came later, once TPE was proposing, with more than 90 %.
# - Two samples asked for 3 heads with a width of 16 or 32: they were rejected without training,
#   and the study drew again.
# - Two trials were stopped by the pruner after one epoch, near chance.
# - Among the completed trials, the higher the learning rate, the higher the accuracy. The two trials
#   that ended best were also clearly ahead after the first epoch (by more than 10 points), which is
#   what makes pruning on early epochs worthwhile. It remains a heuristic: a slow starter that would
#   have caught up can be stopped too.
#
# A study this small says nothing about whether TPE beats random search: random sampling might
# well have hit the same region. The [Tuning](../tuning.md) page compares the samplers over several seeds.
#
# ## The optimisation history
#
# The history plot shows every trial's result in order: blue dots for completed trials, grey crosses
# for pruned ones (at the last value they reported), and the red line for the best value found so
# far. Rejected samples have no value and no mark. A study that has converged shows a long flat red
# line with most new dots below it; here the red line was still rising near the end, a sign that
# the study is far too short to have converged.

# %%
plot_history(study, "val/acc")

# %% [markdown]
# ## Which parameters mattered?
#
# Optuna estimates how much each parameter explains the results (its default evaluator, PED-ANOVA,
# compares where the good trials' values lie with the whole range); the importances sum to 1. They
# are computed from the completed trials only, so with a handful of them they are rough: read them
# as a hint for the next study (narrow or move the range of an important key, fix an unimportant
# one), not as a measurement.

# %%
importances = param_importances(study)
for key, value in importances.items():
    print(f"{key:16} {value:.2f}")
assert max(importances, key=importances.get) == "optim.lr" and importances["optim.lr"] > 0.5

# %%
plot_importances(importances)

# %% [markdown]
# Here the learning rate dominates, as the table suggested. The best learning rate also lies close
# to the top of its range (0.01): a follow-up study would widen the range upwards rather than search
# the widths more finely.
#
# ## The study's folder
#
# Besides returning the study, `tune` writes its results into `<output_dir>/tune/<study>/`: the
# SQLite database (call `tune` again with the same arguments and the study resumes; a larger
# `n_trials` extends it), one run folder per trial under `trials/`, the table of trials (`trials.csv`,
# `trials.md`), the plots as PNG files, `study_report.html` with all of it on one page, and
# `best.yaml`, the full config of the best trial.

# %%
study_dir = workdir / "tune" / "reverse-tiny"
print(sorted(path.name for path in study_dir.iterdir()))
best_yaml = study_dir / "best.yaml"
print(best_yaml.read_text().splitlines()[0])

# %% [markdown]
# ## Retraining the best configuration
#
# `best.yaml` is a complete config, seed included: `attnkit.train("reverse", config=best_yaml)` as it
# is retrains the best trial. The usual next step is to give the winning configuration a larger
# budget than the search could afford for every trial; here 3 epochs instead of 2, on the same data.
# The test split played no part in choosing the configuration, so its accuracy is the figure to
# compare.

# %%
trial_test = best.user_attrs["metrics"]["test/acc"]  # attnkit records each trial's final metrics on it
result = attnkit.train("reverse", config=best_yaml, **{"trainer.max_epochs": 3})
retrained_test = result.metrics["test/acc"]
print(f"best trial, 2 epochs: test/acc {trial_test:.4f}")
print(f"retrained, 3 epochs:  test/acc {retrained_test:.4f}")
assert retrained_test > trial_test + 0.01

# %% [markdown]
# With one more epoch the best configuration does better on the test split than it did as a trial.
#
# ## A real study
#
# Everything here was shrunk to run in about a minute. A real study trains on more data with more
# epochs per trial, searches more keys and runs dozens of trials, for example from the command line:
#
# ```bash
# attnkit tune reverse --space examples/reverse_space.yaml --trials 16 data.train_size=10000 trainer.max_epochs=2
# attnkit train reverse --config runs/tune/reverse/best.yaml
# ```
#
# A long study can be killed and resumed (the same command continues where it stopped), spread over
# several processes with `--workers`, or shared between machines through a PostgreSQL `--storage`;
# the [Tuning](../tuning.md) page describes all of it.
