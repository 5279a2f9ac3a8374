"""The ``attnkit`` command line."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click
import yaml

from attnkit.config import UserPath, parse_overrides
from attnkit.errors import CheckpointError, ConfigError, Preempted
from attnkit.io import write_atomic, write_json_atomic

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
@click.option("--config", "config_file", type=UserPath(dir_okay=False), help="YAML file of config keys.")
@click.option("--resume", type=UserPath(file_okay=False), help="Continue a run folder from its last checkpoint.")
@click.option("--print-config", is_flag=True, help="Print the resolved config as YAML and exit.")
@click.option(
    "--init",
    type=UserPath(),
    help="classify: start from a pretrained BERT encoder (Hugging Face or `attnkit import` folder); lm: from an lm "
    "run (or its `attnkit export` folder); = model.init=PATH. With model.lora.rank=R only LoRA adapters train.",
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
    from attnkit.api import build_config
    from attnkit.api import train as train_api

    try:
        overrides = parse_overrides(ctx.args)
        if init is not None:
            overrides.setdefault("model", {})["init"] = init
        if data_source is not None:
            overrides.setdefault("data", {})["source"] = data_source
        if print_config:
            cfg = build_config(task, config_file, overrides)
            click.echo(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), nl=False)
            return
        result = train_api(task, config_file, resume=resume, **overrides)
    except USER_ERRORS as err:
        _fail(err)
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
    from attnkit.api import prepare as prepare_api

    try:
        overrides = parse_overrides(ctx.args)
        if data_source is not None:
            overrides.setdefault("data", {})["source"] = data_source
        folder = prepare_api(task, config_file, **overrides)
    except USER_ERRORS as err:
        _fail(err)
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


_STANDARDIZED_HELP = "anomaly: the file's features are already standardised (default: raw; the run's mean/std apply)."


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("run", type=UserPath())
@click.option("--data", "data_file", type=UserPath(), help="Score this file (in the task's format) instead.")
@click.option("--out", "out_file", type=UserPath(dir_okay=False), help="Also write the metrics here as JSON.")
@click.option("--batch-size", type=click.IntRange(min=1), help="Batch size (default: the run's).")
@click.option("--standardized", is_flag=True, help=_STANDARDIZED_HELP)
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
    from attnkit.api import evaluate

    try:
        overrides = parse_overrides(ctx.args)
        if set(overrides) - {"trainer"}:
            raise ConfigError(
                f"attnkit test takes trainer.* overrides only (got {', '.join(sorted(set(overrides) - {'trainer'}))}): "
                "the model, data and decoding are the run's"
            )
        metrics = evaluate(
            run, data_file, standardized=standardized, batch_size=batch_size, trainer=overrides.get("trainer")
        )
        if out_file:
            write_json_atomic(out_file, metrics)
    except USER_ERRORS as err:
        _fail(err)
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
@click.option("--standardized", is_flag=True, help=_STANDARDIZED_HELP)
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
    from attnkit.api import load_run, predict_file

    try:
        if input_file is not None:
            if inputs:
                raise ValueError("give inputs either as arguments or with --file, not both")
            records = predict_file(run, input_file, batch_size=batch_size, standardized=standardized)
            _write_json_lines(records, out_file)
            return
        if out_file is not None:
            raise ValueError("--out writes the predictions of --file; add --file FILE")
        if not inputs:
            raise ValueError("nothing to predict: pass inputs as arguments or with --file")
        loaded = load_run(run)
        options = {"standardized": True} if standardized else {}
        if standardized and not loaded.task.feature_inputs:
            raise ValueError(
                f"--standardized is for runs whose inputs are feature vectors (anomaly), not {loaded.task.name!r}"
            )
        for line in loaded.task.predict(loaded.module, list(inputs), **options):
            click.echo(line)
    except USER_ERRORS as err:
        _fail(err)


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


@main.command()
@click.argument("run", type=UserPath())
@click.option("--prompt", default="", help="Text to continue (default: empty, i.e. a new document).")
@click.option("--file", "input_file", type=UserPath(dir_okay=False), help="Continue every line ('-': stdin).")
@click.option("--out", "output_file", type=UserPath(dir_okay=False), help="With --file: write the texts here.")
@click.option("--batch-size", default=8, show_default=True, type=click.IntRange(min=1), help="Prompts per batch.")
@click.option("--max-new-tokens", default=200, show_default=True, type=click.IntRange(min=0), help="Tokens to add.")
@click.option("--temperature", default=1.0, show_default=True, type=float, help="0 = greedy; higher = more random.")
@click.option("--top-k", type=click.IntRange(min=1), help="Sample among the K most likely tokens only.")
@click.option("--top-p", type=float, help="Sample among the most likely tokens whose probability sums to P.")
@click.option("--min-p", type=float, help="Drop tokens less likely than P times the most likely one.")
@click.option(
    "--repetition-penalty", default=1.0, show_default=True, type=float, help="> 1 discourages repeating tokens."
)
@click.option("--stop", multiple=True, help="Stop a text at this string (cut before it); repeatable.")
@click.option("--seed", type=int, help="Seed the sampling: the same seed gives the same text.")
@click.option("--num-samples", default=1, show_default=True, type=click.IntRange(min=1), help="Texts per prompt.")
def generate(
    run: str,
    prompt: str,
    input_file: str | None,
    output_file: str | None,
    batch_size: int,
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    min_p: float | None,
    repetition_penalty: float,
    stop: tuple[str, ...],
    seed: int | None,
    num_samples: int,
) -> None:
    """Generate text with an lm RUN (a run folder or checkpoint file), printed as it comes.

    With --file, every line is a prompt: the prompts are generated in batches and each text is
    written on one line (its line breaks written as \\n), to --out or the standard output.

    \b
      attnkit generate runs/lm/20261122-101500 --prompt "The old owl" --seed 1
      attnkit generate RUN --temperature 0 --max-new-tokens 50     # greedy, from an empty prompt
      attnkit generate RUN --file prompts.txt --out texts.txt --batch-size 16 --stop "."
    """
    from attnkit.tasks.lm import generate_from_run
    from attnkit.tasks.translate import read_lines

    def write(text: str) -> None:
        click.echo(text, nl=False)
        sys.stdout.flush()

    options = dict(
        max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
        repetition_penalty=repetition_penalty, stop=list(stop), seed=seed, num_samples=num_samples,
    )  # fmt: skip
    try:
        if output_file is not None and input_file is None:
            raise ValueError("--out goes with --file (a single --prompt is printed as it is generated)")
        if input_file is None:
            generate_from_run(run, prompt, write=write, **options)  # type: ignore[arg-type]
            return
        prompts = read_lines(input_file)
        if not prompts:
            raise ValueError(f"{input_file} has no lines: write one prompt per line")
        texts = generate_from_run(run, prompts, batch_size=batch_size, **options)  # type: ignore[arg-type]
        lines = "".join(text.replace("\\", "\\\\").replace("\n", "\\n") + "\n" for text in texts)
        if output_file is not None:
            Path(output_file).write_text(lines, encoding="utf-8")
        else:
            click.echo(lines, nl=False)
    except USER_ERRORS as err:
        _fail(err)


@main.command()
@click.argument("run", type=UserPath())
@click.argument("texts", nargs=-1)
@click.option("--file", "input_file", type=UserPath(dir_okay=False), help="Translate every line ('-': stdin).")
@click.option("--out", "output_file", type=UserPath(dir_okay=False), help="Write the translations here.")
@click.option("--beam", type=int, help="Beam size; 1 = greedy (default: the run's decode.beam_size).")
def translate(
    run: str, texts: tuple[str, ...], input_file: str | None, output_file: str | None, beam: int | None
) -> None:
    """Translate TEXTS and/or the lines of --file with a translate RUN: one translation per line.

    \b
      attnkit translate runs/translate/20261122-101500 "three hundred twenty-one"
      attnkit translate RUN --file in.txt --out out.txt --beam 1
    """
    from attnkit.tasks.translate import read_lines, translate_run

    try:
        lines = list(texts) + (read_lines(input_file) if input_file else [])
        if not lines:
            raise ValueError("nothing to translate: pass texts as arguments or with --file")
        out = translate_run(run, lines, beam_size=beam, warn=_warn)
        if output_file:
            Path(output_file).write_text("".join(f"{line}\n" for line in out), encoding="utf-8")
        else:
            for line in out:
                click.echo(line)
    except USER_ERRORS as err:
        _fail(err)


def _warn(message: str) -> None:
    click.secho(f"warning: {message}", fg="yellow", err=True)


PLOT_ERRORS = (*USER_ERRORS, NotImplementedError)
_OUT_HELP = "Image file to write: .png or .svg (default: %s)."


def _save_figure(fig: object, out: str) -> None:
    path = Path(out)
    if path.suffix.lower() not in (".png", ".svg"):
        raise ValueError(f"--out {out}: write a .png or .svg file")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)  # type: ignore[attr-defined]
    click.echo(f"wrote {path}")


@main.group()
def plot() -> None:
    """Plot attention maps, positional encodings, learning-rate schedules and training curves."""


@plot.command("attention")
@click.argument("run", type=UserPath())
@click.option("--input", "text", help="An input written as for `attnkit predict` (e.g. '3 1 4 1 5').")
@click.option("--index", type=int, help="A validation example (default 0 when no --input).")
@click.option("--out", default="attention.png", show_default=True, help=_OUT_HELP % "attention.png")
def plot_attention(run: str, text: str | None, index: int | None, out: str) -> None:
    """Attention maps of RUN for one input: layers as rows, heads as columns."""
    try:
        from attnkit.viz.attention import plot_run_attention

        _save_figure(plot_run_attention(run, text=text, index=index), out)
    except PLOT_ERRORS as err:
        _fail(err)


@plot.command("positional")
@click.option("--dim", default=48, show_default=True, help="Hidden dimension of the encoding.")
@click.option("--length", default=96, show_default=True, help="Number of positions.")
@click.option("--curves", default=4, show_default=True, help="Curves of the first dimensions drawn below.")
@click.option("--out", default="positional.png", show_default=True, help=_OUT_HELP % "positional.png")
def plot_positional(dim: int, length: int, curves: int, out: str) -> None:
    """The sinusoidal positional encoding: heat map over position × dimension, and its first dimensions."""
    try:
        from attnkit.viz.positional import plot_positional_encoding

        _save_figure(plot_positional_encoding(dim, length, num_curves=curves), out)
    except PLOT_ERRORS as err:
        _fail(err)


@plot.command("schedule")
@click.argument("run", type=UserPath(), required=False)
@click.option("--warmup", type=int, default=50, show_default=True, help="Warm-up steps (without RUN).")
@click.option("--max-iters", type=int, help="Steps of the cosine period (without RUN; required then).")
@click.option("--lr", type=float, help="Base learning rate (without RUN; default: plot the factor).")
@click.option("--out", default="schedule.png", show_default=True, help=_OUT_HELP % "schedule.png")
def plot_schedule(run: str | None, warmup: int, max_iters: int | None, lr: float | None, out: str) -> None:
    """The learning-rate schedule for --warmup and --max-iters, or the learning rate RUN logged."""
    try:
        if run is not None:
            from attnkit.viz.schedule import plot_run_lr

            fig = plot_run_lr(run)
        else:
            if max_iters is None:
                raise ValueError("give a RUN folder, or --max-iters (and --warmup) for the formula")
            from attnkit.viz.schedule import plot_lr_schedule

            fig = plot_lr_schedule(warmup, max_iters, lr=lr)
        _save_figure(fig, out)
    except PLOT_ERRORS as err:
        _fail(err)


@plot.command("curves")
@click.argument("run", type=UserPath())
@click.option("--out", default="curves.png", show_default=True, help=_OUT_HELP % "curves.png")
def plot_curves(run: str, out: str) -> None:
    """Training curves of RUN: loss and metrics, train and validation."""
    try:
        from attnkit.viz.curves import plot_training_curves

        _save_figure(plot_training_curves(run), out)
    except PLOT_ERRORS as err:
        _fail(err)


@main.command()
@click.argument("run", type=UserPath())
@click.option("--examples", default=3, show_default=True, help="Validation examples whose attention is shown.")
@click.option("--out", help="Where to write (default: RUN/report.html).")
def report(run: str, examples: int, out: str | None) -> None:
    """(Re)write RUN/report.html: config, metrics, curves and attention maps in one offline file."""
    try:
        from attnkit.viz.report import write_report

        click.echo(f"wrote {write_report(run, num_examples=examples, out=out)}")
    except PLOT_ERRORS as err:
        _fail(err)


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
        from attnkit.tuning import tune as tune_api
    except ImportError as err:
        _fail(ImportError(f"attnkit tune needs Optuna: pip install 'attnkit[tuning]' ({err})"))
        return
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
        _fail(err)


@main.command("import")
@click.argument("path", type=UserPath())
@click.option("--out", required=True, type=UserPath(file_okay=False), help="The attnkit model folder to write.")
def import_model(path: str, out: str) -> None:
    """Convert the Hugging Face BERT, GPT-2, Llama, Mistral or Qwen2 folder PATH (config.json, weights,
    sharded or not, tokenizer files) into an attnkit model folder OUT (model.safetensors + attnkit.json +
    tokenizer). Nothing is downloaded.

    \b
      attnkit import ./bert-base-uncased --out models/bert
      attnkit train classify --init models/bert data.max_len=128
    """
    try:
        from attnkit.interop import import_model as convert

        pretrained = convert(path, out)
    except USER_ERRORS as err:
        _fail(err)
        return
    n = sum(p.numel() for p in pretrained.model.parameters())
    click.echo(f"{path} -> {out}: {pretrained.name} ({type(pretrained.model).__name__}, {n:,} parameters)")


@main.command()
@click.argument("run", type=UserPath())
@click.option("--out", required=True, type=UserPath(file_okay=False), help="The model folder to write.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["attnkit", "hf"]),
    default="attnkit",
    show_default=True,
    help="attnkit: model.safetensors + attnkit.json; hf: a Hugging Face folder (config.json, model.safetensors, "
    "tokenizer.json) that transformers loads.",
)
@click.option("--merge", is_flag=True, help="A LoRA run: fold its adapters into the base weights (a plain model).")
def export(run: str, out: str, fmt: str, merge: bool) -> None:
    """Write the model of RUN (a run folder or checkpoint file) to OUT as model.safetensors + attnkit.json
    (with the run's task and data artifacts); attnkit.interop.load_model(OUT) loads it back bit-exactly.

    With --format hf, RUN is an lm run or an attnkit model folder of a language model (e.g. written by
    `attnkit import`), written as a Hugging Face llama / mistral / qwen2 (rotary, RMSNorm, SwiGLU) or
    gpt2 (learned positions, LayerNorm) checkpoint.

    A LoRA run (model.lora) needs --merge: the base weights plus the adapters, loadable without peft.

    \b
      attnkit export runs/lm/version_0 --out hf/my-lm --format hf
    """
    try:
        if fmt == "hf":
            written, source = _export_hf(run, out, merge)
            click.echo(f"{source} -> {out} ({written})")
            return
        from attnkit.interop import save_model
        from attnkit.tasks import load_run

        loaded = load_run(run)
        model = _plain_model(loaded.module.model, run, merge)
        artifacts = loaded.hparams.get("artifacts") or None
        save_model(model, out, task=loaded.task.name, artifacts=artifacts, source=str(loaded.checkpoint))
    except USER_ERRORS as err:
        _fail(err)
        return
    click.echo(f"{loaded.checkpoint} -> {out}")


def _plain_model(model: Any, run: str, merge: bool) -> Any:
    """The model to export: a LoRA model's adapters folded into its base weights (with --merge)."""
    from attnkit.models.lora import is_lora, merge_lora

    if not is_lora(model):
        return model
    if not merge:
        raise ValueError(f"{run} is a LoRA run (adapters on a frozen base): add --merge to write the merged weights")
    return merge_lora(model)


def _export_hf(run: str, out: str, merge: bool = False) -> tuple[str, str]:
    """``export --format hf``: the model_type written and what was read."""
    from attnkit.data.lm import tokenizer_of
    from attnkit.interop import export_hf, load_pretrained
    from attnkit.interop.export import INFO_FILE
    from attnkit.tasks import load_run

    if (Path(run) / INFO_FILE).is_file():
        pretrained = load_pretrained(run)
        return export_hf(pretrained.model, out, pretrained.tokenizer), run
    loaded = load_run(run)
    if loaded.task.name != "lm":
        raise ConfigError(f"{run} is a {loaded.task.name!r} run; only lm runs export as Hugging Face checkpoints")
    tokenizer = tokenizer_of(loaded.hparams.get("artifacts") or {})
    return export_hf(_plain_model(loaded.module.model, run, merge), out, tokenizer), str(loaded.checkpoint)


if __name__ == "__main__":
    main()
