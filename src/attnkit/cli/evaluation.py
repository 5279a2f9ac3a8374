"""``attnkit eval``: standard benchmarks with lm-evaluation-harness."""

from __future__ import annotations

from pathlib import Path

import click

from attnkit import api
from attnkit.cli.common import USER_ERRORS, fail, main, show_logs
from attnkit.config import UserPath


def _limit(value: str | None) -> int | float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a number") from None
    if number <= 0:
        raise click.BadParameter("must be > 0 (a count of documents, or a fraction below 1)")
    return int(number) if number >= 1 and number.is_integer() else number


@main.command("eval")
@click.argument("run", type=UserPath())
@click.option("--tasks", required=True, help="lm-evaluation-harness tasks, groups or tags, comma-separated.")
@click.option(
    "--include-path",
    type=UserPath(exists=True, file_okay=False),
    multiple=True,
    help="A folder of your own task YAML files (repeatable).",
)
@click.option(
    "--only-included",
    is_flag=True,
    help="Index only the --include-path tasks, not lm_eval's thousands (starts about 10 s sooner).",
)
@click.option("--num-fewshot", type=click.IntRange(min=0), help="Examples before each question (default: the task's).")
@click.option("--limit", help="At most N documents per task (a number below 1: that fraction).")
@click.option("--batch-size", default=8, show_default=True, type=click.IntRange(min=1), help="Requests per batch.")
@click.option("--device", help="cpu, cuda, cuda:1... (default: CUDA when there is one).")
@click.option("--max-length", type=click.IntRange(min=1), help="Context in tokens (default: the model's).")
@click.option(
    "--gen-kwargs",
    metavar="KEY=VALUE,...",
    help="Generation options of generate_until tasks, over the tasks' own (lm_eval's --gen_kwargs syntax): "
    "max_gen_toks=32,temperature=0 (also until, do_sample, top_k, top_p, min_p).",
)
@click.option("--apply-chat-template", is_flag=True, help="Render prompts with the model's chat template.")
@click.option("--log-samples", is_flag=True, help="Keep every document's requests and answers in the JSON.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the generators and few-shot sampling.")
@click.option("--output", type=UserPath(dir_okay=False), help="Write the results here as JSON.")
def evaluate(
    run: str,
    tasks: str,
    include_path: tuple[str, ...],
    only_included: bool,
    num_fewshot: int | None,
    limit: str | None,
    batch_size: int,
    device: str | None,
    max_length: int | None,
    gen_kwargs: str | None,
    apply_chat_template: bool,
    log_samples: bool,
    seed: int,
    output: str | None,
) -> None:
    """Evaluate the language model RUN on lm-evaluation-harness TASKS and print lm_eval's results table.

    RUN is an attnkit run (folder or checkpoint), an attnkit model folder or a Hugging Face folder.
    Needs `pip install attnkit[eval]`. Datasets are fetched by lm_eval (Hugging Face datasets) unless
    a task reads local files.

    \b
      attnkit eval runs/lm/version_0 --tasks hellaswag,arc_easy --limit 100 --output results.json
      attnkit eval ./SmolLM2-135M --tasks my_task --include-path my_tasks/ --only-included
      attnkit eval runs/lm/version_0 --tasks gsm8k --gen-kwargs max_gen_toks=32,temperature=0
    """
    show_logs("attnkit")
    try:
        results = api.evaluate_harness(
            run,
            tasks,
            include_path=list(include_path) or None,
            include_defaults=not only_included,
            num_fewshot=num_fewshot,
            limit=_limit(limit),
            batch_size=batch_size,
            device=device,
            max_length=max_length,
            gen_kwargs=gen_kwargs,
            apply_chat_template=apply_chat_template,
            log_samples=log_samples,
            random_seed=seed,
        )
    except (*USER_ERRORS, ImportError) as err:
        fail(err)
        return
    click.echo(api.harness_table(results))
    if output is not None:
        path = Path(output)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(api.harness_json(results) + "\n", encoding="utf-8")
        click.echo(f"results written to {path}")
