"""The ``tune`` command: a hyperparameter search whose trials are training runs."""

from __future__ import annotations

import click

from attnkit import api
from attnkit.cli.common import USER_ERRORS, fail, main, show_logs
from attnkit.config import UserPath, parse_overrides


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("task")
@click.option("--space", "space_file", required=True, type=UserPath(dir_okay=False), help="YAML search space.")
@click.option("--config", "config_file", type=UserPath(dir_okay=False), help="Base config (YAML file).")
@click.option("--trials", "n_trials", type=int, required=True, help="Trials in all (a resumed study runs the rest).")
@click.option("--timeout", type=float, help="Seconds after which no new trial starts.")
@click.option("--storage", help="SQLAlchemy URL or SQLite file (default: OUTPUT_DIR/tune/STUDY/study.db).")
@click.option("--study", "study_name", help="Study name (default: the task); the same name resumes the study.")
@click.option("--workers", type=int, default=1, show_default=True, help="Worker processes (1 torch thread each).")
@click.option(
    "--sampler",
    type=click.Choice(["tpe", "random", "gp"]),
    default="tpe",
    show_default=True,
    help="TPE, random search or a Gaussian-process (Kriging) surrogate.",
)
@click.option("--pruner", type=click.Choice(["median", "hyperband", "none"]), default="median", show_default=True)
@click.option("--sampler-seed", type=int, help="Seed of the sampler (default: the config's seed).")
@click.option("--heartbeat", type=int, default=10, show_default=True, help="Seconds between liveness records.")
@click.pass_context
def tune(
    ctx: click.Context,
    task: str,
    space_file: str,
    config_file: str | None,
    n_trials: int,
    timeout: float | None,
    storage: str | None,
    study_name: str | None,
    workers: int,
    sampler: str,
    pruner: str,
    sampler_seed: int | None,
    heartbeat: int,
) -> None:
    """Search hyperparameters of TASK: every trial is a training run, reported per epoch and pruned
    when unpromising. Override base config keys as for `train`, e.g.

    \b
      attnkit tune reverse --space examples/reverse_space.yaml --trials 20 trainer.max_epochs=3
      attnkit tune reverse --space s.yaml --trials 40 --workers 2      # resumes the same study

    The study folder (OUTPUT_DIR/tune/STUDY/) gets best.yaml (`attnkit train TASK --config best.yaml`
    reproduces the best trial), trials.csv, plots and study_report.html. A trial whose process died
    is re-run once its heartbeat is older than 4 x --heartbeat seconds.
    """
    try:
        tune_api = api.tune
    except ImportError as err:
        fail(ImportError(f"attnkit tune needs Optuna: pip install 'attnkit[tuning]' ({err})"))
        return
    show_logs("attnkit.tuning.progress")  # a line per trial, notes and the summary, on stdout
    try:
        overrides = parse_overrides(ctx.args)
        tune_api(
            task,
            space_file,
            n_trials=n_trials,
            config=config_file,
            timeout=timeout,
            storage=storage,
            study_name=study_name,
            workers=workers,
            sampler=sampler,
            pruner=pruner,
            seed=sampler_seed,
            heartbeat=heartbeat,
            verbose=True,
            **overrides,
        )
    except (*USER_ERRORS, RuntimeError) as err:
        fail(err)
