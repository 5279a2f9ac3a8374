"""Commands about runs: ``tasks``, ``train``, ``prepare``, ``test`` and ``predict``."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click
import yaml

from attnkit import api
from attnkit.cli.common import STANDARDIZED_HELP, USER_ERRORS, fail, main
from attnkit.config import UserPath, parse_overrides
from attnkit.errors import ConfigError, Preempted
from attnkit.io import write_atomic, write_json_atomic


@main.command()
def tasks() -> None:
    """List the ready-made tasks."""
    for name, summary in api.list_tasks().items():
        click.echo(f"{name:<10} {summary}")


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("task")
@click.option("--config", "config_file", type=UserPath(dir_okay=False), help="YAML file of config keys.")
@click.option("--resume", type=UserPath(file_okay=False), help="Continue a run folder from its last checkpoint.")
@click.option("--print-config", is_flag=True, help="Print the resolved config as YAML and exit.")
@click.option(
    "--init",
    type=UserPath(),
    help="classify: start from a pretrained BERT encoder (Hugging Face or `attnkit import` folder); lm: from an lm "
    "run (or its `attnkit export` folder); sft: from a Hugging Face Llama / Mistral / Qwen2 / GPT-2 folder "
    "(required; LoRA by default, model.lora=null for full fine-tuning); = model.init=PATH. With "
    "model.lora.rank=R only LoRA adapters train.",
)
@click.option(
    "--data", "data_source", type=UserPath(), help="The data file or folder (lm: also a glob); = data.source=PATH."
)
@click.pass_context
def train(
    ctx: click.Context,
    task: str,
    config_file: str | None,
    resume: str | None,
    print_config: bool,
    init: str | None,
    data_source: str | None,
) -> None:
    """Train TASK. Override config keys with key=value or --key value, e.g.

    \b
      attnkit train reverse trainer.max_epochs=5 --optim.lr 1e-3
      attnkit train reverse --print-config     # every key with its default
    """
    try:
        overrides = parse_overrides(ctx.args)
        if init is not None:
            overrides.setdefault("model", {})["init"] = init
        if data_source is not None:
            overrides.setdefault("data", {})["source"] = data_source
        if print_config:
            cfg = api.build_config(task, config_file, overrides)
            click.echo(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), nl=False)
            return
        result = api.train(task, config_file, resume=resume, **overrides)
    except USER_ERRORS as err:
        fail(err)
        return
    except Preempted as stop:  # SIGTERM / SIGUSR1: last.ckpt is saved; say how to continue, exit 128 + signal
        if stop.is_global_zero:
            click.secho(f"attnkit: {stop}", fg="yellow", err=True)
        sys.exit(stop.code)
    if result.is_global_zero:  # one summary, from the first process of a multi-process run
        _summary(task, result.metrics, result.run_dir, result.wall_time_s, result.best_checkpoint)


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("task")
@click.option("--config", "config_file", type=UserPath(dir_okay=False), help="YAML file of config keys.")
@click.option("--data", "data_source", type=UserPath(), help="The data file, folder or glob; = data.source=PATH.")
@click.pass_context
def prepare(ctx: click.Context, task: str, config_file: str | None, data_source: str | None) -> None:
    """Tokenize TASK's data into the token cache now (e.g. on a login node), with the keys `train`
    would get; `attnkit train` then starts from the cache.

    \b
      attnkit prepare lm --data corpus/ data.tokenizer=bpe
    """
    try:
        overrides = parse_overrides(ctx.args)
        if data_source is not None:
            overrides.setdefault("data", {})["source"] = data_source
        folder = api.prepare(task, config_file, **overrides)
    except USER_ERRORS as err:
        fail(err)
        return
    click.echo(f"token cache: {folder}" if folder is not None else f"{task}: nothing to prepare (no token cache)")


def _summary(task: str, metrics: dict[str, float], run_dir: Path, wall: float, best: Path | None) -> None:
    click.echo("")
    click.secho(f"{task}: finished in {wall:.1f} s", bold=True)
    for split in ("val", "test"):
        parts = [f"{k.split('/', 1)[1]} {v:.4f}" for k, v in sorted(metrics.items()) if k.startswith(f"{split}/")]
        if parts:
            click.echo(f"  {split:<5} " + "   ".join(parts))
    click.echo(f"  run   {run_dir}")
    if best is not None:
        click.echo(f"  best  {best}")


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("run", type=UserPath())
@click.option("--data", "data_file", type=UserPath(), help="Score this file (in the task's format) instead.")
@click.option("--out", "out_file", type=UserPath(dir_okay=False), help="Also write the metrics here as JSON.")
@click.option("--batch-size", type=click.IntRange(min=1), help="Batch size (default: the run's).")
@click.option("--standardized", is_flag=True, help=STANDARDIZED_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as one JSON object, at full precision.")
@click.pass_context
def test(
    ctx: click.Context,
    run: str,
    data_file: str | None,
    out_file: str | None,
    batch_size: int | None,
    standardized: bool,
    as_json: bool,
) -> None:
    """Evaluate RUN (a run folder or checkpoint file) on its task's test split, or on --data FILE.

    Extra arguments override the run's trainer section, e.g. `trainer.devices=1 trainer.strategy=auto`
    tests a multi-process run in one process.

    \b
      attnkit test runs/classify/20261122-101500 --data reviews.csv --out metrics.json
    """
    try:
        overrides = parse_overrides(ctx.args)
        if set(overrides) - {"trainer"}:
            raise ConfigError(
                f"attnkit test takes trainer.* overrides only (got {', '.join(sorted(set(overrides) - {'trainer'}))}): "
                "the model, data and decoding are the run's"
            )
        metrics = api.evaluate(
            run, data_file, standardized=standardized, batch_size=batch_size, trainer=overrides.get("trainer")
        )
        if out_file:
            write_json_atomic(out_file, metrics)
    except USER_ERRORS as err:
        fail(err)
        return
    if as_json:
        click.echo(json.dumps(metrics, sort_keys=True))
        return
    for key, value in sorted(metrics.items()):
        click.echo(f"{key:<12} {value:.4f}")


@main.command()
@click.argument("run", type=UserPath())
@click.argument("inputs", nargs=-1)
@click.option("--file", "input_file", type=UserPath(), help="Predict every input of this file ('-': stdin).")
@click.option("--out", "out_file", type=UserPath(dir_okay=False), help="With --file: write the JSON lines here.")
@click.option("--batch-size", default=64, show_default=True, type=click.IntRange(min=1), help="Inputs per batch.")
@click.option("--standardized", is_flag=True, help=STANDARDIZED_HELP)
def predict(
    run: str, inputs: tuple[str, ...], input_file: str | None, out_file: str | None, batch_size: int, standardized: bool
) -> None:
    """Predict with RUN (a run folder or checkpoint file).

    INPUTS on the command line: one readable prediction per line. --file FILE: one JSON line per
    input of FILE (the prediction with its probability or score), to stdout or --out.

    \b
      attnkit predict runs/reverse/20261122-101500 "3 1 4 1 5 9 2 6"
      attnkit predict RUN --file texts.txt --out predictions.jsonl --batch-size 128
    """
    try:
        if input_file is not None:
            if inputs:
                raise ValueError("give inputs either as arguments or with --file, not both")
            records = api.predict_file(run, input_file, batch_size=batch_size, standardized=standardized)
            _write_json_lines(records, out_file)
            return
        if out_file is not None:
            raise ValueError("--out writes the predictions of --file; add --file FILE")
        if not inputs:
            raise ValueError("nothing to predict: pass inputs as arguments or with --file")
        for line in api.predict(run, inputs, standardized=standardized):
            click.echo(line)
    except USER_ERRORS as err:
        fail(err)


def _write_json_lines(records: Iterable[dict[str, Any]], out_file: str | None) -> None:
    """One JSON object per line to ``out_file`` (written whole, then renamed into place) or stdout."""
    if out_file is None:
        for record in records:
            click.echo(json.dumps(record, ensure_ascii=False))
        return

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")

    write_atomic(out_file, write)
