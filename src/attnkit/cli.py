"""The ``attnkit`` command line."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
import yaml

from attnkit.config import parse_overrides
from attnkit.errors import CheckpointError, ConfigError

USER_ERRORS = (ConfigError, CheckpointError, ValueError, FileNotFoundError, TypeError)


def _fail(err: Exception) -> None:
    click.secho(f"error: {err}", fg="red", err=True)
    sys.exit(2)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="attnkit")
def main() -> None:
    """Build, train, inspect and tune Transformer models."""


@main.command()
def tasks() -> None:
    """List the ready-made tasks."""
    from attnkit.tasks import TASKS

    for name, task in sorted(TASKS.items()):
        click.echo(f"{name:<10} {task.summary}")


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("task")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="YAML file of config keys.")
@click.option("--resume", type=click.Path(file_okay=False), help="Continue a run folder from its last checkpoint.")
@click.option("--print-config", is_flag=True, help="Print the resolved config as YAML and exit.")
@click.pass_context
def train(ctx: click.Context, task: str, config_file: str | None, resume: str | None, print_config: bool) -> None:
    """Train TASK. Override config keys with key=value or --key value, e.g.

    \b
      attnkit train reverse trainer.max_epochs=5 --optim.lr 1e-3
      attnkit train reverse --print-config     # every key with its default
    """
    from attnkit.api import build_config
    from attnkit.api import train as train_api

    try:
        overrides = parse_overrides(ctx.args)
        if print_config:
            cfg = build_config(task, config_file, overrides)
            click.echo(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), nl=False)
            return
        result = train_api(task, config_file, resume=resume, **overrides)
    except USER_ERRORS as err:
        _fail(err)
        return
    _summary(task, result.metrics, result.run_dir, result.wall_time_s, result.best_checkpoint)


def _summary(task: str, metrics: dict[str, float], run_dir: Path, wall: float, best: Path | None) -> None:
    if int(os.environ.get("LOCAL_RANK", 0)) != 0 or int(os.environ.get("NODE_RANK", 0)) != 0:
        return  # one summary, from the first process of a multi-process run
    click.echo("")
    click.secho(f"{task}: finished in {wall:.1f} s", bold=True)
    for split in ("val", "test"):
        parts = [f"{k.split('/', 1)[1]} {v:.4f}" for k, v in sorted(metrics.items()) if k.startswith(f"{split}/")]
        if parts:
            click.echo(f"  {split:<5} " + "   ".join(parts))
    click.echo(f"  run   {run_dir}")
    if best is not None:
        click.echo(f"  best  {best}")


@main.command()
@click.argument("run", type=click.Path())
def test(run: str) -> None:
    """Evaluate RUN (a run folder or checkpoint file) on its task's test split."""
    from attnkit.tasks.runner import evaluate

    try:
        metrics = evaluate(run)
    except USER_ERRORS as err:
        _fail(err)
        return
    for key, value in sorted(metrics.items()):
        click.echo(f"{key:<12} {value:.4f}")


@main.command()
@click.argument("run", type=click.Path())
@click.argument("inputs", nargs=-1)
@click.option("--file", "input_file", type=click.File("r"), help="Read one input per line ('-' for stdin).")
def predict(run: str, inputs: tuple[str, ...], input_file: click.File | None) -> None:
    """Predict with RUN (a run folder or checkpoint file) on INPUTS (one prediction per line)."""
    from attnkit.tasks.runner import load_run

    items = list(inputs)
    if input_file is not None:
        items += [line.rstrip("\n") for line in input_file if line.strip()]  # type: ignore[attr-defined]
    try:
        if not items:
            raise ValueError("nothing to predict: pass inputs as arguments or with --file")
        loaded = load_run(run)
        for line in loaded.task.predict(loaded.module, items):
            click.echo(line)
    except USER_ERRORS as err:
        _fail(err)


if __name__ == "__main__":
    main()
